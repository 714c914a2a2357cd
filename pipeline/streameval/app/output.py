"""The worker's Kafka I/O: the cluster at start, the clients' settings, and the producer whose
every message is counted until Kafka acknowledges it."""

from __future__ import annotations

import functools
import logging
import shlex
import threading
import time
from collections import Counter
from typing import Any

from streameval.clients import consumer_settings, kafka_code, producer_settings
from streameval.topics import Topics, create_topics, load_topics

from .settings import WorkerSettings

__all__ = [
    "MAX_POLL_EXCEEDED",
    "SESSION_REFUSED",
    "KafkaErrors",
    "KafkaRefused",
    "NoAnswer",
    "Output",
    "OutputError",
    "connect",
    "consumer_config",
    "failed_transaction",
]

log = logging.getLogger("streameval.worker")


class OutputError(RuntimeError):
    """A record the worker must publish cannot be produced (its topic is gone)."""


class NoAnswer(RuntimeError):
    """Kafka did not answer before the worker had to stop (``shutdown_timeout_s``)."""


class KafkaRefused(RuntimeError):
    """The cluster answers but the worker cannot use it as it is: the worker's settings, or the
    cluster's topics, must change (the message says which)."""


#: What the worker says when librdkafka has left the group because the worker did not read
#: for ``max_poll_interval_ms``.
MAX_POLL_EXCEEDED = (
    "Kafka: %s. The group went on without this worker: it did not read for longer than "
    "max_poll_interval_ms, most likely restoring the partitions a rebalance gave it, or "
    "waiting for their previous owner's hanging transaction (logged as such). It joins again "
    "at its next read and restores again, and its partitions moved meanwhile. Raise "
    "STREAMEVAL_MAX_POLL_INTERVAL_MS (max_poll_interval_ms in [worker]) above the longest "
    "restore (the worker logs each assignment's time: 'ready in … s'), or end the hanging "
    "transaction"
)

#: What the worker says, and stops, when the group coordinator refuses its session timeout.
SESSION_REFUSED = (
    "Kafka refused the worker's session_timeout_ms = %d (%s): the brokers accept from their "
    "group.min.session.timeout.ms (6 s by default) to group.max.session.timeout.ms (30 "
    "minutes by default). Set STREAMEVAL_SESSION_TIMEOUT_MS (session_timeout_ms in [worker]) "
    "within them"
)


class KafkaErrors:
    """librdkafka's error callback: it retries by itself, so each kind is said once a minute.
    It also keeps whether the cluster answers (:attr:`reachable`): not once every broker
    connection is down, again once librdkafka's statistics show a broker up; and the first
    refusal no retry can cure (:attr:`refused`: credentials or the broker's certificate), and
    whether the group refuses the worker's settings (:attr:`group_refused`)."""

    def __init__(self) -> None:
        self._said: dict[str, float] = {}
        self.reachable = True
        self.refused: str | None = None
        #: the group coordinator's refusal of the worker's session timeout, in librdkafka's
        #: words (the worker stops: :data:`SESSION_REFUSED`)
        self.group_refused: str | None = None

    def __call__(self, err: Any) -> None:
        from confluent_kafka import KafkaError

        code = err.code() if hasattr(err, "code") else None
        said = err.str() if hasattr(err, "str") else str(err)
        if code == KafkaError._ALL_BROKERS_DOWN:
            self.reachable = False
        if self.refused is None and code in (KafkaError._AUTHENTICATION, KafkaError._SSL):
            self.refused = _refusal(code, said)
        if code == KafkaError.INVALID_SESSION_TIMEOUT:  # the worker stops, saying what to do
            if self.group_refused is None:
                self.group_refused = said
            return
        key = str(code) if code is not None else str(err)
        now = time.monotonic()
        if now - self._said.get(key, -1e9) >= 60:
            self._said[key] = now
            if code == KafkaError._MAX_POLL_EXCEEDED:
                log.error(MAX_POLL_EXCEEDED, err)
            else:
                log.warning("Kafka: %s (librdkafka retries by itself)", err)

    def brokers(self, stats: dict[str, Any]) -> None:
        """librdkafka's statistics (every few seconds): whether any broker is up."""
        brokers = stats.get("brokers")
        if isinstance(brokers, dict):
            self.reachable = any(b.get("state") == "UP" for b in brokers.values())


