"""What the worker tells about itself: counts for logs, tests and benchmarks (:class:`Stats`),
and the Prometheus series of the :class:`~streameval.exporter.Exporter` (when there is one)."""

from __future__ import annotations

import logging
import platform
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka

from streameval import __version__
from streameval.core.join import Join
from streameval.core.outcome import Outcome
from streameval.engine import Engine
from streameval.exporter import Exporter
from streameval.records import Record
from streameval.store import DiskState

from .changelog_format import CHECKPOINT_VERSION
from .wire import WIRE_VERSION

__all__ = ["Stats", "Telemetry", "build_info"]

log = logging.getLogger("streameval.worker")


def build_info(app_id: str, config_fingerprint: str) -> dict[str, str]:
    """The labels of ``streameval_build_info``: what must agree between the workers of one
    application (version, internal formats, evaluation configuration), and what helps to tell
    why they behave differently (Python, librdkafka)."""
    return {
        "version": __version__,
        "python": platform.python_version(),
        "librdkafka": confluent_kafka.libversion()[0],
        "app_id": app_id,
        "config_fingerprint": config_fingerprint,
        "wire": str(WIRE_VERSION),
        "checkpoint": str(CHECKPOINT_VERSION),
    }


@dataclass
class Stats:
    """What the worker did."""

    input_messages: int = 0
    event_batches: int = 0
    outcome_batches: int = 0
    outcomes: int = 0
    records: Counter[str] = field(default_factory=Counter)
    dead_letters: int = 0
    checkpoints: int = 0
    checkpoint_seconds: float = 0.0  # the latest checkpoint, from its cut to durable
    skipped_batches: int = 0


def _join_counts(join: Join) -> Iterator[tuple[tuple[str, str], int]]:
    """A join partition's drops: ((reason, model), total), model "" for those of no model."""
    attributed: Counter[str] = Counter()
    for (reason, model_id), value in join.model_counters.items():
        attributed[reason] += value
        yield (reason, model_id), value
    for reason, value in join.counters.items():
        yield (reason, ""), value - attributed[reason]


def _taken_as_counted(
    seen: Counter[tuple[str, str]], totals: Iterable[tuple[tuple[str, str], int]]
) -> None:
    """Raise a restored partition's marks to its totals, without counting them."""
    for key, value in totals:
        seen[key] = max(seen[key], value)


