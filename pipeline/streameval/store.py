"""The join's disk store: pending instances in RocksDB, a bounded cache in RAM.

:class:`DiskState` gives the join (:mod:`streameval.core.join`) the interface of
:class:`~streameval.core.state.MemoryState` over an embedded RocksDB database (rocksdict), so a
partition holds as many pending instances as its disk does — a week of labels' delay is a
matter of disk, not memory (docs/architecture.md has the measurements that chose RocksDB).

* **Reads are batched.** The join asks for the records of a whole event batch at once
  (:meth:`DiskState.prefetch`: one multi-get for those not in RAM); what it reads and changes
  stays in RAM until the next checkpoint.
* **Writes happen at checkpoints.** :meth:`DiskState.commit` writes everything that changed
  since the last one in one atomic RocksDB batch, together with the changelog offset the
  checkpoint ends at. After a crash the database is exactly at its last checkpoint, and the
  worker catches up from the changelog from there (streameval.app.changelog). Between
  checkpoints RAM holds what changed (bounded by the traffic of one checkpoint interval) and a
  cache of clean records (bounded by ``cache_mb``; dropped whole when it is over); RocksDB's
  block cache and write buffers take about as much again.
* **Time queues are ordered keys** (:mod:`streameval.store_queues`). The join's expiry and
  memory queues are keys ``x|f`` + time + instance id; the smallest is a seek away, and entries
  that go are deleted in the same batch as their records, so the database never holds more
  than the state.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from streameval.core.pending import PREDICTIONS
from streameval.core.state import (
    EVENT,
    MEMORY,
    META,
    RECORD,
    WAITING,
    Cut,
    decode_value,
    encode_changes,
    encode_value,
    intern_record,
    time_key,
)
from streameval.store_queues import TimeQueue

__all__ = ["FORMAT", "DiskState", "StoreError"]

#: The layout of the database; another is rebuilt from the changelog.
FORMAT = 2
#: Formats this release reads: 1 held a join's waiting events one per key, 2 in chunks too (a
#: release before chunks rebuilds a store of format 2 from the changelog, which it refuses).
READABLE_FORMATS = (1, 2)
_QUEUES = {"expiry": b"x", "forget": b"f"}
_LOCAL = b"~"  # the store's own scalars: format, fingerprint, changelog position, counts
_BYTES_PER_CACHED = 400  # a cached record in RAM, roughly (a list, its ints and strings)


class StoreError(RuntimeError):
    """The store cannot be used: full disk, unreadable files (the message says what to do)."""


class DiskState:
    """A join partition's instances in a RocksDB database at ``path`` (see the module doc).

    Parameters
    ----------
    path
        The partition's directory (created if missing).
    cache_mb
        RAM for clean records read from the database (and as much again for RocksDB's block
        cache).
    fingerprint
        Of the rules the database's records were made under: one written under others is
        rebuilt (and one whose fingerprint is in ``accept``, an older form of these, is not).
    """

    def __init__(
        self,
        path: str | Path,
        cache_mb: int = 256,
        fingerprint: str = "",
        cache_entries: int | None = None,
        accept: tuple[str, ...] = (),
    ) -> None:
        from rocksdict import (
            BlockBasedOptions,
            Cache,
            DBCompressionType,
            Options,
            Rdict,
        )

        self.path = Path(path)
        self.fingerprint = fingerprint
        self.accept = accept
        if cache_entries is None:
            cache_entries = max(1_000, cache_mb * 1024 * 1024 // 2 // _BYTES_PER_CACHED)
        self.cache_entries = cache_entries
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_compression_type(DBCompressionType.lz4())
        options.set_bottommost_compression_type(DBCompressionType.zstd())
        # RocksDB's own RAM is about cache_mb too: half a block cache, half two write buffers
        # (its default is two of 64 MB per database, whatever cache_mb is)
        options.set_write_buffer_size(max(4, cache_mb // 4) * 1024 * 1024)
        options.set_max_write_buffer_number(2)
        table = BlockBasedOptions()
        table.set_block_cache(Cache(max(8, cache_mb // 2) * 1024 * 1024))
        table.set_bloom_filter(10, False)  # most lookups are of new ids: absent, say so fast
        options.set_block_based_table_factory(table)
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            self.db = Rdict(str(self.path), options)
        except Exception as err:  # a corrupt or foreign directory
            raise StoreError(f"cannot open the store at {self.path}: {err}") from err
        self.records: dict[str, list | None] = {}  # cache: None = not in the database
        self.memory: dict[str, tuple[Any, int] | None] = {}
        self._dirty_records: set[str] = set()
        self._dirty_memory: set[str] = set()
        self._fresh_records: set[str] = set()
        self._fresh_memory: set[str] = set()
        self.queues = {name: TimeQueue(self.db, prefix) for name, prefix in _QUEUES.items()}
        self.valid: dict[str, Any] = {}
        #: stale queue entries go at once (the join asks): the database holds no dead keys
        self.discards = True
        self.touch = self._dirty_records.add
        local = self._local()
        self._pending = local.get("pending", 0)
        self._remembered = local.get("remembered", 0)
        self.reads = 0  # records and memory entries read from the database
        self.hits = 0  # ... found in RAM

    # -- the store's own scalars -----------------------------------------------------------
    def _local(self) -> dict[str, Any]:
        data = self.db.get(_LOCAL)
        return decode_value(data) if data is not None else {}

    def usable(self) -> tuple[bool, str]:
        """Whether the database holds a checkpoint of this configuration and format (else:
        why not), to be caught up from its changelog position; an empty one is usable."""
        local = self._local()
        if not local:
            return True, "empty"
        if local.get("format") not in READABLE_FORMATS:
            return False, f"format {local.get('format')}, this worker writes {FORMAT}"
        if local.get("fingerprint") not in (self.fingerprint, *self.accept):
            return False, "written under other join rules"
        return True, "ok"

    @property
    def position(self) -> int | None:
        """The changelog offset the database's last checkpoint ends at (None: none yet)."""
        return self._local().get("position")

    @property
    def sealed(self) -> tuple[Any, ...] | None:
        """Number, intent chunks and lineage (a database of a release before lineages: none)
        of the changelog checkpoint the database is at
        (streameval.app.changelog_format.Sealed)."""
        local = self._local()
        value = local.get("sealed")  # [number, chunks], as a release before lineages reads it
        if not value:
            return None
        # [number, lineage]; of another checkpoint when a release before lineages wrote since
        pair = local.get("lineage")
        mine = isinstance(pair, list) and len(pair) >= 2 and pair[0] == value[0]
        return (value[0], value[1], pair[1] if mine else None)

    @property
    def carried(self) -> list[bytes]:
        """Keys whose values the changelog may hold only in a checkpoint's intent: a crash
        cut that checkpoint's materialization short, and the restore that found it applied
        the intent here. The next checkpoint must write them again (before it deletes that
        intent); a later restore learns them from here, as the changelog's records no longer
        differ from this database's (also when another checkpoint was cut short since)."""
        return self._local().get("carried", [])

    @property
    def carries_all(self) -> bool:
        """Whether the changelog lacks the whole database: it was deleted and created again,
        and no checkpoint has written the whole database into it yet."""
        return self._local().get("whole", False)

    @property
    def committed_at(self) -> float | None:
        """When (epoch seconds) the database's last checkpoint was written."""
        return self._local().get("at")

    def waiting(self) -> list[tuple[bytes, bytes]]:
        """The events that were waiting for the clock at the last checkpoint: their keys and
        values (chunks, and single events as checkpoints before chunks wrote them)."""
        out, it = [], self.db.iter()
        for prefix in (EVENT, WAITING):
            it.seek(prefix)
            while it.valid() and it.key()[:1] == prefix:
                out.append((it.key(), it.value()))
                it.next()
        return out

    def scalars(self) -> dict[bytes, bytes]:
        """The encoded scalars of the last checkpoint: the join's and its stage's keys."""
        return {key: value for key in (META, b"t") if (value := self.db.get(key)) is not None}

    # -- the join's interface ---------------------------------------------------------------
    def prefetch(self, instance_ids: Iterable[str]) -> None:
        records, memory = self.records, self.memory
        ids = list(instance_ids)
        missing = [i for i in ids if i not in records]
        self.hits += len(ids) - len(missing)
        if not missing:
            return
        self.reads += len(missing)
        keys = [RECORD + i.encode() for i in missing] + [MEMORY + i.encode() for i in missing]
        values = self.db.get(keys)
        n = len(missing)
        for instance_id, value in zip(missing, values[:n], strict=True):
            records[instance_id] = (
                None if value is None else intern_record(decode_value(value), PREDICTIONS)
            )
        for instance_id, value in zip(missing, values[n:], strict=True):
            if instance_id in memory:  # changed since the database was written: RAM has it
                continue
            if value is None:
                memory[instance_id] = None
            else:
                label, until = decode_value(value)
                memory[instance_id] = (label, until)

    def create(self, instance_id: str, record: list, expiry: int) -> None:
        self.put(instance_id, record)
        self.queues["expiry"].push(expiry, instance_id)

    def resolved(self, instance_id: str, label: Any, until: int) -> None:
        self.drop(instance_id)
        self.remember(instance_id, label, until)
        self.queues["forget"].push(until + 1, instance_id)

    def put(self, instance_id: str, record: list) -> None:
        if instance_id not in self._dirty_records:
            self._fresh_records.add(instance_id)
        self.records[instance_id] = record
        self._dirty_records.add(instance_id)
        self._pending += 1

    def drop(self, instance_id: str) -> None:
        self.records[instance_id] = None
        self._pending -= 1
        if instance_id in self._fresh_records:
            self._fresh_records.discard(instance_id)
            self._dirty_records.discard(instance_id)
        else:
            self._dirty_records.add(instance_id)

    def remember(self, instance_id: str, label: Any, until: int) -> None:
        if instance_id not in self._dirty_memory and self.memory.get(instance_id) is None:
            self._fresh_memory.add(instance_id)
        self.memory[instance_id] = (label, until)
        self._dirty_memory.add(instance_id)
        self._remembered += 1

    def forget(self, instance_id: str) -> None:
        self.memory[instance_id] = None
        self._remembered -= 1
        if instance_id in self._fresh_memory:
            self._fresh_memory.discard(instance_id)
            self._dirty_memory.discard(instance_id)
        else:
            self._dirty_memory.add(instance_id)

    def push(self, queue: str, t: int, instance_id: str) -> None:
        self.queues[queue].push(t, instance_id)

    def discard(self, queue: str, t: int, instance_id: str) -> None:
        self.queues[queue].discard(t, instance_id)

    def peek(self, queue: str) -> tuple[int, str] | None:
        return self.queues[queue].peek()

    def pop(self, queue: str) -> tuple[int, str]:
        return self.queues[queue].pop()

    def pending_count(self) -> int:
        return self._pending

    def memory_count(self) -> int:
        return self._remembered

    # -- checkpoints -------------------------------------------------------------------------
    def changed(self) -> int:
        """How many keys the next checkpoint writes (records and remembered instances)."""
        return len(self._dirty_records) + len(self._dirty_memory)

    def changes(self, meta: dict[str, Any]) -> dict[bytes, bytes | None]:
        return encode_changes(
            self.records, self._dirty_records, self.memory, self._dirty_memory, meta
        )

    def freeze(self, changes: dict[bytes, bytes | None]) -> Cut:
        """Close the changes since the last freeze: ``changes`` (those of :meth:`changes`,
        plus the stage's keys) and the time queues' changes, as they are now, make the next
        batch; what changes from now on goes into the one after. The join goes on while the
        checkpoint is written to Kafka, and :meth:`written` then writes the batch."""
        queues = {name: q.freeze() for name, q in self.queues.items()}
        cut = Cut(changes, queues, (self._pending, self._remembered))
        self._dirty_records.clear()
        self._dirty_memory.clear()
        self._fresh_records.clear()
        self._fresh_memory.clear()
        return cut

    def written(
        self,
        cut: Cut,
        position: int | None = None,
        sealed: Sequence[Any] | None = None,
        carried: Sequence[bytes] = (),
        whole: bool = False,
    ) -> None:
        """The checkpoint of ``cut`` is in the changelog: write its batch in one atomic write,
        with the changelog ``position`` it ends at and the number, intent chunks and lineage of
        the checkpoint (``sealed``). A new ``position`` also says what the changelog still lacks
        (:attr:`carried`, :attr:`carries_all`): nothing, once a checkpoint was written."""
        if cut.batch is None:
            self.prepare(cut)
        batch, cut.batch = cut.batch, None
        local = self._local()
        pending, remembered = cut.counts
        local.update(
            format=FORMAT,
            fingerprint=self.fingerprint,
            pending=pending,
            remembered=remembered,
            at=time.time(),
        )
        if position is not None:
            local["position"] = position
            for name, value in (("carried", list(carried)), ("whole", whole)):
                if value:
                    local[name] = value
                else:
                    local.pop(name, None)
        if sealed is not None:
            local["sealed"] = list(sealed[:2])
            local["lineage"] = [sealed[0], sealed[2] if len(sealed) > 2 else None]
        batch.put(_LOCAL, encode_value(local))
        self._write(batch)
        for name, (puts, deletes) in cut.queues.items():
            self.queues[name].written(puts, deletes)
        if len(self.records) + len(self.memory) > self.cache_entries:
            self._shrink()

    def prepare(self, cut: Cut) -> None:
        """Build ``cut``'s batch (its changes and time queues' changes), so that
        :meth:`written` only adds the local keys and writes it: the part of the work that
        does not wait for the checkpoint to be durable. Touches nothing else."""
        from rocksdict import WriteBatch

        batch = WriteBatch(raw_mode=True)
        for key, value in cut.changes.items():
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        for name, (puts, deletes) in cut.queues.items():
            TimeQueue.write(batch, _QUEUES[name], puts, deletes)
        cut.batch = batch

    def _shrink(self) -> None:
        """Start the cache again, but for what changed since the last freeze (the database
        does not have it yet): both entries of an instance, as :meth:`prefetch` reads both."""
        dirty = self._dirty_records | self._dirty_memory
        for cache in (self.records, self.memory):
            keep = {k: cache[k] for k in dirty if k in cache}
            cache.clear()  # the same dicts: the join holds them
            cache.update(keep)

    def commit(
        self,
        changes: dict[bytes, bytes | None] | None = None,
        position: int | None = None,
        sealed: Sequence[Any] | None = None,
        carried: Sequence[bytes] = (),
        whole: bool = False,
    ) -> None:
        """:meth:`freeze` and :meth:`written` in one: write ``changes`` (those of
        :meth:`changes`, plus the stage's keys) and the time queues' changes in one atomic
        batch."""
        self.written(self.freeze(changes or {}), position, sealed, carried, whole)

    def _write(self, batch: Any) -> None:
        try:
            self.db.write(batch)
        except Exception as err:
            raise StoreError(
                f"cannot write the store at {self.path} ({err}): is the disk full? Free space "
                "and restart the worker; it continues from its last checkpoint"
            ) from err

    def apply(self, items: list[tuple[bytes, bytes | None]], queue_entries: Any) -> None:
        """Write changes read from a changelog (records, memory, the scalars), keeping the
        time queues and counts in step; applying the same changes twice changes nothing, so a
        restore cut short by a crash is simply done again."""
        from rocksdict import WriteBatch

        batch = WriteBatch(raw_mode=True)
        changed = [k for k, _ in items if k[:1] in (RECORD, MEMORY)]
        old = dict(zip(changed, self.db.get(changed), strict=True)) if changed else {}
        forget = _QUEUES["forget"]
        for key, value in items:
            kind = key[:1]
            if kind == RECORD or kind == MEMORY:
                instance_id = key[1:].decode()
                before = old.get(key)
                if kind == RECORD:
                    entries = lambda v: [(_QUEUES[q], t) for q, t in queue_entries(v)]  # noqa: E731
                else:
                    entries = lambda v: [(forget, v[1] + 1)]  # noqa: E731
                if before is not None:
                    if kind == RECORD:
                        self._pending -= 1
                    else:
                        self._remembered -= 1
                    for prefix, t in entries(decode_value(before)):
                        batch.delete(time_key(prefix, t, instance_id))
                if value is not None:
                    if kind == RECORD:
                        self._pending += 1
                    else:
                        self._remembered += 1
                    for prefix, t in entries(decode_value(value)):
                        batch.put(time_key(prefix, t, instance_id), b"")
                old[key] = value  # the same key again later in these items
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        self._write(batch)
        self.records.clear()
        self.memory.clear()

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        return self.db.get(keys) if keys else []

    def settle(
        self,
        position: int | None,
        sealed: Sequence[Any] | None,
        carried: Sequence[bytes] = (),
        whole: bool = False,
    ) -> None:
        """The changes applied so far make checkpoint ``sealed`` ending at changelog
        ``position``, which lacks the values of ``carried`` under their own keys (or, with
        ``whole``, the whole database)."""
        for queue in self.queues.values():  # apply() wrote under iterators made before it
            queue.reread()
        self.commit({}, position, sealed, carried, whole)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every key a changelog holds of this store (records, memory, waiting events and
        scalars; not the time queues, which follow from the records)."""
        it = self.db.iter()
        it.seek_to_first()
        while it.valid():
            key = it.key()
            if key[:1] in (RECORD, MEMORY, EVENT, WAITING, META, b"t"):
                yield key, it.value()
            it.next()

    def __iter__(self) -> Iterator[tuple[str, list]]:
        it = self.db.iter()
        it.seek(RECORD)
        while it.valid() and it.key()[:1] == RECORD:
            yield it.key()[1:].decode(), intern_record(decode_value(it.value()), PREDICTIONS)
            it.next()

    def disk_bytes(self) -> int:
        """Bytes the database takes on disk (its files, the write-ahead log included)."""
        return sum(f.stat().st_size for f in self.path.iterdir() if f.is_file())

    def compaction_debt(self) -> int:
        """Bytes RocksDB estimates its compactions still have to rewrite."""
        return self.db.property_int_value("rocksdb.estimate-pending-compaction-bytes") or 0

    def close(self) -> None:
        for queue in self.queues.values():
            queue.close()
        self.queues = {}
        self.db.close()
        del self.db

    @staticmethod
    def wipe(path: str | Path) -> None:
        """Remove a store (to rebuild it from its changelog)."""
        shutil.rmtree(path, ignore_errors=True)
