"""Checkpoints of the worker's stages, from the cut to durable, and the restore from them.

A checkpoint covers some stages (join or evaluation partitions) and the input offsets to
commit after them. It is taken every ``snapshot_interval_s``, of a join partition alone as
soon as it has ``checkpoint_max_changes`` changes, when partitions are revoked, and at
shutdown, in these steps:

1. **cut** — each stage hands over what changed since its last checkpoint, encoded (what
   changes from now on goes into the next one), and the producer opens a new epoch;
2. **outputs first** — nothing more happens until Kafka has answered every message produced
   before the cut: a stage restored from this checkpoint must not miss an output of what it
   covers;
3. **write** — the changes go to each stage's changelog partition
   (:class:`~streameval.app.changelog.Changelog`: intent, seal, materialize; no intent
   under exactly-once), a few pieces per turn of the loop;
4. **durable** — once Kafka has acknowledged those records, every stage is told (a disk store
   writes its batch, with the changelog offset it covers; while Kafka acknowledges, the turns
   with no other step build one join partition's batch each);
5. **commit** — the input offsets are committed, each with its partition's progress.

The data path goes on between the steps (one step per turn of the loop, so it stops for one
at a time); revocation and shutdown wait for all of them. Under exactly-once
(:meth:`Checkpoints.transact`) the steps run inside the worker's Kafka transaction: the cut
(from which on the data path's messages are held for the next transaction), the write a few
pieces per turn of the loop, then the commit with the input offsets in a thread of its own
while the data path goes on (:meth:`Checkpoints.landed`), then each disk store's batch in a turn
of the loop of its own. A stage has at most one checkpoint on its way. If Kafka refuses an
output or a changelog record, the worker stops without writing another checkpoint: the last
one stands, and a restart continues exactly from it.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import resource
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from streameval.config import EvaluationConfig
from streameval.core.pending import queue_entries
from streameval.store import DiskState, StoreError

from .changelog import Changelog, ChangelogError, watermarks
from .changelog_format import Sealed, descends, live
from .eval_stage import EvalStage
from .evolve import Refused, join_shape
from .join_stage import SLICE_EVENTS, JoinStage
from .output import NoAnswer, Output, OutputError
from .settings import WorkerSettings
from .telemetry import Telemetry
from .transactions import MissingTopic, TransactionAborted

__all__ = [
    "Checkpoints",
    "progress_from_metadata",
    "progress_metadata",
    "restore_eval",
    "restore_join",
]

log = logging.getLogger("streameval.worker")

#: A checkpoint's changelog records are produced this many at a time, for at most
#: ``CHANGELOG_TURN_S`` per turn of the loop: when the machine is busy (the broker's log
#: cleaner on the same cores), a large checkpoint goes out over a few turns, each a short stop
#: of the data path, rather than in one long one.
CHANGELOG_PIECE = 500
CHANGELOG_TURN_S = 0.03
#: A disk store last written longer ago is rebuilt rather than caught up: the changelog's
#: tombstones (``delete.retention.ms``, 7 days in topics/topics.toml) may be gone by then.
STORE_MAX_AGE_S = 6 * 86_400


def progress_metadata(ts: int) -> str:
    """What an input offset commit carries: the partition's progress at that offset."""
    return orjson.dumps({"progress": ts}).decode()


def progress_from_metadata(metadata: str | None) -> int | None:
    try:
        ts = orjson.loads(metadata or "{}").get("progress")
    except (orjson.JSONDecodeError, AttributeError):
        return None  # committed by something else: nothing to restore
    return ts if type(ts) is int else None


