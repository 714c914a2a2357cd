"""The disk store's time queues: entries ``(time, instance id)`` as ordered keys of its RocksDB
database, so the smallest is a seek away, with what changed since the last commit in RAM."""

from __future__ import annotations

import heapq
from typing import Any

from streameval.core.state import split_time_key, time_key

__all__ = ["TimeQueue"]


class TimeQueue:
    """A time queue over the database's ordered keys, with what changed since the last
    commit in RAM: entries pushed (a heap) and entries taken or discarded (a set)."""

    def __init__(self, db: Any, prefix: bytes) -> None:
        self.db, self.prefix = db, prefix
        self.heap: list[tuple[int, str]] = []
        self.removed: set[tuple[int, str]] = set()
        #: pushed again after being taken from the database: it may still be there
        self.shadowed: set[tuple[int, str]] = set()
        self._reset()

    def _reset(self, start: tuple[int, str] | None = None) -> None:
        self._it = self.db.iter()
        # from the first live entry: the ones taken before it are deleted, and a seek from
        # the prefix would step over all their tombstones until compaction drops them
        self._it.seek(self.prefix if start is None else time_key(self.prefix, *start))
        self._head: tuple[int, str] | None = None
        self._advance()

    def _advance(self) -> None:
        it, prefix = self._it, self.prefix
        while it.valid():
            key = it.key()
            if not key.startswith(prefix):
                break
            entry = split_time_key(key)
            it.next()
            if entry not in self.removed:
                self._head = entry
                return
        self._head = None

    def push(self, t: int, instance_id: str) -> None:
        entry = (t, instance_id)
        if entry in self.removed:  # taken from the database, and back: it may be there still
            self.removed.discard(entry)
            self.shadowed.add(entry)
        heapq.heappush(self.heap, entry)

    def discard(self, t: int, instance_id: str) -> None:
        entry = (t, instance_id)
        self.removed.add(entry)
        if self._head == entry:
            self._advance()

    def peek(self) -> tuple[int, str] | None:
        heap, removed = self.heap, self.removed
        while heap and heap[0] in removed:
            heapq.heappop(heap)
        head = self._head
        if heap and (head is None or heap[0] < head):
            return heap[0]
        return head

    def pop(self) -> tuple[int, str]:
        entry = self.peek()
        if entry is None:
            raise IndexError("pop from an empty queue")
        if self.heap and self.heap[0] == entry:
            heapq.heappop(self.heap)
            if entry in self.shadowed:  # the database may have it: delete it there too
                self.shadowed.discard(entry)
                self.removed.add(entry)
        else:
            self.removed.add(entry)
            self._advance()
        return entry

    def freeze(self) -> tuple[set[tuple[int, str]], set[tuple[int, str]]]:
        """What the database lacks of the queue now: entries to put, entries to delete. The
        queue goes on as it is until :meth:`written` says the database has them."""
        removed = self.removed
        return {e for e in self.heap if e not in removed}, set(removed)

    @staticmethod
    def write(batch: Any, prefix: bytes, puts: set, deletes: set) -> None:
        for t, instance_id in deletes:
            batch.delete(time_key(prefix, t, instance_id))
        for t, instance_id in puts:
            batch.put(time_key(prefix, t, instance_id), b"")

    def written(self, puts: set, deletes: set) -> None:
        """The database now holds ``puts`` and no longer ``deletes`` (a :meth:`freeze`'s):
        keep in RAM only what it still lacks, and read it again from the live head."""
        start = self.peek()  # everything before it is taken (deleted, or in ``removed``)
        heap, removed = self.heap, self.removed
        held = set(heap)
        # taken since the freeze, but written by it: the next batch deletes them
        self.removed = {e for e in removed if e not in deletes} | {e for e in puts if e not in held}
        self.heap = [e for e in heap if e not in puts and e not in removed]
        heapq.heapify(self.heap)
        self.shadowed -= puts
        self._reset(start)

    def reread(self) -> None:
        """Forget what RAM holds and read the queue from the database again (it was written
        under this queue's iterator)."""
        self.heap, self.removed, self.shadowed = [], set(), set()
        self._reset()

    def close(self) -> None:
        """Let go of the database (an open iterator keeps it, and its lock)."""
        self._it = None