def _refusal(code: int, said: str) -> str:
    """What to do about a refusal (the broker's own words kept: they hold no secret)."""
    from confluent_kafka import KafkaError

    if code == KafkaError._AUTHENTICATION:
        return (
            f"Kafka refused the worker's credentials ({said}). Check sasl.username, "
            "sasl.password and sasl.mechanism under [worker.kafka] (or -X key=value / "
            "STREAMEVAL_KAFKA) against the user the cluster knows"
        )
    return (
        f"the TLS handshake with Kafka failed ({said}). Point ssl.ca.location under "
        "[worker.kafka] at the certificate of the CA that signed the brokers' certificates; "
        "if the brokers require client certificates, set ssl.certificate.location and "
        "ssl.key.location too"
    )


class _Closing(logging.Handler):
    """Counts connections the broker closes before answering the first request (ApiVersion):
    the sign of a client speaking plaintext to a TLS or SASL listener. Passes every line on."""

    def __init__(self, forward: logging.Logger | None) -> None:
        super().__init__()
        self.forward = forward
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "Disconnected" in text and "APIVERSION_QUERY" in text:
            self.count += 1
        if self.forward is not None:
            self.forward.handle(record)


#: that many connections closed before the first answer, for that long, and no answer at all:
#: stop (a broker that is starting, or a proxy with no broker behind it, gets that long)
CLOSED_BEFORE_ANSWER = 3
CLOSED_FOR_S = 30.0


def connect(
    client: dict[str, str],
    settings: WorkerSettings,
    topics: Topics,
    on_error: KafkaErrors,
    stopping: threading.Event,
) -> dict[str, int]:
    """Wait for the cluster, create the topics it lacks, return every topic's partition count
    ({} when stopped while waiting). Raises :class:`KafkaRefused` when the cluster answers
    but will not let the worker in (credentials, TLS, or a plaintext client at a TLS or SASL
    listener), or its topics do not fit (a changelog with fewer partitions than its stage):
    waiting would not change that."""
    from confluent_kafka.admin import AdminClient

    closing = _Closing(client.get("logger"))  # type: ignore[arg-type]
    watcher = logging.Logger("streameval.kafka.connect")
    watcher.addHandler(closing)
    admin = AdminClient({**producer_settings(client), "error_cb": on_error, "logger": watcher})
    delay = 1.0
    began = time.monotonic()
    while not stopping.is_set():
        try:
            metadata = admin.list_topics(timeout=10)
            break
        except Exception as err:  # KafkaException: the broker is down or unreachable
            admin.poll(0)  # (error callbacks)
            if on_error.refused is not None:
                raise KafkaRefused(on_error.refused) from None
            closed = closing.count >= CLOSED_BEFORE_ANSWER
            if closed and time.monotonic() - began >= CLOSED_FOR_S:
                raise KafkaRefused(
                    f"Kafka at {client.get('bootstrap.servers')} has closed every connection "
                    f"before answering for {CLOSED_FOR_S:.0f} s: the cluster most likely "
                    "requires TLS. Set security.protocol (SSL or SASL_SSL) and the ssl.* and "
                    "sasl.* settings it needs under [worker.kafka] (or -X key=value / "
                    "STREAMEVAL_KAFKA); docs/operations.md, Security. (A proxy or load "
                    "balancer with no broker behind it does the same)"
                ) from None
            log.warning(
                "Kafka at %s is not reachable (%s); retrying in %.0f s",
                client.get("bootstrap.servers"),
                err,
                delay,
            )
            stopping.wait(delay)
            delay = min(delay * 2, 30.0)
    else:
        return {}
    specs = load_topics(
        prefix=settings.topic_prefix,
        app_id=settings.app_id,
        changelog_configs=settings.changelog_configs,
    )
    missing = [s for s in specs if s.name not in metadata.topics]
    if missing:
        try:
            report = create_topics(admin, missing)
        except Exception as err:  # KafkaException: a right missing, a topic the cluster refuses
            raise KafkaRefused(creation_refused(err, missing, settings)) from None
        log.info("created topics: %s", ", ".join(report.created) or "none")
        metadata = _listing(admin, [s.name for s in missing], stopping)
        if metadata is None:
            return {}
    counts = {name: len(t.partitions) for name, t in metadata.topics.items()}
    for changelog, stage in (
        (topics.join_changelog, topics.events),
        (topics.eval_changelog, topics.outcomes),
    ):
        if counts[changelog] < counts[stage]:
            raise KafkaRefused(
                f"topic {changelog!r} has {counts[changelog]} partitions but {stage!r} has "
                f"{counts[stage]}: it needs at least as many (one per stage partition)"
            )
    return counts


