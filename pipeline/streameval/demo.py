"""``streameval demo``: Kafka, topics, a worker and the simulator, with a live terminal view.

Everything it starts it stops again — on ``--duration``, on Ctrl-C and on SIGTERM: the simulator
thread, the worker process, the demo's topics, and the local Kafka if the demo started it.
"""

from __future__ import annotations

import os
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

import click
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from streameval.clients import QUIET, bootstrap_problem
from streameval.records import ComparisonRecord, DriftAlarmRecord, decode_record
from streameval.simulate.produce import produce_events
from streameval.simulate.system import SimulationConfig, simulate

__all__ = ["run_demo"]

CHAMPION, CHALLENGER = "hoeffding_tree", "naive_bayes"
#: every model's cost of a decision: a missed 1 costs five false alarms
WORKER_CONFIG = f"""
publish_every = 500
[join]
label_grace_ms = 1000
[slices]
by = "attributes.segment"
[maturity]
cohort_ms = 10000
every_ms = 1000
cohorts = 6
[models.hoeffding_tree]
positive_label = 1
costs = {{ 1 = {{ 0 = 5 }}, 0 = {{ 1 = 1 }} }}
[models.naive_bayes]
positive_label = 1
costs = {{ 1 = {{ 0 = 5 }}, 0 = {{ 1 = 1 }} }}
[models.logistic_regression]
positive_label = 1
costs = {{ 1 = {{ 0 = 5 }}, 0 = {{ 1 = 1 }} }}
[models.no_change]
positive_label = 1
costs = {{ 1 = {{ 0 = 5 }}, 0 = {{ 1 = 1 }} }}
[models.majority]
positive_label = 1
costs = {{ 1 = {{ 0 = 5 }}, 0 = {{ 1 = 1 }} }}
[[comparisons]]
a = "{CHAMPION}"
b = "{CHALLENGER}"
"""
WINDOW, FADING = "window:1000", "fading:0.999"
#: the demo's instances come from three segments; at the change each moves to a concept of its own
SEGMENTS = ("web", "app", "store")


def _count(value: int) -> str:
    """6750 as "6 750"."""
    return f"{value:,}".replace(",", " ")


def _position(instance_id: str | None) -> int | None:
    """The simulator's instance position from its id (``sim-<seed>-<position>``)."""
    head, _, digits = (instance_id or "").rpartition("-")
    return int(digits) if head.startswith("sim-") and digits.isdigit() else None


class ChangeWatch:
    """The concept change and the alarms on one axis: instance position and event time.

    An instance's outcome comes when its label does, so under label delay the n-th outcome of a
    model is not the n-th instance: the first outcomes of the new concept arrive among those of
    the old one. The watch follows the labels as the simulator produces them and notes the
    outcome index of the first one of an instance at or after the change (every model predicts
    every instance, and the join resolves labels in the order of their time, then of the
    instance id, as the simulator emits them), so that an alarm can say how many outcomes of the
    new concept it took.

    >>> watch = ChangeWatch(drift_at=3, start_ms=0, rate=1.0)
    >>> labels = [{"type": "label", "instance_id": f"sim-1-{i:08d}"} for i in (0, 1, 3, 2, 4)]
    >>> _ = list(watch.watch(labels))
    >>> watch.first_after, watch.describe_change()
    (3, 'concept change at instance 3 (t=3.0 s)')
    """

    def __init__(self, drift_at: int, start_ms: int, rate: float) -> None:
        self.drift_at = drift_at
        self.start_ms = start_ms
        self.interval = 1000.0 / rate
        self.labels = 0
        #: outcome index (per model) of the first outcome of an instance at or after the change
        self.first_after: int | None = None

    def watch(self, events):
        """The simulator's events, passed on unchanged, their labels counted."""
        for event in events:
            if event["type"] == "label":
                self.labels += 1
                if self.first_after is None:
                    position = _position(event["instance_id"])
                    if position is not None and position >= self.drift_at:
                        self.first_after = self.labels
            yield event

    def _at(self, ms: int | None) -> str:
        return "t=?" if ms is None else f"t={(ms - self.start_ms) / 1000:.1f} s"

    def describe_change(self) -> str:
        change_ms = self.start_ms + int(self.drift_at * self.interval)  # as the simulator
        return f"concept change at instance {_count(self.drift_at)} ({self._at(change_ms)})"

    def describe(self, alarm: DriftAlarmRecord) -> str:
        """An alarm on the change's axis: it fired at the label time of its outcome (whose
        instance may be older than the change: labels come late), so many outcomes after the
        first of the new concept; its change is placed by instance and instance time.

        >>> from streameval.records import DriftAlarmRecord
        >>> watch = ChangeWatch(drift_at=6750, start_ms=0, rate=200.0)
        >>> watch.first_after = 6420
        >>> print(watch.describe(DriftAlarmRecord("drift_alarm", "naive_bayes", 36012, "final",
        ...     "ratio_page_hinkley", 101.2, 100.0, 6582, 1.7, "sim-42-00006712", 33560, 6470,
        ...     35900, "sim-42-00006790", 33950, 0.98, 1.52, {})))
        ... # doctest: +NORMALIZE_WHITESPACE
        naive_bayes: ratio_page_hinkley alarm at t=36.0 s (the label of instance 6 712), 162
        outcomes after the first post-change outcome; change estimated to begin after instance
        6 790 (t=34.0 s); monitored estimate 0.980 → 1.520
        """
        position = _position(alarm.instance_id)
        where = _count(position) if position is not None else alarm.instance_id
        line = f"{alarm.model_id}: {alarm.detector} alarm at {self._at(alarm.ts)} "
        line += f"(the label of instance {where})"
        if self.first_after is not None and alarm.n >= self.first_after:
            line += f", {_count(alarm.n - self.first_after)} outcomes after the first post-change"
            line += " outcome"
        else:
            line += ", before any outcome of the new concept: a false alarm"
        if alarm.change_n is not None:
            start = _position(alarm.change_instance_id)
            line += "; change estimated to begin after instance "
            line += _count(start) if start is not None else str(alarm.change_instance_id)
            line += f" ({self._at(alarm.change_instance_ts)}); monitored estimate "
            line += f"{_fmt(alarm.estimate_before)} → {_fmt(alarm.estimate_after)}"
        return line


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    return f"{value:.{digits}f}"


