"""The worker's loop: one confluent-kafka consumer moving micro-batches between Kafka and the
stages of :mod:`streameval.app.stages`.

One thread runs :meth:`Pipeline.run`. Its consumer is a member of the consumer group
``app_id`` and subscribes to the three input topics and the two internal topics; Kafka's group
protocol spreads their partitions over the workers and moves them when a worker comes or goes.

* an **input** partition feeds the :class:`~streameval.app.router.Router` (ingest): decoded
  events go, one message per join partition per poll, to ``streameval-events``; malformed
  messages to ``dead-letters``;
* an **events** partition is a join partition: its :class:`~streameval.app.stages.JoinStage`
  sends outcome batches to ``streameval-outcomes``, one message per evaluation partition
  (:class:`~streameval.app.topology.Topology`);
* an **outcomes** partition is an evaluation partition: its
  :class:`~streameval.app.stages.EvalStage` publishes to ``metrics``, ``drift-alarms`` and
  ``comparisons``.

The rest is in modules of their own: the producer and the clients' settings
(:mod:`~streameval.app.output`), checkpoints and restores (:mod:`~streameval.app.checkpoint`),
counts and Prometheus series (:mod:`~streameval.app.telemetry`). An event batch that moves a
join's clock past many waiting events sets off more work than a checkpoint should hold: the
join applies them :data:`~streameval.app.stages.SLICE_EVENTS` at a time, with checkpoints
between the steps (a turn of the loop takes steps until one cuts a checkpoint), and its next
event batches wait until it is done. A partition assigned to a worker starts from its latest
checkpoint and re-reads from the offset after it; the events and outcome batches it re-sends
carry the offsets (and steps) they came from, and the next stage skips what it has already
applied. Published records re-sent after a crash are identical to the first copies.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections import deque
from typing import Any

import orjson

from streameval.config import EvaluationConfig
from streameval.exporter import Exporter
from streameval.logs import KAFKA_LOG
from streameval.records import ComparisonRecord, DriftAlarmRecord, Record
from streameval.schemas import encode_record
from streameval.store import StoreError
from streameval.topics import Topics

from .changelog import Changelog, ChangelogError
from .checkpoint import (
    Checkpoints,
    progress_from_metadata,
    progress_metadata,
    restore_eval,
    restore_join,
)
from .eval_stage import EvalStage
from .evolve import config_fingerprint
from .join_stage import JoinStage
from .output import KafkaErrors, NoAnswer, Output, connect, consumer_config
from .router import Router
from .settings import WorkerSettings
from .telemetry import Telemetry
from .topology import Topology
from .wire import (
    WIRE_VERSION,
    EventBatch,
    OutcomeBatch,
    WireError,
    decode_events,
    decode_outcomes,
    encode,
)

__all__ = ["Pipeline"]

log = logging.getLogger("streameval.worker")

#: Allocations between young collections of the garbage collector (Python's default: 700).
#: A micro-batch's objects, by the ten thousand, otherwise survive young collections while
#: being worked on and trigger full collections of the whole heap (40–50 % of the worker's
#: CPU time in benchmarks/pipeline_throughput.py); the data path makes almost no cycles.
GC_THRESHOLDS = (500_000, 20, 100)
#: A join partition that is stepping through its events due keeps about this many of the
#: event batches that come meanwhile in RAM; then it stops fetching them until it has used all
#: but ``QUEUED_RESUME``: a join slower than its input waits in Kafka, not in the heap.
QUEUED_MAX = 16
QUEUED_RESUME = 4
#: Of ``shutdown_timeout_s``, what is kept for leaving the consumer group after the final
#: checkpoint (at most): librdkafka's close waits out the session timeout when Kafka is away.
CLOSE_RESERVE_S = 5.0


class Pipeline:
    """Run the worker's data path until :meth:`stop` (or the ``stop`` event) is set."""

    def __init__(
        self,
        settings: WorkerSettings,
        config: EvaluationConfig,
        client: dict[str, str],
        exporter: Exporter | None = None,
    ) -> None:
        self.settings = settings
        self.config = config
        # the clients log through Python (rate-limited, in the worker's format), not stderr
        self.client = {**client, "logger": KAFKA_LOG}
        self.topics = Topics.with_prefix(settings.topic_prefix, settings.app_id)
        self.fingerprint = config_fingerprint(config)
        self.telemetry = Telemetry(exporter, self.topics.inputs)
        self.stats = self.telemetry.stats
        self.stopping = threading.Event()
        self.failure: BaseException | None = None
        self._callback_error: BaseException | None = None  # raised by a rebalance callback
        self.ready = threading.Event()  # set once the consumer has joined the group
        self.restoring = False  # partitions assigned are being restored
        #: when the worker must have stopped (set by :meth:`stop`)
        self.stop_by: float | None = None
        self.router: Router | None = None
        self.joins: dict[int, JoinStage] = {}
        self.evals: dict[int, EvalStage] = {}
        self._input_next: dict[tuple[str, int], int] = {}  # next offset to commit
        self._kafka_errors = KafkaErrors()
        self._due: deque[tuple[str, int]] = deque()  # ("join" | "eval", partition) to cut next
        self._held: set[int] = set()  # join partitions paused until their checkpoint is done
        self._full: set[int] = set()  # join partitions paused until their queue is used up
        #: join partitions with events due (JoinStage.behind), and the event batches that
        #: came meanwhile: they are applied, in order, once it has caught up
        self._queued: dict[int, deque[Any]] = {}
        self._held_said = -1e9
        self._said_unmatched: set[str] = set()  # comparisons with a model never seen, told

    def stop(self) -> None:
        """End the data path: its loop ends after the current turn; the final records, a
        checkpoint and leaving the group follow — all within ``shutdown_timeout_s``, whether
        Kafka answers or not (without it, the last checkpoint stands)."""
        if self.stop_by is None:
            self.stop_by = time.monotonic() + self.settings.shutdown_timeout_s
            output = getattr(self, "output", None)
            if output is not None:  # a produce waiting for Kafka must not outlast it either
                output.deadline = self.stop_by - self._close_reserve()
        self.stopping.set()

    def _close_reserve(self) -> float:
        return min(CLOSE_RESERVE_S, self.settings.shutdown_timeout_s / 3)

    @property
    def is_ready(self) -> bool:
        """Whether the worker does its work now: in the group, its partitions restored, Kafka
        reachable, not stopping (the readiness probe)."""
        return (
            self.ready.is_set()
            and not self.restoring
            and self._kafka_errors.reachable
            and not self.stopping.is_set()
        )

    @property
    def is_live(self) -> bool:
        """Whether the data path is running or starting (the liveness probe): false once it
        has failed. Waiting for Kafka is live — a restart would not bring Kafka back."""
        return self.failure is None

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> None:
        from confluent_kafka import Consumer

        t, s = self.topics, self.settings
        counts = connect(self.client, s, t, self._kafka_errors, self.stopping)
        if not counts:
            return
        gc.freeze()  # what start-up created (modules, classes, Faust) is never scanned again
        gc.set_threshold(*GC_THRESHOLDS)
        self.inputs = sorted((name, p) for name in t.inputs for p in range(counts[name]))
        self.join_partitions = counts[t.events]
        self.eval_partitions = counts[t.outcomes]
        self.topology = Topology(self.config, self.eval_partitions)
        self.router = Router(
            t.inputs, self.join_partitions, idle_ms=s.idle_ms, rules=self.config.time_rules()
        )
        self.output = Output(self.client, self._kafka_errors)
        producer = self.output.producer
        make_room = self.output.make_room
        self.join_changelog = Changelog(
            t.join_changelog, producer, self.client, self.fingerprint, make_room
        )
        self.eval_changelog = Changelog(
            t.eval_changelog, producer, self.client, self.fingerprint, make_room
        )
        self.consumer = Consumer(
            consumer_config(self.client, s, self._kafka_errors, self._on_stats)
        )
        self.checkpoints = Checkpoints(self.output, self.consumer, self.telemetry, self._durable)
        self.consumer.subscribe(
            [*t.inputs, t.events, t.outcomes],
            on_assign=self._guarded(self._on_assign),
            on_revoke=self._guarded(self._on_revoke),
            on_lost=self._guarded(self._on_lost),
        )
        log.info(
            "worker %s: %d input partitions, %d join and %d evaluation partitions",
            s.app_id,
            len(self.inputs),
            self.join_partitions,
            self.eval_partitions,
        )
        try:
            self._loop()
        except (StoreError, ChangelogError) as err:  # no checkpoint can be written: stop
            log.critical("%s", err)
            self._shutdown(checkpoint=False)
            raise
        except NoAnswer:  # stopping while Kafka is away: a produce waiting for room gave up
            self._shutdown()
        except BaseException:
            self._shutdown()
            raise
        else:
            self._shutdown()

    def _on_stats(self, raw: str) -> None:
        """librdkafka's statistics (every few seconds): whether a broker is up, consumer lag."""
        try:
            stats = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return
        self._kafka_errors.brokers(stats)
        self.telemetry.on_stats(raw)

    def _loop(self) -> None:
        from confluent_kafka import KafkaError

        s, checkpoints = self.settings, self.checkpoints
        consume, timeout = self.consumer.consume, 0.05
        next_publish = time.monotonic() + s.publish_interval_s
        next_checkpoint = time.monotonic() + s.snapshot_interval_s
        next_heartbeat = 0.0
        eof = KafkaError._PARTITION_EOF
        inputs, events, outcomes = self.topics.inputs, self.topics.events, self.topics.outcomes
        while not self.stopping.is_set():
            checkpoints.stepped = False  # one checkpoint step per turn
            # a join with events due goes on at once, whether or not more messages come (one
            # that is held waits for Kafka like the rest)
            going = self._queued and not self._held.issuperset(self._queued)
            messages = consume(s.max_batch, 0 if going else timeout)
            if self._callback_error is not None:
                raise self._callback_error
            wall = time.monotonic()
            batch: list[Any] = []
            ends: list[tuple[str, int]] = []
            for message in messages:
                error = message.error()
                topic = message.topic()
                if error is not None:
                    if error.code() == eof:
                        if topic in inputs:
                            ends.append((topic, message.partition()))
                    else:
                        self._kafka_errors(error)
                    continue
                if topic in inputs:
                    batch.append(message)
                elif topic == events:
                    self._join(message)
                elif topic == outcomes:
                    self._evaluate(message)
            if batch or ends or wall >= next_heartbeat:
                heartbeat = wall >= next_heartbeat
                self._ingest(batch, wall * 1000.0, heartbeat, ends)
                if heartbeat:
                    next_heartbeat = wall + s.heartbeat_ms / 1000.0
            self.output.poll()
            if wall >= next_publish:
                next_publish = wall + s.publish_interval_s
                for stage in list(self.evals.values()):
                    self._evaluated(*stage.tick())
                    self._unmatched(stage)
                self.telemetry.gauges(stage.join for stage in self.joins.values())
            if wall >= next_checkpoint:
                next_checkpoint = wall + s.snapshot_interval_s
                # one stage per turn of the loop: the pause of a cut is one stage's
                self._due.extend(
                    [("join", q) for q in self.joins] + [("eval", r) for r in self.evals]
                )
            if self._queued:
                self._catch_up()
            if self._due:
                kind, p = self._due.popleft()
                last = not self._due
                self._begin(
                    [p] if kind == "join" else [],
                    [p] if kind == "eval" else [],
                    list(self._input_next) if last else [],
                )
            if checkpoints.rounds:
                checkpoints.advance()

    # -- stages ---------------------------------------------------------------------------
    def _ingest(
        self, messages: list[Any], wall_ms: float, heartbeat: bool, ends: list[tuple[str, int]]
    ) -> None:
        router = self.router
        per_partition, letters = router.route(messages, int(time.time() * 1000))
        for topic, partition in ends:  # after the messages that came before the end
            router.at_end(topic, partition, wall_ms)
        self._input_next.update(router.consumed)
        for letter in letters:
            self.output.produce(
                self.topics.dead_letters, letter.payload(), letter.key, headers=letter.headers()
            )
        self.telemetry.input(len(messages), [letter.code for letter in letters])
        if not router.owned:
            return
        sources = router.sources(wall_ms)
        events = self.topics.events
        for q, rows in enumerate(per_partition):
            if rows or heartbeat:
                self.output.produce(
                    events, encode(EventBatch(WIRE_VERSION, sources, rows)), partition=q
                )
                self.stats.event_batches += 1

    def _skip(self, stage: str, message: Any, error: BaseException | None) -> None:
        """An internal batch that cannot be read or applied: say so and go on without it. A
        message that is not a batch of this version is skipped as it is; one that fails while
        it is applied is a defect (the traceback goes to the log) — either way the worker keeps
        running rather than crash on the same message after every restart."""
        where = f"{message.topic()}[{message.partition()}]@{message.offset()}"
        if isinstance(error, WireError):
            log.error("skipping %s: %s", where, error)
        else:
            log.exception("skipping %s: applying it failed", where)
        self.telemetry.skipped(stage)

    def _join(self, message: Any) -> None:
        q = message.partition()
        stage = self.joins.get(q)
        if stage is None:
            return  # fetched before a revocation
        queued = self._queued.get(q)
        if queued is not None:  # it is still applying an earlier batch's events: wait
            queued.append(message)
            if len(queued) >= QUEUED_MAX and q not in self._full:
                self._full.add(q)
                self._pause(q)
            return
        self._apply_join(q, stage, message)

    def _apply_join(self, q: int, stage: JoinStage, message: Any) -> None:
        try:
            batch = decode_events(message.value())
        except WireError as err:
            self._skip("join", message, err)
            stage.offset = max(stage.offset, message.offset())
            return
        before = (stage.frontier, stage.join.clock)
        try:
            outcomes = stage.apply(message.offset(), batch)
        except Exception as err:
            self._skip("join", message, err)
            stage.offset = max(stage.offset, message.offset())
            outcomes = None
        if outcomes is not None:
            self._emit(q, stage, self.topology.after_batch(stage, before, outcomes))
        if stage.behind:  # (also after a failure: its steps go on as after a restart)
            self._queued.setdefault(q, deque())

    def _catch_up(self) -> None:
        """The next steps of each join partition that has events due — until one cuts a
        checkpoint or the partition is held — and, once it has caught up, the event batches
        that waited, until one leaves it behind again."""
        for q, queued in list(self._queued.items()):
            stage = self.joins[q]
            while q not in self._held:
                if stage.behind:
                    clock = stage.join.clock
                    try:
                        outcomes = stage.proceed()
                    except Exception:  # a defect: as for an event batch, say so and go on
                        log.exception(
                            "join %d: a step of the events due failed; its outcomes are lost", q
                        )
                        self.telemetry.skipped("join")
                        break  # the next step in the next turn
                    self._emit(q, stage, self.topology.after_step(stage, clock, outcomes))
                    if self.checkpoints.stepped:  # a checkpoint was cut: the rest later
                        break
                    continue
                if not queued:
                    del self._queued[q]
                    break
                self._apply_join(q, stage, queued.popleft())
                if len(queued) <= QUEUED_RESUME and q in self._full:
                    self._full.discard(q)
                    self._fetch(q)
                if stage.behind:  # its first step is taken: the next ones in the next turn
                    break

    def _emit(self, q: int, stage: JoinStage, batches: list[tuple[int, OutcomeBatch]]) -> None:
        """Send a join step's outcome batches; cut a checkpoint of the stage, or hold it, if
        it has changed enough."""
        for r, batch in batches:
            self.output.produce(self.topics.outcomes, encode(batch), partition=r)
        self.stats.outcome_batches += len(batches)
        self.telemetry.joined(q, stage.join)
        if stage.join.changed >= self.settings.checkpoint_max_changes:
            if not self.checkpoints.on_its_way(self.join_changelog, q):
                self._begin([q], [])  # a short pause now rather than a long one later
            elif q not in self._held:  # its last checkpoint is still on its way (Kafka is
                self._hold(q)  # slow to answer): take no more of its events until it is

    def _evaluate(self, message: Any) -> None:
        r = message.partition()
        stage = self.evals.get(r)
        if stage is None:
            return
        try:
            batch = decode_outcomes(message.value())
            records, released = stage.apply(message.offset(), batch)
        except Exception as err:
            self._skip("evaluate", message, err)
            stage.offset = max(stage.offset, message.offset())
            return
        self._evaluated(records, released)

    def _evaluated(self, records: list[Record], released: list[Any]) -> None:
        """Count what an evaluation stage released and publish its records."""
        if released:
            self.telemetry.released(released)
        if not records:
            return
        t = self.topics
        for record in records:
            if isinstance(record, ComparisonRecord):
                topic, key = t.comparisons, record.pair
            elif isinstance(record, DriftAlarmRecord):
                topic, key = t.alarms, record.model_id
                log.warning(
                    "drift alarm: model %s, detector %s, outcome %d, instance %s (statistic "
                    "%.1f > %.1f); change estimated to begin after outcome %s, instance %s; "
                    "estimate %s -> %s",
                    record.model_id,
                    record.detector,
                    record.n,
                    record.instance_id,
                    record.statistic,
                    record.threshold,
                    record.change_n,
                    record.change_instance_id,
                    record.estimate_before,
                    record.estimate_after,
                )
            else:
                topic, key = t.metrics, record.model_id
            self.output.produce(topic, encode_record(record), key.encode())
        self.telemetry.published(records)

    def _unmatched(self, stage: EvalStage) -> None:
        """Say once per comparison that one of its models has no outcome while the other has
        had ``publish_every`` (a misspelt model id in [[comparisons]], most often)."""
        for message in stage.engine.unmatched_comparisons(least=self.config.publish_every):
            if message.split(":")[0] not in self._said_unmatched:
                self._said_unmatched.add(message.split(":")[0])
                log.warning("%s", message)

    # -- flow control ------------------------------------------------------------------------
    def _hold(self, q: int) -> None:
        """Stop fetching join partition ``q``'s events until its checkpoint on its way is
        done: what changes in a stage between two checkpoints — and so the next one's pause —
        stays bounded however slow Kafka is to acknowledge."""
        self._held.add(q)
        self._pause(q)
        self.output.send_now()  # what its checkpoint waits for goes now, not after linger.ms
        now = time.monotonic()
        if now - self._held_said >= 60:  # once a minute at most
            self._held_said = now
            log.info(
                "join %d: its last checkpoint is not acknowledged yet, and it has %d "
                "changes since: its events wait until it is",
                q,
                self.joins[q].join.changed,
            )

    def _durable(self, changelog: Changelog, q: int) -> None:
        if changelog is self.join_changelog and q in self._held:
            self._held.discard(q)
            self._fetch(q)

    def _pause(self, q: int) -> None:
        """Stop fetching join partition ``q``'s events (held, or its queue full). librdkafka
        drops what it had fetched of the partition and, on resume, fetches it again from the
        offset after the last message it gave the loop: nothing is lost or read twice."""
        from confluent_kafka import TopicPartition

        self.consumer.pause([TopicPartition(self.topics.events, q)])

    def _fetch(self, q: int) -> None:
        """Fetch ``q``'s events again, unless something else still holds it."""
        from confluent_kafka import TopicPartition

        if q not in self._held and q not in self._full:
            self.consumer.resume([TopicPartition(self.topics.events, q)])

    # -- checkpoints -------------------------------------------------------------------------
    def _begin(
        self,
        joins: list[int],
        evals: list[int],
        tps: list[tuple[str, int]] = (),
        wait: bool = False,
    ) -> None:
        """Cut the changes of these stages and start a checkpoint that writes them, then
        commits the offsets ``tps`` (:class:`~streameval.app.checkpoint.Checkpoints`)."""
        from confluent_kafka import TopicPartition

        stages = [(self.join_changelog, q, self.joins[q]) for q in joins if q in self.joins]
        stages += [(self.eval_changelog, r, self.evals[r]) for r in evals if r in self.evals]
        progress = self.router.progress
        offsets = [
            TopicPartition(
                tp[0], tp[1], self._input_next[tp], metadata=progress_metadata(progress(tp))
            )
            for tp in tps
            if tp in self._input_next
        ]
        self.checkpoints.begin(stages, offsets, wait=wait)

    def _checkpoint(
        self, joins: list[int], evals: list[int], commit: list[tuple[str, int]]
    ) -> None:
        """A checkpoint of these stages and input offsets, waited for (revocation, shutdown):
        the checkpoints on their way first, then this one."""
        self.checkpoints.drain()
        self._due.clear()
        self._begin(joins, evals, commit, wait=True)
        self.checkpoints.drain()

    # -- ownership ---------------------------------------------------------------------------
    def _guarded(self, handler: Any) -> Any:
        """A rebalance callback whose exception is raised again after ``consume`` returns.

        Upstream: confluent-kafka 2.16 re-raises an exception from a rebalance callback out of
        ``consume()`` as a ``KafkaError`` object that no ``except`` clause matches (seen with a
        ``KafkaException`` from ``get_watermark_offsets``): the data-path thread died without
        the worker noticing. The callback therefore keeps its exception, and the loop raises
        it as it is (a ChangelogError stops the worker cleanly; anything else is a crash that
        the worker reports with its exit status)."""

        def call(consumer: Any, partitions: list[Any]) -> None:
            try:
                handler(consumer, partitions)
            except BaseException as err:
                if self._callback_error is None:
                    self._callback_error = err

        return call

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self.restoring = True
        try:
            self._assign(consumer, partitions)
        finally:
            self.restoring = False

    def _assign(self, consumer: Any, partitions: list[Any]) -> None:
        from confluent_kafka import OFFSET_BEGINNING

        t, started = self.topics, time.monotonic()
        inputs = []
        for tp in partitions:
            if tp.topic == t.events:
                stage = self.joins[tp.partition] = restore_join(
                    self.join_changelog,
                    tp.partition,
                    self.settings,
                    self.config,
                    self.inputs,
                    self.fingerprint,
                    self.telemetry.restore_lag("join"),
                )
                if stage.behind:  # checkpointed between two steps: the rest comes first
                    self._queued[tp.partition] = deque()
            elif tp.topic == t.outcomes:
                stage = self.evals[tp.partition] = restore_eval(
                    self.eval_changelog,
                    tp.partition,
                    self.config,
                    self.join_partitions,
                    consumer,
                    t.outcomes,
                    self.telemetry.restore_lag("evaluate"),
                )
                self.telemetry.restored(stage.engine)
            else:
                inputs.append((tp.topic, tp.partition))
                continue
            tp.offset = stage.offset + 1 if stage.offset >= 0 else OFFSET_BEGINNING
        restored = [f"join {q}@{s.offset}" for q, s in self.joins.items() if s.offset >= 0]
        restored += [f"evaluation {r}@{s.offset}" for r, s in self.evals.items() if s.offset >= 0]
        if restored:
            log.info("restored from checkpoints: %s", ", ".join(restored))
        self.router.assign(inputs, self._committed_progress(consumer, inputs))
        consumer.assign(partitions)
        # librdkafka keeps a partition the application paused paused through unassign and
        # assign: one paused here before a rebalance (held, or its queue full) would never be
        # fetched again. A partition assigned is fetched (resuming one not paused does nothing).
        joins = [tp for tp in partitions if tp.topic == t.events]
        if joins:
            consumer.resume(joins)
        log.info(
            "assigned: %d input partitions, join %s, evaluation %s (ready in %.2f s)",
            len(inputs),
            sorted(self.joins),
            sorted(self.evals),
            time.monotonic() - started,
        )
        self.ready.set()

    def _committed_progress(
        self, consumer: Any, inputs: list[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        """The progress each input partition had at its committed offset (kept in the commit's
        metadata), so that the router's time rules decide after a restart as before it."""
        from confluent_kafka import TopicPartition

        if not inputs:
            return {}
        try:
            committed = consumer.committed([TopicPartition(t, p) for t, p in inputs], timeout=10)
        except Exception as err:  # the coordinator is busy: the progress builds up again
            log.warning("could not read the committed offsets' progress (%s)", err)
            return {}
        progress = {}
        for tp in committed:
            ts = progress_from_metadata(tp.metadata)
            if ts is not None:
                progress[tp.topic, tp.partition] = ts
        return progress

    def _split(self, partitions: list[Any]) -> tuple[list[int], list[int], list[tuple[str, int]]]:
        """Join partitions, evaluation partitions, input partitions."""
        t = self.topics
        joins = [tp.partition for tp in partitions if tp.topic == t.events]
        evals = [tp.partition for tp in partitions if tp.topic == t.outcomes]
        return joins, evals, [(tp.topic, tp.partition) for tp in partitions if tp.topic in t.inputs]

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        joins, evals, inputs = self._split(partitions)
        started = time.monotonic()
        for r in evals:
            stage = self.evals.get(r)
            if stage is not None:
                self._evaluated(*stage.tick())
        self._checkpoint(joins, evals, inputs)
        self._drop(joins, evals, inputs)
        consumer.unassign()
        log.info(
            "revoked %d partitions; checkpoint taken in %.2f s",
            len(partitions),
            time.monotonic() - started,
        )

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        log.warning("partitions lost (this worker was too slow or cut off); dropping them")
        joins, evals, inputs = self._split(partitions)
        self.checkpoints.lost(
            {(self.join_changelog.topic, q) for q in joins}
            | {(self.eval_changelog.topic, r) for r in evals}
        )
        self._drop(joins, evals, inputs)

    def _drop(self, joins: list[int], evals: list[int], inputs: list[tuple[str, int]]) -> None:
        models: set[str] = set()
        for q in joins:
            self._held.discard(q)  # fetched again when assigned again (_on_assign)
            self._full.discard(q)
            self._queued.pop(q, None)  # re-read from the checkpoint's offset by its next owner
            stage = self.joins.pop(q, None)
            if stage is not None:
                stage.join.state.close()  # a disk store: free it for whoever takes it next
            self.join_changelog.forget(q)
        for r in evals:
            stage = self.evals.pop(r, None)
            self.eval_changelog.forget(r)
            if stage is not None:
                models |= set(stage.engine.models)
        for tp in inputs:
            self._input_next.pop(tp, None)
        self.router.revoke(inputs)
        self.telemetry.dropped(joins, models)

    def _shutdown(self, checkpoint: bool = True) -> None:
        if self.stop_by is None:  # stopping by itself (an error): the same time limit
            self.stop_by = time.monotonic() + self.settings.shutdown_timeout_s
        self.output.deadline = self.stop_by - self._close_reserve()
        try:
            try:
                if checkpoint:
                    log.info("shutting down: final records and a checkpoint")
                    for stage in list(self.evals.values()):
                        self._evaluated(*stage.tick())
                    self._checkpoint(list(self.joins), list(self.evals), list(self._input_next))
                else:  # nothing more is written: the last checkpoint stands, and is resumed from
                    log.info("shutting down without a checkpoint")
                    self.output.flush()
            except NoAnswer as err:
                self.checkpoints.rounds.clear()  # never to be completed: the last one stands
                self.checkpoints.busy.clear()
                log.warning(
                    "Kafka did not answer within shutdown_timeout_s (%g s; %s): stopping "
                    "without a final checkpoint. Nothing is lost: the last checkpoint stands, "
                    "and a restart reads on from it and computes the rest again, exactly",
                    self.settings.shutdown_timeout_s,
                    err,
                )
            self._drop(list(self.joins), list(self.evals), list(self._input_next))
        finally:
            self._close_consumer()
            if self._callback_error is not None and checkpoint:
                log.error("leaving the group failed: %s", self._callback_error)

    def _close_consumer(self) -> None:
        """Leave the group (the partitions move on at once) — or, with Kafka away, give up at
        the time limit: librdkafka's close then waits out the session timeout, and the group
        notices the worker's absence after that timeout anyway."""
        closing = threading.Thread(target=self.consumer.close, name="streameval-close", daemon=True)
        closing.start()
        closing.join(max(0.0, self.stop_by - time.monotonic()))
        if closing.is_alive():
            log.warning(
                "Kafka did not answer the worker's leaving the group; the group will "
                "notice within session_timeout_ms"
            )