@dataclass(frozen=True, slots=True)
class Usage:
    """What the data path's thread got of the machine during a step of a checkpoint: its CPU
    time, how often it waited (a lock, the GIL, I/O) or was preempted by the scheduler, and
    its page faults that read from disk. A step that took long with little CPU was not the
    worker's own work."""

    cpu: float = 0.0
    waits: int = 0
    preemptions: int = 0
    disk_faults: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.cpu + other.cpu,
            self.waits + other.waits,
            self.preemptions + other.preemptions,
            self.disk_faults + other.disk_faults,
        )

    def __sub__(self, other: Usage) -> Usage:
        return Usage(
            self.cpu - other.cpu,
            self.waits - other.waits,
            self.preemptions - other.preemptions,
            self.disk_faults - other.disk_faults,
        )

    def __str__(self) -> str:
        return (
            f"CPU {self.cpu:.3f} s, preempted {self.preemptions}×, waited {self.waits}×, "
            f"{self.disk_faults} page faults from disk"
        )


def _rusage() -> Usage:
    """This thread's usage so far (Linux; elsewhere its CPU time only)."""
    if not hasattr(resource, "RUSAGE_THREAD"):
        return Usage(time.thread_time())
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return Usage(r.ru_utime + r.ru_stime, r.ru_nvcsw, r.ru_nivcsw, r.ru_majflt)


class Watch:
    """A step of the data path being timed (:meth:`Round.took`)."""

    __slots__ = ("usage", "wall")

    def __init__(self) -> None:
        self.wall, self.usage = time.monotonic(), _rusage()

    def used(self) -> Usage:
        """What the thread got since the watch started."""
        return _rusage() - self.usage


@dataclass
class Round:
    """One checkpoint on its way, and the data path's time spent on each of its steps."""

    epoch: int  # messages produced before the cut have a smaller epoch
    cuts: list[tuple[Changelog, int, Any, Any]]  # changelog, partition, stage, cut
    offsets: list[Any]  # TopicPartitions to commit once it is durable
    started: float
    steps: dict[str, float] = field(default_factory=dict)
    sent: bool = False  # written to the changelogs (not yet acknowledged)
    writing: Iterator[int] | None = None  # its records being produced, a piece per turn
    wait: bool = False  # revocation or shutdown: commit the offsets synchronously
    prepared: int = 0  # its cuts whose store batch was built meanwhile (Checkpoints._prepare)
    told: int = 0  # its cuts whose stages were told it is durable (Checkpoints._complete)
    usage: dict[str, Usage] = field(default_factory=dict)  # of the data path's steps

    def took(self, step: str, watch: Watch, *, longest: bool = False, more: bool = False) -> float:
        """Record how long ``step`` took since ``watch`` started, and what the data path's
        thread got of the machine meanwhile (``longest``: the step is taken once per turn of
        the loop, keep its longest turn; ``more``: add to it)."""
        took, used = time.monotonic() - watch.wall, watch.used()
        if longest and took <= self.steps.get(step, 0.0):
            return took
        if more and step in self.steps:
            took, used = took + self.steps[step], used + self.usage.get(step, Usage())
        self.steps[step], self.usage[step] = took, used
        return took

    @property
    def pause(self) -> float:
        """The longest the data path stopped for it (the steps are apart; exactly-once: the
        cut, or all of it when waited for, is the one step "stop")."""
        steps = self.steps
        if "stop" in steps:
            return max(
                steps["stop"],
                steps.get("changelog", 0.0),
                steps.get("prepare", 0.0),
                steps.get("landing", 0.0),
                steps.get("store", 0.0),
            )
        return max(steps.values(), default=0.0)

    def describe(self) -> str:
        stages = ", ".join(
            f"{'join' if isinstance(stage, JoinStage) else 'evaluation'} {q} "
            f"({len(cut.changes):,} changes)"
            for _, q, stage, cut in self.cuts
        )
        steps = ", ".join(
            f"{name} {seconds:.3f} s" + (f" ({self.usage[name]})" if name in self.usage else "")
            for name, seconds in self.steps.items()
        )
        return f"checkpoint of {stages or 'offsets'}: {steps}"


def _stored(cut: tuple[Changelog, int, Any, Any]) -> bool:
    """Whether the stage of a round's cut is a join partition over a disk store."""
    stage = cut[2]
    return isinstance(stage, JoinStage) and isinstance(stage.join.state, DiskState)


