"""Send simulated events to the input topics, as fast as possible or in real time."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson

__all__ = ["produce_events"]

TOPIC_OF = {"instance": "instances", "prediction": "predictions", "label": "labels"}


def produce_events(
    events: Iterable[dict[str, Any]],
    client: dict[str, str],
    prefix: str = "",
    *,
    realtime: bool = False,
    on_instance: Callable[[], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> int:
    """Produce every event to ``prefix`` + its topic, keyed by ``instance_id``; return how many.

    With ``realtime`` an event is sent when the wall clock reaches its ``ts`` (the events must
    then be stamped from now on). ``stop`` is checked between events. A broker that does not
    answer raises ``confluent_kafka.KafkaException`` before anything is sent; a missing input
    topic, or records the broker did not take, :class:`~streameval.produce.ProduceError`.
    """
    from confluent_kafka import Producer

    from streameval.clients import producer_settings
    from streameval.produce import ProduceError

    producer = Producer({"linger.ms": 20, "compression.type": "lz4", **producer_settings(client)})
    metadata = producer.list_topics(timeout=10)  # KafkaException when nobody answers
    missing = [prefix + t for t in TOPIC_OF.values() if prefix + t not in metadata.topics]
    if missing:
        raise ProduceError(
            f"topic {missing[0]} does not exist: create the topics first with `streameval "
            f"topics create{f' --prefix {prefix}' if prefix else ''}` (same --bootstrap and -X "
            "settings)"
        )
    failed: list[Any] = []  # the first delivery error, and how many there were
    count = [0]

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            count[0] += 1
            failed[:] = failed or [error]

    sent = 0
    try:
        for event in events:
            if (stop is not None and stop()) or failed:  # (events lost: no more of them)
                break
            if realtime:
                wait = event["ts"] / 1000.0 - time.time()
                if wait > 0:
                    producer.poll(0)
                    time.sleep(wait)
            topic = prefix + TOPIC_OF[event["type"]]
            value = orjson.dumps({k: v for k, v in event.items() if k != "type"})
            while True:
                try:
                    producer.produce(
                        topic, value, event["instance_id"].encode(), on_delivery=delivered
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            sent += 1
            if event["type"] == "instance" and on_instance is not None:
                on_instance()
            if sent % 1000 == 0:
                producer.poll(0)
    finally:
        left = producer.flush(30)
    if failed or left:
        why = f"the first error: {failed[0].str()}" if failed else "none within 30 s"
        raise ProduceError(f"{count[0] + left} of {sent} events were not delivered ({why})")
    return sent
