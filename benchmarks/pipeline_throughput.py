"""End-to-end throughput, memory and latency of the streaming worker on a real broker, side by
side with the raw consume ceiling and the pipeline a user would write without streameval.

    .venv/bin/python benchmarks/pipeline_throughput.py            # 1M events, every phase
    .venv/bin/python benchmarks/pipeline_throughput.py --events 200000 --rounds 1 --skip latency
    .venv/bin/python benchmarks/pipeline_throughput.py --compare-scores 3   # scores' cost
    .venv/bin/python benchmarks/pipeline_throughput.py --compare-guarantees 3  # exactly-once's
    .venv/bin/python benchmarks/pipeline_throughput.py --compare-features 3  # slices', maturity's
    .venv/bin/python benchmarks/pipeline_throughput.py --compare-code HEAD~5  # a commit's
    .venv/bin/python benchmarks/pipeline_throughput.py --compare-broker-jvm 2 --latency-rate 32150
    .venv/bin/python benchmarks/pipeline_throughput.py --pending 100000 400000  # memory: a line
    .venv/bin/python benchmarks/pipeline_throughput.py --skip all --skip memory --skip latency

Phases (one run, one broker: $STREAMEVAL_BOOTSTRAP, else the local `streameval kafka start`);
phases 1-3 are repeated ``--rounds`` times and reported as min / median / max:

1. **worker**, one data-path process and one per core (``--processes``): N input events
   (instances, one prediction from each of 3 models, labels) are produced to fresh topics (the
   same events for each), then one worker is started; sustained events/s = N / (broker
   timestamp of the last metrics record − broker timestamp of the first event batch carrying
   input events that the worker wrote), i.e. first input read to last metrics record.
2. **raw**: a confluent-kafka consumer that only decodes the same topics (``BatchDecoder``,
   ``fetch.queue.backoff.ms=10``): the ceiling for any consumer in Python.
3. **naive loop**, the main peer: what a user would write first, in one process — a
   confluent-kafka consumer over the same topics, ``orjson.loads`` per message, a dict join that
   takes predictions and labels in either order, and River metrics (cumulative and rolling
   accuracy and κ, F1, Page-Hinkley) per model updated per outcome (:data:`NAIVE_JOIN`); timed
   from its first message to its last outcome, until it has evaluated as many outcomes as
   the worker.
4. **faust**: the same join and evaluation in a Faust agent, one event per message, for
   ``--faust-seconds`` (first round only).
5. **memory**: a fresh worker with the in-memory store (``store = "memory"``) reads K instances
   with 3 predictions each and no labels; resident memory per pending instance = ΔRSS / K (RSS
   from the worker's own /metrics). That spreads what a worker takes once, whatever K, over the
   instances: with several ``--pending`` sizes, a fresh worker each, it also fits ΔRSS = a·K +
   b and prints a, what one more pending instance costs, and b. The disk store's figures:
   ``benchmarks/pending_scale.py``.
6. **latency**, ``--rounds`` runs: a producer at half the measured sustained rate (the worker on
   all cores, median; under ``--skip all``, its 1-process run, and the latency runs then use one
   process too) with live timestamps, label grace 0, from when the worker says it is ready
   (/readyz: every data-path process in its group with its partitions restored; the seconds
   that took are printed); for every final metrics record, the delay from the label time of
   the previous record of that model (an upper bound on any label's wait) to the moment a
   ``read_committed`` reader (a thread of the benchmark, as a user's consumer would be) read
   the record; p50/p99 of each run, from at least 300 records at the default
   ``--latency-seconds``, and the p99 to the record's broker timestamp (when the worker
   produced it, before its commit). Each run also says where the delays went: ingest, join,
   evaluation and publish, commit and read, from the times the worker produced the batches
   that carried each record's oldest new label (:func:`latency_stages`); when in the run the
   slowest 5 % of its records were made; the cores the machine, the worker, the local broker
   and the benchmark's own process (load generator and reader) used while the traffic ran; and
   the records the worker wrote to each of its own topics per input event.

Every pipeline prints how many outcomes it evaluated; one that evaluated fewer than the worker
is said to, and no ratio is drawn from it.

**Per core.** Phases 1-3 also report the CPU time their processes used in the measured window
(user + system, every thread: librdkafka's, RocksDB's, the commit's, and a worker's data-path
child processes; from /proc, sampled every 0.1 s by a thread of the benchmark, about 0.7 ms of
CPU a sample) and the local broker's in the same window, then events per CPU second with and
without the broker's share: a pipeline on two cores or one that leaves a core idle is set
against the others per core, and the work a pipeline gives the broker (the worker's internal
topics, changelogs and transactions) is counted. A broker elsewhere ($STREAMEVAL_BOOTSTRAP)
is not measured.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from streameval.app.wire import decode_events  # noqa: E402
from streameval.codec import BatchDecoder  # noqa: E402
from streameval.devkafka import free_port  # noqa: E402
from streameval.simulate.scripted import ScriptedStream  # noqa: E402

MODELS = {"champion": (0.88, 0.6), "challenger": (0.84, 0.82), "baseline": (0.7, 0.7)}
CONFIG = """
publish_every = 100000
[join]
label_grace_ms = {grace}
[[comparisons]]
a = "champion"
b = "challenger"
[worker]
idle_ms = 200
publish_interval_s = 1.0
snapshot_interval_s = {snapshot}
processes = {processes}
"""


#: The local broker's process, whose CPU time each phase reports (None: a broker elsewhere,
#: $STREAMEVAL_BOOTSTRAP, whose CPU time is not measured)
BROKER_PID: int | None = None


def bootstrap() -> str:
    global BROKER_PID
    if os.environ.get("STREAMEVAL_BOOTSTRAP"):
        return os.environ["STREAMEVAL_BOOTSTRAP"]
    from streameval.devkafka import KafkaInstance

    instance = KafkaInstance.named("default")
    running = KafkaInstance.load(instance)
    # a broker that a benchmark run just before started goes down with it, for a few seconds:
    # use the local broker once it answers, or start one once it is gone
    deadline = time.monotonic() + 60
    while running is not None and running.running():
        if running._serves_metadata():
            BROKER_PID = running.pid
            return running.bootstrap
        if time.monotonic() >= deadline:
            raise SystemExit(
                f"the local broker at {running.bootstrap} neither answers nor stops: stop it "
                "(.venv/bin/streameval kafka stop) and run the benchmark again"
            )
        time.sleep(0.5)
    started = KafkaInstance.start(instance)  # lives as long as the benchmark
    BROKER_PID = started.pid
    return started.bootstrap


# -- CPU time: what each pipeline, and the broker, took of the machine's cores ---------------
_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int | str) -> tuple[int, float]:
    """The parent and the CPU seconds (user + system, every thread) of a process, from /proc
    ((0, 0.0) once it has gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0, 0.0
    # after the name: state, ppid, ... utime (the 12th), stime (the 13th)
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK


def _tree_cpu(root: int) -> float:
    """CPU seconds of a process and of its living descendants (a worker's data-path
    processes)."""
    stats = {int(e.name): _stat(e.name) for e in os.scandir("/proc") if e.name.isdigit()}
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        total += stats.get(pid, (0, 0.0))[1]
        stack += children.get(pid, [])
    return total


class CpuSampler(threading.Thread):
    """Samples, every ``interval`` seconds until :meth:`finish`, the CPU seconds used so far
    by the process trees of ``roots`` (a pipeline's processes) and by the local broker, with
    the wall time (epoch ms) of each sample: :meth:`between` gives what each used in a window
    of the run, interpolated between the samples around its ends."""

    def __init__(self, roots: list[int], interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.roots, self.interval = roots, interval
        self.samples: list[tuple[float, float, float]] = []  # (wall ms, pipeline, broker)
        self.done = threading.Event()

    def sample(self) -> None:
        broker = _stat(BROKER_PID)[1] if BROKER_PID is not None else float("nan")
        own = sum(_tree_cpu(pid) for pid in self.roots)
        self.samples.append((now_ms(), own, broker))

    def run(self) -> None:
        while not self.done.is_set():
            self.sample()
            self.done.wait(self.interval)

    def finish(self) -> None:
        self.done.set()
        self.join()

    def between(self, start_ms: float, end_ms: float) -> tuple[float, float]:
        """CPU seconds of the pipeline and of the broker from ``start_ms`` to ``end_ms``."""
        walls = [s[0] for s in self.samples]
        if not walls or start_ms < walls[0] or end_ms > walls[-1]:
            raise RuntimeError("the CPU samples do not cover the measured window")
        own = np.interp([start_ms, end_ms], walls, [s[1] for s in self.samples])
        broker = np.interp([start_ms, end_ms], walls, [s[2] for s in self.samples])
        return float(own[1] - own[0]), float(broker[1] - broker[0])


def make_topics(boot: str, partitions: int) -> str:
    from confluent_kafka.admin import AdminClient
    from streameval.topics import create_topics, load_topics

    prefix = f"bench{uuid.uuid4().hex[:6]}-"
    admin = AdminClient({"bootstrap.servers": boot})
    create_topics(admin, load_topics(prefix, partitions=partitions))
    return prefix


def produce(boot: str, prefix: str, records) -> int:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": boot,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
        }
    )
    count = 0
    for topic, key, value in records:
        while True:
            try:
                producer.produce(prefix + topic, value, key)
                break
            except BufferError:
                producer.poll(0.05)
        count += 1
    producer.flush(120)
    return count


