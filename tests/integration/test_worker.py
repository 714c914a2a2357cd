"""The streaming worker on a real broker: it publishes replay's numbers, survives SIGKILL, and
shares the work with a second worker — exactly.

The test stream (tests/streaming.py) is produced to the three input topics before the worker
starts, each record keyed by its instance id. Every input partition then carries records in
delivery order; labels overtake predictions by at most 500 ms of event time, less than the
1000 ms label grace, so the watermark join sees every prediction replay sees, and outcomes are
released in (due, instance_id) order in both: the same outcome order per model, hence identical
numbers (docs/architecture.md, "Ordering", says why).
"""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest
from streameval.devkafka import free_port
from streameval.simulate.malformed import mix
from streameval.topics import Topics, create_topics, load_topics, topics_dir

from tests.streaming import finals, make_config, replay_finals

pytestmark = pytest.mark.kafka

CONFIG = """
publish_every = 500
[join]
label_grace_ms = 1000
[maturity]
cohort_ms = 5000
every_ms = 1000
cohorts = 4
[models.champion]
positive_label = "yes"
costs = { yes = { no = 10 }, no = { yes = 1 } }
[models.challenger]
positive_label = "yes"
[models.baseline]
positive_label = "yes"
[[comparisons]]
a = "champion"
b = "challenger"
[worker]
idle_ms = 300
snapshot_interval_s = 0.5
publish_interval_s = 0.3
session_timeout_ms = 6000
"""
SCHEMAS = {
    "metrics": "metrics.schema.json",
    "drift-alarms": "drift-alarm.schema.json",
    "comparisons": "comparison.schema.json",
    "label-maturity": "label-maturity.schema.json",
}


@functools.cache
def _validator(schema_file: str) -> jsonschema.protocols.Validator:
    """The validator of one of topics/schemas (its draft's), built once."""
    schema = orjson.loads((topics_dir() / "schemas" / schema_file).read_bytes())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


