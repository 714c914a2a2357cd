"""The worker's data path: one thread and one confluent-kafka consumer moving micro-batches
between Kafka and the stages.

:meth:`Pipeline.run` connects, subscribes the consumer (group ``app_id``) to the three input
topics and the two internal ones, and turns the loop. A message of an **input** partition goes
to the :class:`~streameval.app.router.Router` (ingest), whose event batches go to the events
topic and malformed messages to ``dead-letters``; one of an **events** partition to its
:class:`~streameval.app.join_stage.JoinStage` (:mod:`~streameval.app.join_pacing`), whose
outcome batches go to the outcomes topic; one of an **outcomes** partition to its
:class:`~streameval.app.eval_stage.EvalStage`, whose records go to ``metrics``,
``drift-alarms`` and ``comparisons``. The loop also publishes at each tick and cuts the
timer's checkpoints (:mod:`~streameval.app.checkpoint`), one stage per turn.

Elsewhere: the rebalance callbacks (:mod:`~streameval.app.rebalance`), the probes and the
shutdown (:mod:`~streameval.app.lifecycle`), the producer and the clients' settings
(:mod:`~streameval.app.output`), counts and Prometheus series
(:mod:`~streameval.app.telemetry`).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import orjson

from streameval.codec import encode_record
from streameval.config import EvaluationConfig
from streameval.exporter import Exporter
from streameval.logs import KAFKA_LOG
from streameval.records import ComparisonRecord, DriftAlarmRecord, LabelMaturityRecord, Record
from streameval.store import StoreError
from streameval.topics import Topics

from .changelog import Changelog, ChangelogError
from .checkpoint import Checkpoints, progress_metadata
from .eval_stage import EvalStage
from .evolve import config_fingerprint
from .join_pacing import JoinPacing
from .join_stage import JoinStage
from .lifecycle import Lifecycle
from .output import (
    SESSION_REFUSED,
    KafkaErrors,
    KafkaRefused,
    NoAnswer,
    Output,
    OutputError,
    connect,
    consumer_config,
)
from .rebalance import Rebalancing
from .router import Router
from .settings import WorkerSettings
from .telemetry import Telemetry
from .topology import Topology
from .transactions import (
    HELD_MAX_BYTES,
    HangWatch,
    TransactionAborted,
    Transactions,
    claim_transactional_id,
    hanging_transactions,
    waiting_at_stable_end,
)
from .wire import (
    WIRE_VERSION,
    EventBatch,
    WireError,
    decode_outcomes,
    encode,
)

__all__ = ["GC_THRESHOLDS", "Pipeline", "next_tick"]

log = logging.getLogger("streameval.worker")

#: Allocations between young collections of the garbage collector (Python's default: 700).
#: A micro-batch's objects, by the ten thousand, otherwise survive young collections while
#: being worked on and trigger full collections of the whole heap (docs/performance.md); the
#: data path makes almost no cycles.
GC_THRESHOLDS = (500_000, 20, 100)
#: Exactly-once: from a checkpoint's cut until its commit has landed, the data path waits for
#: messages at most this long a turn, so that the checkpoint's records are written and its
#: landing (and the messages held meanwhile) seen soon.
COMMIT_LOOK_S = 0.005


def read_turn(consume: Callable[[int, float], list[Any]], most: int, wait: float) -> list[Any]:
    """A turn's messages: up to ``most``, as soon as there is one (or after ``wait`` seconds
    with none), with whatever the client has queued by then. ``consume`` is
    confluent-kafka's ``Consumer.consume``, which returns only once it has ``most`` messages
    or its timeout is up (librdkafka's batch consume; confluent-kafka 2.13 and later cut a
    timeout of 200 ms or more into pieces of 200 ms, so the waits here, shorter, are whole):
    given the whole wait, a worker that keeps up waited it out on every turn with nothing
    urgent (the loop's ``wait`` is 0 with a join step due or a due commit waiting for the last
    one, at most ``COMMIT_LOOK_S`` while a commit is on its way), and a label waits for
    several turns on its way to its metrics (docs/performance.md, "A turn reads what is
    there")."""
    messages = consume(1, wait)
    if messages and most > 1:
        messages += consume(most - 1, 0)
    return messages


def next_tick(due: float, now: float, interval: float) -> float:
    """When a periodic step that was due at ``due`` and ran at ``now`` is next due: an
    ``interval`` after ``due``, so that a step that ran a turn late does not put off the ones
    after it (their lateness would add up), or an ``interval`` after ``now`` when it ran more
    than an interval late (no burst of steps to catch up).

    >>> next_tick(10.0, 10.03, 1.0), next_tick(10.0, 11.5, 1.0)
    (11.0, 12.5)
    """
    due += interval
    return due if due > now else now + interval


#: where a refused outcome is counted (Pipeline._outcomes_refused)
_COUNTED = "counted in streameval_dropped_records_total; "


class Pipeline(Lifecycle, Rebalancing, JoinPacing):
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
        self.telemetry = Telemetry(
            exporter,
            self.topics.inputs,
            {self.topics.events: "join", self.topics.outcomes: "evaluate"},
        )
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
        #: when each model's refused outcomes were last said (monotonic; Pipeline._outcomes_refused)
        self._said_refused: dict[str, float] = {}
        self._said_unmatched: set[str] = set()  # comparisons with a model never seen, told
        #: a store or Kafka refused a write: no checkpoint may follow (the revocation when
        #: the consumer leaves the group takes none either)
        self.no_checkpoints = False
        #: exactly-once: the worker began stopping while an assignment waited for the previous
        #: owner's transaction to end: it restored nothing of it, takes no final checkpoint
        #: (the last ones stand) and aborts its transaction
        self.unsettled = False
        #: the join partitions of this assignment whose disk store is rebuilt from the
        #: changelog alone: a hanging transaction held them (Rebalancing._await_stable)
        self._rebuild: set[int] = set()
        #: exactly-once (docs/architecture.md): each commit of the transaction checkpoints the
        #: stages that wrote into it (("join" | "eval", partition)), every stage when the
        #: snapshot timer says so, and at once when a join partition has changed enough
        self.eo = settings.processing_guarantee == "exactly_once"
        #: exactly-once: the internal partitions a hanging transaction holds (Kafka's tools
        #: end it; the stages reading them wait until then)
        self._hangs = HangWatch(settings.transaction_timeout_ms) if self.eo else None
        self._wrote: set[tuple[str, int]] = set()
        self._snapshot_due = False
        self._commit_soon = False
        self._next_commit = 0.0
        self._id_lock: Any = None  # the lock of the transactional id, held for life

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> None:
        from confluent_kafka import Consumer

        t, s = self.topics, self.settings
        if s.uses_state_dir:  # (the command checks it first: this is for other callers)
            s.state_home()
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
            t.inputs,
            self.join_partitions,
            idle_ms=s.idle_ms,
            rules=self.config.time_rules(),
            slices=self.config.slices.field,
        )
        if self.eo:
            transactional_id, self._id_lock = claim_transactional_id(s)
            self.output: Output = Transactions(
                self.client, self._kafka_errors, transactional_id, s.transaction_timeout_ms
            )
            if not self.output.open_transactions(self.stopping):
                return
            self.telemetry.committed = {}
        else:
            self.output = Output(self.client, self._kafka_errors)
        producer = self.output.producer
        make_room = self.output.make_room
        self.join_changelog = Changelog(
            t.join_changelog, producer, self.client, self.fingerprint, make_room
        )
        self.eval_changelog = Changelog(
            t.eval_changelog, producer, self.client, self.fingerprint, make_room
        )
        if self.eo:
            self.output.renewed.append(self._new_producer)
            self.join_changelog.transactional = self.eval_changelog.transactional = True
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
        except (StoreError, ChangelogError, OutputError) as err:  # no checkpoint may be written:
            # stop (a checkpoint after a record Kafka refused would skip that record for good)
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
        self.telemetry.on_stats(stats)
        if self._hangs is not None:
            self._watch_hangs(stats)

    def _watch_hangs(self, stats: dict[str, Any]) -> None:
        """Say so when a hanging transaction holds an internal partition (an ERROR with the
        commands that end it, again every few minutes), and when it has ended."""
        t = self.topics
        paused = {(t.events, q) for q in self._held | self._full}
        fetched = waiting_at_stable_end(stats, (t.events, t.outcomes), paused)
        # the snapshot's own time (librdkafka's monotonic clock, µs): the loop may hand it
        # over late
        at = stats.get("ts")
        now = at / 1e6 if isinstance(at, int) else time.monotonic()
        hanging, ended = self._hangs.observe(fetched, now)
        if hanging:
            bootstrap = self.client["bootstrap.servers"]
            log.error(hanging_transactions(bootstrap, hanging, restoring=False))
        for topic, partition in ended:
            log.warning("the hanging transaction on %s[%d] has ended", topic, partition)

    def _loop(self) -> None:
        from confluent_kafka import KafkaError

        s, checkpoints = self.settings, self.checkpoints
        # the longest a turn waits for a message (a turn with one goes on at once)
        consume, timeout = self.consumer.consume, 0.05
        next_publish = time.monotonic() + s.publish_interval_s
        next_checkpoint = time.monotonic() + s.snapshot_interval_s
        commit_interval = s.commit_interval_ms / 1000.0
        self._next_commit = time.monotonic() + commit_interval
        next_heartbeat = 0.0
        # a commit is due but waits for the last one's disk store batches (a turn each) or
        # for the commit on its way to land
        commit_waits = False
        eof = KafkaError._PARTITION_EOF
        inputs, events, outcomes = self.topics.inputs, self.topics.events, self.topics.outcomes
        while not self.stopping.is_set():
            checkpoints.stepped = False  # one checkpoint step per turn
            # a join with events due goes on at once, whether or not more messages come (one
            # that is held waits for Kafka like the rest)
            going = self._queued and not self._held.issuperset(self._queued)
            if self.eo and checkpoints.committing:  # its landing is seen soon
                wait = 0 if going else min(timeout, COMMIT_LOOK_S)
            else:
                wait = 0 if going or commit_waits else timeout
            messages = read_turn(consume, s.max_batch, wait)
            if self._callback_error is not None:
                raise self._callback_error
            wall = time.monotonic()
            # (the process paused since the last read: no input is idle yet)
            self.router.reading(wall * 1000.0, time.thread_time() * 1000.0, wait * 1000.0)
            batch: list[Any] = []
            ends: list[tuple[str, int, int]] = []
            for message in messages:
                error = message.error()
                topic = message.topic()
                if error is not None:
                    if error.code() == eof:
                        if topic in inputs:
                            ends.append((topic, message.partition(), message.offset()))
                    else:
                        self._kafka_errors(error)
                    continue
                if topic in inputs:
                    batch.append(message)
                elif topic == events:
                    self._join(message)
                elif topic == outcomes:
                    self._evaluate(message)
            refused = self._kafka_errors.group_refused  # (a read's error): it would never join
            if refused is not None:
                raise KafkaRefused(SESSION_REFUSED % (s.session_timeout_ms, refused))
            if batch or ends or wall >= next_heartbeat:
                heartbeat = wall >= next_heartbeat
                full = len(messages) >= s.max_batch  # more may wait in the queue
                self._ingest(batch, wall * 1000.0, heartbeat, ends, full)
                if heartbeat:
                    next_heartbeat = wall + s.heartbeat_ms / 1000.0
            self.output.poll()
            if wall >= next_publish:
                next_publish = next_tick(next_publish, wall, s.publish_interval_s)
                for r, stage in list(self.evals.items()):
                    self._evaluated(*stage.tick(periodic=True), r)
                    self._unmatched(stage)
                    self._outcomes_refused(r, stage)
                self.telemetry.gauges(
                    [stage.join for stage in self.joins.values()],
                    sum(stage.waiting for stage in self.evals.values()),
                )
                if self.eo and self._wrote:  # the records go out now
                    self._commit_soon = True
            if wall >= next_checkpoint:
                next_checkpoint = wall + s.snapshot_interval_s
                if self.eo:  # every stage in the next transaction
                    self._snapshot_due = True
                else:  # one stage per turn of the loop: the pause of a cut is one stage's
                    self._due.extend(
                        [("join", q) for q in self.joins] + [("eval", r) for r in self.evals]
                    )
            if self._queued:
                self._catch_up()
            if self.eo:
                # the commit on its way (held past a bound, the data path waits for it)
                landed = checkpoints.committing and self._land(
                    wait=self.output.held_bytes >= HELD_MAX_BYTES
                )
                due = self._commit_soon or time.monotonic() >= self._next_commit
                # the last commit's disk store batches go a turn each, after it landed: a
                # commit due meanwhile waits until they all have, so that the data path
                # never stops for a cut and a batch at once; and for the commit on its way
                commit_waits = due and (checkpoints.committed is not None or checkpoints.committing)
                if due and not commit_waits:
                    self._next_commit = time.monotonic() + commit_interval
                    self._commit(wait=False)
                elif not landed:  # a disk store's batch per turn
                    checkpoints.settle(whole=False)
                continue
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
        self,
        messages: list[Any],
        wall_ms: float,
        heartbeat: bool,
        ends: list[tuple[str, int, int]],
        full: bool = False,
    ) -> None:
        """Route input ``messages`` and send each join partition its event batch, with every
        input partition's progress; ``ends``: the input partitions read to their end (and
        the offset of that end) by the same read; ``full``: that read filled its batch."""
        router = self.router
        if not self._kafka_errors.reachable:  # quiet inputs are not idle while Kafka is away
            router.away(wall_ms)
        per_partition, letters = router.route(messages, int(time.time() * 1000))
        for topic, partition, offset in ends:  # after the messages that came before the end
            router.at_end(topic, partition, wall_ms, offset)
        self._input_next.update(router.consumed)
        for letter in letters:
            self.output.produce(
                self.topics.dead_letters, letter.payload(), letter.key, headers=letter.headers()
            )
        self.telemetry.input(len(messages), [letter.code for letter in letters])
        if not router.owned:
            return
        # behind: an input partition with records fetched past its end waits for them
        sources = router.sources(wall_ms, self._fetched if full else None)
        events = self.topics.events
        for q, rows in enumerate(per_partition):
            if rows or heartbeat:
                self.output.produce(
                    events, encode(EventBatch(WIRE_VERSION, sources, rows)), partition=q
                )
                self.stats.event_batches += 1

    def _fetched(self, tp: tuple[str, int]) -> int:
        """How far the consumer has fetched input partition ``tp``: its high watermark as
        the last fetch response gave it (no request to the broker; negative: not known)."""
        from confluent_kafka import KafkaException, TopicPartition

        try:
            return self.consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)[1]
        except KafkaException:
            return -1

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
        self._evaluated(records, released, r)

    def _evaluated(self, records: list[Record], released: list[Any], r: int) -> None:
        """Count what evaluation partition ``r`` released and publish its records."""
        if released:
            self.telemetry.released(released)
        if not records:
            return
        self._wrote.add(("eval", r))
        t = self.topics
        for record in records:
            if isinstance(record, ComparisonRecord):
                topic, key = t.comparisons, record.pair
            elif isinstance(record, LabelMaturityRecord):
                topic, key = t.maturity, record.model_id
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
        """Say once what looks misspelt in the configuration: a comparison one of whose
        models has no outcome while the other has had ``publish_every`` (a model id in
        [[comparisons]]), a model whose outcomes name its positive label in another case,
        ``slices.by`` naming nothing."""
        engine, least = stage.engine, self.config.publish_every
        said = engine.misspelt_positives(least) + engine.unmatched_comparisons(least)
        for message in said + engine.unsliced(least):
            what = message.split(": ", 1)[0]  # (a model id may hold a colon)
            if what not in self._said_unmatched:
                self._said_unmatched.add(what)
                log.warning("%s", message)

    def _outcomes_refused(self, r: int, stage: EvalStage) -> None:
        """Count the outcomes evaluation partition ``r``'s models refused (a class over
        ``max_classes``, a label of another type) in /metrics, and say why in the log: at
        once for a model, then at most once a minute while its outcomes keep being refused.
        (What waits for its minute when the stage goes is in /metrics alone: after a rewind
        the same outcomes are refused, and said, again.)"""
        self.telemetry.refused(r, stage.engine)
        refusals, now = stage.engine.refusals, time.monotonic()
        never = float("-inf")
        for model_id in list(refusals):
            if now < self._said_refused.get(model_id, never) + 60:
                continue
            said, count = refusals.pop(model_id)
            counted = "" if self.telemetry.exporter is None else _COUNTED
            log.warning(
                "model %r refused %d %soutcome%s: %s (%sits numbers leave them out)",
                model_id,
                count,
                "more " if model_id in self._said_refused else "",
                "" if count == 1 else "s",
                said,
                counted,
            )
            self._said_refused[model_id] = now

    # -- checkpoints -------------------------------------------------------------------------
    def _begin(
        self,
        joins: list[int],
        evals: list[int],
        tps: list[tuple[str, int]] = (),
        wait: bool = False,
    ) -> None:
        """Cut the changes of these stages and start a checkpoint that writes them, then
        commits the offsets ``tps`` (:class:`~streameval.app.checkpoint.Checkpoints`).
        Exactly-once: they go into the next commit, in this turn of the loop."""
        from confluent_kafka import TopicPartition

        if self.eo:
            self._commit_soon = True
            return

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
        the checkpoints on their way first, then this one. Exactly-once: a commit of the
        transaction with these stages in it (and the others that wrote into it)."""
        if self.no_checkpoints:
            return
        if self.eo:
            try:
                self._commit(joins, evals, rewind=False)
                self.checkpoints.settle()
            except TransactionAborted as err:  # the partitions go: their last checkpoints stand
                log.warning(
                    "Kafka aborted the worker's last transaction (%s): the partitions' last "
                    "checkpoints stand, and whoever takes them next computes the rest again",
                    err,
                )
            return
        self.checkpoints.drain()
        self._due.clear()
        self._begin(joins, evals, commit, wait=True)
        self.checkpoints.drain()

    # -- exactly-once --------------------------------------------------------------------------
    def _commit(
        self, joins: list[int] = (), evals: list[int] = (), rewind: bool = True, wait: bool = True
    ) -> None:
        """Commit the open transaction: a checkpoint of every stage that wrote into it (its
        outputs must not become visible without the state that made them), of ``joins`` and
        ``evals``, of every stage if the snapshot timer said so and of a join partition
        with ``checkpoint_max_changes`` changes, with the offsets of all input partitions
        and of those stages (so that Kafka fences the commit of a worker no longer in the
        group, KIP-447). If Kafka aborts it, the stages start again from their last
        checkpoints (:meth:`_rewind`; ``rewind=False``: raises
        :class:`~streameval.app.output.TransactionAborted` instead). Without ``wait`` the
        data path goes on while Kafka commits (:meth:`_land` tells when it has); a commit
        still on its way lands first."""
        from confluent_kafka import TopicPartition

        if not self._land(wait=True, rewind=rewind):  # aborted: the stages went back
            return
        if self.unsettled:  # stopping: nothing over what a restore may have missed
            return
        wrote, snapshot = self._wrote, self._snapshot_due
        most = self.settings.checkpoint_max_changes
        self._wrote, self._snapshot_due, self._commit_soon = set(), False, False
        joins = sorted(
            q
            for q, stage in self.joins.items()
            if snapshot or q in joins or ("join", q) in wrote or stage.join.changed >= most
        )
        evals = sorted(r for r in self.evals if snapshot or r in evals or ("eval", r) in wrote)
        progress = self.router.progress
        offsets = [
            TopicPartition(t, p, offset, metadata=progress_metadata(progress((t, p))))
            for (t, p), offset in self._input_next.items()
        ]
        offsets += [
            TopicPartition(self.topics.events, q, self.joins[q].offset + 1)
            for q in joins
            if self.joins[q].offset >= 0
        ]
        offsets += [
            TopicPartition(self.topics.outcomes, r, self.evals[r].offset + 1)
            for r in evals
            if self.evals[r].offset >= 0
        ]
        if not (joins or evals or offsets or len(self.output.producer)):
            return
        stages = [(self.join_changelog, q, self.joins[q]) for q in joins]
        stages += [(self.eval_changelog, r, self.evals[r]) for r in evals]
        try:
            self.checkpoints.transact(
                stages,
                offsets,
                self.consumer.consumer_group_metadata(),
                settle_later=rewind,
                wait=wait,
                on_commit=self._offsets_committed,
            )
        except TransactionAborted as err:
            if not rewind:
                raise
            self._aborted(err)
            return
        for q in joins:  # held while a commit was on its way (JoinPacing._emit): cut now
            if q in self._held:
                self._held.discard(q)
                self._fetch(q)

    def _land(self, wait: bool = False, rewind: bool = True) -> bool:
        """Exactly-once: whether the commit on its way (if any) is done (``wait``: wait for
        it). If Kafka aborted it, the stages start again from their last checkpoints and this
        says False (``rewind=False``: raises
        :class:`~streameval.app.output.TransactionAborted` instead)."""
        try:
            return self.checkpoints.landed(wait)
        except TransactionAborted as err:
            if not rewind:
                raise
            self._aborted(err)
            return False

    def _aborted(self, err: TransactionAborted) -> None:
        log.warning(
            "Kafka aborted the worker's transaction (%s): nothing of it is visible. "
            "Every stage starts again from its last checkpoint",
            err,
        )
        self._rewind()

    def _offsets_committed(self, offsets: list[Any]) -> None:
        committed = self.telemetry.committed
        if committed is not None:  # the consumer lag is measured from them
            committed.update(((tp.topic, tp.partition), tp.offset) for tp in offsets)

    def _new_producer(self, producer: Any) -> None:
        """The output replaced a fenced producer: the changelogs write with the new one."""
        self.join_changelog.producer = producer
        self.eval_changelog.producer = producer

    def _rewind(self) -> None:
        """After an aborted transaction: drop every stage and restore the partitions still
        assigned from their last checkpoints and committed offsets, as a new owner would."""
        from confluent_kafka import TopicPartition

        try:
            assignment = self.consumer.assignment()
        except Exception as err:  # the consumer is closing
            log.debug("no assignment to rewind: %s", err)
            assignment = []
        joins, evals, inputs = self._split(assignment)
        try:
            known = self.consumer.list_topics(timeout=10).topics
        except Exception as err:  # Kafka away: the restore waits for it
            log.debug("no metadata before rewinding: %s", err)
            known = None
        for changelog in (self.join_changelog, self.eval_changelog):
            if known is not None and changelog.topic not in known:  # records timed out on
                raise changelog.gone(0, "the topic does not exist")  # a deleted changelog
        self._drop(
            sorted(set(joins) | set(self.joins)),
            sorted(set(evals) | set(self.evals)),
            sorted(set(inputs) | set(self._input_next) | set(self.router.owned)),
        )
        self._wrote.clear()
        if assignment:
            self._on_assign(
                self.consumer, [TopicPartition(tp.topic, tp.partition) for tp in assignment]
            )
