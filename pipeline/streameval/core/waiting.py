"""The events a join holds until its clock passes them.

They wait in sorted runs — a batch's events, sorted, make one — and are taken, in time order,
once the clock passes them, then applied in slices. A checkpoint writes the events taken in
since the last one in chunks of at most :data:`CHUNK_EVENTS` (in time order, one key each),
writes again each chunk of an earlier checkpoint that lost events since (the events it still
holds) and deletes those that lost them all. Each event was once a key of its own, written
and then deleted: two changelog records and two store writes per input event.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Any

from streameval.core.outcome import Label, Scores
from streameval.core.state import (
    EVENT,
    WAITING,
    decode_value,
    encode_value,
    waiting_key,
)

__all__ = ["CHUNK_BYTES", "CHUNK_EVENTS", "Waiting", "WaitingEvents", "merge_runs", "take_runs"]

#: The most events one checkpoint record holds (about 70 bytes each without scores) ...
CHUNK_EVENTS = 1000
#: ... and about the most bytes: a chunk over it is halved (an event with scores over many
#: classes takes kilobytes), down to one event, which an input message bounds.
CHUNK_BYTES = 256 * 1024

#: a waiting event: (ts, kind, instance_id, model_id, label is a string, label, sequence,
#: scores or None); the sequence is unique, so two events never compare their scores
Waiting = tuple[int, int, str, str, bool, Label, int, Scores | None]


def take_runs(runs: dict[Any, list], key: tuple) -> tuple[list, list, list]:
    """Cut sorted runs, named by the keys of ``runs``, at ``key``, in place: what comes before
    it is taken (concatenated run by run, so not sorted as a whole), and each run keeps the
    rest. Returns ``(taken, names of the runs cut short, names of the runs emptied)``.

    >>> runs = {"a": [(1,), (5,)], "b": [(2,), (3,)], "c": [(7,)]}
    >>> take_runs(runs, (4,)), runs
    (([(1,), (2,), (3,)], ['a'], ['b']), {'a': [(5,)], 'c': [(7,)]})
    """
    taken: list = []
    shortened, emptied = [], []
    for name, run in runs.items():
        if not run or run[0] >= key:  # the usual run: none of it is due yet
            continue
        cut = bisect.bisect_left(run, key)
        if cut < len(run):
            taken += run[:cut]
            runs[name] = run[cut:]  # a new value, not a new key: iterating goes on
            shortened.append(name)
        else:
            taken += run
            emptied.append(name)
    for name in emptied:
        del runs[name]
    return taken, shortened, emptied


def merge_runs(runs: dict[Any, list]) -> None:
    """Keep sorted runs few, in place: the newest joins the one before it when it continues it
    (events in time order, the usual case) or is at least half its length, so a run's events
    are merged about log₂ of the number waiting times, as in a merge sort. Whoever takes from
    the runs looks at the head of each.

    >>> runs = {0: [(1,), (4,)], 1: [(5,)]}
    >>> merge_runs(runs); runs
    {0: [(1,), (4,), (5,)]}
    >>> runs[1] = [(2,)]  # short and out of order: a run of its own
    >>> merge_runs(runs); runs
    {0: [(1,), (4,), (5,)], 1: [(2,)]}
    """
    while len(runs) > 1:
        names = reversed(runs)
        last, before = next(names), next(names)
        newer, older = runs[last], runs[before]
        if older[-1] < newer[0]:
            older += newer
        elif 2 * len(newer) >= len(older):
            runs[before] = sorted(older + newer)  # two sorted runs: timsort merges them
        else:
            return
        del runs[last]


class WaitingEvents:
    """A join's waiting events: sorted :attr:`runs`, and the events :attr:`due` (taken from the
    runs by :meth:`take`, sorted, applied slice by slice from a position on by :meth:`step`).

    The join reads :attr:`runs` and :attr:`due` to skip the calls when they are empty.
    """

    def __init__(self) -> None:
        self.runs: dict[int, list[Waiting]] = {}  # numbered
        self._run_number = 0
        self.due: list[Waiting] = []  # applied from _pos on
        self._pos = 0
        # events taken in since the last checkpoint (no checkpoint has them yet), by sequence
        self._added: dict[int, Waiting] = {}
        # the chunks checkpoints hold: number -> the events still waiting in it, by sequence
        self._chunks: dict[int, dict[int, Waiting]] = {}
        self._chunk_of: dict[int, int] = {}  # sequence -> chunk number
        self._next_chunk = 0
        self._shrunk: set[int] = set()  # chunks that lost events since the last checkpoint
        # events a checkpoint wrote under a key of their own (before chunks): sequence -> key
        self._single: dict[int, bytes] = {}
        self._gone: list[bytes] = []  # ... applied since the last checkpoint: their keys go
        self._left = 0  # events of earlier checkpoints applied since the last one
        # what :meth:`changes` wrote, for :meth:`committed`: the new chunks, the size of each
        # chunk written again, how many keys of single events it deleted and events it counted
        self._staged: tuple[list[tuple[int, list[Waiting]]], dict[int, int], int, int] | None
        self._staged = None

    @classmethod
    def restored(cls, items: Iterable[tuple[bytes, bytes]]) -> WaitingEvents:
        """The events a checkpoint holds (its waiting keys and their values), waiting again
        (one sorted run)."""
        waiting = cls()
        run: list[Waiting] = []
        for key, value in items:
            if key[:1] == WAITING:
                number = int.from_bytes(key[1:], "big")
                chunk = [_entry(e) for e in decode_value(value)]
                waiting._chunks[number] = {e[6]: e for e in chunk}
                waiting._chunk_of.update((e[6], number) for e in chunk)
                waiting._next_chunk = max(waiting._next_chunk, number + 1)
                run += chunk
            elif key[:1] == EVENT:
                entry = _entry(decode_value(value))
                waiting._single[entry[6]] = key
                run.append(entry)
        run.sort()
        waiting.runs = {0: run} if run else {}
        waiting._run_number = 1
        return waiting

    def __len__(self) -> int:
        return sum(len(run) for run in self.runs.values()) + len(self.due) - self._pos

    def latest(self, default: int) -> int:
        """The time of the latest event in the runs (``default`` if none)."""
        return max([run[-1][0] for run in self.runs.values()], default=default)

    def add(self, run: list[Waiting]) -> None:
        """Take in a sorted run of new events."""
        runs = self.runs
        runs[self._run_number] = run
        self._run_number += 1
        if len(runs) > 1:
            merge_runs(runs)
        added = self._added
        for entry in run:
            added[entry[6]] = entry

    def take(self, now: int) -> None:
        """Move the events stamped up to ``now`` from the runs to the events due, in order."""
        taken = take_runs(self.runs, (now + 1,))[0]
        if not taken:
            return
        if self._pos:
            del self.due[: self._pos]
            self._pos = 0
        due = self.due
        due += taken  # all later than those already due
        if len(due) > 1:
            due.sort()  # sorted runs: timsort merges them

    def step(self, budget: int | None) -> list[Waiting]:
        """The next ``budget`` events due (None: all), to be applied now; :attr:`due` is empty
        once none is left."""
        due, start = self.due, self._pos
        end = len(due) if budget is None else min(len(due), start + max(budget, 1))
        part = due[start:end] if start or end < len(due) else due
        if end == len(due):
            self.due, self._pos = [], 0
        else:
            self._pos = end
        added, chunk_of, chunks, shrunk, left = (
            self._added,
            self._chunk_of,
            self._chunks,
            self._shrunk,
            0,
        )
        for entry in part:  # no longer waiting: a checkpoint that has it must drop it
            seq = entry[6]
            if added.pop(seq, None) is None:
                left += 1
                number = chunk_of.pop(seq, None)
                if number is not None:
                    del chunks[number][seq]
                    shrunk.add(number)
                else:
                    self._gone.append(self._single.pop(seq))
        self._left += left
        return part

    # -- checkpoints ------------------------------------------------------------------------
    def changed(self) -> int:
        """How many events :meth:`changes` writes or drops."""
        return len(self._added) + self._left

    def changes(self, changes: dict[bytes, bytes | None]) -> None:
        """Add to ``changes`` what changed since :meth:`committed`: the events taken in, in new
        chunks; the chunks that lost events, again with those left (None: none left); the
        keys of single events applied (None)."""
        for key in self._gone:
            changes[key] = None
        chunks, written = self._chunks, {}
        for number in self._shrunk:
            rest = chunks[number]
            changes[waiting_key(number)] = encode_value(list(rest.values())) if rest else None
            written[number] = len(rest)
        staged = []
        if self._added:
            entries = sorted(self._added.values())
            number = self._next_chunk
            for start in range(0, len(entries), CHUNK_EVENTS):
                for part, encoded in _fitting(entries[start : start + CHUNK_EVENTS]):
                    staged.append((number, part))
                    changes[waiting_key(number)] = encoded
                    number += 1
        self._staged = (staged, written, len(self._gone), self._left)

    def committed(self) -> None:
        """What :meth:`changes` gave last is in a checkpoint: what changed after it (nothing,
        when a cut follows it at once) waits for the next one, and so does everything when
        no :meth:`changes` came before (a restore: nothing changed yet)."""
        if self._staged is None:
            return
        (staged, written, gone, left), self._staged = self._staged, None
        chunks, chunk_of, added, shrunk = self._chunks, self._chunk_of, self._added, self._shrunk
        for number, size in written.items():
            rest = chunks[number]
            if len(rest) == size:  # as written: nothing more to say of it
                shrunk.discard(number)
                if not rest:
                    del chunks[number]
        del self._gone[:gone]
        self._left -= left
        for number, part in staged:
            chunk = chunks[number] = {}
            for e in part:
                if added.pop(e[6], None) is None:  # applied since changes(): the chunk
                    shrunk.add(number)  # written has it, the next one drops it
                    self._left += 1
                else:
                    chunk[e[6]] = e
                    chunk_of[e[6]] = number
            self._next_chunk = number + 1


def _fitting(entries: list[Waiting]) -> Iterable[tuple[list[Waiting], bytes]]:
    """``entries`` as chunk values of about :data:`CHUNK_BYTES` at most, halved until they
    are (an event alone is a chunk, however large)."""
    encoded = encode_value(entries)
    if len(encoded) <= CHUNK_BYTES or len(entries) == 1:
        yield entries, encoded
    else:
        half = len(entries) // 2
        yield from _fitting(entries[:half])
        yield from _fitting(entries[half:])


def _entry(e: list) -> Waiting:
    """A waiting event as a checkpoint wrote it (an event of a checkpoint from before scores
    were kept has none)."""
    return (*e[:7], None if len(e) < 8 or e[7] is None else tuple(e[7]))