class Deployment:
    """Topics with a fresh prefix, the stream produced to them, and workers to start."""

    def __init__(
        self,
        bootstrap: str,
        tmp_path: Path,
        stream,
        config: str = CONFIG,
        client: dict[str, str] | None = None,
    ) -> None:
        """``client``: the test's own librdkafka settings (a secured broker's), else the
        bootstrap alone."""
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient

        self.bootstrap = bootstrap
        self.client = client or {"bootstrap.servers": bootstrap}
        self.prefix = f"w{uuid.uuid4().hex[:8]}-"
        self.tmp = tmp_path
        self.config = tmp_path / "worker.toml"
        self.config.write_text(config)
        self.workers: list[tuple[subprocess.Popen, int, Path]] = []
        self.started = 0
        admin = AdminClient(self.client)
        specs = load_topics(self.prefix, partitions=3)
        for spec in specs:
            if spec.role == "input":
                # room for the oversized records of the malformed-input test, whose records are
                # sent with their (January 2026) event times as Kafka timestamps: retention by
                # time would delete them before the worker reads them
                spec.configs.update({"max.message.bytes": "4194304", "retention.ms": "-1"})
        create_topics(admin, specs)
        self.producer = Producer({**self.client, "linger.ms": 20, "message.max.bytes": 4_000_000})
        self.pending = list(stream.records())
        self.env: dict[str, str] = {}
        self.inputs = [(spec.name, spec.partitions) for spec in specs if spec.role == "input"]
        self._valid: set[tuple[str, bytes]] = set()  # output messages found valid (records())

    @contextmanager
    def pause(self, every: float = 0.5) -> Iterator[None]:
        """A pause in the stream that is not its end, however long it lasts.

        A worker takes inputs quiet for ``idle_ms`` for the end of the stream and resolves the
        labels waiting out their grace — before the predictions they overtook, produced after
        the pause, arrive (late, by design). A busy machine can stretch a pause that is meant
        to be short (a worker starting, a partition moving) past any ``idle_ms`` a test can
        afford; so while this lasts every input partition gets an undecodable record every
        ``every`` seconds (it goes to dead-letters and changes no number), and none is ever
        quiet for long. The tests that use it keep ``idle_ms`` well above ``every``.
        """
        from confluent_kafka import Producer

        producer = Producer({**self.client, "linger.ms": 0})
        stop = threading.Event()

        def keep_alive() -> None:
            while not stop.is_set():
                for topic, partitions in self.inputs:
                    for p in range(partitions):
                        producer.produce(topic, b"a pause, not the end", partition=p)
                producer.flush(10)
                stop.wait(every)

        thread = threading.Thread(target=keep_alive, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(30)
            assert producer.flush(30) == 0

    def produce(self, fraction: float = 1.0) -> None:
        """Produce the next part of the stream (all that is left by default)."""
        count = len(self.pending) if fraction >= 1 else int(len(self.pending) * fraction)
        for topic, key, value in self.pending[:count]:
            self._send(self.prefix + topic, value, key)
        del self.pending[:count]
        assert self.producer.flush(120) == 0

    def _send(self, topic: str, value, key, **options) -> None:
        """One record into the producer; when its local queue is full (a slow broker, a
        large stream), wait for deliveries to drain it rather than fail the test."""
        while True:
            try:
                self.producer.produce(topic, value, key, **options)
                break
            except BufferError:
                self.producer.poll(0.05)
        self.producer.poll(0)

    def produce_records(self, records) -> dict[tuple[str, int, int], str | None]:
        """Produce :class:`~streameval.simulate.malformed.Record` s, each with its key and Kafka
        timestamp; return what each must become, by where it landed."""
        landed: dict[tuple[str, int, int], str | None] = {}

        def delivered(expect):
            def callback(err, message):
                assert err is None, err
                landed[message.topic(), message.partition(), message.offset()] = expect

            return callback

        for record in records:
            self._send(
                self.prefix + record.topic,
                record.value,
                record.key,
                timestamp=record.timestamp,
                on_delivery=delivered(record.expect),
            )
        assert self.producer.flush(60) == 0
        assert len(landed) == len(records)
        return landed

    def dead_letters(self, count: int, timeout: float = 120) -> list:
        """The first ``count`` messages of the dead-letters topic (all of its partitions)."""
        from confluent_kafka import Consumer

        consumer = Consumer(
            {
                **self.client,
                "group.id": uuid.uuid4().hex,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "fetch.message.max.bytes": 4_000_000,
            }
        )
        consumer.subscribe([self.prefix + "dead-letters"])
        letters = []
        deadline = time.monotonic() + timeout
        try:
            while len(letters) < count and time.monotonic() < deadline:
                for message in consumer.consume(1000, timeout=1.0):
                    if message.error() is None:
                        letters.append(message)
            time.sleep(1)  # and nothing more after them
            letters += [m for m in consumer.consume(1000, timeout=2.0) if m.error() is None]
        finally:
            consumer.close()
        return letters

    def start_worker(self, max_file_bytes: int | None = None) -> tuple[subprocess.Popen, int]:
        """A worker process (``max_file_bytes``: no file it writes may grow past this, as if
        the disk were full)."""
        port = free_port()
        log = self.tmp / f"worker-{self.started}.log"
        self.started += 1
        env = {
            **os.environ,
            "STREAMEVAL_BOOTSTRAP": self.bootstrap,
            "STREAMEVAL_TOPIC_PREFIX": self.prefix,
            "STREAMEVAL_APP_ID": self.prefix + "app",
            "STREAMEVAL_METRICS_PORT": str(port),
            "STREAMEVAL_METRICS_HOST": "127.0.0.1",
            "STREAMEVAL_STATE_DIR": str(self.tmp / "state"),
            **self.env,
        }

        def limit() -> None:  # writes past it fail with EFBIG (Python ignores SIGXFSZ)
            import resource

            resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))

        process = subprocess.Popen(
            [sys.executable, "-m", "streameval.cli", "worker", "--config", str(self.config)],
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            preexec_fn=None if max_file_bytes is None else limit,
        )
        self.workers.append((process, port, log))
        return process, port

    def records(self) -> list[dict]:
        """Everything published so far on the output topics, validated against topics/ (each
        distinct message once: a metrics record takes tens of milliseconds to validate, and
        the tests read the outputs again and again while they wait)."""
        records = []
        for topic, value in self.raw_records():
            record = orjson.loads(value)
            if (topic, value) not in self._valid:
                schema_file = SCHEMAS[topic[len(self.prefix) :]]
                error = jsonschema.exceptions.best_match(
                    _validator(schema_file).iter_errors(record)
                )
                if error is not None:  # (the error jsonschema.validate would raise)
                    raise error
                self._valid.add((topic, value))
            records.append(record)
        return records

    def raw_records(self) -> list[tuple[str, bytes]]:
        """Every message on the output topics as a ``read_committed`` reader sees it: (topic,
        value), copies included."""
        topics = [self.prefix + base for base in SCHEMAS]
        return [(topic, value) for topic, _, _, _, value in self.read(topics)]

    def read(self, topics: list[str]) -> list[tuple[str, int, int, bytes, bytes]]:
        """Every message of ``topics`` a ``read_committed`` reader sees: (topic, partition,
        offset, key, value), each partition in offset order. Read to each partition's end as
        the reader sees it (under exactly-once, transaction markers take offsets too, and an
        open transaction ends what may be read)."""
        from confluent_kafka import KafkaError, TopicPartition
        from streameval.app.runner import read_turn

        out = []
        with self.reader({"enable.partition.eof": True}) as consumer:
            for topic in topics:
                metadata = consumer.list_topics(topic, timeout=10).topics[topic]
                for p in sorted(metadata.partitions):
                    low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), 10)
                    if high <= low:
                        continue
                    consumer.assign([TopicPartition(topic, p, low)])
                    ended = False
                    while not ended:
                        messages = read_turn(consumer.consume, 10_000, 10)
                        assert messages, f"{topic}[{p}]: no end in sight"
                        for message in messages:
                            error = message.error()
                            if error is None:
                                out.append(
                                    (topic, p, message.offset(), message.key(), message.value())
                                )
                            elif error.code() == KafkaError._PARTITION_EOF:
                                ended = True
        return out

    @contextmanager
    def reader(self, settings: dict | None = None) -> Iterator[Any]:
        """A consumer that reads what the deployment's worker has committed (a
        ``read_committed`` reader, no offsets of its own), with librdkafka ``settings``
        added; closed afterwards."""
        from confluent_kafka import Consumer

        consumer = Consumer(
            {
                **self.client,
                "group.id": "reader",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                **(settings or {}),
            }
        )
        try:
            yield consumer
        finally:
            consumer.close()

    def wait_for(self, expected: dict, timeout: float = 180) -> dict:
        """Wait until the published finals have replay's counts; return them."""
        want = {k: orjson.loads(v)["n"] for k, v in expected["metrics"].items()}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for process, _, log in self.workers:
                assert process.poll() is None or process.returncode in (0, -9), log.read_text()
            got = finals(self.records())
            have = {k: orjson.loads(v)["n"] for k, v in got["metrics"].items()}
            # the label-maturity records and the slices' last ones may come a tick later
            later = ("maturity", "slices")
            if have == want and all(got[k] == expected.get(k, got[k]) for k in later):
                return got
            time.sleep(1)
        if have == want:
            return got  # (the caller's comparison shows what differs)
        raise AssertionError(f"the worker never got there: {have} != {want}")

    def kill_all(self) -> None:
        """SIGKILL every worker still running (a test's clean-up, whatever happened)."""
        for process, _, _ in self.workers:
            if process.poll() is None:
                process.kill()
                process.wait()

    def stop_all(self) -> None:
        for process, _, _ in self.workers:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process, _, log in self.workers:
            if process.returncode == -9:
                continue
            try:
                code = process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                raise AssertionError("a worker ignored SIGTERM:\n" + log.read_text()) from None
            assert code == 0, log.read_text()[-3000:]