def start_worker(boot: str, prefix: str, config: Path, port: int, log: Path,
                 env: dict[str, str] | None = None) -> subprocess.Popen:  # fmt: skip
    env = {
        **os.environ,
        "STREAMEVAL_BOOTSTRAP": boot,
        "STREAMEVAL_TOPIC_PREFIX": prefix,
        "STREAMEVAL_APP_ID": prefix + "app",
        "STREAMEVAL_METRICS_PORT": str(port),
        "STREAMEVAL_METRICS_HOST": "127.0.0.1",
        "STREAMEVAL_STATE_DIR": str(log.parent / "state"),
        **(env or {}),
    }
    from streameval.devkafka import _die_with_parent  # as the local broker's JVM does

    command = [sys.executable, "-m", "streameval.cli", "worker", "--config", str(config)]
    # (a benchmark that is killed takes its worker with it: one left running spoils the next)
    return subprocess.Popen(command, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            cwd=ROOT, preexec_fn=_die_with_parent)  # fmt: skip


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()


def wait_ready(port: int, process: subprocess.Popen, limit: float = 180.0) -> float:
    """Wait until the worker says on /readyz that it is in its group with its partitions
    restored (every data-path process of it): the seconds that took."""
    began = time.monotonic()
    while time.monotonic() - began < limit:
        if process.poll() is not None:
            raise SystemExit(f"the worker exited ({process.returncode}) before it was ready")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
                if answer.status == 200:
                    return time.monotonic() - began
        except (OSError, http.client.HTTPException):  # not serving yet, or 503: not ready
            pass
        time.sleep(0.2)
    raise SystemExit(f"the worker was not ready after {limit:.0f} s")


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def series(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def total(text: str, name: str) -> float:
    """The sum of every series of a metric in ``text`` (a /metrics page), all its labels."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))  # fmt: skip


def cpu_times() -> list[int]:
    """The machine's CPU time so far, in ticks: user, nice, system, idle, iowait, irq, softirq,
    steal (Linux; empty elsewhere)."""
    try:
        with open("/proc/stat") as stat:
            return [int(x) for x in stat.readline().split()[1:9]]
    except (OSError, ValueError):
        return []


def read_topic(boot: str, topic: str, timeout: float = 10.0) -> list:
    """Every committed message of a topic now: (broker timestamp ms, value). Read to each
    partition's end as a read_committed reader sees it (transaction markers take offsets)."""
    return list(each_message(boot, topic, timeout))


def each_message(boot: str, topic: str, timeout: float = 10.0):
    """:func:`read_topic`, one message at a time (a topic too large to hold whole)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": boot,
            "group.id": "bench-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=timeout).topics[topic].partitions
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, p, low)])
            end = False
            while not end:
                for m in consumer.consume(10_000, 2.0):
                    error = m.error()
                    if error is None:
                        yield m.timestamp()[1], m.value()
                    elif error.code() == KafkaError._PARTITION_EOF:
                        end = True
    finally:
        consumer.close()


def first_input_timestamp(boot: str, topic: str) -> int:
    """Broker timestamp of the first event batch that carries input events. A worker sends
    progress-only batches from the moment it is assigned, before its first fetch returns:
    those do not mark the first input read."""
    return min(ts for ts, value in read_topic(boot, topic) if decode_events(value).events)


# -- phase 1 ----------------------------------------------------------------------------------
def phase_worker(
    boot: str,
    events: int,
    partitions: int,
    tmp: Path,
    workers: int = 1,
    processes: int = 1,
    scored: float = 0.0,
    env: dict[str, str] | None = None,
    features: str = "",
    countries: int = 0,
) -> dict:
    """``features``: evaluation settings added to the configuration (TOML tables);
    ``countries``: the instances' ``attributes.country`` takes that many values."""
    instances = events // 5
    stream = ScriptedStream(
        instances=instances,
        models=MODELS,
        max_repredictions=0,
        drift_at=instances // 2,
        interval_ms=2,
        mean_delay_ms=2000,
        scored=scored,  # the share of predictions with scores
        countries=countries,
        seed=3,
    )
    prefix = make_topics(boot, partitions)
    started = time.perf_counter()
    n = produce(boot, prefix, stream.records())
    print(f"  produced {n:,} events in {time.perf_counter() - started:.1f} s", flush=True)
    config = tmp / "worker.toml"
    config.write_text(CONFIG.format(grace=1000, snapshot=5.0, processes=processes) + features)
    ports = [free_port() for _ in range(workers)]
    log = tmp / "worker-throughput.log"
    processes = [
        start_worker(boot, prefix, config, port, tmp / f"worker-throughput-{i}.log", env)
        for i, port in enumerate(ports)
    ]
    want = instances  # every instance is labelled: each model ends with n == instances
    deadline = time.monotonic() + 900
    done = False
    peak_rss = 0.0
    cpu = CpuSampler([process.pid for process in processes])
    cpu.start()
    try:
        while time.monotonic() < deadline and not done:
            time.sleep(1.0)
            try:
                texts = [scrape(port) for port in ports]
            except OSError:
                continue
            text = "\n".join(texts)
            peak_rss = max(
                peak_rss, *(series(t, "process_resident_memory_bytes") or 0 for t in texts)
            )
            counts = [
                float(v)
                for v in re.findall(r"^streameval_model_outcomes\{[^}]*\} (\S+)$", text, re.M)
            ]
            done = len(counts) == 3 and all(c >= want for c in counts)
        time.sleep(0.3)  # (the samples go past the last record)
    finally:
        cpu.finish()
        for process in processes:
            stop(process)
    if not done:
        raise SystemExit(f"the worker did not finish; see {log}")
    first = first_input_timestamp(boot, prefix + prefix + "app-events")
    records = read_topic(boot, prefix + "metrics")
    last = max(ts for ts, value in records if orjson.loads(value)["n"] >= want)
    seconds = (last - first) / 1000.0
    finals = [orjson.loads(value) for _, value in records]
    own_cpu, broker_cpu = cpu.between(first, last)
    return {
        "cpu": own_cpu,
        "broker_cpu": broker_cpu,
        "outcomes": sum(
            max(r["n"] for r in finals if r["model_id"] == m and "slice" not in r) for m in MODELS
        ),
        "slice_records": sum(1 for r in finals if "slice" in r),
        "maturity_records": len(read_topic(boot, prefix + "label-maturity")),
        "copies": len(records) - len(set(value for _, value in records)),
        "events": n,
        "seconds": seconds,
        "rate": n / seconds,
        "prefix": prefix,
        "peak_rss": peak_rss,
        "changelog": changelog_records(boot, prefix + prefix + "app"),  # prefix + app id
    }


def changelog_records(boot: str, named: str) -> int:
    """How many records the worker wrote to its two changelogs (``named``: the topic prefix
    and the app id): the sum of their partitions' end offsets (a transaction's commit marker
    takes an offset too)."""
    return sum(internal_records(boot, named, ("join-changelog", "eval-changelog")).values())


#: the worker's own topics, by the end of their names (:func:`internal_records`)
INTERNAL = ("events", "outcomes", "join-changelog", "eval-changelog")


def internal_records(boot: str, named: str, kinds: tuple[str, ...] = INTERNAL) -> dict[str, int]:
    """How many records the worker wrote to each of its own topics (``named``: the topic
    prefix and the app id), by kind: the sum of the partitions' end offsets. Under
    exactly-once a commit marker takes an offset in every partition its transaction wrote to,
    up to one per partition and transaction: a large part of the event and outcome batches'
    counts in a live run, a small one of the join changelog's."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": boot, "group.id": "bench-reader"})
    try:
        found = {}
        for kind in kinds:
            topic = f"{named}-{kind}"
            meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                raise SystemExit(f"the worker's topic {topic} is not on the broker")
            found[kind] = sum(
                consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
                for p in meta.partitions
            )
        return found
    finally:
        consumer.close()


# -- phase 2 ----------------------------------------------------------------------------------
def phase_raw(boot: str, prefix: str, events: int) -> dict:
    from confluent_kafka import Consumer

    topics = {
        prefix + t: k
        for t, k in (("instances", "instance"), ("predictions", "prediction"), ("labels", "label"))
    }
    consumer = Consumer(
        {
            "bootstrap.servers": boot,
            "group.id": f"raw-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.subscribe(list(topics))
    decode = BatchDecoder(topics).decode_message
    got, start = 0, None
    deadline = time.monotonic() + 300
    cpu = CpuSampler([])  # the broker's (this process's own: process_time)
    cpu.start()
    try:
        while got < events and time.monotonic() < deadline:
            batch = consumer.consume(10_000, 1.0)
            messages = [m for m in batch if not m.error()]
            if messages and start is None:
                start, start_cpu, start_ms = time.perf_counter(), time.process_time(), now_ms()
            for message in messages:  # a record or a dead letter each
                decode(message)
            got += len(messages)
        seconds, own_cpu = time.perf_counter() - start, time.process_time() - start_cpu
        end_ms = now_ms()
        time.sleep(0.2)
    finally:
        cpu.finish()
    consumer.close()
    return {"events": got, "seconds": seconds, "rate": got / seconds, "cpu": own_cpu,
            "broker_cpu": cpu.between(start_ms, end_ms)[1]}  # fmt: skip


def now_ms() -> float:
    return time.time() * 1000.0


# -- phases 3 and 4: what a user would write without streameval ---------------------------------
#: The join and evaluation both naive pipelines run, per event: a dict of pending instances
#: that takes predictions and labels in either order (a label that comes first waits for the
#: predictions; a prediction that comes after its label is evaluated at once), and River's
#: Accuracy, CohenKappa, F1 (cumulative), Rolling Accuracy and CohenKappa (1000) and
#: Page-Hinkley per model, updated per outcome.
NAIVE_JOIN = """
import orjson
from river import drift, metrics, utils

pending = {}  # instance id -> [label or None, {model: predicted label}]
evaluators = {}
counts = {"events": 0, "outcomes": 0}


def evaluator():
    return ([metrics.Accuracy(), metrics.CohenKappa(), metrics.F1(pos_val="yes"),
             utils.Rolling(metrics.Accuracy(), 1000), utils.Rolling(metrics.CohenKappa(), 1000)],
            drift.PageHinkley())


def evaluate(model, y, y_pred):
    scores, detector = evaluators.get(model) or evaluators.setdefault(model, evaluator())
    for m in scores:
        m.update(y, y_pred)
    detector.update(float(y != y_pred))
    counts["outcomes"] += 1


def on_event(value):
    counts["events"] += 1
    event = orjson.loads(value)
    kind, iid = event.get("type"), event.get("instance_id")
    if kind == "prediction":
        entry = pending.get(iid)
        if entry is None:
            pending[iid] = [None, {event["model_id"]: event["label"]}]
        elif entry[0] is None:
            entry[1][event["model_id"]] = event["label"]
        else:
            evaluate(event["model_id"], entry[0], event["label"])
    elif kind == "label":
        entry = pending.get(iid)
        if entry is None:
            pending[iid] = [event["label"], {}]
        else:
            entry[0] = event["label"]
            for model, y_pred in entry[1].items():
                evaluate(model, event["label"], y_pred)
            entry[1] = {}
"""

#: The loop a user would write first: one confluent-kafka consumer, orjson per message.
LOOP_APP = (
    NAIVE_JOIN
    + """
import os, sys, time
from confluent_kafka import Consumer

PREFIX, WANT, LIMIT = os.environ["PREFIX"], int(os.environ["WANT"]), float(os.environ["LIMIT"])
consumer = Consumer({"bootstrap.servers": os.environ["BOOT"], "group.id": "loop-" + PREFIX,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
consumer.subscribe([PREFIX + t for t in ("instances", "predictions", "labels")])
start = None
while counts["outcomes"] < WANT and (start is None or time.perf_counter() - start < LIMIT):
    for message in consumer.consume(1000, 1.0):
        if message.error():
            continue
        if start is None:
            start, start_cpu, start_ms = time.perf_counter(), time.process_time(), time.time()
        on_event(message.value())
elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
print(f"DONE {counts['events']} {counts['outcomes']} {elapsed} {cpu} {start_ms * 1000} "
      f"{time.time() * 1000}", flush=True)
consumer.close()
"""
)

FAUST_APP = (
    NAIVE_JOIN
    + """
import os, time, faust

PREFIX = os.environ["PREFIX"]
app = faust.App("naive-" + PREFIX, broker="kafka://" + os.environ["BOOT"], value_serializer="raw",
                web_enabled=False, consumer_auto_offset_reset="earliest", topic_disable_leader=True)
topic = app.topic(PREFIX + "instances", PREFIX + "predictions", PREFIX + "labels")
state = {"start": None}

@app.agent(topic)
async def naive(stream):
    async for value in stream:
        if state["start"] is None:
            state["start"] = time.perf_counter()
        on_event(value)
        if counts["events"] % 5000 == 0:
            print(f"PROGRESS {counts['events']} {counts['outcomes']} "
                  f"{time.perf_counter() - state['start']}", flush=True)
"""
)


def phase_loop(boot: str, prefix: str, outcomes: int, tmp: Path, limit: float = 600.0) -> dict:
    """The obvious loop, in a process of its own, until it has evaluated ``outcomes`` (the
    worker's count) or ``limit`` seconds passed since its first message."""
    script = tmp / "naive_loop.py"
    script.write_text(LOOP_APP)
    env = {**os.environ, "PREFIX": prefix, "BOOT": boot, "WANT": str(outcomes),
           "LIMIT": str(limit)}  # fmt: skip
    cpu = CpuSampler([])  # the broker's (the loop measures its own: process_time)
    cpu.start()
    try:
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                              text=True, timeout=limit + 120)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise SystemExit(f"the naive loop did not finish in {limit + 120:.0f} s") from None
    finally:
        cpu.finish()
    found = re.search(r"^DONE (\d+) (\d+) (\S+) (\S+) (\S+) (\S+)$", done.stdout, re.M)
    if found is None:
        raise SystemExit(f"the naive loop failed:\n{done.stdout}{done.stderr}")
    events, evaluated, seconds = int(found[1]), int(found[2]), float(found[3])
    broker_cpu = cpu.between(float(found[5]), float(found[6]))[1]
    return {"events": events, "outcomes": evaluated, "seconds": seconds, "rate": events / seconds,
            "cpu": float(found[4]), "broker_cpu": broker_cpu}  # fmt: skip


def phase_faust(boot: str, prefix: str, seconds: float, tmp: Path) -> dict:
    app = tmp / "naive_faust.py"
    app.write_text(FAUST_APP)
    env = {**os.environ, "PREFIX": prefix, "BOOT": boot, "PYTHONPATH": str(tmp)}
    log = tmp / "faust.log"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "faust",
            "-A",
            "naive_faust",
            "worker",
            "-l",
            "warn",
            "--without-web",
        ],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        cwd=tmp,
    )
    deadline = time.monotonic() + seconds + 60
    best = None
    try:
        while time.monotonic() < deadline:
            time.sleep(2)
            text = log.read_text(errors="replace")
            lines = re.findall(r"^PROGRESS (\d+) (\d+) (\S+)\n", text, re.M)  # whole lines
            if lines:
                best = (int(lines[-1][0]), int(lines[-1][1]), float(lines[-1][2]))
                if best[2] >= seconds:
                    break
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
    if best is None:
        raise SystemExit(f"the Faust pipeline processed nothing; see {log}")
    return {"events": best[0], "outcomes": best[1], "seconds": best[2], "rate": best[0] / best[2]}


# -- phase 5 ----------------------------------------------------------------------------------
def phase_memory(boot: str, pending: int, tmp: Path) -> dict:
    stream = ScriptedStream(
        instances=pending, models=MODELS, max_repredictions=0, unlabelled=1.0, interval_ms=1, seed=4
    )
    prefix = make_topics(boot, 6)
    config = tmp / "worker-memory.toml"
    config.write_text(CONFIG.format(grace=1000, snapshot=3600.0, processes=1))
    port = free_port()
    process = start_worker(
        boot, prefix, config, port, tmp / "worker-memory.log", {"STREAMEVAL_STORE": "memory"}
    )  # the RAM a pending instance takes
    try:
        deadline = time.monotonic() + 60
        base = None
        while time.monotonic() < deadline:
            time.sleep(1)
            try:
                text = scrape(port)
            except OSError:
                continue
            if series(text, "streameval_pending_instances") is not None:
                time.sleep(2)
                base = series(scrape(port), "process_resident_memory_bytes")
                break
        produce(boot, prefix, stream.records())
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            time.sleep(1.5)
            text = scrape(port)
            if series(text, "streameval_pending_instances") >= pending:
                time.sleep(1.5)
                text = scrape(port)
                break
        rss = series(text, "process_resident_memory_bytes")
        held = series(text, "streameval_pending_instances")
    finally:
        stop(process)
    return {"pending": held, "base_rss": base, "rss": rss, "per_instance": (rss - base) / held}


# -- live traffic (phase 6, and benchmarks/soak.py) ---------------------------------------------
class LiveTraffic:
    """A load generator with live timestamps: per instance, the instance record, a prediction
    from each of :data:`MODELS` (80 % right) and its label, ``label_delays(rng, n)`` (n delays
    in seconds) later. Instance ``i`` is called ``ids(i, r)``, ``r`` a random 62-bit integer.

    It shares the machine's cores with the worker: the random draws are made in blocks and
    the JSON is formatted from byte templates, so that it takes as little CPU as it can.
    Call :meth:`step` often; it produces what is due and says how many records it sent.
    """

    BLOCK = 100_000

    def __init__(self, producer, prefix: str, rate: float, seed: int, ids, label_delays) -> None:
        self.producer, self.ids, self.label_delays = producer, ids, label_delays
        self.per_s = rate / (2 + len(MODELS))  # an instance, a prediction per model, a label
        self.topics = prefix + "instances", prefix + "predictions", prefix + "labels"
        self.models = [model.encode() for model in MODELS]
        self.rng = np.random.default_rng(seed)
        self.i, self.sent, self.labels, self.start = 0, 0, 0, None
        self.waiting: deque[tuple[float, bytes, bytes]] = deque()  # (label due, id, label)
        self._block_at = -self.BLOCK

    def _draw(self) -> None:
        self._block_at = self.i
        rng, n = self.rng, self.BLOCK
        self.truths = rng.random(n) < 0.5
        self.right = rng.random((n, len(MODELS))) < 0.8
        self.keys = rng.integers(1 << 62, size=n).tolist()
        self.delays = np.asarray(self.label_delays(rng, n)).tolist()

    def step(self) -> int:
        now = time.monotonic()
        if self.start is None:
            self.start = now
        produce, (instances, predictions, labels) = self.producer.produce, self.topics
        word = (b"no", b"yes")
        target = int((now - self.start) * self.per_s)
        ts = int(time.time() * 1000)
        while self.i < target:
            i = self.i
            if i - self._block_at >= self.BLOCK:
                self._draw()
            k = i - self._block_at
            iid, y = self.ids(i, self.keys[k]), bool(self.truths[k])
            produce(instances, b'{"instance_id":"%s","ts":%d}' % (iid, ts), iid)
            for model, ok in zip(self.models, self.right[k], strict=True):
                produce(predictions,
                        b'{"instance_id":"%s","model_id":"%s","ts":%d,"label":"%s"}'
                        % (iid, model, ts, word[y if ok else not y]), iid)  # fmt: skip
            self.waiting.append((now + self.delays[k], iid, word[y]))
            self.i += 1
            self.sent += 1 + len(self.models)  # the label is counted when it goes
        waiting = self.waiting
        while waiting and waiting[0][0] <= now:
            _, iid, y = waiting.popleft()
            produce(labels, b'{"instance_id":"%s","ts":%d,"label":"%s"}' % (iid, ts, y), iid)
            self.sent += 1
            self.labels += 1
        self.producer.poll(0)
        return self.sent


# -- phase 6 ----------------------------------------------------------------------------------
class MetricsWatcher(threading.Thread):
    """A ``read_committed`` reader of the metrics topic (librdkafka's default, as a user's
    consumer would be), in a thread until :meth:`finish`: ``seen[value]`` is the wall time
    (ms) at which each record, by its bytes, became readable. A failure of the reader is
    raised again by :meth:`finish`, so that a run never reports on part of its records."""

    def __init__(self, boot: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.boot, self.topic = boot, topic
        self.seen: dict[bytes, float] = {}
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        from confluent_kafka import Consumer

        try:
            consumer = Consumer({"bootstrap.servers": self.boot,
                                 "group.id": f"watch-{uuid.uuid4().hex}",
                                 "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                 "fetch.wait.max.ms": 10})  # fmt: skip
            consumer.subscribe([self.topic])
            try:
                while not self.done.is_set():
                    message = consumer.poll(0.05)  # (returns with the first message)
                    if message is not None and message.error() is None:
                        self.seen.setdefault(message.value(), time.time() * 1000.0)
            finally:
                consumer.close()
        except BaseException as err:  # raised again by finish
            self.error = err

    def finish(self) -> dict[bytes, float]:
        self.done.set()
        self.join()
        if self.error is not None:
            raise RuntimeError(f"the metrics reader failed: {self.error!r}") from self.error
        return self.seen


def phase_latency(
    boot: str,
    rate: float,
    seconds: float,
    tmp: Path,
    processes: int = 1,
    env: dict[str, str] | None = None,
) -> dict:
    from confluent_kafka import Producer

    prefix = make_topics(boot, 6)
    config = tmp / "worker-latency.toml"
    config.write_text(CONFIG.format(grace=0, snapshot=5.0, processes=processes))
    port = free_port()
    process = start_worker(boot, prefix, config, port, tmp / "worker-latency.log", env)
    producer = Producer({"bootstrap.servers": boot, "linger.ms": 50})
    traffic = LiveTraffic(producer, prefix, rate, 5, lambda i, _: b"L%09d" % i,
                          lambda _, n: np.full(n, 0.5))  # labels come 0.5 s later  # fmt: skip
    watcher = MetricsWatcher(boot, prefix + "metrics")
    watcher.start()
    try:
        # in its group with every partition restored: a run measures the worker at work, not
        # its start (the second process's joining moves every partition once)
        ready = wait_ready(port, process)
        start, began = time.monotonic(), time.time() * 1000.0
        before = _machine(process.pid)
        while time.monotonic() - start < seconds:
            traffic.step()
            time.sleep(0.002)
        machine = _machine(process.pid, before, time.monotonic() - start)
        sent = traffic.sent
        producer.flush(30)
        time.sleep(3)
        transactions = transaction_times(scrape(port))
    finally:
        try:
            stop(process)
            time.sleep(1)  # what the shutdown committed last
        finally:
            seen = watcher.finish()
    records = [(ts, v, orjson.loads(v)) for ts, v in read_topic(boot, prefix + "metrics")]
    read, produced, covered = [], [], []
    last: dict[str, int] = {}
    count: dict[str, int] = {}
    for broker_ts, value, record in sorted(
        records, key=lambda r: (r[2]["model_id"], r[2]["n"], r[0])
    ):
        if record["view"] != "final":
            continue
        model = record["model_id"]
        count[model] = count.get(model, 0) + 1
        # a model's first delay includes the worker's start-up: from its second on
        if count[model] > 2 and broker_ts - last[model] > 0:
            produced.append(broker_ts - last[model])
            at = seen.get(value)
            if at is not None:
                read.append(at - last[model])
                covered.append((model, last[model], record["ts"], broker_ts, at))
        last[model] = record["ts"]
    if len(read) < len(produced):  # every record the reader read, or the run says so
        raise RuntimeError(
            f"the metrics reader read {len(read)} of {len(produced)} final records in time"
        )
    delays, made = np.asarray(read) / 1000.0, np.asarray(produced) / 1000.0
    # when in the run the worker produced the slowest 5 % of the records
    slow = delays >= np.percentile(delays, 95)
    slow_at = sorted(
        {round((c[3] - began) / 1000.0) for c, late in zip(covered, slow, strict=True) if late}
    )
    return {
        "sent": sent,
        "rate": sent / seconds,
        "records": len(delays),
        "p50": float(np.percentile(delays, 50)),
        "p99": float(np.percentile(delays, 99)),
        "max": float(delays.max()),
        "p99_produced": float(np.percentile(made, 99)),
        "ready": ready,
        "stages": latency_stages(boot, prefix, covered),
        "transactions": transactions,
        "slow_at": slow_at,
        "machine": machine,
        "internal": internal_records(boot, prefix + prefix + "app"),
    }


def _machine(worker: int, before: dict | None = None, seconds: float = 0.0) -> dict:
    """CPU seconds so far of the worker (its process tree), the local broker, this benchmark's
    process (the load generator and the metrics reader), and the machine (its busy time, steal
    apart, and the time the host stole, from /proc/stat); with ``before``, the cores each used
    on average since then."""
    ticks = cpu_times() or [0] * 8  # user nice system idle iowait irq softirq steal
    used = {
        "worker": _tree_cpu(worker),
        "broker": _stat(BROKER_PID)[1] if BROKER_PID is not None else float("nan"),
        "benchmark": sum(os.times()[:2]),
        "busy": (sum(ticks[:8]) - ticks[3] - ticks[4] - ticks[7]) / _TICK,
        "steal": ticks[7] / _TICK,
    }
    if before is None:
        return used
    return {name: (used[name] - before[name]) / seconds for name in used}


def histogram(text: str, name: str) -> dict[float, float]:
    """A histogram's buckets in ``text`` (a /metrics page): the cumulative count per upper
    bound (``inf``: all), summed over the histogram's label sets."""
    prefix = name + "_bucket{"
    out: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith(prefix):
            le = float(line.split('le="', 1)[1].split('"', 1)[0])
            out[le] = out.get(le, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def transaction_times(text: str) -> dict | None:
    """The worker's ``streameval_transaction_seconds`` histogram in ``text`` (its /metrics):
    how many transactions it committed, their mean time from cut to commit, and the bucket
    bounds that half and 99 % of them took at most; None without any (at-least-once)."""
    name = "streameval_transaction_seconds"
    count = total(text, name + "_count")
    if not count:
        return None
    buckets = sorted(histogram(text, name).items())

    def at_most(share: float) -> float:
        return next(le for le, below in buckets if below >= share * count)

    mean = total(text, name + "_sum") / count
    return {"count": int(count), "mean": mean, "p50": at_most(0.5), "p99": at_most(0.99)}


#: the parts of a label's way to the metrics record that counts it (:func:`latency_stages`)
STAGES = ("ingest", "join", "evaluation and publish", "commit and read")


def latency_stages(boot: str, prefix: str, covered: list[tuple]) -> dict[str, np.ndarray]:
    """Where the delay of each final metrics record of the latency phase went. ``covered``:
    per record, (model, the label time of the model's previous record, its own, the time it was
    produced, the time the reader read it). Each record's oldest new label (the first label
    time after the previous record's; of the labels of that time, the one whose outcome was
    resolved last) is followed through the worker's internal topics by the times their batches
    were handed to the worker's producer (the records' timestamps, set on this machine's clock
    as the load generator's ``ts``): **ingest**, from the label's time to the event batch that
    carried it to its join partition (the load generator's ``linger.ms``, the input's fetch
    and routing); **join**, to the outcome batch (the event batch's commit, the join's
    watermark and step); **evaluation and publish**, to the metrics record (the outcome
    batch's commit, the evaluation's release and the wait for the publish tick); **commit and
    read**, to the reader. Under exactly-once a message made while a commit is on its way is
    held and handed to the producer when that commit lands: the hold counts in the part that
    ends at that message, the wait for its own transaction's commit in the next part. The four
    add up to the record's delay less the first label's time after the previous record's (a
    few ms). Seconds, per part, in the order of ``covered``; records whose label is not found
    are left out."""
    from streameval.topics import Topics

    topics = Topics.with_prefix(prefix, prefix + "app")
    # (generators: the events are read once the outcomes have been)
    return stage_parts(
        covered, each_message(boot, topics.outcomes), each_message(boot, topics.events)
    )


def stage_parts(covered: list[tuple], outcome_batches, event_batches) -> dict[str, np.ndarray]:
    """:func:`latency_stages` from the messages of the outcomes and events topics, each an
    iterable of (timestamp ms, value), read in that order."""
    from bisect import bisect_right

    from streameval.app.wire import LABEL, decode_outcomes
    from streameval.core.outcome import is_notice

    resolved: dict[str, dict[int, tuple[int, str]]] = {}  # model: label time: (batch, id)
    for produced, value in outcome_batches:
        for outcome in decode_outcomes(value).outcomes:
            if is_notice(outcome):  # (label maturity's counts ride in outcome batches)
                continue
            times = resolved.setdefault(outcome.model_id, {})
            known = times.get(outcome.t_label)
            if known is None or produced > known[0]:
                times[outcome.t_label] = (produced, outcome.instance_id)
    ordered = {model: sorted(times) for model, times in resolved.items()}
    followed = []  # (label time, outcome batch, instance id, record, read)
    for model, previous, ts, made, at in covered:
        keys = ordered.get(model, [])
        i = bisect_right(keys, previous)
        if i < len(keys) and keys[i] <= ts:
            followed.append((keys[i], *resolved[model][keys[i]], made, at))
    wanted = {iid for _, _, iid, _, _ in followed}
    carried: dict[str, int] = {}  # instance id: the first event batch with its label
    for produced, value in event_batches:
        for row in decode_events(value).events:
            if row[0] == LABEL and row[1] in wanted and produced < carried.get(row[1], 1 << 62):
                carried[row[1]] = produced
    parts = [
        (carried[iid] - label_ts, outcome - carried[iid], made - outcome, at - made)
        for label_ts, outcome, iid, made, at in followed
        if iid in carried
    ]
    table = np.asarray(parts, dtype=float).reshape(-1, len(STAGES)) / 1000.0
    return {name: table[:, i] for i, name in enumerate(STAGES)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--workers", type=int, default=1, help="workers (phase 1)")
    parser.add_argument(
        "--processes", type=int, default=os.cpu_count() or 1,
        help="data-path processes of the worker on all cores (phase 1; default: one per core)",
    )  # fmt: skip
    parser.add_argument(
        "--rounds", type=int, default=3,
        help="rounds of the throughput phases (1-3) and of the latency phase (6)",
    )  # fmt: skip
    parser.add_argument("--faust-seconds", type=float, default=30.0)
    parser.add_argument(
        "--pending", type=int, nargs="+", default=[200_000], metavar="K",
        help="pending instances of the memory phase (5); with several, a fresh worker for each "
        "and a line through them: what one more costs, and what does not depend on K",
    )  # fmt: skip
    parser.add_argument(
        "--latency-seconds", type=float, default=110.0,
        help="length of a latency run (110 s gives about 330 final metrics records)",
    )  # fmt: skip
    parser.add_argument(
        "--latency-rate", type=float, default=None,
        help="input events/s of the latency phase (default: half the sustained rate)",
    )  # fmt: skip
    parser.add_argument(
        "--skip", action="append", default=[],
        choices=["one", "all", "raw", "loop", "faust", "memory", "latency"],
        help="leave a phase out (one: the worker's 1-process run; all: its run on all cores)",
    )  # fmt: skip
    parser.add_argument(
        "--compare-guarantees", type=int, default=0, metavar="ROUNDS",
        help="only phases 1 and 6, alternating processing_guarantee exactly_once and "
        "at_least_once, ROUNDS times each (latency: --latency-seconds, at --latency-rate or "
        "half the at-least-once median; --skip latency: phase 1 only)",
    )  # fmt: skip
    parser.add_argument(
        "--compare-features", type=int, default=0, metavar="ROUNDS",
        help="only phase 1 on a stream whose instances have a country (30 values), "
        "alternating: label maturity and slices off, maturity on (the default), slices on "
        "(top_k 20) with maturity off, both on; ROUNDS times each",
    )  # fmt: skip
    parser.add_argument(
        "--compare-scores", type=int, default=0, metavar="ROUNDS",
        help="only phase 1, alternating the stream without scores and with scores on every "
        "prediction, ROUNDS times each",
    )  # fmt: skip
    parser.add_argument(
        "--compare-code", default=None, metavar="REV",
        help="only phases 1 (unless --skip all) and 6 (unless --skip latency), the worker of "
        "the working tree and the worker of commit REV in pairs, --rounds times each, with "
        "--processes data-path processes (latency: at --latency-rate or half the lower median)",
    )  # fmt: skip
    parser.add_argument(
        "--compare-broker-jvm", type=int, default=0, metavar="ROUNDS",
        help="only phases 1 (one process and --processes) and 6 (at --latency-rate, unless "
        "--skip latency), each on a fresh local broker with the launcher's JVM options and "
        "with those of Kafka's start scripts, ROUNDS times each",
    )  # fmt: skip
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="streameval-bench-"))
    if args.compare_broker_jvm:
        compare_broker_jvm(args, tmp)
        return
    boot = bootstrap()
    if args.compare_scores:
        compare_scores(boot, args, tmp)
        return
    if args.compare_features:
        compare_features(boot, args, tmp)
        return
    if args.compare_guarantees:
        compare_guarantees(boot, args, tmp)
        return
    if args.compare_code:
        compare_code(boot, args, tmp)
        return
    print(f"broker {boot}; logs in {tmp}; {args.events:,} events a run, {args.rounds} rounds",
          flush=True)  # fmt: skip
    runs: dict[str, list[dict]] = {}

    def report(name: str, run: dict, note: str = "") -> None:
        runs.setdefault(name, []).append(run)
        outcomes = f"{run['outcomes']:,} outcomes" if "outcomes" in run else "decode only"
        print(f"  {name:<22} {run['rate']:>10,.0f} events/s  ({run['events']:,} events, "
              f"{outcomes}, {run['seconds']:.1f} s{note})", flush=True)  # fmt: skip
        if "cpu" in run:
            cores = run["cpu"] / run["seconds"]
            print(f"  {'':<22} {run['events'] / run['cpu']:>10,.0f} events per CPU second  "
                  f"(its processes {run['cpu']:.1f} s of CPU, {cores:.2f} cores; "
                  f"{_broker(run)})", flush=True)  # fmt: skip

    pipelines = [] if "all" in args.skip else [("worker, all cores", args.processes)]
    if ("one" not in args.skip and args.processes != 1) or not pipelines:
        pipelines.insert(0, ("worker, 1 process", 1))
    for round_ in range(args.rounds):
        print(f"round {round_ + 1}", flush=True)
        for name, processes in pipelines:
            worker = phase_worker(boot, args.events, args.partitions, tmp, args.workers, processes)
            report(name, worker, f", peak RSS {worker['peak_rss'] / 2**20:.0f} MiB, "
                   f"{processes} data-path process(es), {worker['changelog']:,} changelog "
                   "records")  # fmt: skip
        if "raw" not in args.skip:
            report("raw consume+decode", phase_raw(boot, worker["prefix"], worker["events"]))
        if "loop" not in args.skip:
            report("naive loop", phase_loop(boot, worker["prefix"], worker["outcomes"], tmp))
        if "faust" not in args.skip and round_ == 0:
            naive = phase_faust(boot, worker["prefix"], args.faust_seconds, tmp)
            report("naive Faust agent", naive, f" of at most {args.faust_seconds:.0f} s")
    summarize(runs, args.processes)
    if "memory" not in args.skip:
        grown = []  # (pending, RSS growth)
        for pending in args.pending:
            memory = phase_memory(boot, pending, tmp)
            grown.append((memory["pending"], memory["rss"] - memory["base_rss"]))
            print(
                f"memory      {memory['per_instance']:>12,.0f} bytes per pending instance "
                f"({memory['pending']:,.0f} pending, RSS {memory['base_rss'] / 2**20:.0f} -> "
                f"{memory['rss'] / 2**20:.0f} MiB)",
                flush=True,
            )
        if len({k for k, _ in grown}) > 1:
            slope, fixed = np.polyfit([k for k, _ in grown], [g for _, g in grown], 1)
            print(
                f"memory, a line through the {len(grown)} sizes: {slope:,.0f} bytes per pending "
                f"instance, and {fixed / 2**20:,.0f} MiB that do not depend on their number"
            )
    if "latency" not in args.skip:
        worker, processes = _worker_run(runs, args.processes)
        rate = args.latency_rate or _spread([r["rate"] for r in runs[worker]])[1] / 2
        p99s = []
        for _ in range(args.rounds):
            latency = phase_latency(boot, rate, args.latency_seconds, tmp, processes)
            p99s.append(latency["p99"])
            print(f"  latency {_latency_line(latency)}", flush=True)
        low, median, high = _spread(p99s)
        verdict = "met in every run" if high <= 2.0 else "MISSED in some run"
        print(f"label-to-metric p99 {low:.2f} / {median:.2f} / {high:.2f} s (min / median / max; "
              f"target <= publish_interval + 1 s = 2 s: {verdict})", flush=True)  # fmt: skip


def _broker(run: dict) -> str:
    """What the broker took of the machine in a run's window."""
    if np.isnan(run["broker_cpu"]):
        return "the broker's CPU not measured: not the local broker"
    return (f"the broker {run['broker_cpu']:.1f} s, {run['broker_cpu'] / run['seconds']:.2f} "
            "cores")  # fmt: skip


def _worker_run(runs: dict[str, list[dict]], processes: int) -> tuple[str, int]:
    """The worker run the others are set against, and its data-path processes: the one on
    all cores, or the 1-process run when that one was skipped."""
    if "worker, all cores" in runs:
        return "worker, all cores", processes
    return "worker, 1 process", 1


def summarize(runs: dict[str, list[dict]], processes: int) -> None:
    """min / median / max of each pipeline, its outcomes, and the ratios of the targets."""
    print("pipeline                    events/s: min / median / max   outcomes evaluated")
    medians = {}
    worker, _ = _worker_run(runs, processes)
    worker_outcomes = runs[worker][0]["outcomes"]
    for name, found in runs.items():
        low, median, high = _spread([r["rate"] for r in found])
        medians[name] = median
        outcomes = {r.get("outcomes") for r in found}
        if None in outcomes:
            said = "none (decode only)"
        else:
            said = ", ".join(f"{o:,}" for o in sorted(outcomes))
            if min(outcomes) < worker_outcomes:
                said += f" — FEWER than the worker's {worker_outcomes:,}: not a comparison"
        print(f"{name:<24} {low:>10,.0f} / {median:>10,.0f} / {high:>10,.0f}   {said}")
    loop_ok = "naive loop" in runs and min(r["outcomes"] for r in runs["naive loop"]) >= (
        worker_outcomes
    )
    if "worker, 1 process" in medians and loop_ok:
        ratio = medians["worker, 1 process"] / medians["naive loop"]
        print(f"worker (1 process) / naive loop, medians: {ratio:.2f}x (target >= 3x)")
    if "worker, all cores" not in medians:
        return
    if loop_ok:
        ratio = medians["worker, all cores"] / medians["naive loop"]
        print(f"worker ({processes} processes) / naive loop, medians: {ratio:.2f}x")
    if "raw consume+decode" in medians:
        ratio = medians["worker, all cores"] / medians["raw consume+decode"]
        print(f"worker ({processes} processes) / raw consume+decode, medians: {ratio:.0%} "
              "(target >= 50 %)", flush=True)  # fmt: skip
    summarize_cpu(runs, loop_ok)


def summarize_cpu(runs: dict[str, list[dict]], loop_ok: bool) -> None:
    """Per core: events per CPU second of each pipeline's own processes (every thread:
    librdkafka's, RocksDB's, the data path's) and with the broker's CPU time in the same
    window added (the internal topics, changelogs and transactions of the worker are work
    for the broker that the loop does not give it)."""
    print("pipeline                    events per CPU second: min / median / max   "
          "(with the broker's CPU time)")  # fmt: skip
    own, whole = {}, {}
    for name, found in runs.items():
        found = [r for r in found if "cpu" in r]
        if not found:
            continue
        low, own[name], high = _spread([r["events"] / r["cpu"] for r in found])
        with_broker = [r["events"] / (r["cpu"] + r["broker_cpu"]) for r in found]
        said = "broker not measured"
        if not any(np.isnan(with_broker)):
            wlow, whole[name], whigh = _spread(with_broker)
            said = f"{wlow:,.0f} / {whole[name]:,.0f} / {whigh:,.0f}"
        print(f"{name:<24} {low:>10,.0f} / {own[name]:>10,.0f} / {high:>10,.0f}   ({said})")
    if not loop_ok or "naive loop" not in own:
        return
    for name in ("worker, 1 process", "worker, all cores"):
        if name in own:
            print(f"{name} / naive loop per CPU second, medians: "
                  f"{own[name] / own['naive loop']:.2f}x"
                  + (f" ({whole[name] / whole['naive loop']:.2f}x with the broker's)"
                     if name in whole and "naive loop" in whole else ""), flush=True)  # fmt: skip


def compare_scores(boot: str, args: argparse.Namespace, tmp: Path) -> None:
    """Phase 1 without scores and with scores on every prediction, alternated: the same
    events and outcomes but for the probabilities."""
    rates: dict[str, list[float]] = {"without scores": [], "with scores": []}
    for _ in range(args.compare_scores):
        for name, share in (("without scores", 0.0), ("with scores", 1.0)):
            run = phase_worker(
                boot, args.events, args.partitions, tmp, args.workers, args.processes, share
            )
            rates[name].append(run["rate"])
            print(f"  {name}: {run['rate']:,.0f} events/s ({run['events']:,} events, "
                  f"{run['events'] // 5:,} outcomes per model)", flush=True)  # fmt: skip
    medians = {}
    for name, values in rates.items():
        values.sort()
        medians[name] = values[len(values) // 2]
        print(f"{name:<15} {values[0]:>9,.0f} / {medians[name]:>9,.0f} / {values[-1]:>9,.0f} "
              f"events/s (min / median / max of {len(values)})")  # fmt: skip
    ratio = medians["with scores"] / medians["without scores"]
    print(f"with scores / without, medians: {ratio:.2f} (target >= 0.80)")


#: the evaluation settings of each variant of ``--compare-features``
OFF = "[maturity]\nenabled = false\n"
SLICES = '[slices]\nby = "attributes.country"\ntop_k = 20\n'
FEATURES = {
    "neither": OFF,
    "maturity": "",
    "slices": SLICES + OFF,
    "both": SLICES,
}


def compare_features(boot: str, args: argparse.Namespace, tmp: Path) -> None:
    """Phase 1 with label maturity and slices on and off, alternated on the same events (each
    instance with one of 30 countries, Zipf-distributed): what each costs of the throughput."""
    rates: dict[str, list[float]] = {name: [] for name in FEATURES}
    for _ in range(args.compare_features):
        for name, features in FEATURES.items():
            run = phase_worker(
                boot, args.events, args.partitions, tmp, args.workers, args.processes,
                features=features, countries=30,
            )  # fmt: skip
            rates[name].append(run["rate"])
            print(f"  {name}: {run['rate']:,.0f} events/s ({run['events']:,} events, "
                  f"{run['outcomes']:,} outcomes, {run['slice_records']:,} slice records, "
                  f"{run['maturity_records']:,} label-maturity records)", flush=True)  # fmt: skip
    medians = {}
    for name, values in rates.items():
        low, medians[name], high = _spread(values)
        print(f"{name:<9} {low:>9,.0f} / {medians[name]:>9,.0f} / {high:>9,.0f} events/s "
              f"(min / median / max of {len(values)})")  # fmt: skip
    for name in ("maturity", "slices", "both"):
        ratio = medians[name] / medians["neither"]
        print(f"{name} / neither, medians: {ratio:.2f} (target >= 0.75 for each of the two)")


def _spread(values: list[float]) -> tuple[float, float, float]:
    values = sorted(values)
    return values[0], values[len(values) // 2], values[-1]


def _latency_line(run: dict) -> str:
    """What a run of the latency phase (:func:`phase_latency`) gave, in one line."""
    short = "" if run["records"] >= 300 else " (FEWER than 300: --latency-seconds)"
    return (
        f"p50 {run['p50']:.2f} s, p99 {run['p99']:.2f} s, max {run['max']:.2f} s at "
        f"{run['rate']:,.0f} events/s over {run['records']} records read (p99 "
        f"{run['p99_produced']:.2f} s to the records' broker timestamps; ready "
        f"{run['ready']:.1f} s after its start){short}{_stages_line(run)}"
        f"{_transactions_line(run)}{_slow_line(run)}{_machine_line(run)}"
    )


def _machine_line(run: dict) -> str:
    """What a latency run's traffic had of the machine, and what the worker wrote to its own
    topics per input event."""
    cores, internal = run.get("machine"), run.get("internal")
    if not cores or not internal:
        return ""
    per_event = ", ".join(f"{kind} {n / run['sent']:.3f}" for kind, n in internal.items())
    return (
        f"\n    cores in use while the traffic ran: {cores['busy']:.2f} of {os.cpu_count()} "
        f"(the worker {cores['worker']:.2f}, the broker {cores['broker']:.2f}, the load "
        f"generator and reader {cores['benchmark']:.2f}; stolen {cores['steal']:.2f})"
        f"\n    records the worker wrote to its topics, per input event: {per_event}"
    )


def _slow_line(run: dict) -> str:
    """When, in seconds from the start of its traffic, the worker produced a latency run's
    slowest 5 % of the records: a stall at the start, now and then, or all through."""
    at = run.get("slow_at")
    if not at:
        return ""
    return f"\n    the slowest 5 % produced in these seconds of the run: {spans(at)}"


def spans(seconds: list[int]) -> str:
    """Sorted whole seconds as runs of consecutive ones.

    >>> spans([6, 7, 8, 10, 33])
    '6–8, 10, 33'
    """
    runs: list[list[int]] = []
    for s in seconds:
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in runs)


def _transactions_line(run: dict) -> str:
    """How long the worker's transactions took in a latency run (exactly-once only)."""
    took = run.get("transactions")
    if not took:
        return ""
    return (
        f"\n    transactions, cut to commit: {took['count']:,}, mean {took['mean']:.3f} s, "
        f"half ≤ {took['p50']:g} s, 99 % ≤ {took['p99']:g} s"
    )


def _stages_line(run: dict) -> str:
    """Where a latency run's delays went (:func:`latency_stages`): p50 / p99 of each part,
    and its mean over the slowest 5 % of the records (by the four parts' sum)."""
    stages = run.get("stages")
    if not stages or not len(next(iter(stages.values()))):
        return ""
    total = sum(stages.values())
    slowest = total >= np.percentile(total, 95)
    parts = ", ".join(
        f"{name} {np.percentile(v, 50):.2f} / {np.percentile(v, 99):.2f} / {v[slowest].mean():.2f}"
        for name, v in stages.items()
    )
    return (
        f"\n    where it went, s (p50 / p99 / mean of the slowest 5 %; {len(total)} records "
        f"followed): {parts}"
    )


def _alternated(rounds: int, envs: dict[str, Any], run, line) -> dict[str, list]:
    """``run(env)`` for each of ``envs`` in pairs, ``rounds`` times, each round starting with
    the next one so that none always runs first; ``line(run)`` says what a run gave. The runs of
    each, by name."""
    names = list(envs)
    found: dict[str, list] = {name: [] for name in names}
    for round_ in range(rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            done = run(envs[name])
            found[name].append(done)
            print(f"  round {round_ + 1}, {name}: {line(done)}", flush=True)
    return found


def _throughput_pairs(boot: str, args: argparse.Namespace, tmp: Path, rounds: int,
                      envs: dict[str, dict[str, str]]) -> dict[str, list[float]]:  # fmt: skip
    """Phase 1 in pairs (:func:`_alternated`), and min / median / max of each: events/s."""
    runs = _alternated(
        rounds, envs,
        lambda env: phase_worker(boot, args.events, args.partitions, tmp, args.workers,
                                 args.processes, env=env),
        lambda run: f"{run['rate']:,.0f} events/s ({run['events']:,} events, "
        f"{run['outcomes']:,} outcomes evaluated over 3 models, {run['changelog']:,} changelog "
        f"records, {run['copies']} metrics records seen twice)",
    )  # fmt: skip
    rates = {name: [run["rate"] for run in found] for name, found in runs.items()}
    width = max(map(len, rates))
    for name, values in rates.items():
        low, median, high = _spread(values)
        print(f"{name:<{width}} {low:>9,.0f} / {median:>9,.0f} / {high:>9,.0f} events/s "
              f"(min / median / max of {len(values)})", flush=True)  # fmt: skip
    return rates


def _latency_pairs(
    boot: str, args: argparse.Namespace, tmp: Path, rounds: int, envs: dict[str, dict[str, str]],
    rate: float,
) -> dict[str, list[float]]:  # fmt: skip
    """Phase 6 in pairs (:func:`_alternated`) at ``rate``, and min / median / max of each: the
    p99 of each run."""
    runs = _alternated(
        rounds, envs,
        lambda env: phase_latency(boot, rate, args.latency_seconds, tmp, args.processes, env),
        _latency_line,
    )  # fmt: skip
    p99s = {name: [run["p99"] for run in found] for name, found in runs.items()}
    width = max(map(len, p99s))
    for name, values in p99s.items():
        low, median, high = _spread(values)
        print(f"{name:<{width}} label-to-metric p99 {low:.2f} / {median:.2f} / {high:.2f} s "
              "(min / median / max; target <= publish_interval + 1 s = 2 s)",
              flush=True)  # fmt: skip
    return p99s


def compare_guarantees(boot: str, args: argparse.Namespace, tmp: Path) -> None:
    """Phase 1 under exactly-once and at-least-once, alternated on the same events; then
    phase 6 under each, ROUNDS times: label-to-metric p99 (each run's p99 over its records)."""
    envs = {g: {"STREAMEVAL_PROCESSING_GUARANTEE": g} for g in ("exactly_once", "at_least_once")}
    rates = _throughput_pairs(boot, args, tmp, args.compare_guarantees, envs)
    ratio = _spread(rates["exactly_once"])[1] / _spread(rates["at_least_once"])[1]
    print(f"exactly_once / at_least_once, medians: {ratio:.2f} (target >= 0.85)", flush=True)
    if "latency" in args.skip:
        return
    rate = args.latency_rate or _spread(rates["at_least_once"])[1] / 2
    _latency_pairs(boot, args, tmp, args.compare_guarantees, envs, rate)


def _imports(env: dict[str, str]) -> str:
    """Where a worker started with ``env`` (over this environment) imports the package from."""
    return subprocess.run(
        [sys.executable, "-c", "import streameval; print(streameval.__file__)"],
        env={**os.environ, **env}, cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def code_of(rev: str, tmp: Path) -> tuple[str, dict[str, str]]:
    """The commit ``rev`` names, and the environment under which a worker runs the package as
    it was at that commit: ``pipeline/streameval`` of the commit (``git archive``) first on
    ``PYTHONPATH``. The Rust kernels are not rebuilt: the worker of ``rev`` imports the ones
    installed now, so a commit whose ``pipeline/kernels`` differ from HEAD's is refused, as the
    comparison would not be of its code, and so is a working tree whose kernels have changes
    not committed (the installed ones may be either)."""
    git = ["git", "-C", str(ROOT)]
    found = subprocess.run([*git, "rev-parse", "--verify", "--quiet", rev + "^{commit}"],
                           capture_output=True, text=True)  # fmt: skip
    if found.returncode != 0:
        shallow = subprocess.run([*git, "rev-parse", "--is-shallow-repository"],
                                 capture_output=True, text=True).stdout.strip()  # fmt: skip
        hint = "; the clone is shallow: `git fetch --unshallow`" if shallow == "true" else ""
        raise SystemExit(f"--compare-code {rev}: not a commit of {ROOT} (git rev-parse found "
                         f"none{hint}); give a commit, a branch or a tag, e.g. HEAD~3")  # fmt: skip
    commit = found.stdout.strip()
    if subprocess.run([*git, "diff", "--quiet", "HEAD", "--", "pipeline/kernels"]).returncode:
        raise SystemExit(f"--compare-code {rev}: the working tree's Rust kernels "
                         "(pipeline/kernels) have changes not committed, and both workers would "
                         "run with the kernels installed now; commit or set them aside "
                         "first")  # fmt: skip
    kernels = [*git, "diff", "--quiet", commit, "HEAD", "--", "pipeline/kernels"]
    if subprocess.run(kernels).returncode:
        raise SystemExit(f"--compare-code {rev}: the Rust kernels (pipeline/kernels) of "
                         f"{commit[:7]} differ from HEAD's, and its worker would run with the "
                         "kernels installed now; compare a commit with the same "
                         "kernels")  # fmt: skip
    where = tmp / f"code-{commit[:12]}"
    where.mkdir()
    archive = subprocess.run([*git, "archive", "--format=tar", commit, "pipeline/streameval"],
                             capture_output=True, check=True)  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive.stdout, check=True)
    path = [str(where / "pipeline"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {"PYTHONPATH": os.pathsep.join(path)}
    imported = _imports(env)
    if not imported.startswith(str(where)):
        raise SystemExit(f"--compare-code {rev}: the worker would import {imported}, not the "
                         f"copy of {commit[:7]} in {where}")  # fmt: skip
    return commit, env


def compare_code(boot: str, args: argparse.Namespace, tmp: Path) -> None:
    """Phase 1 and phase 6 with the worker of the working tree and the worker of the commit
    ``--compare-code`` names, in pairs, ``--rounds`` times; each round starts with the other
    one, so that neither always runs first. The benchmark's own code is the working tree's
    in both: the events, the topics, the reader and the clock are the same."""
    commit, old_env = code_of(args.compare_code, tmp)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "pipeline"],
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    ours = _imports({})
    if not ours.startswith(str(ROOT / "pipeline" / "streameval")):
        raise SystemExit(f"--compare-code: the working tree's worker would import {ours}, not "
                         f"{ROOT / 'pipeline' / 'streameval'}: is PYTHONPATH set, or the package "
                         "installed from elsewhere?")  # fmt: skip
    named = "" if commit.startswith(args.compare_code) else f" ({args.compare_code})"
    names = (f"{commit[:7]}{named}",
             f"working tree (HEAD {head}{', changed' if dirty else ''})")  # fmt: skip
    env = {names[0]: old_env, names[1]: {}}
    print(f"broker {boot}; logs in {tmp}; the worker of {names[0]} against the {names[1]}, "
          f"{args.rounds} rounds of {args.processes} data-path process(es)",
          flush=True)  # fmt: skip
    rates = {} if "all" in args.skip else _throughput_pairs(boot, args, tmp, args.rounds, env)
    if "latency" in args.skip:
        return
    if args.latency_rate is None and not rates:
        raise SystemExit("--compare-code with --skip all needs --latency-rate (events/s)")
    rate = args.latency_rate or min(_spread(v)[1] for v in rates.values()) / 2
    p99s = _latency_pairs(boot, args, tmp, args.rounds, env, rate)
    higher = sum(new > old for old, new in zip(p99s[names[0]], p99s[names[1]], strict=True))
    print(f"the {names[1]}'s p99 the higher in {higher} of {args.rounds} pairs", flush=True)


#: The JVM options Kafka's own start scripts give a broker: the heap of kafka-server-start.sh
#: and KAFKA_JVM_PERFORMANCE_OPTS of kafka-run-class.sh (the launcher's are quick-start ones,
#: ``devkafka.JVM_OPTIONS``: C1 only, the serial collector, 512 MB)
KAFKA_SCRIPTS_JVM = (
    "-Xmx1G", "-Xms1G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)  # fmt: skip


@contextlib.contextmanager
def broker_with_jvm(options: tuple[str, ...], directory: Path):
    """A fresh local broker whose JVM runs with ``options``, for as long as the block: its
    bootstrap. The launcher reads ``devkafka.JVM_OPTIONS`` when it starts a JVM; this is the one
    place the benchmark changes it, and only while the broker starts."""
    global BROKER_PID
    from streameval import devkafka

    kept, measured = devkafka.JVM_OPTIONS, BROKER_PID
    devkafka.JVM_OPTIONS = options
    try:
        instance = devkafka.KafkaInstance.start(directory, log=lambda *_: None)
    finally:
        devkafka.JVM_OPTIONS = kept
    BROKER_PID = instance.pid
    try:
        yield instance.bootstrap
    finally:
        BROKER_PID = measured
        instance.stop()
        shutil.rmtree(directory, ignore_errors=True)  # its 1 M events and more


def _per_million(run: dict) -> float:
    """The broker's CPU seconds per million events of a phase-1 run."""
    return run["broker_cpu"] / run["events"] * 1e6


def compare_broker_jvm(args: argparse.Namespace, tmp: Path) -> None:
    """Phase 1 (one process and ``--processes``) and phase 6 on a fresh local broker with the
    launcher's JVM options and on one with Kafka's start scripts' (:data:`KAFKA_SCRIPTS_JVM`),
    in pairs, ROUNDS times; each round starts with the other one. What the broker's JVM does
    to the worker's rate, to the broker's CPU time and to the latency."""
    if os.environ.get("STREAMEVAL_BOOTSTRAP"):
        raise SystemExit("--compare-broker-jvm starts local brokers of its own: unset "
                         "STREAMEVAL_BOOTSTRAP")  # fmt: skip
    if "latency" not in args.skip and args.latency_rate is None:
        raise SystemExit("--compare-broker-jvm needs --latency-rate (events/s), or --skip "
                         "latency")  # fmt: skip
    from streameval import devkafka

    profiles = {"quick start": devkafka.JVM_OPTIONS, "Kafka's scripts": KAFKA_SCRIPTS_JVM}
    processes = sorted({1, args.processes})
    brokers = itertools.count()
    print(f"a fresh broker per run; logs in {tmp}; {args.events:,} events a run, "
          f"{args.compare_broker_jvm} rounds", flush=True)  # fmt: skip

    def run(options: tuple[str, ...]) -> dict[str, Any]:
        """Phase 1 with each number of processes, then phase 6, on a broker of ``options``."""
        done: dict[str, Any] = {}
        with broker_with_jvm(options, tmp / f"kafka-{next(brokers)}") as boot:
            for n in processes:
                done[n] = phase_worker(boot, args.events, args.partitions, tmp, args.workers, n)
            if "latency" not in args.skip:
                done["latency"] = phase_latency(boot, args.latency_rate, args.latency_seconds,
                                                tmp, args.processes)  # fmt: skip
        return done

    def line(done: dict[str, Any]) -> str:
        said = [f"{n} process(es) {done[n]['rate']:,.0f} events/s ({done[n]['outcomes']:,} "
                f"outcomes), the broker {_per_million(done[n]):.1f} s of CPU per 1 M events"
                for n in processes]  # fmt: skip
        if "latency" in done:
            said.append(f"latency {_latency_line(done['latency'])}")
        return "; ".join(said)

    runs = _alternated(args.compare_broker_jvm, profiles, run, line)
    found: dict[tuple[str, str], list[float]] = {}
    for name, done in runs.items():
        for n in processes:
            found[name, f"{n} process(es), events/s"] = [d[n]["rate"] for d in done]
            found[name, f"{n} process(es), the broker's CPU s per 1 M events"] = [
                _per_million(d[n]) for d in done
            ]
        if "latency" not in args.skip:
            found[name, "label-to-metric p99, s"] = [d["latency"]["p99"] for d in done]
    for (name, what), values in found.items():
        low, median, high = _spread(values)
        digits = 0 if what.endswith("events/s") else 2
        print(f"{name:<16} {what:<52} {low:>10,.{digits}f} / {median:>10,.{digits}f} / "
              f"{high:>10,.{digits}f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