@dataclass
class _Landing:
    """An exactly-once checkpoint cut and not yet committed (:meth:`Checkpoints.landed`)."""

    round: Round
    stages: list[tuple[Changelog, int, Any]]
    offsets: list[Any]
    group: Any  # the consumer's group metadata, committed with the offsets
    handed: float | None  # when the commit went to its thread (None: records being written)
    settle_later: bool
    on_commit: Callable[[list[Any]], None] | None


class Checkpoints:
    """The checkpoints on their way (steps in the module doc).

    ``durable(changelog, q)`` is called when stage partition ``q``'s checkpoint is done.
    :attr:`stepped` says a step was taken since the caller last cleared it (one per turn of
    the loop).
    """

    def __init__(
        self,
        output: Output,
        consumer: Any,
        telemetry: Telemetry,
        durable: Callable[[Changelog, int], None],
    ) -> None:
        self.output, self.consumer, self.telemetry = output, consumer, telemetry
        self.durable = durable
        self.rounds: deque[Round] = deque()
        self.busy: set[tuple[str, int]] = set()  # (changelog topic, partition)
        self.stepped = False
        #: exactly-once: a committed checkpoint whose stages are not yet told (a disk store
        #: writes its batch in a later turn of the loop: :meth:`settle`)
        self.committed: Round | None = None
        #: exactly-once: the commit on its way (:meth:`transact`, :meth:`landed`)
        self._landing: _Landing | None = None

    def on_its_way(self, changelog: Changelog, q: int) -> bool:
        return (changelog.topic, q) in self.busy

    def begin(
        self, stages: list[tuple[Changelog, int, Any]], offsets: list[Any], wait: bool = False
    ) -> None:
        """Step 1 for the stages with no checkpoint on their way; the rest in :meth:`advance`."""
        watch = Watch()
        cuts = []
        for changelog, q, stage in stages:
            if (changelog.topic, q) not in self.busy:
                cuts.append((changelog, q, stage, stage.cut()))
                changelog.describe(q, stage.summary())  # what the seal says it holds
                self.busy.add((changelog.topic, q))
        if not cuts and not offsets:
            return
        round_ = Round(self.output.next_epoch(), cuts, offsets, watch.wall, wait=wait)
        round_.took("cut", watch)
        self.rounds.append(round_)
        self.stepped = True

    def advance(self, wait: bool = False) -> None:
        """Take one step of the checkpoints on their way, as far as Kafka's answers allow
        (``wait``: every step the answers allow — the caller waits for all of them anyway)."""
        if self.stepped and not wait:
            return
        self._refused()
        oldest = self.output.oldest_unanswered()
        for round_ in self.rounds:
            if not round_.sent:
                if round_.epoch > oldest:  # step 2: an output from before its cut is unanswered
                    continue
                self._write(round_, wait)
                return
            if all(changelog.acknowledged(q) for changelog, q, _, _ in round_.cuts):
                self._complete(round_)
                self.rounds.remove(round_)
                self.stepped = True
                return
        if not wait:  # nothing else to do: a store batch built while Kafka acknowledges
            for round_ in self.rounds:
                if round_.sent and self._prepare(round_):
                    self.stepped = True
                    return

    def _refused(self) -> None:
        """Stop (ChangelogError) once Kafka has refused an output: no checkpoint may pass it."""
        if self.output.error is not None:
            raise ChangelogError(
                f"Kafka did not acknowledge a message the worker produced ({self.output.error})"
                ". The worker stops without writing another checkpoint: its last one stands, "
                "and when it is started again it re-reads from there and sends what was lost "
                "again"
            )

    def _write(self, round_: Round, wait: bool) -> None:
        """Step 3: its records, piece by piece, until done or this turn's time is up."""
        watch = Watch()
        if round_.writing is None:
            round_.writing = itertools.chain.from_iterable(
                changelog.write(q, cut.changes, CHANGELOG_PIECE)
                for changelog, q, _stage, cut in round_.cuts
            )
        while not round_.sent:
            round_.sent = next(round_.writing, None) is None
            if not wait and time.monotonic() - watch.wall >= CHANGELOG_TURN_S:
                break
        self.output.send_now()
        round_.took("changelog", watch, longest=True)
        self.stepped = True

    def transact(
        self,
        stages: list[tuple[Changelog, int, Any]],
        offsets: list[Any],
        group: Any,
        settle_later: bool = False,
        wait: bool = True,
        on_commit: Callable[[list[Any]], None] | None = None,
    ) -> None:
        """Exactly-once: cut these stages, write their changes into the open transaction,
        commit it with the input ``offsets`` (``group``: the consumer's group metadata) and
        begin the next one; then the stages are told (a disk store writes its batch) — at
        once, or with ``settle_later`` by :meth:`settle` in a later turn of the loop, so that
        the data path stops for the two apart. Everything the transaction holds — outputs,
        internal batches, changelog records, offsets — becomes visible at once or never.

        The data path stops for the cut. From the cut on, every message it produces is held
        for the next transaction; the changelog records go into this one a few pieces per
        turn of the loop (:meth:`landed`, as at-least-once writes them), and once they all
        have, the transaction is committed in a thread of its own
        (:meth:`~streameval.app.transactions.Transactions.commit_in_background`). With
        ``wait`` this returns once the commit is done; without, the data path goes on and
        :meth:`landed` tells when it is. ``on_commit(offsets)`` is called once it is
        committed. Raises (here or from :meth:`landed`)
        :class:`~streameval.app.output.TransactionAborted` when Kafka aborted it (the caller
        restores its stages from their last checkpoints), ``ChangelogError`` when a record
        was refused, ``NoAnswer`` at the output's deadline."""
        self.landed(wait=True)  # one commit at a time
        if self.output.given_up is not None:  # a checkpoint left half written: not this one
            said = self.output.given_up
            self.output.abort()
            raise TransactionAborted(said)
        watch = Watch()
        self.settle()  # the stages' previous checkpoint first, in this same stop
        settled = Watch()
        self._refused()
        if self.output.stuck:  # stopping: the last commit never finished
            raise NoAnswer("a transaction was left unfinished")
        cuts = []
        for changelog, q, stage in stages:
            cuts.append((changelog, q, stage, stage.cut()))
            changelog.describe(q, stage.summary())
        self.output.hold()  # what the data path makes from here on is the next one's
        # from the cut: a revocation's settle of the checkpoint before is a step of its own
        round_ = Round(0, cuts, [], settled.wall, wait=True)
        round_.took("cut", settled)
        if settled.wall - watch.wall >= 0.001:  # the previous one's batch
            round_.steps["settle"] = settled.wall - watch.wall
        self.output.topics.update(changelog.topic for changelog, _, _ in stages)
        round_.took("stop", watch)  # the data path's, the cut's
        self._landing = _Landing(round_, stages, offsets, group, None, settle_later, on_commit)
        if wait:
            self.landed(wait=True, same_stop=True)

    @property
    def committing(self) -> bool:
        """Exactly-once: a checkpoint was cut and its commit has not landed yet (its
        changelog records being written, or the commit on its way: :meth:`transact`
        without ``wait``)."""
        return self._landing is not None

    def landed(self, wait: bool = False, same_stop: bool = False) -> bool:
        """Exactly-once: whether the checkpoint cut last (if any) is committed (``wait``:
        write what is left of its changelog records and wait for the commit); else one
        more turn of its changelog records is written, or, once they all are, its commit
        handed to a thread of its own. Raises what the commit raised (:meth:`transact`).
        Once it is done, the messages held since its cut go into the next transaction.
        ``same_stop``: the data path has not gone on since the cut (its wait belongs to the
        checkpoint's one stop)."""
        landing = self._landing
        if landing is None:
            return True
        watch = Watch()
        try:
            if landing.handed is None:  # its changelog records are being written
                self._hand_over(landing, wait)
            done = landing.handed is not None and self.output.landed(wait)
        except MissingTopic as err:  # a changelog deleted under the worker says so
            self._give_up()
            for changelog, q, _ in landing.stages:
                if changelog.topic == err.topic:
                    raise changelog.gone(q, str(err)) from None
            raise
        except OutputError:
            self._give_up()
            self._refused()  # a record refused: said as a refusal
            raise
        except BaseException:
            self._give_up()
            raise
        if not done:  # (what building a batch raises leaves the commit on its way alone)
            if landing.handed is not None:  # the commit on its way: a store batch meanwhile
                self._prepare(landing.round)
            return False
        self._landing = None
        round_ = landing.round
        now = time.monotonic()
        round_.steps["commit"] = now - landing.handed  # (in a thread: the data path went on)
        round_.steps["transaction"] = now - round_.started  # cut to commit
        self.telemetry.transaction(round_.steps["transaction"])
        if landing.settle_later:
            self.committed = round_
        try:
            self.output.release()  # the messages held meanwhile, after it is counted done
        except OutputError:
            self._refused()
            raise
        if landing.on_commit is not None:
            landing.on_commit(landing.offsets)
        # what the data path stopped for: the wait, if any, and the held messages produced
        if same_stop:
            round_.took("stop", watch, more=True)
        elif time.monotonic() - watch.wall >= 0.001:
            round_.took("landing", watch)
        if not landing.settle_later:  # in the same stop as the rest
            self._complete(round_, pause=round_.pause)
        return True

    def _hand_over(self, landing: _Landing, wait: bool) -> None:
        """A turn of the cut checkpoint's changelog records (``wait``: all of them); once
        they are all produced, its commit goes to a thread of its own."""
        round_ = landing.round
        try:
            self._write(round_, wait)
        except TransactionAborted as err:  # it failed meanwhile: the commit says why
            self.output.failed = self.output.failed or str(err)
            round_.sent = True
        if round_.sent:
            self.output.commit_in_background(landing.offsets, landing.group)
            landing.handed = time.monotonic()

    def _prepare(self, round_: Round) -> bool:
        """While it waits for Kafka (its commit under exactly-once, the acknowledgement of
        its records under at-least-once), a turn of the loop builds one join partition's
        disk store batch (:meth:`~streameval.store.DiskState.prepare`), so that writing it,
        once the checkpoint is durable, is a shorter stop. Whether it built one."""
        while round_.prepared < len(round_.cuts):
            entry = round_.cuts[round_.prepared]
            round_.prepared += 1
            if _stored(entry):
                _, _, stage, cut = entry
                watch = Watch()
                stage.prepare(cut)
                round_.took("prepare", watch, longest=True)
                return True
        return False

    def give_up(self, why: str) -> None:
        """Exactly-once: if the checkpoint cut last is still being written, write no more of
        it and fail the open transaction (``why``), so that nothing of it is ever committed:
        the partitions were lost, and their next owner restores them from their last
        checkpoints."""
        landing = self._landing
        if landing is not None and landing.handed is None:
            self.output.give_up(why)
            self._give_up()

    def _give_up(self) -> None:
        """The checkpoint cut last failed: nothing more of it is written, and the messages
        held since its cut go with the state the caller gives up. If its records were being
        written, the open transaction holds some of them and its stages have given their
        changes to it: it is failed, so that no later commit (a shutdown's) makes it visible —
        it aborts, and the stages' last checkpoints stand."""
        landing, self._landing = self._landing, None
        if landing is not None and landing.handed is None:
            self.output.give_up("a checkpoint was left half written")
        self.output.drop_held()

    def settle(self, whole: bool = True) -> None:
        """Exactly-once: tell the stages of the last committed checkpoint (a disk store
        writes its batch) — all of them, or without ``whole`` those up to the next disk
        store's batch: a turn of the loop each, so that the data path stops for one store at
        a time. Its changes are Kafka's already: a crash before this only leaves the store
        behind its changelog, which the next start reads on from."""
        round_ = self.committed
        if round_ is None:
            return
        try:
            done = self._complete(round_, whole=whole)
        except BaseException:
            self.committed = None  # (the worker stops, or its stages go)
            raise
        if done:
            self.committed = None

    def _complete(self, round_: Round, pause: float | None = None, whole: bool = True) -> bool:
        """Steps 4 and 5 (``pause``: how long the data path had already stopped for it in the
        same turn of the loop; without ``whole``, up to the next disk store's batch).
        Whether every stage is told."""
        watch = Watch()
        while round_.told < len(round_.cuts):
            changelog, q, stage, cut = round_.cuts[round_.told]
            error = changelog.confirm(q)
            if error is not None:
                raise ChangelogError(
                    f"Kafka did not acknowledge the checkpoint of {changelog.topic}[{q}] "
                    f"({error}). The worker stops without writing more: its last "
                    "checkpoint stands, and a restart continues exactly from it"
                )
            round_.told += 1
            if isinstance(stage, JoinStage):  # a disk store writes its batch now
                stage.written(cut, changelog.position(q), changelog.sealed(q))
            else:
                stage.written(cut)
            self.busy.discard((changelog.topic, q))
            self.durable(changelog, q)
            if (
                not whole
                and _stored(round_.cuts[round_.told - 1])
                and any(map(_stored, round_.cuts[round_.told :]))
            ):
                round_.took("store", watch, longest=True)  # the next store in another turn
                return False
        if round_.offsets:
            try:
                self.consumer.commit(offsets=round_.offsets, asynchronous=not round_.wait)
            except Exception as err:  # the group is rebalancing: the next round commits
                log.warning("offset commit failed (%s); input may be re-read, never lost", err)
        store = round_.took("store", watch, longest=True)
        pause = round_.pause if pause is None else pause + store
        if pause > 0.1:
            log.info("%s (the data path's longest stop: over 100 ms)", round_.describe())
        self.telemetry.checkpointed(time.monotonic() - round_.started, pause)
        return True

    def drain(self) -> None:
        """Wait until every checkpoint on its way is durable."""
        while self.rounds:
            self.output.flush()
            before = (len(self.rounds), sum(r.sent for r in self.rounds))
            self.advance(wait=True)
            if (len(self.rounds), sum(r.sent for r in self.rounds)) == before:
                raise RuntimeError("a checkpoint makes no progress with everything acknowledged")

    def abandon(self) -> None:
        """Forget every checkpoint on its way, its offsets too (the worker lost all its
        partitions and purged what it had not sent: none of them may complete or commit)."""
        self.rounds.clear()
        self.busy.clear()


