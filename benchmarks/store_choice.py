"""RocksDB (rocksdict) against LMDB (lmdb) on the join's workload: which embedded store holds
the pending instances.

The workload is the join's, a batch at a time: each batch of 1000 events touches about 200
instances — a third new (a record put and a time-index entry), the rest pending ones read
(one multi-get for the batch) and written back, some resolved (record and index entry
deleted). The pending count first grows to N (instances whose labels have not come), then the
batches run at that size. Printed for each store and N: batches/s and events/s of the steady
phase, bytes on disk per pending instance, resident memory.

    .venv/bin/python benchmarks/store_choice.py                   # N = 1e5, 1e6
    .venv/bin/python benchmarks/store_choice.py --pending 10000000
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = ("champion", "challenger", "baseline")
encode = msgspec.msgpack.Encoder().encode
BE = struct.Struct(">q")


def record(i: int) -> bytes:
    t = 1_767_225_600_000 + i * 10
    return encode([t, True, None, None, None, MODELS[0], t, "no", MODELS[1], t, "yes",
                   MODELS[2], t + 3, "no"])  # fmt: skip


def key(i: int) -> bytes:
    return b"p" + f"inst-{i:012d}".encode()


def index(i: int) -> bytes:
    return b"x" + BE.pack(1_767_225_600_000 + i * 10) + f"inst-{i:012d}".encode()


class Rocks:
    name = "rocksdb (rocksdict)"

    def __init__(self, path: str) -> None:
        from rocksdict import DBCompressionType, Options, Rdict

        options = Options(raw_mode=True)
        options.set_compression_type(DBCompressionType.lz4())
        options.set_bottommost_compression_type(DBCompressionType.zstd())
        options.set_write_buffer_size(64 << 20)
        self.db = Rdict(path, options)

    def get_many(self, keys):
        return self.db.get(keys)

    def write(self, puts, deletes):
        from rocksdict import WriteBatch

        batch = WriteBatch(raw_mode=True)
        for k, v in puts:
            batch.put(k, v)
        for k in deletes:
            batch.delete(k)
        self.db.write(batch)

    def close(self):
        self.db.flush()
        self.db.close()


class Lmdb:
    name = "lmdb"

    def __init__(self, path: str) -> None:
        import lmdb

        self.env = lmdb.open(path, map_size=1 << 40, sync=False, metasync=False,
                             writemap=True, map_async=True)  # fmt: skip

    def get_many(self, keys):
        with self.env.begin() as txn:
            return [txn.get(k) for k in keys]

    def write(self, puts, deletes):
        with self.env.begin(write=True) as txn:
            for k, v in puts:
                txn.put(k, v)
            for k in deletes:
                txn.delete(k)

    def close(self):
        self.env.sync()
        self.env.close()


def du(path: str) -> int:
    return sum(f.stat().st_blocks * 512 for f in Path(path).rglob("*") if f.is_file())


def run(store_cls, pending: int, batches: int) -> dict:
    path = tempfile.mkdtemp(prefix="store-", dir=os.environ.get("TMPDIR"))
    store = store_cls(path)
    rng = random.Random(1)
    try:
        started = time.perf_counter()
        step = 2_000
        for start in range(0, pending, step):  # fill: N pending instances
            ids = range(start, min(pending, start + step))
            store.write([(key(i), record(i)) for i in ids] + [(index(i), b"") for i in ids], [])
        fill = time.perf_counter() - started
        next_id, oldest = pending, 0
        started = time.perf_counter()
        for _ in range(batches):  # steady: new instances, reads, updates, resolutions
            new = range(next_id, next_id + 70)
            touched = [rng.randrange(oldest, next_id) for _ in range(130)]
            resolved = range(oldest, oldest + 70)
            store.get_many([key(i) for i in touched] + [key(i) for i in resolved])
            puts = [(key(i), record(i)) for i in new] + [(index(i), b"") for i in new]
            puts += [(key(i), record(i)) for i in touched]
            deletes = [key(i) for i in resolved] + [index(i) for i in resolved]
            store.write(puts, deletes)
            next_id += 70
            oldest += 70
        steady = time.perf_counter() - started
        store.close()
        size = du(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)
    return {
        "fill_s": fill,
        "events_per_s": batches * 1000 / steady,
        "bytes_per_pending": size / pending,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pending", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--batches", type=int, default=2_000)
    parser.add_argument("--store", choices=["rocksdb", "lmdb"], nargs="+",
                        default=["rocksdb", "lmdb"])  # fmt: skip
    args = parser.parse_args()
    stores = {"rocksdb": Rocks, "lmdb": Lmdb}
    print(f"{'store':22} {'pending':>10} {'fill s':>8} {'events/s':>10} {'B/pending':>10}")
    for n in args.pending:
        for name in args.store:
            r = run(stores[name], n, args.batches)
            print(f"{stores[name].name:22} {n:>10,} {r['fill_s']:8.1f} "
                  f"{r['events_per_s']:10,.0f} {r['bytes_per_pending']:10.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