def creation_refused(err: Exception, missing: list[Any], settings: WorkerSettings) -> str:
    """What to say when Kafka refuses to create the ``missing`` topics (their specs)."""
    from confluent_kafka import KafkaError

    error = err.args[0] if err.args else err
    code = kafka_code(err)
    names = ", ".join(spec.name for spec in missing)
    words = ["streameval", "topics", "create", "--app-id", settings.app_id]
    if settings.topic_prefix:
        words += ["--prefix", settings.topic_prefix]
    for key, value in settings.changelog_configs.items():
        words += ["--changelog-config", f"{key}={value}"]
    command = shlex.join(words)  # (quoted as a shell needs it: a value may have blanks)
    said = error.str() if hasattr(error, "str") else str(error)
    if code in (KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT, KafkaError._TRANSPORT):
        return (
            f"Kafka did not answer the creation of the topics the worker lacks ({names}): "
            f"{said}. Start the worker again once the cluster answers, or create the topics "
            f"beforehand: `{command}`"
        )
    if code in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED):
        return (
            f"the worker's principal may not create the topics it lacks ({names}); a topic it "
            "may not DESCRIBE looks missing too. Grant it CREATE (and DESCRIBE) on them, or "
            f"create them beforehand as an administrator: `{command}` (docs/operations.md, "
            "'Security')"
        )
    return (
        f"Kafka refused to create the topics the worker lacks ({names}): {said}. Change what "
        "it names in the topic plan (topics/topics.toml, or a copy in $STREAMEVAL_TOPICS_DIR; "
        f"changelog_configs for the changelogs), or create the topics beforehand: `{command}`"
    )


#: How long a worker waits for topics it created to show in the cluster's metadata
CREATED_TOPICS_WAIT_S = 30.0


def _usable(topic: Any) -> bool:
    """Listed with its partitions and no error (a new topic may be listed before its leaders)."""
    return topic is not None and topic.error is None and bool(topic.partitions)


def _listing(admin: Any, created: list[str], stopping: threading.Event) -> Any | None:
    """The cluster's metadata once it lists the topics just created, with their partitions
    (None when stopped meanwhile). A broker answers CreateTopics before every broker's metadata
    cache has them (seen on a single KRaft broker: the metadata right after creation lacked a
    changelog topic), so list until they show, for up to ``CREATED_TOPICS_WAIT_S`` in a row of
    answers without them. A broker that went away meanwhile is waited for, as :func:`connect`
    waits, and the count starts again once it answers."""
    deadline = time.monotonic() + CREATED_TOPICS_WAIT_S
    while True:
        try:
            metadata = admin.list_topics(timeout=10)
        except Exception as err:  # KafkaException: the broker went away meanwhile
            log.warning("Kafka stopped answering after it created the topics (%s); waiting", err)
            deadline = time.monotonic() + CREATED_TOPICS_WAIT_S
            metadata, absent = None, created
        else:
            listed = metadata.topics
            absent = [name for name in created if not _usable(listed.get(name))]
        if not absent:
            return metadata
        if stopping.is_set():
            return None
        if time.monotonic() >= deadline:
            raise KafkaRefused(
                f"Kafka created the topics {', '.join(absent)} but has not listed them after "
                f"{CREATED_TOPICS_WAIT_S:.0f} s; check the brokers' logs, then start the worker "
                "again (it creates only what is missing)"
            )
        stopping.wait(0.2)


