"""What a join partition's checkpoints cost on the disk store, in-process (no broker).

One join on the worker's disk store (RocksDB) takes ``--instances`` instances: each an instance
record and one prediction of each of three models at the same time, and its label
``--lag`` instances later; batches of ``--batch`` events, the join's clock at the batch's
last event. Whenever ``--every`` keys or more changed, it checkpoints as the worker's join
stage does, without the changelog: the changed keys (``changes``), the cut (``freeze``),
the store's batch (``prepare``) and its write (``written``). Printed per round: events/s
overall, the outcomes, the checkpoints, the puts and deletes of the time queues they wrote
(expiry and forgetting), and the seconds in the checkpoints' store steps; then the store
steps' min / median / max over ``--rounds``.

    .venv/bin/python benchmarks/join_store.py
    .venv/bin/python benchmarks/join_store.py --instances 500000 --lag 5000 --rounds 5

First it measures what a pending instance costs in memory with the in-memory store
(``store = "memory"``): ``--instances`` instances, each with its instance record and three
predictions and no label, the growth of the process's resident memory over the pending
instances (before anything else runs in the process, so no memory freed earlier hides it).
``--memory-only`` stops there. Instance ids are numbers in order, zero-padded to
``--id-chars`` characters (36 by default, as a UUID's).

Most instances here are created and labelled between two checkpoints: their expiry entry is
pushed and discarded without ever being written (docs/performance.md, "nothing on disk for
what comes and goes"). A larger ``--lag`` keeps more of them pending across checkpoints.

The script uses only what the join and the disk store offered before that change (66e7719), so
it runs as is on an older commit (``PYTHONPATH=<worktree>/pipeline``) for a before/after.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass

from streameval.core.join import Join
from streameval.core.outcome import INSTANCE, LABEL, PREDICTION
from streameval.core.state import MemoryState
from streameval.store import DiskState

MODELS = ("a", "b", "c")
T0 = 1_767_225_600_000  # 2026-01-01, ms
WEEK_MS = 7 * 86_400_000


@dataclass
class Round:
    seconds: float
    events: int
    outcomes: int
    checkpoints: int
    puts: int
    deletes: int
    store_seconds: float


def instance_id(i: int, chars: int) -> str:
    """Instance ``i``'s id: ``chars`` characters (36, as a UUID, by default), or more if ``i``
    needs more digits."""
    return str(i).zfill(chars)


def instance_rows(i: int, chars: int, offset: int) -> list[tuple]:
    """Instance ``i``'s record and a prediction of each model, at offsets from ``offset`` on."""
    key, ts = instance_id(i, chars), T0 + i
    rows = [(INSTANCE, key, "", ts, "", 0, offset, None)]
    rows += [(PREDICTION, key, m, ts, "yes", 0, offset + 1 + k, None) for k, m in enumerate(MODELS)]
    return rows


def resident() -> int:
    """The process's resident memory (bytes; Linux)."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_per_pending(instances: int, batch: int, chars: int) -> tuple[int, float]:
    """Pending instances held by a join on the in-memory store, and the resident memory each
    added: an instance record and a prediction of each model, no label."""
    join = Join(0, WEEK_MS, 10**9, MemoryState())
    gc.collect()
    before = resident()
    rows: list[tuple] = []
    offset = 0
    for i in range(instances):
        rows += instance_rows(i, chars, offset)
        offset += 1 + len(MODELS)
        if len(rows) >= batch or i == instances - 1:
            join.add_events(rows, T0 + i)
            rows = []
    gc.collect()
    return join.pending, (resident() - before) / max(join.pending, 1)


def one(instances: int, lag: int, batch: int, every: int, chars: int) -> Round:
    path = tempfile.mkdtemp(prefix="streameval-join-store-")
    state = DiskState(path, cache_mb=64)
    try:
        join = Join(0, WEEK_MS, 10**9, state)
        rows: list[tuple] = []
        offset = outcomes = checkpoints = puts = deletes = 0
        store_seconds = 0.0
        start = time.perf_counter()
        for i in range(instances + lag):
            ts = T0 + i
            if i < instances:
                rows += instance_rows(i, chars, offset)
                offset += 1 + len(MODELS)
            if i >= lag:
                rows.append((LABEL, instance_id(i - lag, chars), "", ts, "yes", 0, offset, None))
                offset += 1
            if len(rows) >= batch or i == instances + lag - 1:
                out, _ = join.add_events(rows, ts)
                outcomes += len(out)
                rows = []
                if join.state.changed() >= every:
                    begun = time.perf_counter()
                    cut = join.freeze(join.changes())
                    for queue_puts, queue_deletes in cut.queues.values():
                        puts += len(queue_puts)
                        deletes += len(queue_deletes)
                    join.prepare(cut)
                    join.written(cut, offset, (checkpoints, 1))
                    store_seconds += time.perf_counter() - begun
                    checkpoints += 1
        outcomes += len(join.flush())
        seconds = time.perf_counter() - start
    finally:
        state.close()
        shutil.rmtree(path, ignore_errors=True)
    return Round(seconds, offset, outcomes, checkpoints, puts, deletes, store_seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--instances", type=int, default=200_000)
    parser.add_argument("--lag", type=int, default=50, help="instances between one and its label")
    parser.add_argument("--batch", type=int, default=1_000, help="events per batch")
    parser.add_argument("--every", type=int, default=10_000, help="changed keys per checkpoint")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--id-chars", type=int, default=36, help="characters of an instance id")
    parser.add_argument("--memory-only", action="store_true", help="only the memory figure")
    args = parser.parse_args()
    for name in ("instances", "batch", "every", "rounds", "id_chars"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.lag < 0:
        parser.error("--lag must be at least 0")
    pending, per_instance = memory_per_pending(args.instances, args.batch, args.id_chars)
    print(
        f"the in-memory store: {per_instance:,.0f} bytes of resident memory per pending instance "
        f"({pending:,} pending, {len(MODELS)} predictions each, {args.id_chars}-character ids)",
        flush=True,
    )
    if args.memory_only:
        return
    print(
        f"{args.instances:,} instances, {len(MODELS)} models, labels {args.lag:,} instances "
        f"later, batches of {args.batch:,} events, a checkpoint at {args.every:,} changed keys"
    )
    rounds = []
    for _ in range(args.rounds):
        r = one(args.instances, args.lag, args.batch, args.every, args.id_chars)
        rounds.append(r)
        print(
            f"  {r.events / r.seconds:>9,.0f} events/s  {r.outcomes:,} outcomes  "
            f"{r.checkpoints} checkpoints  queues: {r.puts:,} puts, {r.deletes:,} deletes  "
            f"checkpoint store steps {r.store_seconds:.3f} s",
            flush=True,
        )
    steps = sorted(r.store_seconds for r in rounds)
    print(
        f"checkpoint store steps (s), min / median / max of {len(steps)}: "
        f"{steps[0]:.3f} / {statistics.median(steps):.3f} / {steps[-1]:.3f}"
    )


if __name__ == "__main__":
    main()
