"""Exactly-once outputs: the worker's producer as a Kafka transaction that is always open
(:class:`Transactions`), committed with the input offsets and the stages' checkpoints
(:meth:`~streameval.app.checkpoint.Checkpoints.transact`), and the transactional id each
data-path process keeps under ``state_dir`` (:func:`claim_transactional_id`).
docs/architecture.md, "Exactly-once outputs", has the design.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection
from typing import Any

from ..clients import producer_settings, unpolled
from .output import (
    KafkaErrors,
    KafkaRefused,
    NoAnswer,
    Output,
    OutputError,
    delivery_error,
    refusal_codes,
    refused_record,
    stops,
)
from .settings import WorkerSettings

__all__ = [
    "HANGING",
    "HANGING_MARGIN_S",
    "HANGING_REPEAT_S",
    "HELD_MAX_BYTES",
    "HangWatch",
    "MissingTopic",
    "TransactionAborted",
    "Transactions",
    "claim_transactional_id",
    "hanging_transactions",
    "waiting_at_stable_end",
]

log = logging.getLogger("streameval.worker")


class TransactionAborted(RuntimeError):
    """Kafka aborted the worker's open transaction (or a record of it failed for a reason a
    retry may cure): nothing it held is visible, and the stages go back to their last
    checkpoints."""


class MissingTopic(OutputError):
    """A topic the worker writes is gone (deleted under it)."""

    def __init__(self, topic: str, said: str) -> None:
        super().__init__(said)
        self.topic = topic


class Transactions(Output):
    """The worker's producer under exactly-once: :meth:`open_transactions` once, then
    every message belongs to the open transaction until :meth:`commit` or :meth:`abort`
    (which begin the next)."""

    transactional = True

    def __init__(
        self,
        client: dict[str, str],
        on_error: KafkaErrors,
        transactional_id: str,
        transaction_timeout_ms: int = 60_000,
    ) -> None:
        # (librdkafka lowers message.timeout.ms to the transaction timeout)
        extra = {
            "transactional.id": transactional_id,
            "transaction.timeout.ms": transaction_timeout_ms,
        }
        super().__init__(client, on_error, extra)
        self.transactional_id = transactional_id
        #: told the new producer when a fenced one is replaced (the changelogs write with it)
        self.renewed: list[Any] = []
        self._renewals: list[float] = []
        #: threads left in a call librdkafka never returned from (:meth:`_send_offsets`)
        self._hung: list[threading.Thread] = []
        #: a commit or abort was left unfinished at the deadline: nothing more may be
        #: produced (the worker is stopping; its next start aborts what is open)
        self.stuck = False
        #: the commit on its way in a thread of its own (:meth:`commit_in_background`), and
        #: what it raised
        self._committing: threading.Thread | None = None
        self._raised: BaseException | None = None
        #: produce() holds its messages for the next transaction (:meth:`hold`), from a
        #: checkpoint's cut until its commit has landed and :meth:`release` sends them
        self.holding = False
        #: the open transaction was given up (:meth:`give_up`): it is aborted, never committed
        self.given_up: str | None = None
        self._held: list[tuple[str, bytes, bytes | None, int, Any]] = []
        #: the bytes of the messages held (the data path waits for the commit past
        #: :data:`HELD_MAX_BYTES`)
        self.held_bytes = 0

    def open_transactions(self, stopping: threading.Event, timeout_s: float = 60.0) -> bool:
        """Take the transactional id (fencing a previous process of that id: what it left
        open is aborted) and begin the first transaction. False if ``stopping`` was set
        meanwhile. Raises :class:`KafkaRefused` when Kafka gives no transaction coordinator
        within ``timeout_s`` or refuses the id."""
        from confluent_kafka import KafkaException

        began = time.monotonic()
        while not stopping.is_set():
            try:
                self.producer.init_transactions(10.0)
                break
            except KafkaException as exc:
                err = exc.args[0]
                if err.fatal() or not err.retriable():
                    raise KafkaRefused(
                        _transactions_refused(err.str(), self.transactional_id)
                    ) from None
                if time.monotonic() - began >= timeout_s:
                    raise KafkaRefused(
                        f"Kafka gave the worker no transaction coordinator within "
                        f"{timeout_s:.0f} s ({err.str()}). The cluster's transaction state "
                        "topic may be unable to meet its replication "
                        "(transaction.state.log.replication.factor and .min.isr, 3 and 2 by "
                        "default, against the number of brokers), or the cluster does not "
                        "support transactions: fix that, or set processing_guarantee = "
                        '"at_least_once" under [worker]'
                    ) from None
                log.warning("waiting for Kafka's transaction coordinator (%s)", err.str())
        else:
            return False
        log.info(
            "transactional id %s taken in %.1f s (what a previous process of that id left "
            "open is aborted)",
            self.transactional_id,
            time.monotonic() - began,
        )
        self.producer.begin_transaction()
        return True

    def commit(self, offsets: list[Any], group: Any) -> None:
        """Wait for every message of the open transaction, commit it with ``offsets`` (the
        consumer's ``group`` metadata fences a worker that is no longer in the group), and
        begin the next. Raises :class:`TransactionAborted` if Kafka aborted it (it is
        aborted and the next one begun), :class:`OutputError` if a record was refused,
        :class:`NoAnswer` at the :attr:`deadline`."""
        if self.stuck:
            raise NoAnswer("a transaction was left unfinished")
        if self.given_up is not None:  # nothing of it is committed
            said = self.given_up
            self.abort()
            raise TransactionAborted(said)
        self.flush()
        if self.error is not None:
            raise OutputError(self.error)
        if self.failed is not None:  # the commit fails: it says why (a refusal stops here)
            try:
                self._transact(self.producer.commit_transaction)
            except TransactionAborted:
                pass
            except _Fenced as err:
                said = self.failed
                self._renew(err)
                raise TransactionAborted(f"{said}; {err}") from None
            said = self.failed
            self.abort()
            raise TransactionAborted(said)
        try:
            if offsets:
                self._transact(lambda t: self._send_offsets(offsets, group, t))
            self._transact(self.producer.commit_transaction)
        except TransactionAborted:
            self.abort()
            raise
        except _Fenced as err:
            self._renew(err)
            raise TransactionAborted(str(err)) from None
        self.topics.clear()
        self.producer.begin_transaction()

    # -- the commit off the data path -----------------------------------------------------
    def hold(self) -> None:
        """From now on produce() holds every message for the next transaction, until
        :meth:`release` (a checkpoint was cut: what the data path makes from here on is not
        covered by it). The changelogs go on writing into the open transaction: they produce
        on the librdkafka producer itself."""
        self.holding = True

    def commit_in_background(self, offsets: list[Any], group: Any) -> None:
        """:meth:`commit`, in a thread of its own, so that the data path goes on while Kafka
        acknowledges the transaction's messages and commits it. Until :meth:`landed` says it
        is done, produce() holds every message (they belong to the next transaction: the
        offsets and checkpoints of this one do not cover what made them), and the data path
        leaves the producer alone — its delivery reports are the committing thread's."""
        if self._committing is not None:
            raise RuntimeError("a commit is already on its way")

        def commit() -> None:
            try:
                self.commit(offsets, group)
            except BaseException as err:  # handed to the data path by landed()
                self._raised = err

        self._raised = None
        self.holding = True
        self._committing = threading.Thread(target=commit, name="streameval-commit", daemon=True)
        self._committing.start()

    @property
    def committing(self) -> bool:
        """A commit is on its way (:meth:`commit_in_background`) and not yet landed."""
        return self._committing is not None

    def landed(self, wait: bool = False) -> bool:
        """Whether the commit on its way is over (``wait``: wait until it is). Raises what the
        commit raised (:meth:`commit`), and then throws the held messages away: they were
        made from state that the stages give up when Kafka aborted the transaction, and
        nothing more is produced when the worker stops. After a commit, :meth:`release`
        sends them."""
        thread = self._committing
        if thread is None:
            return True
        if wait:
            thread.join()
        elif thread.is_alive():
            return False
        self._committing = None
        if self._raised is not None:
            raised, self._raised = self._raised, None
            self.drop_held()
            raise raised
        return True

    def give_up(self, why: str) -> None:
        """Never commit the open transaction (``why``): the next :meth:`commit` aborts it and
        raises :class:`TransactionAborted` — what it holds was left half done (a checkpoint's
        records, the messages held for it)."""
        self._no_commit_on_its_way()
        self.given_up = self.given_up or why

    def drop_held(self) -> None:
        """Throw the held messages away and stop holding (the transaction they would have
        gone into is given up with the state that made them)."""
        self._held, self.held_bytes, self.holding = [], 0, False

    def release(self) -> None:
        """Produce the messages held since the last checkpoint's cut, in their order, into
        the transaction begun after its commit, and stop holding."""
        if self._committing is not None:
            raise RuntimeError("the commit on its way must land first (Transactions.landed)")
        held, self._held, self.held_bytes, self.holding = self._held, [], 0, False
        try:
            for topic, value, key, partition, headers in held:
                self.produce(topic, value, key, partition, headers)
        except BaseException as err:  # the rest would be missing from the open transaction
            self.give_up(f"held messages not produced ({err})")
            raise

    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        partition: int = -1,
        headers: Any = None,
    ) -> None:
        if self.holding:
            self._held.append((topic, value, key, partition, headers))
            self.held_bytes += len(value)
            return
        super().produce(topic, value, key, partition, headers)

    def poll(self) -> None:
        if self._committing is None:  # else the committing thread serves the reports
            super().poll()

    def send_now(self) -> None:
        if self._committing is None:
            super().send_now()

    def abort(self) -> None:
        """Abort the open transaction (its messages not yet sent are purged, those sent are
        never shown to read_committed consumers) and begin the next."""
        if self.stuck:
            raise NoAnswer("a transaction was left unfinished")
        self._no_commit_on_its_way()
        try:
            self._transact(self.producer.abort_transaction)
        except _Fenced as err:  # a new producer: nothing of the old one's is visible
            self._renew(err)
            return
        self.producer.poll(0)  # the aborted transaction's reports, before forgetting them
        self.failed = self.given_up = None
        self.topics.clear()
        self.producer.begin_transaction()

    def flush(self) -> None:
        self._no_commit_on_its_way()
        super().flush()

    def purge(self) -> int:
        self._no_commit_on_its_way()
        return super().purge()

    def _no_commit_on_its_way(self) -> None:
        if self._committing is not None and threading.current_thread() is not self._committing:
            raise RuntimeError("the commit on its way must land first (Transactions.landed)")

    def _transact(self, call: Any) -> None:
        """A transactional call, again while Kafka says to retry, until the deadline."""
        from confluent_kafka import KafkaError, KafkaException

        warned = 0.0
        while True:
            wait = 10.0 if self.deadline is None else min(10.0, self.deadline - time.monotonic())
            try:
                call(max(wait, 0.01))
                return
            except KafkaException as exc:
                err = exc.args[0]
                if err.fatal():
                    raise _Fenced(err.str()) from None
                if err.code() in refusal_codes():  # (adding a topic to the transaction)
                    said = f"Kafka refused the worker's transaction ({err.str()})"
                    if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                        said = self._forbidden(err) or said
                    else:
                        gone = self._missing()
                        if gone is not None:
                            raise MissingTopic(gone, refused_record(exc, gone)) from None
                    raise OutputError(stops(said)) from None
                if err.txn_requires_abort():
                    raise TransactionAborted(err.str()) from None
                if not err.retriable():
                    raise OutputError(
                        f"Kafka refused the worker's transaction: {err.str()}"
                    ) from None
                try:
                    self._in_time()
                except NoAnswer:
                    self.stuck = True
                    raise
                if time.monotonic() - warned >= 10:
                    warned = time.monotonic()
                    log.warning("waiting for Kafka to answer a transaction (%s)", err.str())

    def _send_offsets(self, offsets: list[Any], group: Any, timeout: float) -> None:
        """``send_offsets_to_transaction``, watched: librdkafka (2.16) may never return from
        it — its wait for the group coordinator ignores the timeout (librdkafka #5456) and
        is not woken when that broker comes back (#5511). Seen after the broker was
        restarted under a commit: the call hung for minutes, its transaction stayed open,
        and every reader of the changelog partitions it held — the workers restoring them
        too — waited for it. Past its timeout and :data:`HUNG_AFTER_S` the producer is
        taken as fenced: a new one with the same transactional id aborts the transaction
        (the stuck call is left to its thread, which holds the old producer; more than
        :data:`HUNG_MAX` such calls alive at once stop the worker). At the :attr:`deadline`
        (stopping) it raises :class:`NoAnswer` instead: the next start aborts what is open."""
        self._hung = [thread for thread in self._hung if thread.is_alive()]
        if len(self._hung) >= HUNG_MAX:
            raise OutputError(
                f"librdkafka has left {len(self._hung)} calls of send_offsets_to_transaction "
                "hung (librdkafka #5456, #5511), each holding a producer: the worker stops "
                "to let them go. Start it again: it continues from its last checkpoints"
            )
        producer = self.producer
        ended: list[BaseException | None] = []

        def call() -> None:
            try:
                producer.send_offsets_to_transaction(offsets, group, timeout)
                ended.append(None)
            except BaseException as err:  # handed to the waiting thread
                ended.append(err)

        watched = threading.Thread(target=call, name="streameval-send-offsets", daemon=True)
        watched.start()
        began, patience = time.monotonic(), timeout + HUNG_AFTER_S
        if self.deadline is not None:
            patience = min(patience, max(self.deadline - began, 0.0))
        watched.join(patience)
        if not ended:
            self._hung.append(watched)
            if self.deadline is not None and time.monotonic() >= self.deadline:
                self.stuck = True
                raise NoAnswer("send_offsets_to_transaction had not returned")
            raise _Hung(
                f"librdkafka's send_offsets_to_transaction did not return within "
                f"{time.monotonic() - began:.0f} s (librdkafka #5456, #5511)"
            )
        if ended[0] is not None:
            raise ended[0]

    def _renew(self, err: _Fenced) -> None:
        """Replace a producer Kafka fenced by a new one of the same transactional id. That
        is what Kafka does to a transaction that outlived ``transaction_timeout_ms`` (the
        broker away longer, a commit stuck): it aborts it and bumps the id's epoch, and
        librdkafka takes that as fatal. A process that keeps being fenced shares its id with
        another (a copied state_dir): it stops (:class:`OutputError`). A producer given up
        for a hung call (:class:`_Hung`) is replaced the same way, and not counted."""
        from confluent_kafka import Producer

        said = str(err)
        if isinstance(err, _Hung):
            log.warning(
                "%s. A new producer takes the same transactional id (which aborts the open "
                "transaction), and every stage starts again from its last checkpoint",
                said,
            )
        else:
            now = time.monotonic()
            self._renewals = [t for t in self._renewals if now - t < RENEW_WINDOW_S] + [now]
            if len(self._renewals) > RENEW_MAX:
                raise OutputError(_transactions_refused(said, self.transactional_id))
            log.warning(
                "Kafka fenced the worker's transactional producer (%s): most likely its "
                "transaction outlived transaction_timeout_ms while Kafka was away. A new "
                "producer takes the same transactional id, and every stage starts again "
                "from its last checkpoint",
                said,
            )
        old = self.producer
        try:
            old.purge(in_queue=True, in_flight=True, blocking=False)
            old.poll(0)
        except Exception as err:  # a fatal producer may refuse even that
            log.debug("purging the fenced producer: %s", err)
        self.producer = Producer(self._config)
        self.failed = self.given_up = None
        self.topics.clear()
        try:
            self._transact(self.producer.init_transactions)
        except _Fenced as err:
            raise OutputError(_transactions_refused(str(err), self.transactional_id)) from None
        self.producer.begin_transaction()
        for told in self.renewed:
            told(self.producer)

    def _missing(self) -> str | None:
        """A topic of the transaction that the cluster no longer has (None: all are there,
        or Kafka will not say)."""
        try:
            known = self._admin().list_topics(timeout=10).topics
        except Exception as failure:
            log.debug("could not tell which topic is gone: %s", failure)
            return None
        return next((topic for topic in sorted(self.topics) if topic not in known), None)

    def _forbidden(self, err: Any) -> str | None:
        """Which topic of the transaction the worker's principal may not write, as
        :func:`~streameval.app.output.delivery_error` says it (None: Kafka will not say)."""
        from confluent_kafka import TopicCollection
        from confluent_kafka.admin import AclOperation

        try:
            admin = self._admin()  # (kept until the answers came: they die with it)
            futures = admin.describe_topics(
                TopicCollection(sorted(self.topics)),
                include_authorized_operations=True,
                request_timeout=10,
            )
            for topic, future in futures.items():
                allowed = future.result().authorized_operations or []
                if AclOperation.WRITE not in allowed and AclOperation.ALL not in allowed:
                    return delivery_error(err, topic)
        except Exception as failure:  # the cluster will not say: the refusal as it came
            log.debug("could not tell which topic is forbidden: %s", failure)
        return None

    def _admin(self) -> Any:
        """An admin client with the worker's connection settings (without the producer's
        logger)."""
        from confluent_kafka.admin import AdminClient

        return AdminClient(producer_settings(unpolled(self.client)))


