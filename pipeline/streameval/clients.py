"""Kafka client settings: where the cluster is and how to talk to it."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable

__all__ = [
    "PROTOCOLS",
    "ClientConfigError",
    "bootstrap_problem",
    "client_config",
    "consumer_settings",
    "first_address",
    "kafka_trouble",
    "producer_settings",
    "unpolled",
]


class ClientConfigError(ValueError):
    """No cluster to talk to, or a malformed client setting."""


def client_config(bootstrap: str | None = None, settings: Iterable[str] = ()) -> dict[str, str]:
    """librdkafka settings: ``bootstrap.servers`` plus ``key=value`` pass-through settings
    (SASL/SSL, client ids ...), and the quiet ``logger`` of the commands (:data:`QUIET`).

    The bootstrap is, in order: the argument, ``$STREAMEVAL_BOOTSTRAP``, the local instance
    started with ``streameval kafka start``.
    """
    config: dict[str, str] = {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ClientConfigError(
                f"Kafka setting {item!r} is not key=value (e.g. security.protocol=SASL_SSL)"
            )
        config[key.strip()] = value
    bootstrap = bootstrap or config.pop("bootstrap.servers", None)
    bootstrap = bootstrap or os.environ.get("STREAMEVAL_BOOTSTRAP")
    if not bootstrap:
        from streameval.devkafka import KafkaInstance

        local = KafkaInstance.load(KafkaInstance.named("default"))
        if local is not None and local.running():
            bootstrap = local.bootstrap
    if not bootstrap:
        raise ClientConfigError(
            "no Kafka to talk to: pass --bootstrap HOST:PORT, set STREAMEVAL_BOOTSTRAP, or start "
            "a local one with `streameval kafka start`"
        )
    problem = bootstrap_problem(bootstrap)
    if problem is not None:
        raise ClientConfigError(f"bootstrap servers {bootstrap!r}: {problem}")
    config["bootstrap.servers"] = bootstrap
    config["logger"] = QUIET  # type: ignore[assignment]
    return config


#: the prefixes librdkafka reads before a broker's address (its security protocols)
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def bootstrap_problem(bootstrap: str) -> str | None:
    """What is wrong with a list of bootstrap servers that no Kafka client could use, or None:
    a URL (``http://host:9092``), whose scheme librdkafka cannot parse, so that it reaches no
    broker and a command would wait and then say that Kafka did not answer.

    >>> bootstrap_problem("kafka-1:9092,SASL_SSL://kafka-2:9093") is None
    True
    >>> bootstrap_problem("https://kafka:9092")
    "'https://kafka:9092' is a URL; a Kafka address is HOST:PORT (e.g. localhost:9092), without https://"
    """
    for server in bootstrap.split(","):
        scheme, sep, _rest = server.strip().partition("://")
        if sep and scheme.upper() not in PROTOCOLS:
            return (
                f"{server.strip()!r} is a URL; a Kafka address is HOST:PORT (e.g. "
                f"localhost:9092), without {scheme}://"
            )
    return None


def first_address(bootstrap: str) -> str:
    """The first broker's ``HOST:PORT`` in a list of bootstrap servers, without the security
    protocol librdkafka may read before it (for a URL of one's own, ``kafka://`` + this).

    >>> first_address("SASL_SSL://kafka-1:9093,kafka-2:9093")
    'kafka-1:9093'
    """
    server = bootstrap.split(",")[0].strip()
    scheme, sep, rest = server.partition("://")
    return rest if sep and scheme.upper() in PROTOCOLS else server


def unpolled(client: dict) -> dict:
    """``client`` without its ``logger``, for a short-lived client nobody polls (an admin
    client, a consumer asked only for offsets): librdkafka hands a client's lines to its
    ``logger`` only from ``poll``, so they would wait in its queue, never written."""
    return {k: v for k, v in client.items() if k != "logger"}


#: librdkafka's settings that only a producer reads, and those that only a consumer reads (its
#: CONFIGURATION.md marks them P and C; aliases included). One set of settings is given to all
#: of a worker's clients, and librdkafka warns, once per client, about each one of the other
#: kind: a consumer "will ignore" a producer's ``compression.type``. Each client gets the
#: settings of its kind (:func:`producer_settings`, :func:`consumer_settings`).
PRODUCER_ONLY = frozenset(
    {
        "acks", "batch.num.messages", "batch.size", "compression.codec", "compression.level",
        "compression.type", "delivery.report.only.error", "delivery.timeout.ms", "dr_cb",
        "dr_msg_cb", "enable.gapless.guarantee", "enable.idempotence", "linger.ms",
        "message.send.max.retries", "message.timeout.ms", "msg_order_cmp", "partitioner",
        "partitioner_cb", "produce.offset.report", "queue.buffering.backpressure.threshold",
        "queue.buffering.max.kbytes", "queue.buffering.max.messages", "queue.buffering.max.ms",
        "queuing.strategy", "request.required.acks", "request.timeout.ms", "retries",
        "sticky.partitioning.linger.ms", "transaction.timeout.ms", "transactional.id",
    }
)  # fmt: skip
CONSUMER_ONLY = frozenset(
    {
        "auto.commit.enable", "auto.commit.interval.ms", "auto.offset.reset", "check.crcs",
        "consume.callback.max.messages", "consume_cb", "coordinator.query.interval.ms",
        "enable.auto.commit", "enable.auto.offset.store", "enable.partition.eof",
        "fetch.error.backoff.ms", "fetch.max.bytes", "fetch.message.max.bytes",
        "fetch.min.bytes", "fetch.queue.backoff.ms", "fetch.wait.max.ms", "group.id",
        "group.instance.id", "group.protocol", "group.protocol.type", "group.remote.assignor",
        "heartbeat.interval.ms", "isolation.level", "max.partition.fetch.bytes",
        "max.poll.interval.ms", "max.poll.records", "offset.store.method", "offset.store.path",
        "offset.store.sync.interval.ms", "offset_commit_cb", "partition.assignment.strategy",
        "queued.max.messages.kbytes", "queued.min.messages", "rebalance_cb",
        "session.timeout.ms", "share.acknowledgement.mode",
    }
)  # fmt: skip


def producer_settings(client: dict) -> dict:
    """``client`` without the settings only a consumer reads: for a producer or an admin
    client (librdkafka's admin client is a producer)."""
    return {k: v for k, v in client.items() if k not in CONSUMER_ONLY}


def consumer_settings(client: dict) -> dict:
    """``client`` without the settings only a producer reads."""
    return {k: v for k, v in client.items() if k not in PRODUCER_ONLY}


#: The clients' ``logger`` for the commands: librdkafka's own lines (a refused connection,
#: ~20 a second) stay off the terminal — a broker that does not answer ends in one message
#: that says what to do. The worker logs them instead (streameval.logs.KAFKA_LOG).
QUIET = logging.getLogger("streameval.kafka.quiet")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False


def kafka_code(err: Exception) -> int | None:
    """The KafkaError code a KafkaException carries (None for another exception)."""
    error = err.args[0] if err.args else None
    return error.code() if hasattr(error, "code") else None


def kafka_trouble(err: Exception) -> str:
    """What kind of failure a KafkaException is: ``"unanswered"`` (a wrong address, Kafka
    down, a request that timed out), ``"connection refused"`` (TLS or SASL turned the
    connection down), ``"not ready"`` (a cluster starting, or electing a coordinator or a
    leader, says so for a while), ``"client"`` (the client's own settings) or ``"refused"``
    (Kafka's answer, final). The first and the third pass by themselves."""
    from confluent_kafka import KafkaError as E

    error = err.args[0] if err.args else None
    code = kafka_code(err)
    unanswered = (E._TRANSPORT, E._TIMED_OUT, E._ALL_BROKERS_DOWN, E._RESOLVE,
                  E._TIMED_OUT_QUEUE, E._MSG_TIMED_OUT)  # fmt: skip
    if code is None or code in unanswered:
        return "unanswered"
    if code in (E._AUTHENTICATION, E._SSL):  # a broker turned the connection down
        return "connection refused"
    transient = (
        E._WAIT_COORD,
        E.REQUEST_TIMED_OUT,
        E.NETWORK_EXCEPTION,
        E.COORDINATOR_NOT_AVAILABLE,
        E.NOT_COORDINATOR,
        E.COORDINATOR_LOAD_IN_PROGRESS,
        E.NOT_CONTROLLER,
        E.LEADER_NOT_AVAILABLE,
        E.NOT_LEADER_FOR_PARTITION,
    )
    if code in transient:
        return "not ready"
    if code < 0:  # the client's own: its settings, before or without Kafka's answer
        return "client"
    if hasattr(error, "retriable") and error.retriable():
        return "not ready"
    return "refused"


def refused_for_good(err: Exception) -> bool:
    """Whether a KafkaException met while reading a partition is one that waiting would not
    change: a right missing (authorization), or a connection TLS or SASL turned down."""
    from confluent_kafka import KafkaError as E

    denied = (E.TOPIC_AUTHORIZATION_FAILED, E.GROUP_AUTHORIZATION_FAILED,
              E.CLUSTER_AUTHORIZATION_FAILED)  # fmt: skip
    return kafka_code(err) in denied or kafka_trouble(err) == "connection refused"