def reasons(letters) -> dict[tuple[str, int, int], str]:
    """Each dead letter's reason code, by where its record was (topic, partition, offset); every
    one has a reason said in words too."""
    got = {}
    for letter in letters:
        headers = {k: v.decode() for k, v in letter.headers()}
        where = (
            headers["streameval.source.topic"],
            int(headers["streameval.source.partition"]),
            int(headers["streameval.source.offset"]),
        )
        assert headers["streameval.reason"], headers
        got[where] = headers["streameval.reason.code"]
    return got


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def _series(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name}{labels} in /metrics")


@pytest.fixture
def deployment(kafka_bootstrap, tmp_path, stream):
    deployment = Deployment(kafka_bootstrap, tmp_path, stream)
    yield deployment
    deployment.kill_all()


@pytest.mark.parametrize(
    ("processes", "guarantee"),
    [(1, "exactly_once"), (2, "exactly_once"), (1, "at_least_once")],
)
def test_streaming_equals_replay(deployment, expected, processes, guarantee):
    """Under the default guarantee and the one for clusters without transactions (the fault
    campaign runs both too)."""
    deployment.env["STREAMEVAL_PROCESSES"] = str(processes)
    deployment.env["STREAMEVAL_PROCESSING_GUARANTEE"] = guarantee
    deployment.produce()
    _, port = deployment.start_worker()
    got = deployment.wait_for(expected)
    assert got == expected
    if processes > 1:  # the work was shared, and /metrics shows every process's series
        log = deployment.workers[0][2].read_text()
        assert re.search(r"process 1: assigned: \d+ input partitions, join \[\d", log), log
    text = _scrape(port)
    for (model, view), record in expected["metrics"].items():
        record = orjson.loads(record)
        assert _series(
            text,
            "streameval_measure",
            model=model,
            view=view,
            estimator="window_1000",
            measure="accuracy",
        ) == pytest.approx(record["estimators"]["window:1000"]["accuracy"], rel=1e-12)
        if view == "final":
            assert _series(text, "streameval_model_outcomes", model=model) == record["n"]
    assert _series(text, "streameval_dead_letters_total", reason="missing_field") >= 1
    # exactly-once: each transaction's time from its cut to its commit (none without them)
    (transactions,) = re.findall(r"^streameval_transaction_seconds_count (\S+)$", text, re.M)
    assert (float(transactions) > 0) == (guarantee == "exactly_once")
    total_dead = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("streameval_dead_letters_total{")
    )
    assert total_dead == 7
    # nothing is left between the stages once everything is evaluated (the gauges that tell
    # where a backlog sits: the input, the join's clock or the evaluation's frontiers)
    deadline = time.monotonic() + 30
    while True:
        text = _scrape(port)
        waiting = [
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(("streameval_join_waiting_events ",
                                "streameval_evaluation_waiting_outcomes "))
        ]  # fmt: skip
        assert len(waiting) == 2, text
        if waiting == [0.0, 0.0] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert waiting == [0.0, 0.0]
    deployment.stop_all()