def consumer_config(
    client: dict[str, str], settings: WorkerSettings, on_error: KafkaErrors, on_stats: Any
) -> dict[str, Any]:
    return {
        # defaults that the user's librdkafka settings (``kafka``) change
        "fetch.queue.backoff.ms": 10,  # the default (1 s) stalls a busy consumer
        "fetch.min.bytes": 65_536,
        "fetch.wait.max.ms": 20,
        "queued.max.messages.kbytes": 16_384,  # prefetch per partition: bounds memory
        **consumer_settings(client),
        # the worker's own (settings.OWNED_KAFKA: refused in ``kafka``)
        "group.id": settings.app_id,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
        "session.timeout.ms": settings.session_timeout_ms,
        # a rebalance restores in its callback, which librdkafka counts as time between two
        # reads when the read that serves it does not wait (a busy loop's): Rebalancing._assign
        "max.poll.interval.ms": settings.max_poll_interval_ms,
        "heartbeat.interval.ms": min(500, settings.session_timeout_ms // 5),  # rebalances seen soon
        "statistics.interval.ms": 5_000,
        "stats_cb": on_stats,
        "error_cb": on_error,
    }


def delivery_error(err: Any, topic: str) -> str:
    from confluent_kafka import KafkaError

    if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        return (
            f"{err.str()}: the worker's principal may not write to {topic}. Grant it WRITE "
            "(and DESCRIBE) on that topic; docs/operations.md, Security, lists every right "
            "the worker needs"
        )
    return str(err)


def refused_record(err: Exception, topic: str) -> str:
    """What to say when producing to ``topic`` raises at once (librdkafka already knows the
    topic is gone or forbidden)."""
    error = err.args[0] if err.args else None
    if hasattr(error, "code"):
        said = delivery_error(error, topic)
        if said != str(error):  # a refusal with its own advice
            return f"{said}. The worker stops without writing another checkpoint"
    return (
        f"Kafka refused a record for {topic} ({err}): was the topic deleted? The worker "
        "stops without writing another checkpoint: its last one stands. Start it again: it "
        "creates the topics it lacks and sends again what it sent since that checkpoint"
    )


def _passing(err: Any) -> bool:
    """Whether a delivery error may not happen again: a timeout or a broker away, not a
    refusal (a topic gone, a right missing, a record too large)."""
    from confluent_kafka import KafkaError

    if err.code() in refusal_codes():
        return False
    return err.retriable() or err.code() in (
        KafkaError._MSG_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError._FATAL,  # the producer was fenced: a new one is made at the commit
        KafkaError._INCONSISTENT,
    )


@functools.cache
def refusal_codes() -> frozenset[int]:
    """Errors a retry would meet again: a topic gone, a right missing, a record too large."""
    from confluent_kafka import KafkaError

    return frozenset(
        (
            KafkaError.UNKNOWN_TOPIC_OR_PART,
            KafkaError._UNKNOWN_TOPIC,
            KafkaError._UNKNOWN_PARTITION,
            KafkaError.TOPIC_AUTHORIZATION_FAILED,
            KafkaError.MSG_SIZE_TOO_LARGE,
            KafkaError.RECORD_LIST_TOO_LARGE,
        )
    )


def failed_transaction(err: Exception) -> bool:
    """Whether produce() refused a record because the open transaction has failed (it must
    be aborted; the reason comes with the records' reports or the commit) or the producer
    was fenced (it is replaced at the commit)."""
    from confluent_kafka import KafkaError

    error = err.args[0] if err.args else None
    return hasattr(error, "code") and error.code() in (KafkaError._STATE, KafkaError._FATAL)


def stops(said: str) -> str:
    return f"{said}. The worker stops without writing another checkpoint"


def _purged_codes() -> frozenset[int]:
    from confluent_kafka import KafkaError

    return frozenset((KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT))


class Output:
    """The one idempotent producer of a worker, for every topic it writes.

    Each message is counted under the *epoch* in force when it was produced until Kafka
    answers; a checkpoint opens a new epoch at its cut and may be written once no message of
    an earlier epoch is unanswered (its stage's outputs are durable). The first refusal is
    kept in :attr:`error`: the worker then stops without another checkpoint.
    """

    #: exactly-once (:class:`~streameval.app.transactions.Transactions`): every message
    #: belongs to the open transaction
    transactional = False

    def __init__(
        self, client: dict[str, str], on_error: KafkaErrors, extra: dict[str, Any] | None = None
    ) -> None:
        from confluent_kafka import Producer

        config: dict[str, Any] = {
            # defaults that the user's librdkafka settings (``kafka``) change
            "linger.ms": 20,
            "compression.type": "lz4",
            "message.max.bytes": 67_108_864,
            "queue.buffering.max.kbytes": 1_048_576,
            **producer_settings(client),
            "enable.idempotence": True,
            "error_cb": on_error,
            **(extra or {}),
        }
        self.producer = Producer(config)
        self._config = config
        self.client = client
        #: the topics written since the last commit (to name one Kafka refuses)
        self.topics: set[str] = set()
        #: exactly-once: a record of the open transaction failed for a reason a retry may
        #: cure (a timeout while Kafka was away): the transaction must be aborted
        self.failed: str | None = None
        self.epoch = 0
        self.error: str | None = None
        #: past it (the worker must have stopped by then), waiting for Kafka raises NoAnswer
        self.deadline: float | None = None
        self._unanswered: Counter[int] = Counter()
        self._on_delivery = self._answer(0)

    def _answer(self, epoch: int) -> Any:
        unanswered = self._unanswered

        def delivered(err: Any, message: Any) -> None:
            unanswered[epoch] -= 1
            if err is None or err.code() in _purged_codes():
                return
            if self.transactional and _passing(err):  # abort, go back, try again
                if self.failed is None:
                    self.failed = f"{message.topic()}: {err.str()}"
            elif self.error is None:
                self.error = delivery_error(err, message.topic())

        return delivered

    def purge(self) -> int:
        """Throw away every message not yet sent to Kafka (the worker lost its partitions:
        what their stages produced since their last checkpoint belongs to whoever restores
        them from it); return how many. Their delivery reports say "purged", which is no
        refusal."""
        queued = len(self.producer)
        self.producer.purge(in_queue=True, in_flight=False, blocking=True)
        self.producer.poll(0)
        return queued - len(self.producer)

    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None = None,
        partition: int = -1,
        headers: Any = None,
    ) -> None:
        while True:
            try:
                self.producer.produce(
                    topic, value, key, partition, headers=headers, on_delivery=self._on_delivery
                )
                self._unanswered[self.epoch] += 1
                self.topics.add(topic)
                return
            except BufferError:  # the local queue is full: let deliveries drain
                self.make_room()
            except Exception as err:  # KafkaException: the topic is gone, or forbidden
                if self.transactional and failed_transaction(err):
                    self.producer.poll(0)  # the reports of its records may say why
                    if self.error is not None:
                        raise OutputError(stops(self.error)) from None
                    if self.failed is None:
                        self.failed = f"{topic}: {err}"
                    return  # dropped with the transaction, aborted at the next commit
                said = refused_record(err, topic)
                if self.error is None:  # sticky: no checkpoint may be written past it
                    self.error = said
                raise OutputError(said) from None

    def make_room(self) -> None:
        """Wait a moment for deliveries to drain the producer's full queue."""
        self._in_time()
        self.producer.poll(0.05)

    def _in_time(self) -> None:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise NoAnswer(f"{len(self.producer)} messages not acknowledged by Kafka")

    def next_epoch(self) -> int:
        """Open an epoch (at a checkpoint's cut); return it."""
        self.epoch += 1
        self._on_delivery = self._answer(self.epoch)
        return self.epoch

    def oldest_unanswered(self) -> int:
        """The oldest epoch with a message Kafka has not answered (past the current one when
        every message is answered)."""
        unanswered = self._unanswered
        for e in [e for e, n in unanswered.items() if not n and e < self.epoch]:
            del unanswered[e]
        return min((e for e, n in unanswered.items() if n), default=self.epoch + 1)

    def poll(self) -> None:
        self.producer.poll(0)

    def send_now(self) -> None:
        """Send what lingers: ``flush(0)`` ignores linger.ms while it runs (librdkafka #3489)
        and, with no timeout, returns at once."""
        self.producer.flush(0)

    def flush(self) -> None:
        """Wait until Kafka has answered every message (or raise :class:`NoAnswer` at the
        :attr:`deadline`)."""
        while True:
            wait = 10.0 if self.deadline is None else min(10.0, self.deadline - time.monotonic())
            if self.producer.flush(max(wait, 0.0)) == 0:
                return
            self._in_time()
            log.warning("waiting for Kafka to acknowledge %d messages", len(self.producer))
