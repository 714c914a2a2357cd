"""Labels days to weeks late: the join with the disk store and with the in-memory store as the
number of pending instances grows, in one run, side by side.

    .venv/bin/python benchmarks/pending_scale.py                    # 1e5, 1e6; restore of 1e6
    .venv/bin/python benchmarks/pending_scale.py --pending 100000 1000000 10000000 \
        --store-only 100000000

Phases:

1. **data path** (per store and N, each in a process of its own, so that its resident memory is
   its own): N instances (36-character ids, three models predicting each once) are fed to a
   join partition and an evaluation partition, the worker's stages, and none gets its label;
   then a steady phase of ``--events`` events in which every new instance's label comes N
   instances later, so that N stay pending. Checkpoints as the worker takes them: every
   ``--checkpoint-s`` seconds, and of the join alone as soon as it has
   ``checkpoint_max_changes`` changes, in the worker's steps — changes cut, encoded as
   changelog records (streameval.app.changelog), the disk store's batch written — without the
   produce to Kafka and the waits for its acknowledgements (the worker goes on during those).
   Printed: events/s of the steady phase, peak resident memory, bytes on disk per pending
   instance (after the fill, when the store holds pending instances only), the pause of the
   data path per stage checkpoint p50/p99/max (the data path is one thread: the longest of
   those steps stops it), how many outcomes were evaluated, and the store's
   size at the end, resolved instances being remembered for ``label_ttl`` (7 days) too. The in-
   memory store is measured up to ``--memory-max`` pending (RAM: about 1 KB each).
2. **store alone** (``--store-only N``): the disk store filled with N pending instances and
   run in steady state through the join (no evaluation), for sizes the whole path takes too long
   to reach.
3. **restore** (``--restore N``, a real broker): a worker with one join partition holding N
   pending instances is killed with SIGKILL after a checkpoint; a new one on an empty disk
   rebuilds the partition from the changelog, and one on the killed worker's disk catches up;
   the time each takes until the partition is assigned and ready (from the worker's log).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = ("champion", "challenger", "baseline")
START = 1_767_225_600_000


def _id(i: int) -> str:
    h = f"{i:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _batches(first: int, count: int, pending: int, step: int = 200):
    """Event rows for instances ``first`` .. ``first + count``, ``step`` instances a batch:
    each instance and three predictions at its time, and the label of instance i − pending."""
    from streameval.core.outcome import INSTANCE, LABEL, PREDICTION

    rng = np.random.default_rng(first)
    for start in range(first, first + count, step):
        stop = min(start + step, first + count)
        guesses = rng.random((stop - start, 3)) < 0.8
        rows = []
        for n, i in enumerate(range(start, stop)):
            iid, t = _id(i), START + i * 10
            truth = "yes" if i % 3 else "no"
            rows.append((INSTANCE, iid, "", t, "", 0, 4 * i, None))
            for m, model in enumerate(MODELS):
                guess = truth if guesses[n, m] else ("no" if truth == "yes" else "yes")
                rows.append((PREDICTION, iid, model, t, guess, 0, 4 * i + m + 1, None))
            j = i - pending
            if j >= 0:
                rows.append((LABEL, _id(j), "", t + 5, "yes" if j % 3 else "no", 1, i, None))
        yield rows, START + (stop - 1) * 10 + 5


def inner(store: str, pending: int, events: int, checkpoint_s: float, state_dir: str) -> dict:
    """Phase 1 for one store and N, in this process."""
    import gc

    from streameval.app.changelog_format import checkpoint_records
    from streameval.app.eval_stage import EvalStage
    from streameval.app.join_stage import JoinStage
    from streameval.app.runner import GC_THRESHOLDS
    from streameval.app.settings import WorkerSettings
    from streameval.app.wire import WIRE_VERSION, EventBatch, Source
    from streameval.config import load_config
    from streameval.store import DiskState

    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    config = load_config(
        publish_every=100_000,
        join={"label_grace_ms": 0},
        comparisons=[{"a": "champion", "b": "challenger"}],
    )
    assert config.join.max_pending > 2 * pending  # the bound must not bind here
    budget = WorkerSettings.model_fields["checkpoint_max_changes"].default
    inputs = [("instances", 0), ("labels", 0)]
    state = DiskState(state_dir, cache_mb=64) if store == "disk" else None
    join = JoinStage(0, config, inputs, state)
    evaluate = EvalStage(0, config, 1)
    offset, outcomes, checkpoints, number, chunks = 0, 0, [], 0, 0

    def feed(rows, high):
        nonlocal offset, outcomes
        sources = [Source("instances", 0, high, False), Source("labels", 0, high, False)]
        out = join.apply(offset, EventBatch(WIRE_VERSION, sources, rows))
        _, released = evaluate.apply(offset, join.batch(out))
        outcomes += len(released)
        offset += 1

    def checkpoint(join_only=False):
        """As the worker takes one, stage by stage: the changes cut, then encoded as changelog
        records, then (once Kafka would have them) the disk store's batch written. Each step
        stops the data path; the worker goes on between them: the pause is the longest."""
        nonlocal number, chunks
        stages = ((join, True),) if join_only else ((join, True), (evaluate, False))
        for stage, is_join in stages:
            t0 = time.perf_counter()
            cut = stage.cut()
            t1 = time.perf_counter()
            records, new_chunks = checkpoint_records(number + 1, cut.changes, chunks, {"v": 1})
            t2 = time.perf_counter()
            if is_join:
                stage.written(cut, offset, (number + 1, new_chunks))
                number, chunks = number + 1, new_chunks
            else:
                stage.written(cut)
            del records
            checkpoints.append(max(t1 - t0, t2 - t1, time.perf_counter() - t2))

    started = time.perf_counter()
    due = time.monotonic() + checkpoint_s
    for rows, high in _batches(0, pending, pending):  # fill: nothing labelled yet
        feed(rows, high)
        if time.monotonic() >= due:
            checkpoint()
            due = time.monotonic() + checkpoint_s
        elif join.join.changed >= budget:
            checkpoint(join_only=True)
    fill = time.perf_counter() - started
    checkpoint()
    pending_bytes = None
    if state is not None:  # only pending instances so far: the disk each one takes
        state.db.flush()
        pending_bytes = state.disk_bytes() / max(1, join.join.pending)
    checkpoints.clear()
    steady_instances = events // 5
    generate = 0.0
    started = time.perf_counter()
    batches = _batches(pending, steady_instances, pending)
    while True:
        t = time.perf_counter()
        item = next(batches, None)
        generate += time.perf_counter() - t
        if item is None:
            break
        feed(*item)
        if time.monotonic() >= due:
            checkpoint()
            due = time.monotonic() + checkpoint_s
        elif join.join.changed >= budget:  # as the worker does (checkpoint_max_changes)
            checkpoint(join_only=True)
    steady = time.perf_counter() - started - generate
    checkpoint()  # everything on disk, for the bytes per pending instance
    result = {
        "store": store,
        "pending": join.join.pending,
        "events_per_s": steady_instances * 5 / steady,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "fill_s": fill,
        "outcomes": outcomes,
        "checkpoints": len(checkpoints),
        "checkpoint_ms": [1000 * float(np.percentile(checkpoints, q)) for q in (50, 99, 100)]
        if checkpoints
        else [0, 0, 0],
    }
    if state is not None:
        state.db.flush()
        result["bytes_per_pending"] = pending_bytes
        result["bytes_at_end"] = state.disk_bytes()
        result["remembered"] = state.memory_count()
        state.close()
    return result


def store_only(pending: int, events: int, state_dir: str) -> dict:
    """Phase 2: the disk store under the join alone (no evaluation), N pending."""
    from streameval.core.join import Join
    from streameval.store import DiskState

    state = DiskState(state_dir, cache_mb=64)
    join = Join(0, 30 * 86_400_000, 10**9, state)
    started, number = time.perf_counter(), 0
    for rows, high in _batches(0, pending, pending, step=2_000):
        join.add_events(rows, high)
        number += 1
        if number % 50 == 0:
            join.commit(join.changes(), number, (number, 1))
    fill = time.perf_counter() - started
    started = time.perf_counter()
    for rows, high in _batches(pending, events // 5, pending, step=2_000):
        join.add_events(rows, high)
        number += 1
        if number % 50 == 0:
            join.commit(join.changes(), number, (number, 1))
    steady = time.perf_counter() - started
    join.commit(join.changes(), number, (number, 1))
    state.db.flush()
    out = {
        "pending": join.pending,
        "fill_s": fill,
        "events_per_s": events / steady,
        "bytes_per_pending": state.disk_bytes() / max(1, join.pending),
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    state.close()
    return out


def _run_inner(args: list[str]) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--inner", *args], capture_output=True, text=True, cwd=ROOT
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- phase 3: restore on a real broker ----------------------------------------------------------
def restore(pending: int, tmp: Path) -> dict:
    from confluent_kafka.admin import AdminClient
    from pipeline_throughput import bootstrap, make_topics, produce, scrape, series
    from streameval.devkafka import free_port
    from streameval.simulate.scripted import ScriptedStream
    from streameval.topics import create_topics, load_topics

    boot = bootstrap()
    prefix = make_topics(boot, partitions=1)  # the inputs; then the worker's, one partition each
    create_topics(
        AdminClient({"bootstrap.servers": boot}),
        load_topics(prefix, app_id=prefix + "app", partitions=1),
    )
    start_ms = int(time.time() * 1000) - pending - 60_000
    stream = ScriptedStream(
        instances=pending,
        models=dict.fromkeys(MODELS, (0.8, 0.8)),
        max_repredictions=0,
        unlabelled=1.0,
        interval_ms=1,
        start_ms=start_ms,
        seed=4,
    )
    produce(boot, prefix, stream.records())
    config = tmp / "restore.toml"
    config.write_text(
        "[join]\nlabel_grace_ms = 0\n[worker]\nidle_ms = 500\nsnapshot_interval_s = 5.0\n"
    )
    state = tmp / "state"
    logs = []

    ports = []

    def start(name):
        log = tmp / f"{name}.log"
        logs.append(log)
        ports.append(free_port())
        env = {
            **os.environ,
            "STREAMEVAL_BOOTSTRAP": boot,
            "STREAMEVAL_TOPIC_PREFIX": prefix,
            "STREAMEVAL_APP_ID": prefix + "app",
            "STREAMEVAL_METRICS_PORT": str(ports[-1]),
            "STREAMEVAL_METRICS_HOST": "127.0.0.1",
            "STREAMEVAL_STATE_DIR": str(state),
        }
        return subprocess.Popen(
            [sys.executable, "-m", "streameval.cli", "worker", "--config", str(config)],
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )

    def wait_for(log, pattern, timeout=1800):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.findall(pattern, log.read_text(errors="replace"))
            if found:
                return found
            time.sleep(0.5)
        raise RuntimeError(f"{log}: no {pattern!r}")

    first = start("first")
    try:  # every instance read and pending, and a checkpoint written after that
        deadline = time.monotonic() + 1800
        while time.monotonic() < deadline:
            time.sleep(1)
            try:
                held = series(scrape(ports[0]), "streameval_pending_instances")
            except OSError:
                continue
            if held is not None and held >= pending:
                break
        time.sleep(7)  # past the next checkpoint (every 5 s)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    own = start("own-disk")  # the killed worker's disk: catch up from the changelog
    ready_own = float(wait_for(logs[-1], r"ready in ([0-9.]+) s")[0])
    own.send_signal(signal.SIGKILL)
    own.wait()
    shutil.rmtree(state)
    empty = start("empty-disk")  # another machine: rebuild from the changelog
    ready_empty = float(wait_for(logs[-1], r"ready in ([0-9.]+) s")[0])
    held = wait_for(logs[-1], r"join 0: (\d+) pending instances")[0]
    empty.send_signal(signal.SIGTERM)
    empty.wait(120)
    return {
        "pending": int(held),
        "restore_own_disk_s": ready_own,
        "restore_empty_disk_s": ready_empty,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pending", type=int, nargs="*", default=[100_000, 1_000_000])
    parser.add_argument("--events", type=int, default=1_000_000, help="of the steady phase")
    parser.add_argument("--stores", nargs="+", default=["disk", "memory"])
    parser.add_argument("--memory-max", type=int, default=2_000_000)
    parser.add_argument(
        "--checkpoint-s",
        type=float,
        default=1.0,
        help="checkpoint period (the worker's default is 5 s)",
    )
    parser.add_argument("--store-only", type=int, nargs="*", default=[])
    parser.add_argument("--restore", type=int, nargs="*", default=[1_000_000])
    parser.add_argument("--inner", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        kind, *rest = args.inner
        if kind == "path":
            store, pending, events, checkpoint_s, state_dir = rest
            result = inner(store, int(pending), int(events), float(checkpoint_s), state_dir)
        else:
            pending, events, state_dir = rest
            result = store_only(int(pending), int(events), state_dir)
        print(json.dumps(result))
        return
    tmp = Path(tempfile.mkdtemp(prefix="pending-scale-"))
    rows = []
    print(
        f"{'store':7} {'pending':>11} {'events/s':>9} {'RSS MB':>7} {'B/pend':>7} "
        f"{'pause p50':>9} {'p99':>6} {'max ms':>7} {'outcomes':>9} {'end MB':>7} "
        f"{'remembered':>10}"
    )
    for n in args.pending:
        for store in args.stores:
            if store == "memory" and n > args.memory_max:
                continue
            state_dir = tmp / f"{store}-{n}"
            r = _run_inner(
                ["path", store, str(n), str(args.events), str(args.checkpoint_s), str(state_dir)]
            )
            shutil.rmtree(state_dir, ignore_errors=True)
            rows.append(r)
            p50, p99, worst = r["checkpoint_ms"]
            print(
                f"{store:7} {r['pending']:>11,} {r['events_per_s']:>9,.0f} {r['rss_mb']:>7,.0f} "
                f"{r.get('bytes_per_pending') or float('nan'):>7.1f} {p50:>9.1f} {p99:>6.1f} "
                f"{worst:>7.1f} {r['outcomes']:>9,} {r.get('bytes_at_end', 0) / 1e6:>7.0f} "
                f"{r.get('remembered', 0):>10,}",
                flush=True,
            )
    memory = [r for r in rows if r["store"] == "memory"]
    disk = [r for r in rows if r["store"] == "disk"]
    if memory and disk:
        base = min(memory, key=lambda r: r["pending"])
        top = max(disk, key=lambda r: r["pending"])
        print(
            f"disk store at {top['pending']:,} pending: {top['events_per_s']:,.0f} events/s, "
            f"{top['events_per_s'] / base['events_per_s']:.0%} of the in-memory store at "
            f"{base['pending']:,}"
        )
    for n in args.store_only:
        r = _run_inner(["store", str(n), str(args.events), str(tmp / f"store-{n}")])
        shutil.rmtree(tmp / f"store-{n}", ignore_errors=True)
        print(
            f"store alone, {r['pending']:,} pending: fill {r['fill_s']:.0f} s, "
            f"{r['events_per_s']:,.0f} events/s, {r['bytes_per_pending']:.1f} B/pending, "
            f"RSS {r['rss_mb']:,.0f} MB",
            flush=True,
        )
    for n in args.restore:
        r = restore(n, tmp)
        print(
            f"restore of a join partition with {r['pending']:,} pending: "
            f"{r['restore_empty_disk_s']:.1f} s from the changelog on an empty disk, "
            f"{r['restore_own_disk_s']:.1f} s on its own disk after SIGKILL",
            flush=True,
        )
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