def _wait_for_progress(deployment, n: int) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        metrics = finals(deployment.records())["metrics"]
        if any(orjson.loads(v)["n"] >= n for v in metrics.values()):
            return
        time.sleep(0.2)
    raise AssertionError(f"no model reached {n} outcomes")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.parametrize("processes", [1, 2])
def test_sigkill_and_restart_loses_and_doubles_nothing(deployment, expected, processes):
    # Half the stream, then SIGKILL once the worker is well into it; the rest is produced
    # while no worker runs, so the kill is in the middle of the stream whatever the speed.
    # The pause is not the end of the stream (Deployment.pause).
    deployment.env["STREAMEVAL_IDLE_MS"] = "8000"
    deployment.env["STREAMEVAL_PROCESSES"] = str(processes)
    deployment.produce(0.5)
    with deployment.pause():
        process, _ = deployment.start_worker()
        _wait_for_progress(deployment, 500)
        time.sleep(0.7)  # past a checkpoint, so the restart starts from one
        text = deployment.workers[0][2].read_text()
        children = [int(pid) for pid in re.findall(r"\[(\d+)\] \[\w+\] process \d+:", text)]
        assert len(set(children)) == processes - 1
        process.send_signal(signal.SIGKILL)
        process.wait()
        deadline = time.monotonic() + 10  # a worker's processes die with it, as in a crash
        while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in children)
    deployment.produce()
    deployment.start_worker()
    assert deployment.wait_for(expected) == expected
    deployment.stop_all()
    assert "restored from checkpoints" in deployment.workers[1][2].read_text()


#: the streaming tests' configuration, with every model evaluated per country too
SLICED = CONFIG.replace(
    "[maturity]",
    '[slices]\nby = "attributes.country"\ntop_k = 4\nwindow = 300\n[maturity]',
)


def test_slices_give_replays_numbers_through_a_sigkill(kafka_bootstrap, tmp_path, stream):
    """Every model per country (the top 4 and the rest): each slice's records, the models'
    lists of their slices and every label-maturity record are replay's, through a SIGKILL in
    the middle of the stream (the slices' gathered outcomes restored from their pieces)."""
    sliced = replace(stream, countries=15)
    expected = replay_finals(
        sliced,
        make_config(slices={"by": "attributes.country", "top_k": 4, "window": 300}),
    )
    assert len(expected["slices"]) >= 8  # 4 slices or more, both views
    deployment = Deployment(kafka_bootstrap, tmp_path, sliced, SLICED)
    try:
        deployment.env["STREAMEVAL_IDLE_MS"] = "8000"
        deployment.produce(0.5)
        with deployment.pause():
            process, _ = deployment.start_worker()
            _wait_for_progress(deployment, 500)
            time.sleep(0.7)  # past a checkpoint, so the restart starts from one
            process.send_signal(signal.SIGKILL)
            process.wait()
        deployment.produce()
        _, port = deployment.start_worker()
        assert deployment.wait_for(expected) == expected
        text = _scrape(port)  # the slices and the maturity on /metrics too
        slice_n = {"model": "champion", "slice": "c0", "estimator": "window_1000", "measure": "n"}
        assert _series(text, "streameval_slice_measure", **slice_n) > 0
        predicted = {"model": "champion", "state": "predicted"}
        assert _series(text, "streameval_label_maturity_instances", **predicted) > 0
        deployment.stop_all()
    finally:
        deployment.kill_all()


def test_a_second_worker_joining_mid_stream_changes_nothing(deployment, expected):
    # Inputs pause while the second worker starts (not the end of the stream).
    deployment.env["STREAMEVAL_IDLE_MS"] = "8000"
    deployment.produce(0.5)
    with deployment.pause():
        deployment.start_worker()
        _wait_for_progress(deployment, 500)
        deployment.start_worker()
    deployment.produce()
    assert deployment.wait_for(expected) == expected
    deployment.stop_all()
    second = deployment.workers[1][2].read_text()
    assert re.search(r"assigned: \d+ input partitions, join \[\d", second), second[-2000:]