class _Fenced(RuntimeError):
    """librdkafka's fatal error of a transactional producer (a new one replaces it:
    :meth:`Transactions._renew`)."""


class _Hung(_Fenced):
    """A transactional call librdkafka did not return from: its producer is replaced too."""


#: While a commit is on its way, the data path goes on until the messages it holds for the
#: next transaction come to this many bytes, then waits for the commit: a commit that Kafka
#: is slow to answer (a coordinator away, up to transaction_timeout_ms) holds bounded memory.
HELD_MAX_BYTES = 64 * 2**20
#: A transactional call still running this long past its own timeout is taken as hung
HUNG_AFTER_S = 5.0
#: This many hung calls alive at once (each holds a producer and its threads) stop the worker
HUNG_MAX = 5
#: More than this many fenced producers within this many seconds: another process has the id
RENEW_MAX = 5
RENEW_WINDOW_S = 600.0


def _transactions_refused(said: str, transactional_id: str | None) -> str:
    return (
        f"Kafka refused the worker's transactions ({said}). If another worker process took "
        f"its transactional id ({transactional_id}: two workers share a state_dir they cannot "
        "lock, or a copy of it), give each worker its own state_dir; if the principal lacks "
        "the right, grant it WRITE and DESCRIBE on the TransactionalId resources with the "
        "prefix app_id (docs/operations.md, Security); or set processing_guarantee = "
        '"at_least_once" under [worker]'
    )