# -- restore ----------------------------------------------------------------------------------
def restore_join(
    changelog: Changelog,
    q: int,
    settings: WorkerSettings,
    config: EvaluationConfig,
    inputs: list[tuple[str, int]],
    fingerprint: str,
    lag: Callable[[int], None] | None,
    rebuild: bool = False,
) -> JoinStage:
    """A join partition from its changelog (a new one if it has none): into RAM, or into its
    disk store, which only catches up from the changelog offset it is at — or, with
    ``rebuild``, is emptied first (it may hold a checkpoint the changelog does not: one a
    hanging transaction held, which an administrator then aborted)."""
    if rebuild and settings.store != "memory":
        path = _store_path(settings, q)
        log.warning(
            "join %d: the changelog was held by a transaction that hung; rebuilding the store "
            "at %s from the changelog",
            q,
            path,
        )
        DiskState.wipe(path)
    try:
        return _restore_join(changelog, q, settings, config, inputs, fingerprint, lag)
    except Refused as err:  # a worker's start checks first: a worker of another configuration
        raise ChangelogError(str(err)) from None


def _restore_join(
    changelog: Changelog,
    q: int,
    settings: WorkerSettings,
    config: EvaluationConfig,
    inputs: list[tuple[str, int]],
    fingerprint: str,
    lag: Callable[[int], None] | None,
) -> JoinStage:
    if settings.store == "memory":
        changes, sealed, _ = changelog.read(q, lag=lag)
        if not sealed:
            return JoinStage(q, config, inputs, slice_events=SLICE_EVENTS)
        return JoinStage.restore(live(changes), config, inputs, slice_events=SLICE_EVENTS)
    state = _open_store(settings, config, fingerprint, q)
    ttl = config.join.label_ttl_ms
    entries = lambda record: queue_entries(record, ttl)  # noqa: E731
    sink = lambda items: state.apply(items, entries)  # noqa: E731
    start = state.position
    changes, sealed, end = changelog.read(q, start, sink=sink, lookup=state.get_many, lag=lag)
    if changes:  # the latest checkpoint's intent, over the values read
        state.apply(list(changes.items()), entries)
    # what the changelog lacks is written by the next checkpoint; until one has been, the
    # store says so (its carried keys, or the whole of it), so that a crash before it loses
    # nothing: the changelog's records no longer differ from the store once it holds them
    recreated = start is not None and end < start  # not the changelog the store knew
    if recreated and changelog.hanging(q):
        # the assignment's deadline (Changelog.wait_until) passed with a transaction still
        # open from ``end`` on, one begun after the assignment waited out those open then (a
        # zombie's): what is before it is the state once it is aborted
        log.warning(
            "join %d: a transaction that hangs holds the changelog from offset %d, before "
            "the store's position %d; rebuilding the store at %s from the changelog's records "
            "before it",
            q,
            end,
            start,
            state.path,
        )
        state.close()
        DiskState.wipe(state.path)
        return _restore_join(changelog, q, settings, config, inputs, fingerprint, lag)
    if (state.carries_all and sealed) or (recreated and changelog.latest(q)[0] is not None):
        # a checkpoint written into the new changelog since (by another worker, or one of
        # this store's own that a crash cut short: its intent holds it all) is the state now
        log.warning(
            "join %d: the changelog was deleted and created again, and a checkpoint has been "
            "written into it since; rebuilding the store at %s from it",
            q,
            state.path,
        )
        state.close()
        DiskState.wipe(state.path)
        return _restore_join(changelog, q, settings, config, inputs, fingerprint, lag)
    whole = recreated or state.carries_all
    held = Sealed(*state.sealed) if state.sealed is not None else None
    latest = None  # the partition's latest seal, when the store's check reads it
    if not whole and held is not None and held.lineage is not None:
        latest = changelog.seal(q) if sealed else changelog.latest(q)[0]
        if not descends(latest, held):
            # the store holds a checkpoint that is not in the changelog's history: its
            # transaction was aborted (a hanging one, by an administrator), and the partition
            # may have gone on from the one before it since
            log.warning(
                "join %d: the store at %s holds checkpoint %d, which is not in the changelog's "
                "history (most likely a transaction that held it was aborted); rebuilding the "
                "store from the changelog",
                q,
                state.path,
                held.number,
            )
            state.close()
            DiskState.wipe(state.path)
            return _restore_join(changelog, q, settings, config, inputs, fingerprint, lag)
    if whole:
        log.warning(
            "join %d: %s; writing the whole store into it",
            q,
            f"the changelog ends at {end}, before the store's position {start}: it was "
            "deleted and created again"
            if recreated
            else "the changelog was deleted and created again, and no checkpoint has "
            "written the whole store into it yet",
        )
        changelog.carry_all(q, state.items())
        if held is not None:  # numbers go on from the store's (no seal is here yet); no
            changelog.resume(q, held, end, {})  # root: the old changelog's are not this one's
    else:
        if state.carried:  # found by an earlier restore, and no checkpoint since
            keys = [k for k in state.carried if k not in changelog.carried(q)]
            changelog.carry(q, dict(zip(keys, state.get_many(keys), strict=True)))
        if not sealed and held is not None:  # the store is at the latest checkpoint
            own = latest is not None and latest["n"] == held.number
            own = own and latest.get("lineage") == held.lineage
            changelog.resume(q, held, end, latest if own else None)  # (its roots, if read)
    state.settle(end, changelog.sealed(q), [] if whole else list(changelog.carried(q)), whole)
    scalars = state.scalars()
    # one line per partition, a new one included: what a restart found is in the log
    log.info(
        "join %d: %d pending instances in %s, caught up from changelog offset %s",
        q,
        state.pending_count(),
        state.path,
        start or 0,
    )
    if not scalars:
        return JoinStage(q, config, inputs, state, SLICE_EVENTS)
    return JoinStage.resume(scalars, config, inputs, state, SLICE_EVENTS)