def test_a_paused_worker_takes_no_input_for_idle_until_it_has_read_for_idle_ms(
    deployment, expected
):
    """A worker whose process was paused (SIGSTOP: a frozen VM, a throttled container) for
    longer than ``idle_ms`` finds, when it runs again, inputs it last saw quiet before the
    pause. They were quiet only because it could not read them: none is idle until it has read
    for ``idle_ms`` again. Seen in the progress its event batches carry (what the join's
    watermark is made of), by their Kafka timestamps. (The pause is shorter than the
    session timeout: the worker keeps its partitions.)"""
    idle_ms = 1200
    deployment.env["STREAMEVAL_IDLE_MS"] = str(idle_ms)
    deployment.produce()
    worker, _ = deployment.start_worker()
    assert deployment.wait_for(expected) == expected  # the end of the stream: inputs idle
    time.sleep(2 * idle_ms / 1000)
    worker.send_signal(signal.SIGSTOP)
    try:
        stopped = time.time() * 1000
        time.sleep(3.0)
        resumed = time.time() * 1000
    finally:
        worker.send_signal(signal.SIGCONT)
    time.sleep(3.0)
    batches = _event_batches(deployment, time.time() * 1000)
    before = [idle for ts, idle in batches if stopped - idle_ms / 2 <= ts < stopped]
    # (from 50 ms on: a batch made just before the pause may be stamped as it goes, after it)
    soon_after = [idle for ts, idle in batches if resumed + 50 <= ts < resumed + idle_ms / 2]
    later = [idle for ts, idle in batches if ts >= resumed + 2_000]
    assert before and soon_after and later, (len(before), len(soon_after), len(later))
    assert all(before), before  # heartbeats, every input idle
    assert not any(soon_after), soon_after
    assert all(later), later
    assert finals(deployment.records()) == expected  # and nothing changed
    deployment.stop_all()


def _event_batches(deployment, until_ms: float) -> list[tuple[float, bool]]:
    """The committed event batches of the deployment's worker up to ``until_ms`` of Kafka
    time: each one's timestamp (ms) and whether it says every input partition is idle. (A
    worker running exactly-once has a transaction open on the events topic most of the
    time, so a reader is rarely told it reached the end: each partition is read up to the
    first batch stamped at or after ``until_ms``, which the worker's heartbeats provide.)"""
    from confluent_kafka import TopicPartition
    from streameval.app.wire import decode_events

    topic = Topics.with_prefix(deployment.prefix, deployment.prefix + "app").events
    out = []
    with deployment.reader() as consumer:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        for p in metadata.partitions:
            consumer.assign([TopicPartition(topic, p, 0)])
            deadline = time.monotonic() + 60
            while True:
                assert time.monotonic() < deadline, f"{topic}[{p}]: nothing stamped {until_ms}"
                message = consumer.poll(1)
                if message is None:
                    continue
                assert message.error() is None, message.error()
                ts = message.timestamp()[1]
                if ts >= until_ms:
                    break
                sources = decode_events(message.value()).sources
                out.append((ts, all(s.idle for s in sources)))
    return out


def test_a_worker_stopped_while_it_waits_for_an_open_transaction_checkpoints_nothing(
    deployment, expected
):
    """Exactly-once: a worker given partitions first waits for the transactions open on
    their changelogs to end (their owner may be committing a newer checkpoint). SIGTERMed
    during that wait it stops at once and takes no checkpoint over what it may have
    restored too early; the next worker gives replay's numbers and no record twice."""
    from confluent_kafka import Producer

    deployment.produce()
    deployment.start_worker()
    assert deployment.wait_for(expected) == expected
    deployment.stop_all()
    # another process's transaction, open on a changelog partition the next worker restores
    other = Producer(
        {**deployment.client, "transactional.id": deployment.prefix + "other",
         "transaction.timeout.ms": 120_000}
    )  # fmt: skip
    changelog = Topics.with_prefix(deployment.prefix, deployment.prefix + "app").join_changelog
    said = []
    other.init_transactions(30)
    other.begin_transaction()
    other.produce(changelog, b"never read", b"0", 0, on_delivery=lambda err, _: said.append(err))
    other.flush(30)
    assert said == [None]
    try:
        process, _ = deployment.start_worker()
        log = deployment.workers[-1][2]
        _until_logged(process, log, "waiting for the transactions open on", 90)
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0, log.read_text()[-3000:]
        text = log.read_text()
        assert "stopping while a restore waited" in text, text[-3000:]
        assert "neither restored nor assigned" in text, text[-3000:]
        assert "final records and a checkpoint" not in text, text[-3000:]
    finally:
        other.abort_transaction(30)
    deployment.start_worker()
    assert deployment.wait_for(expected) == expected
    deployment.stop_all()
    copies = [value for value, n in Counter(deployment.raw_records()).items() if n > 1]
    assert not copies, copies[:3]