def claim_transactional_id(settings: WorkerSettings) -> tuple[str, Any]:
    """A transactional id of this worker process that a restart on the same ``state_dir``
    takes again — so that its first transaction fences the process it replaces and aborts
    what that one left open, rather than read_committed readers waiting out
    ``transaction_timeout_ms`` — and that no other live process holds: the first slot
    ``producer-<k>`` under ``state_dir/<app_id>`` whose lock is free (one per data-path
    process of a worker). Returns the id and the open lock file (held until the process
    ends)."""
    import fcntl
    import uuid

    home = settings.state_home()
    try:
        k = 0
        while True:
            lock = open(home / f"producer-{k}.lock", "a+")  # held for the process's life
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.close()
                k += 1
                continue
            name = home / f"producer-{k}.id"
            if not name.exists():
                name.write_text(f"{uuid.uuid4().hex}\n")
            return f"{settings.app_id}-{name.read_text().strip()}", lock
    except OSError as err:
        raise settings.state_dir_refused(f"{err.strerror}: {err.filename}") from None


#: the marker of the error :func:`hanging_transactions` words (tests and log searches use it)
HANGING = "a hanging transaction"
#: a transaction open this long past ``transaction_timeout_ms`` hangs: the broker looks for
#: expired transactions every 10 s (transaction.abort.timed.out.transaction.cleanup.interval.ms)
HANGING_MARGIN_S = 15.0
#: how often a worker waiting for a hanging transaction says so again
HANGING_REPEAT_S = 300.0


