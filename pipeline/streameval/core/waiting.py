"""The events a join holds until its clock passes them.

They wait in sorted runs — a batch's events, sorted, make one — and are taken, in time order,
once the clock passes them, then applied in slices. A checkpoint writes the events taken in
since the last one, each under a key of its own, and deletes those of earlier checkpoints that
have been applied since.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Any

from streameval.core.outcome import Label, Scores
from streameval.core.state import encode_value, event_key

__all__ = ["Waiting", "WaitingEvents", "merge_runs", "take_runs"]

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
        # since the last checkpoint: events taken in (no checkpoint has them yet), and those
        # of a checkpoint applied since (their keys go)
        self._added: dict[int, Waiting] = {}
        self._applied: list[tuple[int, int]] = []

    @classmethod
    def restored(cls, entries: Iterable[list]) -> WaitingEvents:
        """The events a checkpoint holds, waiting again (one sorted run)."""
        waiting = cls()
        # (an event of a checkpoint from before scores were kept has none)
        run = sorted((*e[:7], None if len(e) < 8 or e[7] is None else tuple(e[7])) for e in entries)
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
        added, applied = self._added, self._applied
        for entry in part:  # no longer waiting: a checkpoint that has it must drop it
            if added.pop(entry[6], None) is None:
                applied.append((entry[0], entry[6]))
        return part

    # -- checkpoints ------------------------------------------------------------------------
    def changed(self) -> int:
        """How many keys :meth:`changes` writes."""
        return len(self._added) + len(self._applied)

    def changes(self, changes: dict[bytes, bytes | None]) -> None:
        """Add to ``changes`` what changed since :meth:`committed`: the keys of events
        applied go (None), those of events taken in come."""
        for ts, seq in self._applied:
            changes[event_key(ts, seq)] = None
        for entry in self._added.values():
            changes[event_key(entry[0], entry[6])] = encode_value(entry)

    def committed(self) -> None:
        """The changes so far are in a checkpoint."""
        self._added.clear()
        self._applied.clear()