class _View:
    """The latest metrics per model, the alarms, read from the output topics."""

    def __init__(self, client: dict[str, str], prefix: str) -> None:
        from confluent_kafka import Consumer

        from streameval.topics import Topics

        settings = {
            "group.id": f"{prefix}demo-view",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
        self.consumer = Consumer({**client, **settings})
        topics = Topics.with_prefix(prefix)
        self.kinds = {
            topics.metrics: "metrics",
            topics.alarms: "drift_alarm",
            topics.comparisons: "comparison",
            topics.maturity: "label_maturity",
        }
        self.consumer.subscribe(list(self.kinds))
        self.metrics: dict[str, dict[str, Any]] = {}
        self.slices: dict[tuple[str, str], Any] = {}  # the latest final record of each slice
        self.maturity: dict[str, Any] = {}
        self.alarms: deque[DriftAlarmRecord] = deque(maxlen=8)
        self.all_alarms: list[DriftAlarmRecord] = []
        self.comparison: ComparisonRecord | None = None

    def poll(self) -> list[DriftAlarmRecord]:
        new_alarms = []
        for message in self.consumer.consume(1000, 0.2):
            if message.error():
                continue
            kind = self.kinds[message.topic()]
            record = decode_record(kind, message.value())
            if kind == "metrics" and record.view == "final" and record.slice is not None:
                self.slices[record.model_id, record.slice] = record
            elif kind == "metrics" and record.view == "final":
                self.metrics[record.model_id] = record
            elif kind == "label_maturity":
                self.maturity[record.model_id] = record
            elif kind == "drift_alarm":
                self.alarms.append(record)
                self.all_alarms.append(record)
                new_alarms.append(record)
            elif kind == "comparison":
                self.comparison = record
        return new_alarms

    def table(self, title: str) -> Table:
        table = Table(title=title, title_justify="left")
        for column in (
            "model",
            "outcomes",
            "κ⁺",
            "κ_per",
            "acc window",
            "acc fading",
            "AUC",
            "log-loss",
            "cost",
            "initial acc",
            "Ψ₂ acc",
            "final acc",
            "label latency",
            "worst segment",
            "labelled 0 / 1",
        ):
            table.add_column(column, justify="left" if column == "model" else "right")
        for model, record in sorted(self.metrics.items()):
            window, fading = record.estimators[WINDOW], record.estimators[FADING]
            delayed = record.delayed[WINDOW]
            table.add_row(
                model,
                str(record.n),
                _fmt(window["kappa_plus"]),
                _fmt(window["kappa_temporal"]),
                _fmt(window["accuracy"]),
                _fmt(fading["accuracy"]),
                _fmt(window.get("roc_auc")),
                _fmt(window.get("log_loss")),
                _fmt(window.get("expected_cost")),
                _fmt(delayed["accuracy_initial"]),
                _fmt(delayed["psi_accuracy"]),
                _fmt(delayed["accuracy_final"]),
                f"{(record.latency_ms.mean or 0.0) / 1000:.1f} s",
                self._worst_slice(model, record),
                self._labelled(model),
            )
        return table

    def _worst_slice(self, model: str, record: Any) -> str:
        """The model's segment with the lowest window accuracy, and that accuracy."""
        worst = None
        for name in record.slices or ():
            own = self.slices.get((model, name))
            if own is None:
                continue
            accuracy = own.estimators[WINDOW]["accuracy"]
            if accuracy is not None and (worst is None or accuracy < worst[0]):
                worst = (accuracy, name)
        return "–" if worst is None else f"{worst[1]} {worst[0]:.3f}"

    def _labelled(self, model: str) -> str:
        """Of the last whole cohort (10 s of first predictions), the share of each class's
        instances labelled so far (its labelled instances against its share of all labels)."""
        record = self.maturity.get(model)
        if record is None or len(record.cohorts) < 2:
            return "–"
        cohort = record.cohorts[-2]
        final = record.labelled_by_class
        total = sum(final.values())
        shares = []
        for name in ("0", "1"):  # labelled of the class, against its share of all labels
            part = cohort.by_class.get(name)
            expected = final.get(name, 0) / total * cohort.predicted if total else 0
            shares.append(
                "–" if part is None or not expected else f"{part.labelled / expected:.0%}"
            )
        return " / ".join(shares)

    def close(self) -> None:
        self.consumer.close()


def _pending(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as response:
            for line in response.read().decode().splitlines():
                if line.startswith("streameval_pending_instances "):
                    return str(int(float(line.split()[1])))
    except OSError:
        pass
    return "–"


def demo_stream(
    duration: float | None, rate: float, seed: int, start_ms: int | None = None
) -> SimulationConfig:
    """The stream ``streameval demo`` simulates: an hour of traffic (or ``duration`` seconds)
    at ``rate`` instances/s, the concept changing once, 45 % into the first two minutes
    (instance 10 800 at the default 200/s). ``start_ms``: the simulator's default epoch when
    None.

    >>> demo_stream(None, 200.0, 42).drifts, demo_stream(None, 200.0, 42).instances
    ([10800], 720000)
    """
    instances = int((duration or 3600) * rate)
    drift_at = max(1, int(min(duration or 120, 120) * rate * 0.45))
    return SimulationConfig(
        instances=max(instances, drift_at + 1),
        drifts=[drift_at],
        rate=rate,
        seed=seed,
        segments=list(SEGMENTS),
        **({} if start_ms is None else {"start_ms": start_ms}),
    )


def run_demo(
    duration: float | None,
    bootstrap: str | None,
    metrics_port: int,
    rate: float,
    seed: int,
    console: Console,
) -> int:
    """Run the demo; return the exit status."""
    from confluent_kafka.admin import AdminClient

    from streameval.devkafka import KafkaInstance
    from streameval.topics import create_topics, load_topics

    launched = time.monotonic()
    started_kafka: KafkaInstance | None = None
    bootstrap = bootstrap or os.environ.get("STREAMEVAL_BOOTSTRAP")
    problem = bootstrap_problem(bootstrap) if bootstrap else None
    if problem is not None:  # said now, not as a Kafka that did not answer
        raise click.UsageError(f"--bootstrap (or $STREAMEVAL_BOOTSTRAP): {problem}")
    if not bootstrap:
        local = KafkaInstance.load(KafkaInstance.named("default"))
        if local is not None and local.running():
            bootstrap = local.bootstrap
        else:
            console.print(
                "starting a local Apache Kafka (the first time fetches it from Maven Central) …"
            )
            started_kafka = KafkaInstance.start(
                KafkaInstance.named("demo"), tie_to_parent=True, log=console.print
            )
            bootstrap = started_kafka.bootstrap
    # librdkafka's own lines (a broker going away as the demo stops its Kafka) stay off the view
    client = {"bootstrap.servers": bootstrap, "logger": QUIET}
    prefix = f"demo-{uuid.uuid4().hex[:6]}-"
    app_id = prefix + "app"
    admin = AdminClient(client)
    specs = load_topics(prefix, partitions=3, app_id=app_id)
    from confluent_kafka import KafkaException

    try:
        create_topics(admin, specs)
    except KafkaException as err:  # a wrong --bootstrap, Kafka down (it was a traceback)
        from streameval.cli_kafka import kafka_failure

        raise kafka_failure(
            err,
            bootstrap,
            "--bootstrap (or $STREAMEVAL_BOOTSTRAP); without either, the demo "
            "starts a local Kafka of its own",
        ) from None
    workdir = Path(tempfile.mkdtemp(prefix="streameval-demo-"))
    (workdir / "demo.toml").write_text(WORKER_CONFIG)
    log = workdir / "worker.log"
    env = {
        **os.environ,
        "STREAMEVAL_BOOTSTRAP": bootstrap,
        "STREAMEVAL_TOPIC_PREFIX": prefix,
        "STREAMEVAL_APP_ID": app_id,
        "STREAMEVAL_METRICS_PORT": str(metrics_port),
        "STREAMEVAL_IDLE_MS": "3000",
        "STREAMEVAL_LOG_LEVEL": "warning",
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "streameval.cli", "worker", "--config", str(workdir / "demo.toml")],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    console.print(
        f"worker pid {worker.pid}; /metrics on http://localhost:{metrics_port}/metrics;"
        f" worker log {log}"
    )
    sim = demo_stream(duration, rate, seed, start_ms=int(time.time() * 1000) + 3000)
    drift_at = sim.drifts[0]
    stop = threading.Event()
    produced = [0]
    failed: list[Exception] = []  # the simulator's end, if it failed
    change = ChangeWatch(drift_at, sim.start_ms, rate)

    def simulator() -> None:
        events = change.watch(simulate(sim))
        try:
            produced[0] = produce_events(events, client, prefix, realtime=True, stop=stop.is_set)
        except Exception as err:  # Kafka gone, or refusing the records: the view says so
            console.print(f"the simulator stopped: {err}", style="red", markup=False)
            failed.append(err)
            stop.set()

    thread = threading.Thread(target=simulator, name="simulator", daemon=True)
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    view = _View(client, prefix)
    status = 0
    began = time.monotonic()
    console.print(
        f"simulating {rate:.0f} instances/s, {change.describe_change()} of event time; alarms "
        "are placed on the same axis (instance, event time); Ctrl-C to stop"
    )
    thread.start()
    try:
        with Live(console=console, refresh_per_second=2, transient=False) as live:
            while not stop.is_set():
                elapsed = time.monotonic() - began
                if duration is not None and elapsed >= duration:
                    break
                if worker.poll() is not None:
                    console.print(f"[red]the worker exited ({worker.returncode}); see {log}")
                    status = 1
                    break
                had_metrics = bool(view.metrics)
                new_alarms = view.poll()
                if view.metrics and not had_metrics:
                    console.print(
                        f"first metrics {time.monotonic() - launched:.1f} s after the demo started"
                    )
                for alarm in new_alarms:
                    console.print(Text("drift alarm: ", style="bold red") + change.describe(alarm))
                title = (
                    f"streameval demo — {elapsed:.0f} s, pending labels "
                    f"{_pending(metrics_port)}, http://localhost:{metrics_port}/metrics"
                )
                parts: list[Any] = [view.table(title)]
                if view.comparison:
                    c = view.comparison.estimators[WINDOW]
                    parts.append(
                        Text(
                            f"{CHAMPION} vs {CHALLENGER} (window): McNemar {_fmt(c.mcnemar, 2)}, "
                            f"Q {_fmt(c.q_statistic, 2)}, leader {c.leader or '–'}"
                        )
                    )
                live.update(Group(*parts))
    except KeyboardInterrupt:
        console.print("stopping …")
    finally:
        stop.set()
        signal.signal(signal.SIGTERM, previous)
        thread.join(30)
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(60)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        view.poll()
        view.close()
        console.print(view.table("final numbers"))
        # (a failed simulator returned no count: its red line above says how far it got)
        sent = "the simulator stopped early" if failed else f"{produced[0]} events produced"
        console.print(
            f"{sent}, {len(view.all_alarms)} drift alarms; " + change.describe_change(),
            markup=False,
        )
        for alarm in view.all_alarms:
            console.print(Text("  " + change.describe(alarm)))
        admin.delete_topics([s.name for s in specs], operation_timeout=30)
        if started_kafka is not None:
            started_kafka.stop()
            console.print("stopped the local Kafka the demo started")
    return 1 if failed else status
