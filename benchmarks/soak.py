"""A long run of one worker under steady live traffic: does anything grow that should not?

    .venv/bin/python benchmarks/soak.py                       # 30 minutes at 20 k events/s
    .venv/bin/python benchmarks/soak.py --minutes 5 --rate 30000

A load generator sends live traffic — an instance, a prediction from each of three models and a
label about two seconds later, 36-character ids — to a worker with the disk store and the
default ``label_ttl`` of 7 days, so the resolved instances it remembers grow all run long.
Every ``--sample-s`` seconds it reads the worker's /metrics: the duration of the latest
checkpoint (from its cut to durable; the data path goes on meanwhile), the pauses checkpoints
made in the data path (a histogram), resident memory, the store's size and compaction debt,
pending instances, the input messages not yet consumed, the internal batches not yet read by
the join and evaluation stages, and the outcomes behind: three per label sent (one per model)
less those evaluated — a backlog anywhere in the worker, on the input topics or between its
stages (either growing means the worker does not keep up with ``--rate``); of that backlog, the
events the join holds for its clock and the outcomes the evaluation holds for the join
partitions' frontiers. It prints a line per minute and, at the end, the checkpoint durations of
the first and the last fifth of the run side by side (mean and maximum), the median and 90th
percentile of each fifth, how many pauses passed 100 ms, and whether the worker ran through (it
must: exit 1 otherwise). Each line also says how busy the machine's CPUs were over its minute
(the broker, its log cleaner and the load generator share them with the worker), and how much
of their time went to I/O wait and to other guests (steal). The worker's log (its path is
printed) names each checkpoint pause over 100 ms with its steps and what the data path's thread
got of the machine during each.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from pipeline_throughput import (  # noqa: E402
    MODELS,
    LiveTraffic,
    bootstrap,
    cpu_times,
    histogram,
    make_topics,
    scrape,
    series,
    start_worker,
    stop,
)
from pipeline_throughput import total as _total  # noqa: E402  (a local is called total)
from streameval.devkafka import free_port  # noqa: E402


def _cpu_line(was: list[int], now: list[int]) -> str:
    """How busy the machine's CPUs were between two readings of
    :func:`~pipeline_throughput.cpu_times`."""
    if len(was) < 8 or len(now) < 8:
        return ""
    d = [max(0, b - a) for a, b in zip(was, now, strict=True)]  # (iowait may go back)
    total = sum(d) or 1
    busy, iowait, steal = (100 * x / total for x in (total - d[3] - d[4], d[4], d[7]))
    return f"  machine CPU busy {busy:3.0f} % (I/O wait {iowait:2.0f} %, steal {steal:2.0f} %)"


CONFIG = """
publish_every = 100000
[join]
label_grace_ms = 1000
[worker]
idle_ms = 1000
snapshot_interval_s = 5.0
processes = {processes}
"""


def _pause_line(hist: dict[float, float]) -> str:
    """How many checkpoint pauses, how many over 100 ms, and the bucket the longest is in."""
    total = hist.get(float("inf"), 0.0)
    over = total - hist.get(0.1, 0.0)
    bounds = sorted(hist)
    longest = next((b for b in bounds if hist[b] >= total), float("inf"))
    below = max((b for b in bounds if b < longest), default=0.0)
    return (f"{total:,.0f} checkpoint pauses, {over:,.0f} over 100 ms; the longest between "
            f"{below * 1000:.0f} and {longest * 1000:.0f} ms")  # fmt: skip


def _fifths(count: int) -> list[np.ndarray]:
    """The indices of ``count`` samples in five consecutive parts as near equal as can be (the
    first ones a sample longer): every per-fifth figure of the soak uses these."""
    return np.array_split(np.arange(count), 5)


def _fifths_line(durations: list[float]) -> str:
    """The checkpoint duration's median and 90th percentile in each fifth of the run, and the
    change of the median from the first fifth to the last: a mean moves with one slow minute
    (a backlog episode, the machine busy with something else), a median only when most
    checkpoints take longer."""
    values = np.asarray(durations, dtype=float)
    fifths = [values[part] for part in _fifths(len(values))]
    if any(len(f) == 0 for f in fifths):
        return "checkpoint duration by fifth: too few samples"
    cells = [f"{np.median(f):.3f} / {np.percentile(f, 90):.3f}" for f in fifths]
    first, last = np.median(fifths[0]), np.median(fifths[-1])
    change = f"{(last / first - 1) * 100:+.0f} %" if first > 0 else "n/a"
    return (f"checkpoint duration by fifth, median / p90 (s): {'; '.join(cells)}; median, "
            f"first fifth to last: {change}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=20_000, help="input events/s")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--sample-s", type=float, default=5.0)
    args = parser.parse_args()
    from confluent_kafka import Producer

    boot = bootstrap()
    prefix = make_topics(boot, 6)
    tmp = Path(tempfile.mkdtemp(prefix="soak-"))
    config = tmp / "soak.toml"
    config.write_text(CONFIG.format(processes=args.processes))
    port = free_port()
    worker = start_worker(boot, prefix, config, port, tmp / "worker.log")
    producer = Producer({"bootstrap.servers": boot, "linger.ms": 50,
                         "queue.buffering.max.messages": 2_000_000})  # fmt: skip
    traffic = LiveTraffic(
        producer, prefix, args.rate, 7,
        lambda i, r: str(uuid.UUID(int=r << 64 | i)).encode(),  # 36 characters
        lambda rng, n: 0.2 + rng.exponential(2.0, n),  # labels about two seconds later
    )  # fmt: skip
    samples: list[tuple[float, ...]] = []
    pauses: dict[float, float] = {}
    seconds = args.minutes * 60
    time.sleep(8)  # the worker joins its group
    start = time.monotonic()
    next_sample, next_line = start, start + 60
    cpu = cpu_times()
    alive = True
    try:
        while time.monotonic() - start < seconds:
            sent = traffic.step()
            now = time.monotonic()
            if now >= next_sample:
                next_sample = now + args.sample_s
                if worker.poll() is not None:
                    alive = False
                    break
                try:
                    text = scrape(port)
                except OSError:
                    continue
                samples.append((now - start, series(text, "streameval_checkpoint_seconds") or 0,
                                series(text, "process_resident_memory_bytes") or 0,
                                series(text, "streameval_store_bytes") or 0,
                                series(text, "streameval_pending_instances") or 0,
                                _total(text, "streameval_consumer_lag"),
                                _total(text, "streameval_store_compaction_pending_bytes"),
                                len(MODELS) * traffic.labels
                                - _total(text, "streameval_outcomes_total"),
                                series(text, "streameval_join_waiting_events") or 0,
                                series(text, "streameval_evaluation_waiting_outcomes") or 0,
                                _total(text, "streameval_internal_lag"),
                                ))  # fmt: skip
                pauses = histogram(text, "streameval_checkpoint_pause_seconds")
            if now >= next_line and samples:
                next_line = now + 60
                cpu, cpu_was = cpu_times(), cpu
                latest = samples[-1]
                t, _, rss, store, pending, lag, debt, behind, events, outcomes, internal = latest
                recent = [s[1] for s in samples if s[0] > t - 60]
                total = pauses.get(float("inf"), 0.0)
                print(f"{t / 60:5.1f} min  sent {sent:>12,}  checkpoint max {max(recent):6.3f} s  "
                      f"pauses > 100 ms {total - pauses.get(0.1, 0.0):>4,.0f} of {total:>6,.0f}  "
                      f"RSS {rss / 1e6:6.0f} MB  store {store / 1e6:7.1f} MB  "
                      f"pending {pending:>9,.0f}  input lag {lag:>11,.0f}  "
                      f"internal lag {internal:>7,.0f} batches  "
                      f"outcomes behind {behind:>10,.0f} (waiting: join {events:>9,.0f}, "
                      f"evaluation {outcomes:>9,.0f})  "
                      f"compaction debt {debt / 1e6:6.0f} MB" + _cpu_line(cpu_was, cpu),
                      flush=True)  # fmt: skip
            time.sleep(0.001)
        producer.flush(60)
    finally:
        alive = alive and worker.poll() is None
        stop(worker)
    sent = traffic.sent
    parts = _fifths(len(samples))
    first, last = [samples[i][1] for i in parts[0]], [samples[i][1] for i in parts[-1]]
    if first:
        end = samples[parts[0][-1]]  # the last sample of the first fifth
        print(f"input lag, end of the first fifth: {end[5]:,.0f} messages; "
              f"at the end: {samples[-1][5]:,.0f}; outcomes behind {end[7]:,.0f} → "
              f"{samples[-1][7]:,.0f}; RSS {end[2] / 1e6:,.0f} → "
              f"{samples[-1][2] / 1e6:,.0f} MB")  # fmt: skip
    rate = sent / seconds
    print(f"sent {sent:,} events in {seconds / 60:.0f} min ({rate:,.0f}/s)")
    if first and last:
        print(
            f"checkpoint duration (cut to durable), first fifth: mean {np.mean(first):.3f} s, max "
            f"{max(first):.3f} s; last fifth: mean {np.mean(last):.3f} s, max {max(last):.3f} s"
        )
        print(_fifths_line([s[1] for s in samples]))
    if pauses:
        print(_pause_line(pauses))
    print(f"the worker's log: {tmp / 'worker.log'}")
    print("the worker ran through" if alive else "THE WORKER STOPPED: see " + str(tmp))
    sys.exit(0 if alive else 1)


if __name__ == "__main__":
    main()