def _open_store(
    settings: WorkerSettings, config: EvaluationConfig, legacy: str, q: int
) -> DiskState:
    """Join partition ``q``'s disk store, rebuilt (emptied, then filled from the changelog) if
    it is unreadable, of another format or join rules (a store of the release before, which
    fingerprinted the whole configuration, is kept if that was ``legacy``, this one), or too
    old for the changelog's tombstones to still say what it lacks."""
    path = _store_path(settings, q)
    rules = orjson.dumps(join_shape(config), option=orjson.OPT_SORT_KEYS)
    fingerprint = "join:" + hashlib.sha256(rules).hexdigest()[:16]
    try:
        state = DiskState(path, settings.cache_mb, fingerprint, accept=(legacy,))
    except StoreError as err:
        log.warning("join %d: %s; rebuilding it from the changelog", q, err)
        DiskState.wipe(path)
        return DiskState(path, settings.cache_mb, fingerprint)
    usable, why = state.usable()
    at = state.committed_at
    if usable and at is not None and time.time() - at > STORE_MAX_AGE_S:
        usable, why = False, f"last written {(time.time() - at) / 86400:.1f} days ago"
    if not usable:
        log.warning(
            "join %d: the store at %s is %s; rebuilding it from the changelog", q, path, why
        )
        state.close()
        DiskState.wipe(path)
        state = DiskState(path, settings.cache_mb, fingerprint)
    return state