def test_a_hanging_transaction_on_an_internal_topic_is_named_and_its_end_seen(deployment, expected):
    """Exactly-once: a transaction open on a join partition's events for longer than the
    app's transaction_timeout_ms (the broker would have ended any it still knew) holds that
    join partition: the worker says so at ERROR, with the abort command at the offset where
    it starts, and says so again once it has ended. The transaction is open before the worker
    routes anything, so every event batch of that join partition waits behind it: once it
    has ended, the join reads them all, and the numbers are replay's, no record twice."""
    from confluent_kafka.admin import AdminClient

    deployment.env["STREAMEVAL_TRANSACTION_TIMEOUT_MS"] = "5000"
    app = deployment.prefix + "app"
    events = Topics.with_prefix(deployment.prefix, app).events
    # the events topic before the worker makes it (it makes the rest); the stream as a
    # backlog: inputs quiet for idle_ms mid-stream would be its end (Deployment.pause)
    specs = [s for s in load_topics(deployment.prefix, app_id=app) if s.name == events]
    create_topics(AdminClient(deployment.client), specs)
    deployment.produce()
    other = _hung_writer(deployment, events, 0)
    try:
        process, _ = deployment.start_worker()
        log = deployment.workers[-1][2]
        _until_logged(process, log, f"a hanging transaction on {events}[0] from offset 0", 120)
        text = log.read_text()
        assert f"abort --topic {events} --partition 0 --start-offset 0`" in text
        assert "The stages reading these partitions wait for it" in text
        # the evaluation waits for every join partition: nothing final came out yet
        assert finals(deployment.records())["metrics"] != expected["metrics"]
    finally:
        other.abort_transaction(30)
    _until_logged(process, log, f"the hanging transaction on {events}[0] has ended", 60)
    assert deployment.wait_for(expected) == expected
    deployment.stop_all()
    copies = [value for value, n in Counter(deployment.raw_records()).items() if n > 1]
    assert not copies, copies[:3]