def waiting_at_stable_end(
    stats: dict[str, Any], topics: tuple[str, ...], paused: set[tuple[str, int]]
) -> dict[tuple[str, int], tuple[int, int]]:
    """From librdkafka's statistics of a read_committed consumer: ``(ls_offset, hi_offset)``
    of each partition of ``topics`` it fetches and has fetched up to its last stable offset.
    Left out: partitions not fetched (moved away, or ``paused``: librdkafka still says
    "active" of them), those whose fetcher is behind the stable end, and those whose leader
    is unknown or not up — their offsets are not current. (``fetchq_cnt`` says nothing of a
    partition: librdkafka forwards every partition's queue to the consumer's one, and each
    reports the length of that.)"""
    up = {
        b.get("nodeid")
        for b in (stats.get("brokers") or {}).values()
        if isinstance(b, dict) and b.get("state") == "UP"
    }
    found = {}
    for topic in topics:
        info = (stats.get("topics") or {}).get(topic)
        if not isinstance(info, dict):
            continue
        for name, p in (info.get("partitions") or {}).items():
            if name == "-1" or (topic, int(name)) in paused:
                continue
            stable, end, leader = p.get("ls_offset", -1), p.get("hi_offset", -1), p.get("leader")
            if (
                p.get("fetch_state") == "active"
                and p.get("next_offset", -1) >= stable
                and isinstance(leader, int)
                and leader >= 0
                and leader in up
            ):
                found[topic, int(name)] = (stable, end)
    return found