class Telemetry:
    """The worker's counts, and the exporter's series of them."""

    def __init__(
        self,
        exporter: Exporter | None,
        inputs: Iterable[str],
        internal: Mapping[str, str] | None = None,
    ) -> None:
        """``internal``: the internal topics the stages read, each with its stage's name."""
        self.exporter = exporter
        self.stats = Stats()
        self._inputs = set(inputs)
        self._internal = dict(internal or {})
        self._lag_shown: set[tuple[str, str]] = set()  # consumer-lag series exported
        self._internal_shown: set[tuple[str, str]] = set()  # internal-lag series exported
        #: exactly-once: the offsets the last transactions committed, of the input and the
        #: internal partitions (the consumer never learns them: the producer commits them)
        self.committed: dict[tuple[str, int], int] | None = None
        #: per join partition, its drops by (reason, model) taken as counted (:meth:`_count`)
        self._join_seen: dict[int, Counter[tuple[str, str]]] = {}
        #: per evaluation partition, the outcomes its models refused, likewise
        self._refused_seen: dict[int, Counter[tuple[str, str]]] = {}

    def input(self, messages: int, dead_letter_codes: list[str]) -> None:
        self.stats.input_messages += messages
        self.stats.dead_letters += len(dead_letter_codes)
        if self.exporter is not None:
            self.exporter.count_input(messages)
            for code in dead_letter_codes:
                self.exporter.count_dead_letters(code)

    def skipped(self, stage: str) -> None:
        self.stats.skipped_batches += 1
        if self.exporter is not None:
            self.exporter.count_skipped_batch(stage)

    def released(self, outcomes: list[Outcome]) -> None:
        """Outcomes an evaluation stage took in: their count, and their label latency (the
        join's notices of newly predicted instances among them are not outcomes)."""
        outcomes = [o for o in outcomes if o.times]
        self.stats.outcomes += len(outcomes)
        if self.exporter is not None:
            latencies: dict[str, list[int]] = defaultdict(list)
            for outcome in outcomes:
                latencies[outcome.model_id].append(outcome.t_label - outcome.t_instance)
            for model_id, values in latencies.items():
                self.exporter.observe_outcomes(model_id, values)

    def published(self, records: list[Record]) -> None:
        for record in records:
            self.stats.records[record.kind] += 1
        if self.exporter is not None:
            self.exporter.observe(records)

    def restored(self, r: int, engine: Engine) -> None:
        """Evaluation partition ``r`` restored: its latest records, shown at once (built only
        when there is an exporter to show them), and its refused outcomes taken as counted."""
        rejected = (((reason, m), value) for (m, reason), value in engine.rejected.items())
        _taken_as_counted(self._refused_seen.setdefault(r, Counter()), rejected)
        if self.exporter is not None:
            self.exporter.observe(engine.latest_records())

    def restored_join(self, q: int, join: Join) -> None:
        """Join partition ``q`` restored: its drops taken as counted."""
        _taken_as_counted(self._join_seen.setdefault(q, Counter()), _join_counts(join))

    def joined(self, q: int, join: Join) -> None:
        """Add what join partition ``q`` dropped since the last look to the counters."""
        if self.exporter is None:
            return
        seen = self._join_seen.setdefault(q, Counter())
        for (reason, model_id), value in _join_counts(join):
            self._count(seen, reason, model_id, value)

    def refused(self, r: int, engine: Engine) -> None:
        """Add the outcomes evaluation partition ``r``'s models refused since the last look
        to ``streameval_dropped_records_total``, as the join's drops."""
        if self.exporter is None:
            return
        seen = self._refused_seen.setdefault(r, Counter())
        for (model_id, reason), value in engine.rejected.items():
            self._count(seen, reason, model_id, value)

    def _count(
        self, seen: Counter[tuple[str, str]], reason: str, model_id: str, value: int
    ) -> None:
        """Count what a partition's total ``value`` of (``reason``, ``model_id``) adds to the
        most of it taken as counted (``seen``). A restored partition's totals are taken as
        counted (:meth:`restored_join`, :meth:`restored`) — by whichever process or worker
        counted them, or by none: the counters count what this process saw happen, and start
        at 0 with it. After a rewind the same input, read again, reaches the mark again: only
        what passes it is new."""
        if value > seen[reason, model_id]:
            assert self.exporter is not None
            self.exporter.count_dropped(reason, model_id, value - seen[reason, model_id])
            seen[reason, model_id] = value

    def dropped(self, models: set[str]) -> None:
        """Evaluation partitions went (to another worker, or to be restored again): forget
        the series of their models. (What was counted of each partition stays its mark: it is
        raised again to its totals when the partition comes back.)"""
        if self.exporter is not None and models:
            self.exporter.forget_models(models)

    def gauges(self, joins: Iterable[Join], waiting_outcomes: int) -> None:
        """The gauges of this process's stages: the joins' pending instances and waiting
        events, the evaluation stages' waiting outcomes, the disk stores."""
        if self.exporter is None:
            return
        joins = list(joins)
        self.exporter.set_pending(sum(join.pending for join in joins))
        self.exporter.set_waiting(sum(join.waiting for join in joins), waiting_outcomes)
        stores = [join.state for join in joins if isinstance(join.state, DiskState)]
        if stores:
            self.exporter.set_store(
                sum(s.disk_bytes() for s in stores),
                sum(s.hits for s in stores),
                sum(s.reads for s in stores),
                sum(s.compaction_debt() for s in stores),
            )

    def checkpointed(self, seconds: float, pause: float) -> None:
        self.stats.checkpoints += 1
        self.stats.checkpoint_seconds = seconds
        if self.exporter is not None:
            self.exporter.set_checkpoint(seconds, pause)

    def transaction(self, seconds: float) -> None:
        """Exactly-once: a transaction committed ``seconds`` after its cut."""
        if self.exporter is not None:
            self.exporter.observe_transaction(seconds)

    def restore_lag(self, stage: str) -> Callable[[int], None] | None:
        """A restore's progress, to /metrics (records of the changelog left to read)."""
        if self.exporter is None:
            return None
        return lambda records: self.exporter.set_changelog_lag(stage, records)

    def on_stats(self, stats: dict[str, Any]) -> None:
        """librdkafka's statistics (parsed): the consumer lag of every input partition
        fetched (from the offsets the worker's last transaction committed, under
        exactly-once), and of every internal partition fetched, from the last batch its stage
        was handed."""
        exporter = self.exporter
        if exporter is None:
            return
        shown, internal = set(), set()
        for topic, info in stats.get("topics", {}).items():
            stage = self._internal.get(topic)
            if stage is None and topic not in self._inputs:
                continue
            for partition, lag in self._lags(topic, info, read=stage is not None):
                if stage is None:
                    exporter.set_lag(topic, partition, lag)
                    shown.add((topic, partition))
                else:
                    exporter.set_internal_lag(stage, partition, lag)
                    internal.add((stage, partition))
        for labels in self._lag_shown - shown:
            exporter.remove_lag(*labels)
        for labels in self._internal_shown - internal:
            exporter.remove_internal_lag(*labels)
        self._lag_shown, self._internal_shown = shown, internal

    def _lags(
        self, topic: str, info: dict[str, Any], read: bool = False
    ) -> Iterator[tuple[str, int]]:
        """The lag of each partition of ``topic`` this consumer fetches: from its committed
        offset, or (``read``) from the last message the worker was handed, once there is one.
        librdkafka keeps reporting the last lag of partitions it no longer fetches (after a
        rebalance moved them away): only partitions in fetch_state "active" are ours; the
        others' series go, or the lag of a moved partition would be counted twice."""
        for partition, p in info.get("partitions", {}).items():
            if partition == "-1" or p.get("fetch_state") != "active":
                continue
            lag = p.get("consumer_lag", -1)
            end = p.get("ls_offset", -1)  # what a read_committed consumer may read
            if read and p.get("app_offset", -1) >= 0 and end >= 0:
                lag = max(0, end - p["app_offset"])
            elif self.committed is not None:
                at = self.committed.get((topic, int(partition)))
                if at is not None and end >= 0:
                    lag = max(0, end - at)
            if lag >= 0:
                yield partition, lag
