"""Prometheus exporter: the latest published numbers as series (an adapter; no core logic).

The worker hands every record it publishes to :meth:`Exporter.observe`, which only stores a
reference to the latest snapshot per model, view and pair; the custom collector
(:class:`~streameval.series.SnapshotCollector`) turns those snapshots into series at scrape
time, so a scrape costs no evaluation and holds the exporter's lock only to read which records
are the latest (it holds the interpreter while it renders), and exports only the measures,
estimators, classes and bins its :class:`~streameval.series.Selection` names (the worker's
``export_*`` settings: docs/operations.md, "Cardinality"). /metrics serves
:meth:`Exporter.scrape`: the same text, with the records' series rendered once per record by
:class:`~streameval.exposition.SeriesText`. Events (alarms, outcomes, dropped records, dead
letters) are counters; the latest alarm of each detector of a model
leaves where it fired and where its change began in gauges (a fixed set of label values);
label latency is a histogram per model. Series of models that this worker no longer owns are
removed with :meth:`Exporter.forget_models`.

Names (docs/operations.md, "What Prometheus gets"): every series starts with ``streameval_``;
labels are ``model``, ``view``, ``estimator`` (``cumulative``, ``window_1000``,
``fading_0.999``), ``measure``, ``class`` (per-class measures), ``detector``, ``pair``,
``reason``. A family holds one kind of number, so that aggregating over its labels means
something: measures (ratios, kappas, baselines) in ``streameval_measure``, the counts of an
estimate (``n``, ``n_effective``) in ``streameval_estimate_outcomes`` and
``streameval_estimate_effective_outcomes``, a comparison's tallies of disagreements (n01, n10)
apart from its statistics.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    generate_latest,
)

from streameval.exposition import SeriesText
from streameval.records import Record
from streameval.series import LATENCY_BUCKETS, Selection, SnapshotCollector, estimator_label

__all__ = ["LATENCY_BUCKETS", "Exporter", "Selection", "estimator_label"]


class Exporter:
    """The worker's Prometheus series, on a registry passed in (never the global one).

    Examples
    --------
    >>> from prometheus_client import CollectorRegistry, generate_latest
    >>> registry = CollectorRegistry()
    >>> exporter = Exporter(registry)
    >>> from streameval.records import DriftAlarmRecord
    >>> alarm = DriftAlarmRecord("drift_alarm", "m", 5000, "final", "page_hinkley", 101.5,
    ...     100.0, 21042, 0.41, "i9", 3000, 20310, 2000, "i4", 1000, 0.2, 0.37,
    ...     {"type": "page_hinkley"})
    >>> exporter.observe([alarm])
    >>> scraped = generate_latest(registry).decode()
    >>> 'streameval_drift_alarms_total{detector="page_hinkley",model="m"} 1.0' in scraped
    True
    >>> for line in scraped.splitlines():
    ...     if line.startswith("streameval_drift_alarm_") and "change" in line:
    ...         print(line)
    streameval_drift_alarm_outcome{detector="page_hinkley",model="m",point="change"} 20310.0
    streameval_drift_alarm_timestamp_seconds{detector="page_hinkley",model="m",point="change"} 2.0
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        detectors_of: Callable[[str], Iterable[str]] | None = None,
        selection: Selection | None = None,
    ) -> None:
        self.registry = registry
        # which of the published numbers become series (streameval.series): the defaults
        # unless the worker's settings say otherwise
        self.selection = Selection() if selection is None else selection
        # the detector names of a model: its alarm counters start at 0 when the model is first
        # seen, so that increase() and the drift alert see its first alarm (a counter that is
        # born at 1 shows no increase to Prometheus)
        self._detectors_of = detectors_of
        self._models: set[str] = set()
        self._lock = threading.Lock()  # readers (a scrape) against the swap of new dicts
        # writers: the data path's thread and, with processes > 1, the thread that takes the
        # children's records; each copy-change-swap of the dicts, and the label values we
        # created, belong to one of them at a time
        self._writing = threading.RLock()
        self._metrics: dict[tuple[str, str], dict[str, Any]] = {}
        self._comparisons: dict[str, dict[str, Any]] = {}
        self.alarms = Counter(
            "streameval_drift_alarms",
            "Drift alarms fired.",
            ["model", "detector"],
            registry=registry,
        )
        # the latest alarm of each detector of a model: where it fired, where it estimates the
        # change began, the monitored estimate before and after (a fixed set of label values,
        # made at a detector's first alarm: no series per alarm)
        self.alarm_outcome = Gauge(
            "streameval_drift_alarm_outcome",
            "The latest drift alarm's outcome index (point=alarm) and that of the outcome at "
            "the Page-Hinkley minimum, after which the change is estimated to begin "
            "(point=change; NaN when not known).",
            ["model", "detector", "point"],
            registry=registry,
        )
        self.alarm_time = Gauge(
            "streameval_drift_alarm_timestamp_seconds",
            "Event time (label time) of the latest drift alarm's outcome (point=alarm) and of "
            "the outcome after which the change is estimated to begin (point=change).",
            ["model", "detector", "point"],
            registry=registry,
        )
        self.alarm_estimate = Gauge(
            "streameval_drift_alarm_estimate",
            "The latest drift alarm's monitored estimate (fading error, or ratio R), its mean "
            "from the detector's last reset to the change (span=before) and from the change to "
            "the alarm (span=after).",
            ["model", "detector", "span"],
            registry=registry,
        )
        # label maturity: the latest label-maturity record of each model
        self.maturity = Gauge(
            "streameval_label_maturity",
            "Share of the instances a model first predicted in a cohort (cohort_ms of event "
            "time; age 0 is the cohort in progress, age k the k-th before it) that have their "
            "label so far, overall (class empty) and by class of the label; NaN for a cohort "
            "without predictions.",
            ["model", "age", "class"],
            registry=registry,
        )
        self.maturity_instances = Gauge(
            "streameval_label_maturity_instances",
            "Instances a model predicted (state=predicted) and, of them, labelled so far "
            "(state=labelled), every cohort since its maturity was first counted; "
            "delta() of the two says whether labels still come.",
            ["model", "state"],
            registry=registry,
        )
        self.dropped = Counter(
            "streameval_dropped_records",
            "Records the join dropped or found odd, and outcomes a model refused, by reason "
            "(and model where it has one).",
            ["reason", "model"],
            registry=registry,
        )
        self.dead_letters = Counter(
            "streameval_dead_letters",
            "Malformed input messages sent to dead letters.",
            ["reason"],
            registry=registry,
        )
        self.skipped_batches = Counter(
            "streameval_skipped_batches",
            "Internal batches a stage could not read or apply and skipped (a defect or a "
            "version mix-up: see the worker's log).",
            ["stage"],
            registry=registry,
        )
        self.input_messages = Counter(
            "streameval_input_messages",
            "Messages consumed from the input topics (rate() gives the input throughput).",
            registry=registry,
        )
        self.outcomes = Counter(
            "streameval_outcomes",
            "Outcomes evaluated (rate() gives outcomes per second).",
            ["model"],
            registry=registry,
        )
        # label latency per model: counts per bucket and the sum of seconds, updated a batch at
        # a time with numpy (a prometheus_client Histogram observes one value per call)
        self._latency: dict[str, tuple[np.ndarray, float]] = {}
        self.pending = Gauge(
            "streameval_pending_instances",
            "Instances buffered by the join, waiting for a label.",
            registry=registry,
        )
        self.join_waiting = Gauge(
            "streameval_join_waiting_events",
            "Events the joins have read and hold until every input partition's clock has "
            "passed them (they are applied in event-time order), or due and not yet applied.",
            registry=registry,
        )
        self.evaluation_waiting = Gauge(
            "streameval_evaluation_waiting_outcomes",
            "Outcomes the evaluation stages have read and hold until every join partition has "
            "reached them (they are evaluated in event-time order).",
            registry=registry,
        )
        self.lag = Gauge(
            "streameval_consumer_lag",
            "Messages not yet consumed, per input partition.",
            ["topic", "partition"],
            registry=registry,
        )
        self.internal_lag = Gauge(
            "streameval_internal_lag",
            "Internal batches not yet read by this worker's stages, per internal partition: "
            "stage join (the events topic) or evaluate (the outcomes topic).",
            ["stage", "partition"],
            registry=registry,
        )
        self.store_bytes = Gauge(
            "streameval_store_bytes",
            "Bytes the join's disk stores take on disk.",
            registry=registry,
        )
        self.compaction_debt = Gauge(
            "streameval_store_compaction_pending_bytes",
            "Bytes RocksDB estimates it still has to rewrite in compactions (a debt that grows "
            "means compaction does not keep up with the writes).",
            registry=registry,
        )
        self.cache_hits = Gauge(
            "streameval_store_cache_hit_ratio",
            "Share of the join's reads of pending instances served from RAM, since start.",
            registry=registry,
        )
        self.checkpoint_seconds = Gauge(
            "streameval_checkpoint_seconds",
            "How long the latest checkpoint took from its cut to durable: outputs acknowledged, "
            "changes written to the changelogs and acknowledged, stores written (the data path "
            "goes on meanwhile).",
            registry=registry,
        )
        self.checkpoint_pause = Histogram(
            "streameval_checkpoint_pause_seconds",
            "How long the data path stopped for a checkpoint: the longest of its steps "
            "(cutting the changes, producing them, writing a disk store's batch).",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=registry,
        )
        self.transaction_seconds = Histogram(
            "streameval_transaction_seconds",
            "Exactly-once: how long each of the worker's transactions took from its cut until "
            "the worker saw it committed; what it wrote became visible to read_committed "
            "consumers then (each stage of a label's way to its metrics waits for one).",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0),
            registry=registry,
        )
        self.changelog_lag = Gauge(
            "streameval_changelog_lag",
            "Changelog records a stage still has to read to restore (0 once it has).",
            ["stage"],
            registry=registry,
        )
        self.changelog_lag.labels("join").set(0)
        self.changelog_lag.labels("evaluate").set(0)
        self.build = Info(
            "streameval_build",
            "What this worker runs: its version, Python, librdkafka, application, evaluation "
            "configuration (fingerprint) and internal formats (1 whatever they are).",
            registry=registry,
        )
        self._collector = SnapshotCollector(self._snapshots, self._latency_snapshot, self.selection)
        registry.register(self._collector)
        self._text = SeriesText(self._collector)
        self._scrape_lock = threading.Lock()
        self._children: dict[str, set[tuple[str, ...]]] = {}  # label values we created
        self._pending: dict[int, int] = {}  # per data-path process (worker.processes)
        self._waiting: dict[int, tuple[int, int]] = {}  # per process: events, outcomes
        self._store: dict[int, tuple[int, ...]] = {}  # per process: bytes, hits, reads, debt

    def scrape(self) -> bytes:
        """The families of ``generate_latest(registry)``, the same text family by family (the
        records' families last), the records' series from
        :class:`~streameval.exposition.SeriesText`: each record rendered once, the text kept
        until a record changes. What /metrics serves."""
        with self._scrape_lock:  # one scrape at a time renders; the next gets its cache
            with self._collector.skipping_records():
                head = generate_latest(self.registry)
            return head + self._text.render()

    def _child(self, metric, *values: str):
        with self._writing:
            self._children.setdefault(metric._name, set()).add(values)
        return metric.labels(*values)

    # -- updates from the worker ------------------------------------------------------------
    def observe(self, records: Iterable[Record]) -> None:
        """Take the records the worker publishes: keep the latest snapshots, count alarms."""
        with self._writing:  # a copy, changed and swapped in by one writer at a time
            metrics, comparisons = None, None
            for record in records:
                kind = record.kind
                if kind == "metrics":
                    if metrics is None:
                        metrics = dict(self._metrics)
                    if record.slice is not None:  # a slice's: under its own key
                        metrics[record.model_id, record.view, record.slice] = record
                        continue
                    metrics[record.model_id, record.view] = record
                    if record.model_id not in self._models:
                        self._first_seen(record.model_id)
                    slices = getattr(record, "slices", None)
                    if slices is not None:  # the model's slices now: the others' series go
                        live = set(slices)
                        for key in [k for k in metrics if len(k) == 3 and k[0] == record.model_id]:
                            if key[2] not in live:
                                del metrics[key]
                elif kind == "comparison":
                    if comparisons is None:
                        comparisons = dict(self._comparisons)
                    comparisons[record.pair] = record
                elif kind == "drift_alarm":
                    if record.model_id not in self._models:  # an alarm before its first metrics
                        self._first_seen(record.model_id)
                    self._child(self.alarms, record.model_id, record.detector).inc()
                    self._latest_alarm(record)
                elif kind == "label_maturity":
                    self._latest_maturity(record)
            with self._lock:  # swap in new dicts: a scrape sees one consistent snapshot
                if metrics is not None:
                    self._metrics = metrics
                if comparisons is not None:
                    self._comparisons = comparisons

    def _latest_alarm(self, record: Record) -> None:
        model, detector = record.model_id, record.detector
        change = record.change_n is not None

        def seconds(ms: int | None) -> float:
            return ms / 1000.0 if ms is not None else float("nan")

        self._child(self.alarm_outcome, model, detector, "alarm").set(record.n)
        self._child(self.alarm_outcome, model, detector, "change").set(
            record.change_n if change else float("nan")
        )
        self._child(self.alarm_time, model, detector, "alarm").set(seconds(record.ts))
        self._child(self.alarm_time, model, detector, "change").set(seconds(record.change_ts))
        for span, value in (("before", record.estimate_before), ("after", record.estimate_after)):
            self._child(self.alarm_estimate, model, detector, span).set(
                float("nan") if value is None else value
            )

    def _latest_maturity(self, record: Record) -> None:
        """The cohorts of a label-maturity record by age (0: the cohort in progress at its
        ``ts``): by default the share of ages 0 and 1, and that of age 1 (the latest whole
        cohort) by class of the label; every cohort the record lists by class when the
        selection lists ``label_maturity``. NaN for a cohort it does not list."""
        model, width = record.model_id, record.cohort_ms
        current = (record.ts - 1) // width * width
        by_age = {(current - c.start) // width: c for c in record.cohorts}
        selection = self.selection
        every = selection.wants_measure("final", "label_maturity")
        classes = sorted({name for c in record.cohorts for name in c.by_class})
        if selection.classes is not None:
            classes = classes[: selection.classes]
        ages = max(by_age, default=-1) + 1 if every else 2
        known = self._children.get(self.maturity._name, set())
        for age in range(ages):
            cohort = by_age.get(age)
            share = None if cohort is None else cohort.share
            self._child(self.maturity, model, str(age), "").set(_nan(share))
            if not every and age != 1:
                continue
            for name in classes:
                part = None if cohort is None else cohort.by_class.get(name)
                if part is None and cohort is not None and cohort.predicted > 0:
                    value = 0.0  # none of it labelled with that class yet
                else:
                    value = _nan(None if part is None else part.share)
                self._child(self.maturity, model, str(age), name).set(value)
        for labels in [c for c in known if c[0] == model and int(c[1]) >= ages]:
            self.maturity.remove(*labels)  # cohorts the record no longer lists
            known.discard(labels)
        self._child(self.maturity_instances, model, "predicted").set(record.predicted)
        self._child(self.maturity_instances, model, "labelled").set(record.labelled)

    def _first_seen(self, model_id: str) -> None:
        self._models.add(model_id)
        for detector in self._detectors_of(model_id) if self._detectors_of else ():
            self._child(self.alarms, model_id, detector)

    def observe_outcomes(self, model_id: str, latencies_ms: Iterable[float]) -> None:
        """Count a model's new outcomes and record their label latencies (one batch)."""
        seconds = np.asarray(latencies_ms, dtype=np.float64) / 1000.0
        index = np.searchsorted(np.asarray(LATENCY_BUCKETS), seconds, side="left")
        counts = np.bincount(index, minlength=len(LATENCY_BUCKETS))
        with self._lock:
            before, total = self._latency.get(model_id, (0, 0.0))
            self._latency[model_id] = (before + counts, total + float(seconds.sum()))
        self._child(self.outcomes, model_id).inc(seconds.size)

    def set_build_info(self, labels: dict[str, str]) -> None:
        """The labels of ``streameval_build_info`` (once, at start)."""
        self.build.info(labels)

    def count_input(self, messages: int) -> None:
        self.input_messages.inc(messages)

    def set_pending(self, instances: int, source: int = 0) -> None:
        """The join's pending instances in one data-path process; the gauge shows the sum."""
        with self._lock:  # the relay thread and the parent's pipeline: the last sum set last
            self._pending[source] = instances
            self.pending.set(sum(self._pending.values()))

    def set_waiting(self, events: int, outcomes: int, source: int = 0) -> None:
        """What one data-path process has read and holds back for event time: events
        waiting for the join's clock, outcomes waiting for the join partitions' frontiers;
        the gauges show the sums."""
        with self._lock:
            self._waiting[source] = (events, outcomes)
            self.join_waiting.set(sum(v[0] for v in self._waiting.values()))
            self.evaluation_waiting.set(sum(v[1] for v in self._waiting.values()))

    def set_store(self, size: int, hits: int, reads: int, debt: int = 0, source: int = 0) -> None:
        """One data-path process's disk stores: bytes on disk, reads served from RAM, reads
        that went to disk, bytes RocksDB still has to compact; the gauges show the sums."""
        with self._lock:
            self._store[source] = (size, hits, reads, debt)
            size, hits, reads, debt = (sum(v[i] for v in self._store.values()) for i in range(4))
            self.store_bytes.set(size)
            self.compaction_debt.set(debt)
            if hits + reads:
                self.cache_hits.set(hits / (hits + reads))

    def set_checkpoint(self, seconds: float, pause: float = 0.0) -> None:
        self.checkpoint_seconds.set(seconds)
        self.checkpoint_pause.observe(pause)

    def observe_transaction(self, seconds: float) -> None:
        self.transaction_seconds.observe(seconds)

    def set_changelog_lag(self, stage: str, records: int) -> None:
        self.changelog_lag.labels(stage).set(records)

    def set_lag(self, topic: str, partition: str, lag: int) -> None:
        self.lag.labels(topic, partition).set(lag)

    def remove_lag(self, topic: str, partition: str) -> None:
        self.lag.remove(topic, partition)

    def set_internal_lag(self, stage: str, partition: str, lag: int) -> None:
        self.internal_lag.labels(stage, partition).set(lag)

    def remove_internal_lag(self, stage: str, partition: str) -> None:
        self.internal_lag.remove(stage, partition)

    def count_dropped(self, reason: str, model_id: str = "", amount: int = 1) -> None:
        self._child(self.dropped, reason, model_id).inc(amount)

    def count_dead_letters(self, reason: str, amount: int = 1) -> None:
        self._child(self.dead_letters, reason).inc(amount)

    def count_skipped_batch(self, stage: str) -> None:
        self.skipped_batches.labels(stage).inc()

    def forget_models(self, model_ids: Iterable[str]) -> None:
        """Remove every series of models this worker no longer owns."""
        with self._writing:
            gone = set(model_ids)
            self._models -= gone
            with self._lock:
                self._metrics = {k: v for k, v in self._metrics.items() if k[0] not in gone}
                self._comparisons = {
                    k: v
                    for k, v in self._comparisons.items()
                    if v.model_a not in gone and v.model_b not in gone
                }
                self._latency = {k: v for k, v in self._latency.items() if k not in gone}
            for metric, position in (
                (self.alarms, 0),
                (self.outcomes, 0),
                (self.dropped, 1),
                (self.alarm_outcome, 0),
                (self.alarm_time, 0),
                (self.alarm_estimate, 0),
                (self.maturity, 0),
                (self.maturity_instances, 0),
            ):
                children = self._children.get(metric._name, set())
                for labels in [c for c in children if c[position] in gone]:
                    metric.remove(*labels)
                    children.discard(labels)

    def _latency_snapshot(self) -> dict[str, tuple[np.ndarray, float]]:
        with self._lock:
            return dict(self._latency)

    def _snapshots(self):
        with self._lock:
            return self._metrics, self._comparisons


def _nan(value: float | None) -> float:
    return float("nan") if value is None else value