class HangWatch:
    """The internal partitions a hanging transaction holds, from librdkafka's statistics of
    the worker's consumer: a partition whose last stable offset (``ls_offset``) stays below
    its end (``hi_offset``) without moving for :data:`HANGING_MARGIN_S` past
    ``transaction_timeout_ms`` waits for a transaction older than any the broker lets live.

    Every writer of these partitions is a worker of the same ``app_id`` (the same timeout).
    The statistics only say what the last fetch saw, and a snapshot can be stale (a fetch
    held back, a partition paused), so a partition is only taken to hang when its end moved
    *after* the timeout with its stable offset still where it was — other writers' records
    fetched since, behind the transaction — and only said to have ended once its stable
    offset is seen to move. A partition missing from a snapshot tells nothing.
    """

    def __init__(self, timeout_ms: int) -> None:
        self.after_s = timeout_ms / 1000.0 + HANGING_MARGIN_S
        # per partition: the stable offset seen, since when, and the largest end seen with it
        self._held: dict[tuple[str, int], tuple[int, float, int]] = {}
        self._told = float("-inf")
        #: the partitions reported hanging whose stable offset has not been seen to move
        self.told: set[tuple[str, int]] = set()

    def observe(
        self, offsets: dict[tuple[str, int], tuple[int, int]], now: float
    ) -> tuple[dict[tuple[str, int], int], list[tuple[str, int]]]:
        """Take the ``(ls_offset, hi_offset)`` of the partitions fetched, as of ``now``
        (seconds, the snapshot's own monotonic time). Returns the partitions to report as
        hanging now, with their last stable offsets (every one hanging, at most once per
        :data:`HANGING_REPEAT_S`, or at once when one more hangs), and those reported before
        whose stable offset has moved since."""
        held, told = self._held, self.told
        hanging, ended = {}, []
        for tp, (stable, end) in offsets.items():
            if stable < 0 or end < 0:  # not known yet
                continue
            was = held.get(tp)
            if stable >= end or was is None or was[0] != stable:  # nothing open, or it moved
                if tp in told:
                    told.discard(tp)
                    ended.append(tp)
                if stable >= end:
                    held.pop(tp, None)
                else:
                    held[tp] = (stable, now, end)
                continue
            _, since, seen_end = was
            if end > seen_end:  # fetched since: the snapshot is current
                held[tp] = (stable, since, end)
                if now - since >= self.after_s:
                    hanging[tp] = stable
            elif tp in told:  # nothing new fetched: still as last reported
                hanging[tp] = stable
        ended.sort()
        if hanging and (not set(hanging) <= told or now - self._told >= HANGING_REPEAT_S):
            self._told = now
            told |= set(hanging)
            return hanging, ended
        return {}, ended

    def keep(self, partitions: Collection[tuple[str, int]]) -> None:
        """The worker's partitions are now ``partitions`` (a new assignment): what was seen of
        any other goes, unsaid — its new owner watches it. Those that stay are watched on,
        so a hang reported before the rebalance is said to have ended when it does (the
        group's eager rebalances revoke every partition first, and give most of them back)."""
        for tp in [tp for tp in self._held if tp not in partitions]:
            del self._held[tp]
        self.told.intersection_update(partitions)


