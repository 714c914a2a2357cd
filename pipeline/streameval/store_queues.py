"""The disk store's time queues: entries ``(time, instance id)`` as ordered keys of its RocksDB
database, so the smallest is a seek away, with what changed since the last commit in RAM."""

from __future__ import annotations

import heapq
from typing import Any

from streameval.core.state import split_time_key, time_key

__all__ = ["TimeQueue"]


class TimeQueue:
    """A time queue over the database's ordered keys, with what changed since the last
    commit in RAM: entries pushed (a heap) and entries taken or discarded (a set).

    An entry pushed and discarded between two freezes never reaches the database: neither
    its key nor a tombstone for it is written (an instance created and labelled within one
    checkpoint, the common case, costs its expiry queue nothing on disk). The join never
    pushes an entry that is live (queued and not taken or discarded), which this relies on."""

    def __init__(self, db: Any, prefix: bytes) -> None:
        self.db, self.prefix = db, prefix
        self.heap: list[tuple[int, str]] = []
        #: the entries the heap holds, each once (a taken or discarded one until popped)
        self.queued: set[tuple[int, str]] = set()
        self.removed: set[tuple[int, str]] = set()
        #: pushed again after being taken from the database: it may still be there
        self.shadowed: set[tuple[int, str]] = set()
        #: pushed since the last freeze, and neither in the database nor in a frozen batch
        self.fresh: set[tuple[int, str]] = set()
        #: fresh entries discarded: skipped in the heap, and nothing to delete
        self.cancelled: set[tuple[int, str]] = set()
        #: the entries the latest frozen batch puts, until written (a batch frozen before it
        #: and not written never is: the latest holds everything it would have put)
        self._frozen: set[tuple[int, str]] = set()
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
        elif entry in self.cancelled:  # its one copy is still in the heap: live again
            self.cancelled.discard(entry)
            self.fresh.add(entry)
            return
        elif entry not in self._frozen:
            self.fresh.add(entry)
        if entry not in self.queued:  # else discarded after a freeze, its copy still there
            self.queued.add(entry)
            heapq.heappush(self.heap, entry)

    def discard(self, t: int, instance_id: str) -> None:
        entry = (t, instance_id)
        if entry in self.fresh:  # only in the heap: no key to delete
            self.fresh.discard(entry)
            self.cancelled.add(entry)
            return
        self.removed.add(entry)
        self.shadowed.discard(entry)  # the next batch deletes it, whichever copy it was
        if self._head == entry:
            self._advance()

    def peek(self) -> tuple[int, str] | None:
        heap, removed, cancelled = self.heap, self.removed, self.cancelled
        while heap and (heap[0] in removed or heap[0] in cancelled):
            gone = heapq.heappop(heap)
            self.queued.discard(gone)
            cancelled.discard(gone)  # a cancelled entry's one copy is gone
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
            self.queued.discard(entry)
            if self._head == entry:  # pushed again while the database still had it
                self.removed.add(entry)
                self._advance()
            if entry in self.shadowed:  # the database may have it: delete it there too
                self.shadowed.discard(entry)
                self.removed.add(entry)
            else:
                self.fresh.discard(entry)
        else:
            self.removed.add(entry)
            self._advance()
        return entry

    def freeze(self) -> tuple[set[tuple[int, str]], set[tuple[int, str]]]:
        """What the database lacks of the queue now: entries to put, entries to delete. The
        queue goes on as it is until :meth:`written` says the database has them."""
        removed, cancelled = self.removed, self.cancelled
        puts = {e for e in self.heap if e not in removed and e not in cancelled}
        self._frozen = puts
        self.fresh = set()  # on their way to the database now
        return puts, set(removed)

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
        heap, removed, cancelled, held = self.heap, self.removed, self.cancelled, self.queued
        # taken since the freeze, but written by it: the next batch deletes them
        self.removed = {e for e in removed if e not in deletes} | {e for e in puts if e not in held}
        self.heap = [e for e in heap if e not in puts and e not in removed and e not in cancelled]
        self.queued = set(self.heap)
        heapq.heapify(self.heap)
        # pushed again after the freeze, their keys deleted by it: the database lacks them
        self.fresh |= self.shadowed & deletes
        self.shadowed -= puts | deletes
        self.cancelled = set()  # none is in the heap any more
        if self._frozen is puts:
            self._frozen = set()
        self._reset(start)

    def reread(self) -> None:
        """Forget what RAM holds and read the queue from the database again (it was written
        under this queue's iterator)."""
        self.heap, self.queued, self.removed, self.shadowed = [], set(), set(), set()
        self.fresh, self.cancelled, self._frozen = set(), set(), set()
        self._reset()

    def close(self) -> None:
        """Let go of the database (an open iterator keeps it, and its lock)."""
        self._it = None
