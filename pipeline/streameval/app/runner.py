"""The worker's data path: one confluent-kafka consumer and producer moving micro-batches
between Kafka and the stages of :mod:`streameval.app.stages`.

One thread runs :meth:`Pipeline.run`. Its consumer is a member of the consumer group
``app_id`` and subscribes to the three input topics and the two internal topics; Kafka's group
protocol spreads their partitions over the workers and moves them when a worker comes or goes.

* an **input** partition feeds the :class:`~streameval.app.router.Router` (ingest): decoded
  events go, one message per join partition per poll, to ``streameval-events``; malformed
  messages to ``dead-letters``;
* an **events** partition is a join partition: its :class:`~streameval.app.stages.JoinStage`
  sends outcome batches to ``streameval-outcomes``, one message per evaluation partition;
* an **outcomes** partition is an evaluation partition: its
  :class:`~streameval.app.stages.EvalStage` publishes to ``metrics``, ``drift-alarms`` and
  ``comparisons``.

Checkpoints (every ``snapshot_interval_s``, when partitions are revoked, at shutdown, and for a
join partition as soon as it has ``checkpoint_max_changes`` changes) go in three steps, and the
data path does not wait between them (:class:`_Round`): a stage's changes since its last
checkpoint are *cut* (encoded; what changes from then on goes into the next one); once every
message produced before the cut is acknowledged, they are *written* — with the offset they
cover — to the stage's changelog partition (:mod:`streameval.app.checkpoint`), a few pieces per
turn of the loop; once Kafka
acknowledges those records, the stage is told (a disk store writes its batch) and the input
offsets are committed. Revocation and shutdown wait for all of it. An event batch that moves a
join's clock past many waiting events sets off more work than a checkpoint should hold: the
join applies them :data:`~streameval.app.stages.SLICE_EVENTS` at a time, with checkpoints
between the steps (a turn of the loop takes steps until one cuts a checkpoint), and its next
event batches wait until it is done. A partition assigned to a worker starts from its latest
checkpoint and re-reads from the offset after it; the events and outcome batches it re-sends
carry the offsets (and steps) they came from, and the next stage skips what it has already
applied. Published records re-sent after a crash are identical to the first copies (same
model, ``n`` and values).
"""

from __future__ import annotations

import gc
import itertools
import logging
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from streameval.config import EvaluationConfig
from streameval.core.join import Outcome, queue_entries
from streameval.exporter import Exporter
from streameval.schemas import encode_record
from streameval.store import DiskState, StoreError
from streameval.topics import load_topics

from .checkpoint import Changelog, ChangelogError, live, watermarks
from .router import Router
from .settings import WorkerSettings
from .stages import (
    SLICE_EVENTS,
    EvalStage,
    JoinStage,
    config_fingerprint,
)
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

__all__ = ["Pipeline", "Topics"]

log = logging.getLogger("streameval.worker")

INPUT_KINDS = {"instances": "instance", "predictions": "prediction", "labels": "label"}
#: A disk store last written longer ago is rebuilt rather than caught up: the changelog's
#: tombstones (``delete.retention.ms``, 7 days in topics/topics.toml) may be gone by then.
STORE_MAX_AGE_S = 6 * 86_400
#: Allocations between young collections of the garbage collector (Python's default: 700).
#: The data path allocates and frees a micro-batch's objects by the ten thousand; with the
#: default, they survive young collections while being worked on, reach the old generation
#: and trigger full collections of the whole heap: 40–50 % of the worker's CPU time with one
#: worker on 1M events (benchmarks/pipeline_throughput.py). A young collection scans what is
#: alive and young at that moment: above what one micro-batch holds at once, collections
#: become rare (48 → 0 in benchmarks/stages.py, 50 000 → 500 000: 8 % of its time). The data
#: path makes almost no reference cycles, so collecting less often costs little memory.
GC_THRESHOLDS = (500_000, 20, 100)
#: A checkpoint's changelog records are produced this many at a time, for at most
#: ``CHANGELOG_TURN_S`` per turn of the loop: when the machine is busy (the broker's log
#: cleaner on the same cores), a large checkpoint goes out over a few turns, each a short stop
#: of the data path, rather than in one long one.
CHANGELOG_PIECE = 500
CHANGELOG_TURN_S = 0.03
#: A join partition that is stepping through its events due keeps about this many of the
#: event batches that come meanwhile in RAM (and those of the consume call that reached it);
#: then it stops fetching them until it has used all but ``QUEUED_RESUME``: a join slower than
#: its input waits in Kafka, not in the heap.
QUEUED_MAX = 16
QUEUED_RESUME = 4


def _progress_metadata(ts: int) -> str:
    """What an input offset commit carries: the partition's progress at that offset."""
    return orjson.dumps({"progress": ts}).decode()


