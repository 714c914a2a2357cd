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
    then be stamped from now on). ``stop`` is checked between events.
    """
    from confluent_kafka import Producer

    producer = Producer({**client, "linger.ms": 20, "compression.type": "lz4"})
    sent = 0
    try:
        for event in events:
            if stop is not None and stop():
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
                    producer.produce(topic, value, event["instance_id"].encode())
                    break
                except BufferError:
                    producer.poll(0.05)
            sent += 1
            if event["type"] == "instance" and on_instance is not None:
                on_instance()
            if sent % 1000 == 0:
                producer.poll(0)
    finally:
        producer.flush(30)
    return sent
