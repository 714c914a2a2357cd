"""Where the join keeps what it holds: pending instances, remembered ones, the time queues.

The join (:mod:`streameval.core.join`) works on plain Python objects — a pending instance is one
flat list — through a :class:`JoinState`, which decides where they live. :class:`MemoryState`
keeps everything in RAM (tests, small deployments, ``streameval replay`` by default); the
worker's disk store keeps them in RocksDB behind a bounded cache (``streameval.store``). Both
give the join the same answers, and both report what changed since the last checkpoint as
key/value pairs in one encoding (:func:`encode_changes`), so a checkpoint writes only what
changed and either store can be rebuilt from the checkpoints of the other.

Keys (bytes): ``p`` + instance id → a pending instance's record; ``r`` + instance id → a
remembered (resolved, expired or evicted) instance; ``w`` + a number → a chunk of events waiting
for the clock (``e`` + time + sequence → one waiting event, as checkpoints before chunks wrote
them: still read); ``m`` → the join's small scalars (counters, clock). The time queues (expiry,
grace, memory) are derived from the records and are not part of the changes.
"""

from __future__ import annotations

import heapq
import struct
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

__all__ = [
    "EVENT",
    "MEMORY",
    "META",
    "RECORD",
    "WAITING",
    "Cut",
    "MemoryState",
    "decode_value",
    "encode_changes",
    "encode_value",
    "event_key",
    "intern_record",
    "waiting_key",
]

RECORD, MEMORY, EVENT, META, WAITING = b"p", b"r", b"e", b"m", b"w"
_BE = struct.Struct(">Q")
_OFFSET = 1 << 63  # signed times as unsigned big-endian: byte order is time order
_encoder = msgspec.msgpack.Encoder()
encode_value = _encoder.encode
decode_value = msgspec.msgpack.Decoder().decode
_intern = sys.intern


def event_key(ts: int, seq: int) -> bytes:
    """The key of a waiting event: sorted by time, then by arrival sequence."""
    return EVENT + _BE.pack(ts + _OFFSET) + _BE.pack(seq)


def waiting_key(number: int) -> bytes:
    """The key of a chunk of waiting events."""
    return WAITING + _BE.pack(number)


def time_key(prefix: bytes, t: int, instance_id: str) -> bytes:
    """A time queue's key: ``prefix``, then ``t`` so that byte order is time order."""
    return prefix + _BE.pack(t + _OFFSET) + instance_id.encode()


def split_time_key(key: bytes) -> tuple[int, str]:
    return _BE.unpack_from(key, 1)[0] - _OFFSET, key[9:].decode()


def intern_record(record: list, predictions_at: int) -> list:
    """Share model ids and string labels of a decoded record with every other record."""
    for i in range(predictions_at, len(record), 3):
        if type(record[i]) is str:
            record[i] = _intern(record[i])
        entry = record[i + 2]
        if type(entry) is str:
            record[i + 2] = _intern(entry)
        elif type(entry) is list:  # [label, scores]: the scores a tuple, as when they came
            if type(entry[0]) is str:
                entry[0] = _intern(entry[0])
            entry[1] = tuple(entry[1])
    return record


def encode_changes(
    records: Any,
    dirty_records: Iterable[str],
    memory: Any,
    dirty_memory: Iterable[str],
    meta: dict[str, Any],
) -> dict[bytes, bytes | None]:
    """The changes of a state as key/value pairs (a checkpoint's; None: deleted): every dirty
    record and memory entry as it is now, and the join's scalars. Written as comprehensions: a
    checkpoint stalls the data path for as long as this takes."""
    encode, get_record, get_memory = encode_value, records.get, memory.get
    out: dict[bytes, bytes | None] = {
        RECORD + i.encode(): None if (r := get_record(i)) is None else encode(r)
        for i in dirty_records
    }
    out.update(
        {
            MEMORY + i.encode(): None if (e := get_memory(i)) is None else encode(e)
            for i in dirty_memory
        }
    )
    out[META] = encode(meta)
    return out


class Cut:
    """What one checkpoint writes of a state, closed by ``freeze`` while the join goes on:
    the encoded ``changes`` (for the changelog and a disk store's batch), and for a disk store
    the time queues' changes, its counts as they were then, and the write ``batch`` of those
    once prepared (``prepare``: built while the checkpoint's commit is on its way, so that
    writing it is a shorter stop)."""

    __slots__ = ("batch", "changes", "counts", "queues")

    def __init__(
        self,
        changes: dict[bytes, bytes | None],
        queues: Any = None,
        counts: tuple[int, int] = (0, 0),
    ) -> None:
        self.changes = changes
        self.queues = queues
        self.counts = counts
        self.batch: Any = None