def hanging_transactions(
    bootstrap: str,
    open_at: dict[tuple[str, int], int],
    group_offsets: bool = False,
    restoring: bool = True,
) -> str:
    """The error for partitions whose last stable offset has not moved for longer than
    ``transaction_timeout_ms`` and the margin the broker takes to notice an expired
    transaction (:data:`HANGING_MARGIN_S`): each ``(topic, partition)`` of ``open_at`` at the
    offset where its open transaction starts (its last stable offset), ``group_offsets`` when
    the group's committed offsets were not stable either; ``restoring``: the worker waits for
    them before it restores (else a stage waits for them as it reads). The broker ends every
    transaction by then, unless it skipped the transaction's markers (Kafka 4.4 does when it
    cannot find a partition's leader, as while a restarted broker is fenced): such a
    transaction stays open until an administrator aborts it (KIP-664), and read_committed
    readers wait for it.
    """
    tool = f"kafka-transactions.sh --bootstrap-server {bootstrap}"
    where, aborts = [], []
    for (topic, p), at in sorted(open_at.items()):
        where.append(f"{topic}[{p}] from offset {at}")
        aborts.append(f"{tool} abort --topic {topic} --partition {p} --start-offset {at}")
    if group_offsets:
        where.append("the group's committed offsets (a partition of __consumer_offsets)")
    group = (
        f"; and those `{tool} find-hanging --topic __consumer_offsets "
        "--max-transaction-timeout 1` lists, in the same way"
        if group_offsets
        else ""
    )
    return (
        f"{HANGING} on {', '.join(where)}: it has been open for longer than "
        "transaction_timeout_ms and the broker's 10 s to notice, so the broker has most likely "
        "lost track of it (it skips a transaction's markers when it cannot find a partition's "
        "leader, as while a restarted broker is fenced), and no read_committed reader passes "
        "it until it is aborted. "
        + (
            "This worker waits for it, and restores its partitions once it has ended (a join "
            "partition's disk store from the changelog alone). "
            if restoring
            else "The stages reading these partitions wait for it, and read on once it has ended. "
        )
        + "Check with "
        f"`{tool} find-hanging --broker-id <the partitions' leader> --max-transaction-timeout 1`"
        ", then abort every partition of that transaction (its ProducerId) that it lists, on "
        "each broker: "
        + "; ".join(f"`{a}`" for a in aborts)
        + group
        + " (with `--command-config <client properties>` on a secured cluster; "
        + 'docs/operations.md, "A hanging transaction")'
    )