def test_a_hanging_transaction_on_the_outcomes_holds_its_models_until_it_ends(deployment, expected):
    """Exactly-once: the same on the evaluation's input. A transaction open on the outcomes
    partition of a model holds that partition's evaluation (its models' records), named at
    ERROR once the partition's end has grown behind it for transaction_timeout_ms and the
    broker's margin: the join writes to every evaluation partition whenever its clock moves,
    so the stream comes in parts while the worker runs, not as a backlog (one worked through
    before then is never named: docs/operations.md). Once the transaction has ended, the
    evaluation reads on: replay's numbers, no record twice."""
    from confluent_kafka.admin import AdminClient
    from streameval.app.settings import load_settings
    from streameval.app.topology import model_partitioner

    deployment.env["STREAMEVAL_TRANSACTION_TIMEOUT_MS"] = "5000"
    deployment.env["STREAMEVAL_IDLE_MS"] = "8000"  # the gaps between the parts are no end
    app = deployment.prefix + "app"
    outcomes = Topics.with_prefix(deployment.prefix, app).outcomes
    specs = [s for s in load_topics(deployment.prefix, app_id=app) if s.name == outcomes]
    create_topics(AdminClient(deployment.client), specs)
    _, config = load_settings(deployment.config, bootstrap=deployment.bootstrap)
    partition_of = model_partitioner(config, specs[0].partitions)
    r = partition_of("champion")
    held = {m for m in ("champion", "challenger", "baseline") if partition_of(m) == r}
    # a part every 0.2 s and more (each is flushed): the hang is named about 25 s after the
    # worker starts, a third of the way through
    parts = 400
    size = -(-len(deployment.pending) // parts)
    other = _hung_writer(deployment, outcomes, r)
    try:
        process, _ = deployment.start_worker()
        log = deployment.workers[-1][2]

        def the_next_part() -> None:
            assert deployment.pending, "the stream ended first: " + log.read_text()[-3000:]
            deployment.produce(size / len(deployment.pending))

        hang = f"a hanging transaction on {outcomes}[{r}] from offset 0"
        _until_logged(process, log, hang, 120, the_next_part)
        # reading the outputs takes seconds: inputs quiet for idle_ms meanwhile would be the
        # end of the stream, and the rest of it late
        with deployment.pause():
            text = log.read_text()
            assert f"abort --topic {outcomes} --partition {r} --start-offset 0`" in text
            assert "The stages reading these partitions wait for it" in text
            # that partition's models publish nothing; the others' evaluation goes on (its
            # label maturity every second of event time, its metrics every 500 outcomes)
            records = deployment.records()
            published = {
                x["model_id"] for x in records if x["kind"] in ("metrics", "label_maturity")
            }
            assert published and not published & held, (published, held)
            assert not finals(records)["comparisons"]  # (champion and challenger's)
            deployment.produce()
    finally:
        other.abort_transaction(30)
    _until_logged(process, log, f"the hanging transaction on {outcomes}[{r}] has ended", 60)
    assert deployment.wait_for(expected) == expected
    deployment.stop_all()
    copies = [value for value, n in Counter(deployment.raw_records()).items() if n > 1]
    assert not copies, copies[:3]


def _until_logged(
    process: subprocess.Popen,
    log: Path,
    text: str,
    timeout: float,
    each: Callable[[], object] | None = None,
) -> None:
    """Wait until the worker's log has ``text`` (it must not stop meanwhile); ``each``: what
    to do every 0.2 s while waiting."""
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        assert process.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        if each is not None:
            each()
        time.sleep(0.2)


def _hung_writer(deployment, topic: str, partition: int):
    """A transaction open on ``topic[partition]`` from offset 0 that the broker keeps for ten
    minutes: past the worker's transaction_timeout_ms, as if it hung (its producer, to abort
    it)."""
    from confluent_kafka import Producer

    other = Producer(
        {**deployment.client, "transactional.id": deployment.prefix + "hung",
         "transaction.timeout.ms": 600_000}
    )  # fmt: skip
    said = []
    other.init_transactions(30)
    other.begin_transaction()
    other.produce(topic, b"never read", None, partition, on_delivery=lambda e, m: said.append(m))
    other.flush(30)
    assert said and said[0].error() is None and said[0].offset() == 0
    return other


def test_a_join_slower_than_its_input_waits_in_kafka(deployment, expected, monkeypatch):
    """A join partition stepping through its events due keeps only a few of the event batches
    that come meanwhile, and stops fetching the rest until it has used them (its backlog waits
    in Kafka, not in RAM): paused and resumed again and again, and through a rebalance while
    partitions are paused (a second worker joins), it loses and repeats nothing. The first
    worker runs in this process, with the bounds made tiny so that they bind all the time.
    Its reads of 20 messages (``max_batch``), full while it is behind, are the ones after
    which what its consumer has fetched past an input's end keeps that input from idling
    (Router.sources); a read with fewer messages leaves that to the inputs' ends."""
    import threading

    from streameval.app import checkpoint, join_pacing, runner
    from streameval.app.router import Router
    from streameval.app.settings import load_settings

    monkeypatch.setattr(checkpoint, "SLICE_EVENTS", 2)  # behind after nearly every event batch
    monkeypatch.setattr(join_pacing, "QUEUED_MAX", 1)
    monkeypatch.setattr(join_pacing, "QUEUED_RESUME", 0)
    pauses: list[int] = []  # for a full queue (a checkpoint on its way also pauses)
    paused_at_revocation: list[set[int]] = []
    pause, revoke = runner.Pipeline._pause, runner.Pipeline._on_revoke

    def counted(self, q: int) -> None:
        if q in self._full and q not in self._held:
            pauses.append(q)
        pause(self, q)

    def revoked(self, consumer, partitions) -> None:
        paused_at_revocation.append(self._full | self._held)
        revoke(self, consumer, partitions)

    monkeypatch.setattr(runner.Pipeline, "_pause", counted)
    monkeypatch.setattr(runner.Pipeline, "_on_revoke", revoked)
    reads: list[tuple[int, bool]] = []  # per routed read: its messages; fetched ends asked
    last_read = [0]
    sources = Router.sources

    def routed(self, wall_ms, fetched=None):
        reads.append((last_read[0], fetched is not None))
        return sources(self, wall_ms, fetched)

    monkeypatch.setattr(Router, "sources", routed)
    deployment.env["STREAMEVAL_IDLE_MS"] = "8000"  # the pause is not the end of the stream
    deployment.produce(0.5)  # a backlog to catch up on
    settings, config = load_settings(
        deployment.config,
        bootstrap=deployment.bootstrap,
        topic_prefix=deployment.prefix,
        app_id=deployment.prefix + "app",
        state_dir=deployment.tmp / "state",
        max_batch=20,
        metrics_port=0,
        idle_ms=8000,
    )
    pipeline = runner.Pipeline(settings, config, {"bootstrap.servers": deployment.bootstrap})
    thread = threading.Thread(target=pipeline.run, daemon=True)
    turn = runner.read_turn

    def turn_counted(consume, most, wait):  # how many messages the latest turn read
        messages = turn(consume, most, wait)
        if threading.current_thread() is thread:
            last_read[0] = len(messages)
        return messages

    monkeypatch.setattr(runner, "read_turn", turn_counted)
    thread.start()
    try:
        with deployment.pause():  # (of the inputs, not the end of the stream)
            deadline = time.monotonic() + 60
            while len(pauses) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            deployment.start_worker()  # a rebalance, most likely with partitions paused here
        deployment.produce()
        assert deployment.wait_for(expected) == expected
    finally:
        pipeline.stop()
        thread.join(60)
    assert not thread.is_alive()
    deployment.stop_all()
    # the bound was reached again and again: a partition paused, resumed and paused again,
    # reading on each time from where it stopped; and the group did rebalance
    assert len(pauses) >= 3 and max(Counter(pauses).values()) >= 2, pauses
    assert paused_at_revocation, "no rebalance reached the worker in this process"
    assert all(asked == (n >= 20) for n, asked in reads), reads
    assert {asked for _, asked in reads} == {True, False}


def test_outcomes_a_model_refuses_are_counted_and_said(kafka_bootstrap, tmp_path, stream):
    """With ``max_classes = 1`` every outcome naming "no" is refused, in the worker as in
    replay. The worker counted them only in its checkpoints: a model whose label field was an
    identifier froze with nothing said. Now /metrics counts them by model and reason, and the
    log says why."""
    import io

    from streameval.replay import replay

    config = make_config(max_classes=1)
    source = io.BytesIO(b"".join(line + b"\n" for line in stream.lines()))
    refused = replay(source, config, io.BytesIO()).rejected
    assert set(refused) == {(m, "class_limit") for m in ("champion", "challenger", "baseline")}
    expected = replay_finals(stream, config)
    deployment = Deployment(kafka_bootstrap, tmp_path, stream, config="max_classes = 1\n" + CONFIG)
    try:
        deployment.produce()
        _, port = deployment.start_worker()
        assert deployment.wait_for(expected) == expected
        time.sleep(1)  # (the next publish tick counts what the last outcomes refused)
        text = _scrape(port)
        log = deployment.workers[0][2].read_text()
        # (a rebalance or a rewind would start the models' series again from 0)
        again = re.search(r"revoked|aborted|partitions lost", log)
        for (model, reason), count in refused.items():
            got = _series(text, "streameval_dropped_records_total", reason=reason, model=model)
            assert got == count if again is None else 0 < got <= count, (model, got, count)
        for model in ("champion", "challenger", "baseline"):
            said = re.findall(rf"model '{model}' refused (\d+) outcomes: label 'no' would be "
                              r"class number 2, over max_classes=1", log)  # fmt: skip
            assert said, log[-3000:]  # (then at most once a minute: the rest may wait)
            assert sum(map(int, said)) <= refused[model, "class_limit"], said
    finally:
        deployment.kill_all()


def test_malformed_and_odd_records_never_stop_the_worker_nor_change_a_number(
    deployment, stream, expected
):
    """10 000 malformed records — the two poison pills of the landed worker (invalid UTF-8,
    nesting 2 000 deep), every wrong shape, timestamps hours or a century ahead and from 1970,
    1 MB values — and 2 000 odd ones (duplicates, conflicting labels, labels of unknown
    instances, second instance records), mixed into the stream and keyed at random: the
    worker never stops, every malformed record reaches dead-letters with the reason it must
    have, and the numbers are replay's of the valid events alone."""
    records = mix(replace(stream, malformed=0), bad=10_000, odd=2_000, oversized=3, seed=7)
    landed = deployment.produce_records(records)
    bad = {where: code for where, code in landed.items() if code is not None}
    assert len(bad) == 10_003
    process, port = deployment.start_worker()
    assert deployment.wait_for(expected) == expected
    letters = deployment.dead_letters(len(bad))
    got = reasons(letters)
    for letter in letters:
        headers = {k: v.decode() for k, v in letter.headers()}
        if headers["streameval.reason.code"] == "oversized":
            assert int(headers["streameval.value.bytes"]) > len(letter.value()) == 1_048_576
    assert len(letters) == len(bad)  # each once
    assert got == bad
    text = _scrape(port)
    for reason, want in Counter(bad.values()).items():
        assert _series(text, "streameval_dead_letters_total", reason=reason) == want
    for reason in ("conflicting_label", "duplicate_label", "orphan_label"):
        assert _series(text, "streameval_dropped_records_total", reason=reason) > 0
    assert process.poll() is None  # it never stopped...
    log = deployment.workers[0][2].read_text()
    assert "Traceback" not in log and "skipping" not in log, log[-3000:]
    assert log.count("worker " + deployment.prefix) == 1  # ...nor restarted
    deployment.stop_all()