def _progress_from_metadata(metadata: str | None) -> int | None:
    try:
        ts = orjson.loads(metadata or "{}").get("progress")
    except (orjson.JSONDecodeError, AttributeError):
        return None  # committed by something else: nothing to restore
    return ts if type(ts) is int else None


@dataclass(frozen=True)
class Topics:
    """Every topic name the worker uses, with the configured prefix."""

    inputs: dict[str, str]  # name -> kind
    events: str
    outcomes: str
    join_changelog: str
    eval_changelog: str
    metrics: str
    alarms: str
    comparisons: str
    dead_letters: str

    @classmethod
    def with_prefix(cls, prefix: str, app_id: str = "streameval") -> Topics:
        internal = prefix + app_id
        return cls(
            inputs={prefix + base: kind for base, kind in INPUT_KINDS.items()},
            events=internal + "-events",
            outcomes=internal + "-outcomes",
            join_changelog=internal + "-join-changelog",
            eval_changelog=internal + "-eval-changelog",
            metrics=prefix + "metrics",
            alarms=prefix + "drift-alarms",
            comparisons=prefix + "comparisons",
            dead_letters=prefix + "dead-letters",
        )


@dataclass
class Stats:
    """What the worker did (for logs, tests and the benchmark)."""

    input_messages: int = 0
    event_batches: int = 0
    outcome_batches: int = 0
    outcomes: int = 0
    records: Counter[str] = field(default_factory=Counter)
    dead_letters: int = 0
    checkpoints: int = 0
    checkpoint_seconds: float = 0.0  # the latest checkpoint, from its cut to durable
    skipped_batches: int = 0


