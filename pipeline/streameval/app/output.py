"""The worker's Kafka I/O: the cluster at start, the clients' settings, and the producer whose
every message is counted until Kafka acknowledges it."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any

from streameval.topics import Topics, create_topics, load_topics

from .settings import WorkerSettings

__all__ = ["KafkaErrors", "NoAnswer", "Output", "connect", "consumer_config"]

log = logging.getLogger("streameval.worker")


class NoAnswer(RuntimeError):
    """Kafka did not answer before the worker had to stop (``shutdown_timeout_s``)."""


class KafkaErrors:
    """librdkafka's error callback: it retries by itself, so each kind is said once a minute.
    It also keeps whether the cluster answers (:attr:`reachable`): not once every broker
    connection is down, again once librdkafka's statistics show a broker up."""

    def __init__(self) -> None:
        self._said: dict[str, float] = {}
        self.reachable = True

    def __call__(self, err: Any) -> None:
        from confluent_kafka import KafkaError

        code = err.code() if hasattr(err, "code") else None
        if code == KafkaError._ALL_BROKERS_DOWN:
            self.reachable = False
        key = str(code) if code is not None else str(err)
        now = time.monotonic()
        if now - self._said.get(key, -1e9) >= 60:
            self._said[key] = now
            log.warning("Kafka: %s (librdkafka retries by itself)", err)

    def brokers(self, stats: dict[str, Any]) -> None:
        """librdkafka's statistics (every few seconds): whether any broker is up."""
        brokers = stats.get("brokers")
        if isinstance(brokers, dict):
            self.reachable = any(b.get("state") == "UP" for b in brokers.values())


def connect(
    client: dict[str, str],
    settings: WorkerSettings,
    topics: Topics,
    on_error: KafkaErrors,
    stopping: threading.Event,
) -> dict[str, int]:
    """Wait for the cluster, create the topics it lacks, return every topic's partition count
    ({} when stopped while waiting)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**client, "error_cb": on_error})
    delay = 1.0
    while not stopping.is_set():
        try:
            metadata = admin.list_topics(timeout=10)
            break
        except Exception as err:  # KafkaException: the broker is down or unreachable
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
        report = create_topics(admin, missing)
        log.info("created topics: %s", ", ".join(report.created) or "none")
        metadata = admin.list_topics(timeout=10)
    counts = {name: len(t.partitions) for name, t in metadata.topics.items()}
    for changelog, stage in (
        (topics.join_changelog, topics.events),
        (topics.eval_changelog, topics.outcomes),
    ):
        if counts[changelog] < counts[stage]:
            raise RuntimeError(
                f"topic {changelog!r} has {counts[changelog]} partitions but {stage!r} has "
                f"{counts[stage]}: it needs at least as many (one per stage partition)"
            )
    return counts


def consumer_config(
    client: dict[str, str], settings: WorkerSettings, on_error: KafkaErrors, on_stats: Any
) -> dict[str, Any]:
    return {
        **client,
        "group.id": settings.app_id,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
        "fetch.queue.backoff.ms": 10,  # the default (1 s) stalls a busy consumer
        "fetch.min.bytes": 65_536,
        "fetch.wait.max.ms": 20,
        "queued.max.messages.kbytes": 16_384,  # prefetch per partition: bounds memory
        "session.timeout.ms": settings.session_timeout_ms,
        "heartbeat.interval.ms": min(500, settings.session_timeout_ms // 5),  # rebalances seen soon
        "statistics.interval.ms": 5_000,
        "stats_cb": on_stats,
        "error_cb": on_error,
    }


class Output:
    """The one idempotent producer of a worker, for every topic it writes.

    Each message is counted under the *epoch* in force when it was produced until Kafka
    answers; a checkpoint opens a new epoch at its cut and may be written once no message of
    an earlier epoch is unanswered (its stage's outputs are durable). The first refusal is
    kept in :attr:`error`: the worker then stops without another checkpoint.
    """

    def __init__(self, client: dict[str, str], on_error: KafkaErrors) -> None:
        from confluent_kafka import Producer

        self.producer = Producer(
            {
                **client,
                "enable.idempotence": True,
                "linger.ms": 20,
                "compression.type": "lz4",
                "message.max.bytes": 67_108_864,
                "queue.buffering.max.kbytes": 1_048_576,
                "error_cb": on_error,
            }
        )
        self.epoch = 0
        self.error: str | None = None
        #: past it (the worker must have stopped by then), waiting for Kafka raises NoAnswer
        self.deadline: float | None = None
        self._unanswered: Counter[int] = Counter()
        self._on_delivery = self._answer(0)

    def _answer(self, epoch: int) -> Any:
        unanswered = self._unanswered

        def delivered(err: Any, _message: Any) -> None:
            unanswered[epoch] -= 1
            if err is not None and self.error is None:
                self.error = str(err)

        return delivered

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
                return
            except BufferError:  # the local queue is full: let deliveries drain
                self.make_room()

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