def _store_path(settings: WorkerSettings, q: int) -> Path:
    """Where join partition ``q``'s disk store lives."""
    return settings.state_dir / settings.app_id / f"join-{q}"


def restore_eval(
    changelog: Changelog,
    r: int,
    config: EvaluationConfig,
    join_partitions: int,
    consumer: Any,
    outcomes: str,
    lag: Callable[[int], None] | None,
) -> EvalStage:
    """An evaluation partition from its changelog (a new one if it has none)."""
    try:
        return _restore_eval(changelog, r, config, join_partitions, consumer, outcomes, lag)
    except Refused as err:  # a worker's start checks first: a worker of another configuration
        raise ChangelogError(str(err)) from None


def _restore_eval(
    changelog: Changelog,
    r: int,
    config: EvaluationConfig,
    join_partitions: int,
    consumer: Any,
    outcomes: str,
    lag: Callable[[int], None] | None,
) -> EvalStage:
    changes, sealed, _ = changelog.read(r, lag=lag)
    if not sealed:
        low, _ = watermarks(consumer, outcomes, r)
        if low > 0:  # a fresh start would miss the outcomes before it
            raise ChangelogError(
                f"evaluation partition {r} has no checkpoint in {changelog.topic}, but "
                f"{outcomes}[{r}] starts at offset {low}: its earlier outcomes are gone, so "
                "its models' numbers cannot be recomputed (was the changelog deleted?). Start "
                "over with a new app_id"
            )
        return EvalStage(r, config, join_partitions)
    return EvalStage.restore(live(changes), config, join_partitions)