@dataclass
class _Round:
    """A checkpoint on its way (see the module doc): the stages' cuts, the input offsets to
    commit after them, and the data path's time spent on it (its longest single step)."""

    epoch: int  # messages produced before the cut have a smaller epoch
    cuts: list[tuple[Changelog, int, Any, Any]]  # changelog, partition, stage, cut
    offsets: list[Any]  # TopicPartitions to commit once it is durable
    started: float
    steps: dict[str, float] = field(default_factory=dict)  # the data path's time per step
    sent: bool = False  # written to the changelogs (not yet acknowledged)
    writing: Iterator[int] | None = None  # its records being produced, a piece per turn
    wait: bool = False  # revocation or shutdown: commit the offsets synchronously

    @property
    def pause(self) -> float:
        """The longest the data path stopped for it (the steps are apart)."""
        return max(self.steps.values(), default=0.0)

    def describe(self) -> str:
        stages = ", ".join(f"{'join' if isinstance(stage, JoinStage) else 'evaluation'} {q} "
                           f"({len(cut.changes):,} changes)"
                           for _, q, stage, cut in self.cuts)  # fmt: skip
        steps = ", ".join(f"{name} {seconds:.3f} s" for name, seconds in self.steps.items())
        return f"checkpoint of {stages or 'offsets'}: {steps}"


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
        self.client = dict(client)
        self.exporter = exporter
        self._lag_shown: set[tuple[str, str]] = set()  # consumer-lag series exported
        self.topics = Topics.with_prefix(settings.topic_prefix, settings.app_id)
        self.fingerprint = config_fingerprint(config)
        self.stats = Stats()
        self.stopping = threading.Event()
        self.failure: BaseException | None = None
        self._callback_error: BaseException | None = None  # raised by a rebalance callback
        self.ready = threading.Event()  # set once the consumer has joined the group
        self.router: Router | None = None
        self.joins: dict[int, JoinStage] = {}
        self.evals: dict[int, EvalStage] = {}
        self._input_next: dict[tuple[str, int], int] = {}  # next offset to commit
        self._join_counters: dict[int, Counter[tuple[str, str]]] = {}
        self._errors: Counter[str] = Counter()
        # checkpoints on their way (_Round), the stages they hold, the stages due next
        self._rounds: deque[_Round] = deque()
        self._busy: set[tuple[str, int]] = set()  # (changelog topic, partition)
        self._due: deque[tuple[str, int]] = deque()  # ("join" | "eval", partition)
        # produced messages not yet acknowledged, per epoch (one epoch per cut)
        self._epoch = 0
        self._unacked: Counter[int] = Counter()
        self._ack = self._acknowledger(0)
        self._output_error: str | None = None
        self._held: set[int] = set()  # join partitions paused until their checkpoint is done
        self._full: set[int] = set()  # join partitions paused until their queue is used up
        #: join partitions with events due (JoinStage.behind), and the event batches that
        #: came meanwhile: they are applied, in order, once it has caught up
        self._queued: dict[int, deque[Any]] = {}
        self._held_said = -1e9
        self._stepped = False  # a checkpoint step was taken in this turn of the loop

    def stop(self) -> None:
        self.stopping.set()

    # -- start-up ----------------------------------------------------------------------------
    def _connect(self) -> dict[str, int]:
        """Wait for the cluster; create missing topics; return partition counts."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({**self.client, "error_cb": self._on_error})
        delay = 1.0
        while not self.stopping.is_set():
            try:
                metadata = admin.list_topics(timeout=10)
                break
            except Exception as err:  # KafkaException: the broker is down or unreachable
                log.warning(
                    "Kafka at %s is not reachable (%s); retrying in %.0f s",
                    self.client.get("bootstrap.servers"), err, delay,
                )  # fmt: skip
                self.stopping.wait(delay)
                delay = min(delay * 2, 30.0)
        else:
            return {}
        from streameval.topics import create_topics

        specs = load_topics(prefix=self.settings.topic_prefix, app_id=self.settings.app_id,
                            changelog_configs=self.settings.changelog_configs)  # fmt: skip
        missing = [s for s in specs if s.name not in metadata.topics]
        if missing:
            report = create_topics(admin, missing)
            log.info("created topics: %s", ", ".join(report.created) or "none")
            metadata = admin.list_topics(timeout=10)
        counts = {name: len(t.partitions) for name, t in metadata.topics.items()}
        t = self.topics
        for changelog, stage in ((t.join_changelog, t.events), (t.eval_changelog, t.outcomes)):
            if counts[changelog] < counts[stage]:
                raise RuntimeError(
                    f"topic {changelog!r} has {counts[changelog]} partitions but {stage!r} has "
                    f"{counts[stage]}: it needs at least as many (one per stage partition)"
                )
        return counts

    def _on_error(self, err: Any) -> None:
        """librdkafka's errors: it retries by itself; say so once per kind and minute."""
        key = str(err.code()) if hasattr(err, "code") else str(err)
        now = time.monotonic()
        if now - self._errors.get(key, -1e9) >= 60:
            self._errors[key] = now
            log.warning("Kafka: %s (librdkafka retries by itself)", err)

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> None:
        from confluent_kafka import Consumer, Producer

        counts = self._connect()
        if not counts:
            return
        gc.freeze()  # what start-up created (modules, classes, Faust) is never scanned again
        gc.set_threshold(*GC_THRESHOLDS)
        t, s = self.topics, self.settings
        self.inputs = sorted((name, p) for name in t.inputs for p in range(counts[name]))
        self.join_partitions = counts[t.events]
        self.eval_partitions = counts[t.outcomes]
        self.topology = Topology(self.config, self.eval_partitions)
        self.router = Router(t.inputs, self.join_partitions, idle_ms=s.idle_ms,
                             rules=self.config.time_rules())  # fmt: skip
        self.producer = Producer({
            **self.client,
            "enable.idempotence": True,
            "linger.ms": 20,
            "compression.type": "lz4",
            "message.max.bytes": 67_108_864,
            "queue.buffering.max.kbytes": 1_048_576,
            "error_cb": self._on_error,
        })  # fmt: skip
        self.join_changelog = Changelog(t.join_changelog, self.producer, self.client,
                                        self.fingerprint)  # fmt: skip
        self.eval_changelog = Changelog(t.eval_changelog, self.producer, self.client,
                                        self.fingerprint)  # fmt: skip
        self.consumer = Consumer({
            **self.client,
            "group.id": s.app_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
            "fetch.queue.backoff.ms": 10,  # the default (1 s) stalls a busy consumer
            "fetch.min.bytes": 65_536,
            "fetch.wait.max.ms": 20,
            "queued.max.messages.kbytes": 16_384,  # prefetch per partition: bounds memory
            "session.timeout.ms": s.session_timeout_ms,
            "heartbeat.interval.ms": min(500, s.session_timeout_ms // 5),  # rebalances seen soon
            "statistics.interval.ms": 5_000,
            "stats_cb": self._on_stats,
            "error_cb": self._on_error,
        })  # fmt: skip
        self.consumer.subscribe(
            [*t.inputs, t.events, t.outcomes],
            on_assign=self._guarded(self._on_assign), on_revoke=self._guarded(self._on_revoke),
            on_lost=self._guarded(self._on_lost),
        )  # fmt: skip
        log.info(
            "worker %s: %d input partitions, %d join and %d evaluation partitions",
            s.app_id, len(self.inputs), self.join_partitions, self.eval_partitions,
        )  # fmt: skip
        try:
            self._loop()
        except (StoreError, ChangelogError) as err:  # no checkpoint can be written: stop
            log.critical("%s", err)
            self._shutdown(checkpoint=False)
            raise
        except BaseException:
            self._shutdown()
            raise
        else:
            self._shutdown()

    def _loop(self) -> None:
        s = self.settings
        consume, timeout = self.consumer.consume, 0.05
        next_publish = time.monotonic() + s.publish_interval_s
        next_checkpoint = time.monotonic() + s.snapshot_interval_s
        next_heartbeat = 0.0
        from confluent_kafka import KafkaError

        eof = KafkaError._PARTITION_EOF
        inputs, events, outcomes = self.topics.inputs, self.topics.events, self.topics.outcomes
        while not self.stopping.is_set():
            self._stepped = False  # one checkpoint step per turn (see _advance)
            # a join with events due goes on at once, whether or not more messages come (one
            # that is held waits for Kafka like the rest)
            going = self._queued and not self._held.issuperset(self._queued)
            messages = consume(s.max_batch, 0 if going else timeout)
            if self._callback_error is not None:
                raise self._callback_error
            wall = time.monotonic()
            wall_ms = wall * 1000.0
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
                        self._on_error(error)
                    continue
                if topic in inputs:
                    batch.append(message)
                elif topic == events:
                    self._join(message)
                elif topic == outcomes:
                    self._evaluate(message)
            if batch or ends or wall >= next_heartbeat:
                heartbeat = wall >= next_heartbeat
                self._ingest(batch, wall_ms, heartbeat, ends)
                if heartbeat:
                    next_heartbeat = wall + s.heartbeat_ms / 1000.0
            self.producer.poll(0)
            if wall >= next_publish:
                next_publish = wall + s.publish_interval_s
                for stage in list(self.evals.values()):
                    self._evaluated(*stage.tick())
                self._gauges()
            if wall >= next_checkpoint:
                next_checkpoint = wall + s.snapshot_interval_s
                # one stage per turn of the loop: the pause of a cut is one stage's
                self._due.extend([("join", q) for q in self.joins]
                                 + [("eval", r) for r in self.evals])  # fmt: skip
            if self._queued:
                self._catch_up()
            if self._due:
                kind, p = self._due.popleft()
                last = not self._due
                self._begin([p] if kind == "join" else [], [p] if kind == "eval" else [],
                            list(self._input_next) if last else [])  # fmt: skip
            if self._rounds:
                self._advance()

    # -- stages ---------------------------------------------------------------------------
    def _produce(self, topic: str, value: bytes, key: bytes | None = None,
                 partition: int = -1, headers: Any = None) -> None:  # fmt: skip
        while True:
            try:
                self.producer.produce(topic, value, key, partition, headers=headers,
                                      on_delivery=self._ack)  # fmt: skip
                self._unacked[self._epoch] += 1
                return
            except BufferError:  # the local queue is full: let deliveries drain
                self.producer.poll(0.05)

    def _acknowledger(self, epoch: int) -> Any:
        """The delivery callback of the messages produced in ``epoch``."""
        unacked = self._unacked

        def acknowledged(err: Any, _message: Any) -> None:
            unacked[epoch] -= 1
            if err is not None and self._output_error is None:
                self._output_error = str(err)

        return acknowledged

    def _ingest(self, messages: list[Any], wall_ms: float, heartbeat: bool,
                ends: list[tuple[str, int]]) -> None:  # fmt: skip
        router = self.router
        per_partition, letters = router.route(messages, int(time.time() * 1000))
        for topic, partition in ends:  # after the messages that came before the end
            router.at_end(topic, partition, wall_ms)
        self._input_next.update(router.consumed)
        self.stats.input_messages += len(messages)
        if self.exporter is not None:
            self.exporter.count_input(len(messages))
        for letter in letters:
            self._produce(self.topics.dead_letters, letter.payload(), letter.key,
                          headers=letter.headers())  # fmt: skip
            if self.exporter is not None:
                self.exporter.count_dead_letters(letter.code)
        self.stats.dead_letters += len(letters)
        if not router.owned:
            return
        sources = router.sources(wall_ms)
        events = self.topics.events
        for q, rows in enumerate(per_partition):
            if rows or heartbeat:
                self._produce(events, encode(EventBatch(WIRE_VERSION, sources, rows)),
                              partition=q)  # fmt: skip
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
        self.stats.skipped_batches += 1
        if self.exporter is not None:
            self.exporter.count_skipped_batch(stage)

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
                        log.exception("join %d: a step of the events due failed; its "
                                      "outcomes are lost", q)  # fmt: skip
                        self.stats.skipped_batches += 1
                        if self.exporter is not None:
                            self.exporter.count_skipped_batch("join")
                        break  # the next step in the next turn
                    self._emit(q, stage, self.topology.after_step(stage, clock, outcomes))
                    if self._stepped:  # a checkpoint was cut: the rest in the next turns
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
        """Send a join step's outcome batches (:class:`~streameval.app.topology.Topology`);
        cut a checkpoint of the stage, or hold it, if it has changed enough."""
        for r, batch in batches:
            self._produce(self.topics.outcomes, encode(batch), partition=r)
        self.stats.outcome_batches += len(batches)
        if self.exporter is not None:
            self._count_join(q, stage)
        if stage.join.changed >= self.settings.checkpoint_max_changes:
            if (self.join_changelog.topic, q) not in self._busy:
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

    def _evaluated(self, records: list[dict[str, Any]], released: list[Outcome]) -> None:
        """Count what an evaluation stage released and publish its records."""
        if released:
            self.stats.outcomes += len(released)
            if self.exporter is not None:
                latencies: dict[str, list[int]] = defaultdict(list)
                for outcome in released:
                    latencies[outcome.model_id].append(outcome.t_label - outcome.t_instance)
                for model_id, values in latencies.items():
                    self.exporter.observe_outcomes(model_id, values)
        if records:
            self._publish(records)

    def _publish(self, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        t = self.topics
        for record in records:
            kind = record["kind"]
            if kind == "metrics":
                topic, key = t.metrics, record["model_id"]
            elif kind == "drift_alarm":
                topic, key = t.alarms, record["model_id"]
                log.warning(
                    "drift alarm: model %s, detector %s, outcome %d (statistic %.1f > %.1f)",
                    record["model_id"], record["detector"], record["n"],
                    record["statistic"], record["threshold"],
                )  # fmt: skip
            else:
                topic, key = t.comparisons, record["pair"]
            self._produce(topic, encode_record(record), key.encode())
            self.stats.records[kind] += 1
        if self.exporter is not None:
            self.exporter.observe(records)

    def _count_join(self, q: int, stage: JoinStage) -> None:
        """Add what the join counted since the last look to the dropped-records counters."""
        join = stage.join
        seen = self._join_counters.setdefault(q, Counter())
        by_model = join.model_counters
        attributed: Counter[str] = Counter()
        for (reason, model_id), value in by_model.items():
            attributed[reason] += value
            if value != seen[reason, model_id]:
                self.exporter.count_dropped(reason, model_id, value - seen[reason, model_id])
                seen[reason, model_id] = value
        for reason, value in join.counters.items():
            rest = value - attributed[reason]
            if rest != seen[reason, ""]:
                self.exporter.count_dropped(reason, "", rest - seen[reason, ""])
                seen[reason, ""] = rest

    def _gauges(self) -> None:
        if self.exporter is None:
            return
        self.exporter.set_pending(sum(stage.join.pending for stage in self.joins.values()))
        stores = [s.join.state for s in self.joins.values() if isinstance(s.join.state, DiskState)]
        if stores:
            self.exporter.set_store(sum(s.disk_bytes() for s in stores),
                                    sum(s.hits for s in stores), sum(s.reads for s in stores),
                                    sum(s.compaction_debt() for s in stores))  # fmt: skip

    def _on_stats(self, raw: str) -> None:
        if self.exporter is None:
            return
        try:
            stats = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return
        # librdkafka keeps reporting the last lag of partitions it no longer fetches (after a
        # rebalance moved them away): only partitions in fetch_state "active" are ours; the
        # others' series go, or the lag of a moved partition would be counted twice
        shown = set()
        for topic, info in stats.get("topics", {}).items():
            if topic not in self.topics.inputs:
                continue
            for partition, p in info.get("partitions", {}).items():
                lag = p.get("consumer_lag", -1)
                if partition != "-1" and lag >= 0 and p.get("fetch_state") == "active":
                    self.exporter.set_lag(topic, partition, lag)
                    shown.add((topic, partition))
        for labels in self._lag_shown - shown:
            self.exporter.remove_lag(*labels)
        self._lag_shown = shown

    # -- ownership and checkpoints ------------------------------------------------------------
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
        from confluent_kafka import OFFSET_BEGINNING

        t = self.topics
        started = time.monotonic()
        inputs = []
        for tp in partitions:
            if tp.topic == t.events:
                stage = self._restore_join(tp.partition)
                self.joins[tp.partition] = stage
                tp.offset = stage.offset + 1 if stage.offset >= 0 else OFFSET_BEGINNING
                if stage.behind:  # checkpointed between two steps: the rest comes first
                    self._queued[tp.partition] = deque()
            elif tp.topic == t.outcomes:
                stage = self._restore_eval(tp.partition)
                self.evals[tp.partition] = stage
                tp.offset = stage.offset + 1 if stage.offset >= 0 else OFFSET_BEGINNING
                if self.exporter is not None:  # show the restored numbers at once
                    self.exporter.observe(stage.engine.latest_records())
            else:
                inputs.append((tp.topic, tp.partition))
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
            len(inputs), sorted(self.joins), sorted(self.evals), time.monotonic() - started,
        )  # fmt: skip
        self.ready.set()

    def _committed_progress(self, consumer: Any, inputs: list[tuple[str, int]]
                            ) -> dict[tuple[str, int], int]:  # fmt: skip
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
            ts = _progress_from_metadata(tp.metadata)
            if ts is not None:
                progress[tp.topic, tp.partition] = ts
        return progress

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        t = self.topics
        joins = [tp.partition for tp in partitions if tp.topic == t.events]
        evals = [tp.partition for tp in partitions if tp.topic == t.outcomes]
        inputs = [(tp.topic, tp.partition) for tp in partitions if tp.topic in t.inputs]
        started = time.monotonic()
        for r in evals:
            stage = self.evals.get(r)
            if stage is not None:
                self._evaluated(*stage.tick())
        self._checkpoint(joins, evals, commit=inputs)
        self._drop(joins, evals, inputs)
        consumer.unassign()
        log.info("revoked %d partitions; checkpoint taken in %.2f s", len(partitions),
                 time.monotonic() - started)  # fmt: skip

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        t = self.topics
        log.warning("partitions lost (this worker was too slow or cut off); dropping them")
        lost = {(self.join_changelog.topic, tp.partition) for tp in partitions
                if tp.topic == t.events}  # fmt: skip
        lost |= {(self.eval_changelog.topic, tp.partition) for tp in partitions
                 if tp.topic == t.outcomes}  # fmt: skip
        for round_ in self._rounds:  # their checkpoints are someone else's now
            round_.cuts = [c for c in round_.cuts if (c[0].topic, c[1]) not in lost]
        self._busy -= lost
        self._drop(
            [tp.partition for tp in partitions if tp.topic == t.events],
            [tp.partition for tp in partitions if tp.topic == t.outcomes],
            [(tp.topic, tp.partition) for tp in partitions if tp.topic in t.inputs],
        )

    def _drop(self, joins: list[int], evals: list[int], inputs: list[tuple[str, int]]) -> None:
        models: set[str] = set()
        for q in joins:
            self._held.discard(q)  # fetched again when assigned again (_on_assign)
            self._full.discard(q)
            self._queued.pop(q, None)  # re-read from the checkpoint's offset by its next owner
            stage = self.joins.pop(q, None)
            if stage is not None:
                stage.join.state.close()  # a disk store: free it for whoever takes it next
            self._join_counters.pop(q, None)
            self.join_changelog.forget(q)
        for r in evals:
            stage = self.evals.pop(r, None)
            self.eval_changelog.forget(r)
            if stage is not None:
                models |= set(stage.engine.models)
        for tp in inputs:
            self._input_next.pop(tp, None)
        self.router.revoke(inputs)
        if self.exporter is not None and models:
            self.exporter.forget_models(models)

    def _checkpoint(
        self,
        joins: list[int],
        evals: list[int],
        commit: list[tuple[str, int]] | None = None,
        commit_all: bool = False,
    ) -> None:
        """A checkpoint of these stages and input offsets, waited for (revocation, shutdown):
        the checkpoints on their way first, then this one."""
        self._drain()
        self._due.clear()
        tps = list(self._input_next) if commit_all else (commit or [])
        self._begin(joins, evals, tps, wait=True)
        self._drain()

    def _begin(self, joins: list[int], evals: list[int], tps: list[tuple[str, int]] = (),
               wait: bool = False) -> None:  # fmt: skip
        """Cut the changes of these stages (those with no checkpoint on its way) and start a
        round that writes them (:meth:`_advance`), then commits the offsets ``tps``."""
        from confluent_kafka import TopicPartition

        started = time.monotonic()
        cuts = []
        parts = ((self.join_changelog, self.joins, joins), (self.eval_changelog, self.evals, evals))
        for changelog, stages, partitions in parts:
            for q in partitions:
                stage = stages.get(q)
                if stage is not None and (changelog.topic, q) not in self._busy:
                    cuts.append((changelog, q, stage, stage.cut()))
                    self._busy.add((changelog.topic, q))
        progress = self.router.progress
        offsets = [TopicPartition(tp[0], tp[1], self._input_next[tp],
                                  metadata=_progress_metadata(progress(tp)))
                   for tp in tps if tp in self._input_next]  # fmt: skip
        if not cuts and not offsets:
            return
        self._epoch += 1
        self._ack = self._acknowledger(self._epoch)
        self._rounds.append(_Round(self._epoch, cuts, offsets, started,
                                   {"cut": time.monotonic() - started}, wait=wait))  # fmt: skip
        self._stepped = True

    def _advance(self, wait: bool = False) -> None:
        """Take the checkpoints on their way as far as Kafka's acknowledgements allow: a
        round's changes go to the changelogs once every message produced before its cut is
        acknowledged (a restored stage must not miss an output of what it covers); once those
        records are acknowledged, the stages are told and the offsets committed. Rounds are
        independent of each other (a stage has one at a time); one step that takes time
        (producing a round's records, writing a disk store's batch) per turn of the loop, a
        cut included, so that the data path stops for one at a time (``wait``: the caller
        waits anyway, for all of them)."""
        if self._stepped and not wait:
            return
        if self._output_error is not None:
            raise ChangelogError(
                f"Kafka did not acknowledge a message the worker produced ({self._output_error})"
                ". The worker stops without writing another checkpoint: its last one stands, "
                "and when it is started again it re-reads from there and sends what was lost "
                "again"
            )
        unacked = self._unacked
        for e in [e for e, n in unacked.items() if not n and e < self._epoch]:
            del unacked[e]
        oldest = min((e for e, n in unacked.items() if n), default=self._epoch + 1)
        for round_ in self._rounds:
            if not round_.sent:
                if round_.epoch > oldest:  # an output produced before its cut is unanswered
                    continue
                started = time.monotonic()
                if round_.writing is None:
                    round_.writing = itertools.chain.from_iterable(
                        changelog.write(q, cut.changes, CHANGELOG_PIECE)
                        for changelog, q, _stage, cut in round_.cuts
                    )
                while not round_.sent:  # pieces until done, or this turn's time is up
                    round_.sent = next(round_.writing, None) is None
                    if not wait and time.monotonic() - started >= CHANGELOG_TURN_S:
                        break
                # send them now: flush() ignores linger.ms while it runs (librdkafka #3489),
                # and with no timeout it wakes the lingering batches and returns at once
                self.producer.flush(0)
                took = time.monotonic() - started
                round_.steps["changelog"] = max(round_.steps.get("changelog", 0.0), took)
                self._stepped = True
                return
            if all(changelog.acknowledged(q) for changelog, q, _, _ in round_.cuts):
                self._complete(round_)
                self._rounds.remove(round_)
                self._stepped = True
                return

    def _hold(self, q: int) -> None:
        """Stop fetching join partition ``q``'s events until its checkpoint on its way is
        done: what changes in a stage between two checkpoints — and so the next one's pause —
        stays bounded however slow Kafka is to acknowledge."""
        self._held.add(q)
        self._pause(q)
        self.producer.flush(0)  # what its checkpoint waits for goes now, not after linger.ms
        now = time.monotonic()
        if now - self._held_said >= 60:  # once a minute at most
            self._held_said = now
            log.info("join %d: its last checkpoint is not acknowledged yet, and it has %d "
                     "changes since: its events wait until it is", q,
                     self.joins[q].join.changed)  # fmt: skip

    def _release(self, q: int) -> None:
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

    def _complete(self, round_: _Round) -> None:
        """The round's records are acknowledged: tell its stages, commit its offsets."""
        started = time.monotonic()
        for changelog, q, stage, cut in round_.cuts:
            error = changelog.confirm(q)
            if error is not None:
                raise ChangelogError(
                    f"Kafka did not acknowledge the checkpoint of {changelog.topic}[{q}] "
                    f"({error}). The worker stops without writing more: its last "
                    "checkpoint stands, and a restart continues exactly from it"
                )
            if changelog is self.join_changelog:  # a disk store writes its batch now
                stage.written(cut, changelog.position(q), changelog.sealed(q))
            else:
                stage.written(cut)
            self._busy.discard((changelog.topic, q))
            if changelog is self.join_changelog and q in self._held:
                self._release(q)
        if round_.offsets:
            try:
                self.consumer.commit(offsets=round_.offsets, asynchronous=not round_.wait)
            except Exception as err:  # the group is rebalancing: the next round commits
                log.warning("offset commit failed (%s); input may be re-read, never lost",
                            err)  # fmt: skip
        round_.steps["store"] = time.monotonic() - started
        self.stats.checkpoints += 1
        self.stats.checkpoint_seconds = time.monotonic() - round_.started
        if round_.pause > 0.1:
            log.info("%s (the data path's longest stop: over 100 ms)", round_.describe())
        if self.exporter is not None:
            self.exporter.set_checkpoint(self.stats.checkpoint_seconds, round_.pause)

    def _drain(self) -> None:
        """Wait until every checkpoint on its way is durable."""
        while self._rounds:
            self._flush()
            before = (len(self._rounds), sum(r.sent for r in self._rounds))
            self._advance(wait=True)
            if (len(self._rounds), sum(r.sent for r in self._rounds)) == before:
                raise RuntimeError("a checkpoint makes no progress with everything acknowledged")

    def _flush(self) -> None:
        while self.producer.flush(10) > 0:
            log.warning("waiting for Kafka to acknowledge %d messages", len(self.producer))

    def _restore_join(self, q: int) -> JoinStage:
        """A join partition from its changelog (a new one if it has none): into RAM, or into
        its disk store, which only catches up from the changelog offset it is at."""
        changelog = self.join_changelog
        if self.settings.store == "memory":
            changes, sealed, _ = changelog.read(q, lag=self._lag("join"))
            if not sealed:
                return JoinStage(q, self.config, self.inputs, slice_events=SLICE_EVENTS)
            return JoinStage.restore(live(changes), self.config, self.inputs,
                                     slice_events=SLICE_EVENTS)  # fmt: skip
        state = self._open_store(q)
        ttl = self.config.join.label_ttl_ms
        entries = lambda record: queue_entries(record, ttl)  # noqa: E731
        sink = lambda items: state.apply(items, entries)  # noqa: E731
        start = state.position
        changes, sealed, end = changelog.read(q, start, sink=sink, lookup=state.get_many,
                                              lag=self._lag("join"))  # fmt: skip
        if start is not None and end < start:  # the changelog is not the one the store knew
            log.warning("join %d: the changelog ends at %d, before the store's position %d: it "
                        "was deleted and created again; writing the whole store into it",
                        q, end, start)  # fmt: skip
            changelog.carry_all(q, state.items())
        if changes:  # the latest checkpoint's intent, over the values read
            state.apply(list(changes.items()), entries)
        if not sealed and state.sealed is not None:  # the store is at the latest checkpoint
            changelog.resume(q, *state.sealed, end)
        state.settle(end, changelog.sealed(q))
        scalars = state.scalars()
        # one line per partition, a new one included: what a restart found is in the log
        log.info("join %d: %d pending instances in %s, caught up from changelog offset %s",
                 q, state.pending_count(), state.path, start or 0)  # fmt: skip
        if not scalars:
            return JoinStage(q, self.config, self.inputs, state, SLICE_EVENTS)
        return JoinStage.resume(scalars, self.config, self.inputs, state, SLICE_EVENTS)

    def _lag(self, stage: str) -> Any:
        """A restore's progress, to /metrics (records of the changelog left to read)."""
        if self.exporter is None:
            return None
        return lambda records: self.exporter.set_changelog_lag(stage, records)

    def _open_store(self, q: int) -> DiskState:
        """Join partition ``q``'s disk store, rebuilt (emptied, then filled from the
        changelog) if it is unreadable, of another format or configuration, or too old for
        the changelog's tombstones to still say what it lacks."""
        path = self.settings.state_dir / self.settings.app_id / f"join-{q}"
        try:
            state = DiskState(path, self.settings.cache_mb, self.fingerprint)
        except StoreError as err:
            log.warning("join %d: %s; rebuilding it from the changelog", q, err)
            DiskState.wipe(path)
            return DiskState(path, self.settings.cache_mb, self.fingerprint)
        usable, why = state.usable()
        at = state.committed_at
        if usable and at is not None and time.time() - at > STORE_MAX_AGE_S:
            usable, why = False, f"last written {(time.time() - at) / 86400:.1f} days ago"
        if not usable:
            log.warning("join %d: the store at %s is %s; rebuilding it from the changelog",
                        q, path, why)  # fmt: skip
            state.close()
            DiskState.wipe(path)
            state = DiskState(path, self.settings.cache_mb, self.fingerprint)
        return state

    def _restore_eval(self, r: int) -> EvalStage:
        """An evaluation partition from its changelog (a new one if it has none)."""
        changes, sealed, _ = self.eval_changelog.read(r, lag=self._lag("evaluate"))
        if not sealed:
            low, _ = watermarks(self.consumer, self.topics.outcomes, r)
            if low > 0:  # a fresh start would miss the outcomes before it
                raise ChangelogError(
                    f"evaluation partition {r} has no checkpoint in {self.eval_changelog.topic}, "
                    f"but {self.topics.outcomes}[{r}] starts at offset {low}: its earlier "
                    "outcomes are gone, so its models' numbers cannot be recomputed (was the "
                    "changelog deleted?). Start over with a new app_id"
                )
            return EvalStage(r, self.config, self.join_partitions)
        return EvalStage.restore(live(changes), self.config, self.join_partitions)

    def _shutdown(self, checkpoint: bool = True) -> None:
        try:
            if checkpoint:
                log.info("shutting down: final records and a checkpoint")
                for stage in list(self.evals.values()):
                    self._evaluated(*stage.tick())
                self._checkpoint(list(self.joins), list(self.evals), commit_all=True)
            else:  # nothing more is written: the last checkpoint stands, and is resumed from
                log.info("shutting down without a checkpoint")
                self._flush()
            self._drop(list(self.joins), list(self.evals), list(self._input_next))
        finally:
            self.consumer.close()  # leaves the group: the partitions move on at once
            if self._callback_error is not None and checkpoint:
                log.error("leaving the group failed: %s", self._callback_error)