class MemoryState:
    """Everything in RAM: dicts for records and remembered instances, heaps for the time
    queues (stale entries are skipped when they reach the top, and compacted now and then).

    The join reads and writes :attr:`records` and :attr:`memory` directly (the hot path) and
    calls :meth:`touch` for what it changed; :meth:`changes` encodes what changed since the
    last :meth:`commit`.
    """

    def __init__(self) -> None:
        self.records: dict[str, list] = {}
        self.memory: dict[str, tuple[Any, int]] = {}
        # Each time queue: entries pushed in time order (the usual case: the join applies
        # events in time order, so expiries, graces and memories come due in the order they
        # are made) in a deque, the others in a heap; the smallest is at the front of either.
        names = ("expiry", "forget")
        self.queues: dict[str, deque[tuple[int, str]]] = {name: deque() for name in names}
        self._late: dict[str, list[tuple[int, str]]] = {name: [] for name in names}
        self._compact_at = dict.fromkeys(names, 4096)
        #: instances held, and remembered (bound methods of the dicts: asked often)
        self.pending_count = self.records.__len__
        self.memory_count = self.memory.__len__
        self._dirty_records: set[str] = set()
        self._dirty_memory: set[str] = set()
        #: a record changed in place (the set's own method: called for every event)
        self.touch = self._dirty_records.add
        # created since the last commit: dropped again before the next, they are no change
        self._fresh_records: set[str] = set()
        self._fresh_memory: set[str] = set()
        #: per queue, whether an entry ``(t, instance_id)`` still stands (set by the join,
        #: which knows the rules); stale entries are dropped when a heap is compacted
        self.valid: dict[str, Any] = {}

    # -- the join's interface ---------------------------------------------------------------
    def prefetch(self, instance_ids: Iterable[str]) -> None:
        """Make the records and memory of ``instance_ids`` readable from the dicts (here they
        always are)."""

    def create(self, instance_id: str, record: list, expiry: int) -> None:
        """A new pending instance and its expiry (:meth:`put` and :meth:`push` in one)."""
        if instance_id not in self._dirty_records:
            self._fresh_records.add(instance_id)
        self.records[instance_id] = record
        self._dirty_records.add(instance_id)
        fifo = self.queues["expiry"]
        entry = (expiry, instance_id)
        if not fifo or entry >= fifo[-1]:
            fifo.append(entry)
            if len(fifo) > self._compact_at["expiry"]:
                self._compact("expiry")
        else:
            heapq.heappush(self._late["expiry"], entry)

    def resolved(self, instance_id: str, label: Any, until: int) -> None:
        """A pending instance resolved: dropped, remembered until ``until`` (:meth:`drop`,
        :meth:`remember` and :meth:`push` in one, once per instance: written out)."""
        del self.records[instance_id]
        if instance_id in self._fresh_records:
            self._fresh_records.discard(instance_id)
            self._dirty_records.discard(instance_id)
        else:
            self._dirty_records.add(instance_id)
        memory = self.memory
        if instance_id not in memory and instance_id not in self._dirty_memory:
            self._fresh_memory.add(instance_id)
        memory[instance_id] = (label, until)
        self._dirty_memory.add(instance_id)
        fifo = self.queues["forget"]
        entry = (until + 1, instance_id)
        if not fifo or entry >= fifo[-1]:
            fifo.append(entry)
            if len(fifo) > self._compact_at["forget"]:
                self._compact("forget")
        else:
            heapq.heappush(self._late["forget"], entry)

    def put(self, instance_id: str, record: list) -> None:
        """A new pending instance."""
        if instance_id not in self._dirty_records:  # no checkpoint has it: none needs to know
            self._fresh_records.add(instance_id)  # if it goes before the next one
        self.records[instance_id] = record
        self._dirty_records.add(instance_id)

    def drop(self, instance_id: str) -> None:
        del self.records[instance_id]
        if instance_id in self._fresh_records:
            self._fresh_records.discard(instance_id)
            self._dirty_records.discard(instance_id)
        else:
            self._dirty_records.add(instance_id)

    def remember(self, instance_id: str, label: Any, until: int) -> None:
        if instance_id not in self._dirty_memory and instance_id not in self.memory:
            self._fresh_memory.add(instance_id)
        self.memory[instance_id] = (label, until)
        self._dirty_memory.add(instance_id)

    def forget(self, instance_id: str) -> None:
        del self.memory[instance_id]
        if instance_id in self._fresh_memory:
            self._fresh_memory.discard(instance_id)
            self._dirty_memory.discard(instance_id)
        else:
            self._dirty_memory.add(instance_id)

    def push(self, queue: str, t: int, instance_id: str) -> None:
        entry = (t, instance_id)
        fifo = self.queues[queue]
        if not fifo or entry >= fifo[-1]:
            fifo.append(entry)
        else:
            heapq.heappush(self._late[queue], entry)
        if len(fifo) > self._compact_at[queue]:
            self._compact(queue)

    def discard(self, queue: str, t: int, instance_id: str) -> None:
        """The entry is no longer valid (stale entries are skipped when popped)."""

    def peek(self, queue: str) -> tuple[int, str] | None:
        fifo, late = self.queues[queue], self._late[queue]
        if fifo:
            return late[0] if late and late[0] < fifo[0] else fifo[0]
        return late[0] if late else None

    def pop(self, queue: str) -> tuple[int, str]:
        fifo, late = self.queues[queue], self._late[queue]
        if late and (not fifo or late[0] < fifo[0]):
            return heapq.heappop(late)
        return fifo.popleft()

    def _compact(self, queue: str) -> None:
        """Drop the entries of instances no longer held from a queue grown to twice what is
        held (otherwise they are dropped when they reach the front; what is left may still be
        stale, and is checked then)."""
        held = self.memory if queue == "forget" else self.records
        fifo = deque(entry for entry in self.queues[queue] if entry[1] in held)
        self.queues[queue] = fifo
        late = [entry for entry in self._late[queue] if entry[1] in held]
        heapq.heapify(late)
        self._late[queue] = late
        self._compact_at[queue] = 2 * len(fifo) + 4096

    # -- checkpoints -------------------------------------------------------------------------
    def changed(self) -> int:
        """How many keys the next checkpoint writes (records and remembered instances)."""
        return len(self._dirty_records) + len(self._dirty_memory)

    def changes(self, meta: dict[str, Any]) -> dict[bytes, bytes | None]:
        """What changed since the last :meth:`commit`, encoded (None: deleted), with ``meta``."""
        return encode_changes(
            self.records, self._dirty_records, self.memory, self._dirty_memory, meta
        )

    def freeze(self, changes: dict[bytes, bytes | None]) -> Cut:
        """Close the changes since the last freeze: ``changes`` (those of :meth:`changes`, with
        the caller's own keys) are what a checkpoint writes; what changes from now on goes
        into the next one. The checkpoint is written (Kafka acknowledges it) later, while
        the join goes on: then :meth:`written` is called with the cut."""
        self._dirty_records.clear()
        self._dirty_memory.clear()
        self._fresh_records.clear()
        self._fresh_memory.clear()
        return Cut(changes)

    def prepare(self, cut: Cut) -> None:
        """Nothing to prepare in RAM (a disk store builds its batch)."""

    def written(self, cut: Cut, *_: Any) -> None:
        """The checkpoint of ``cut`` is durable (nothing to do in RAM; the arguments are a
        disk store's)."""

    def commit(self, *_: Any) -> None:
        """The changes so far are written (:meth:`freeze` and :meth:`written` in one)."""
        self.freeze({})

    def load(
        self,
        items: Iterable[tuple[bytes, bytes]],
        queue_entries: Any,
        predictions_at: int,
    ) -> dict[str, Any] | None:
        """Fill an empty state from encoded items (a checkpoint's) and build the time queues
        (``queue_entries(record)``: a record's ``(queue, t)`` entries); return the meta."""
        meta = None
        for key, value in items:
            kind = key[:1]
            if kind == RECORD:
                instance_id = key[1:].decode()
                record = intern_record(decode_value(value), predictions_at)
                self.records[instance_id] = record
                for queue, t in queue_entries(record):
                    self._late[queue].append((t, instance_id))
            elif kind == MEMORY:
                instance_id = key[1:].decode()
                label, until = decode_value(value)
                self.memory[instance_id] = (label, until)
                self._late["forget"].append((until + 1, instance_id))
            elif kind == META:
                meta = decode_value(value)
        for name, entries in self._late.items():  # restored: one sorted run each
            self.queues[name] = deque(sorted(entries))
            self._late[name] = []
        return meta

    def __iter__(self) -> Iterator[tuple[str, list]]:
        return iter(self.records.items())

    def close(self) -> None:
        pass
