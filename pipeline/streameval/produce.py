"""``streameval produce EVENTS.jsonl``: an events file onto the input topics, for a worker.

The file is the one ``streameval replay`` reads (one event per line, with its ``type``). Every
line is checked first, as replay decodes it — a malformed one stops the command before anything
is sent, naming the line — and then each line is sent as it is (without a byte order mark and
surrounding blanks) to the input topic of its type, with the prefix, keyed by its instance id,
in file order: a partition then carries its events in the order of the file, as replay takes
them. The record timestamp is the time of sending, or, when the settings read event time from
it (``[time] ts_source = "kafka"``), the event's ``ts`` in milliseconds — so that a worker sees
the times replay sees.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

from streameval.clients import producer_settings
from streameval.codec import Event, NotUtf8, decode_event, event_lines
from streameval.decode_errors import utf16_file
from streameval.messages import EventError
from streameval.topics import INPUT_KINDS

__all__ = ["PRODUCE_DEFAULTS", "ProduceError", "check_file", "produce_config", "produce_file"]

#: the input topic (without prefix) of each type of event
TOPIC_OF = {kind: topic for topic, kind in INPUT_KINDS.items()}

#: the settings of this command's producer unless the user's -X settings say otherwise:
#: idempotent, so that a retried request does not write an event twice, and batched for 20 ms
PRODUCE_DEFAULTS = MappingProxyType({"linger.ms": 20, "enable.idempotence": True})


def produce_config(client: dict[str, str]) -> dict[str, Any]:
    """The producer's librdkafka settings: :data:`PRODUCE_DEFAULTS`, then the user's own of
    a producer's kind (``-X enable.idempotence=false`` for a cluster whose ACLs do not grant
    idempotent writes)."""
    return {**PRODUCE_DEFAULTS, **producer_settings(client)}


class ProduceError(Exception):
    """Why the file was not sent, or not all of it: a message for a person."""


def _events(path: Path, ts_unit: str) -> Iterator[tuple[bytes, Event]]:
    """Every event of the file with its line as sent; :class:`ProduceError` at a bad line."""
    with path.open("rb") as handle:
        try:
            for number, value in event_lines(handle):
                try:
                    event = decode_event(value, ts_unit)
                except EventError as err:
                    raise ProduceError(f"{path} line {number}: {err}") from None
                yield value, event
        except NotUtf8:
            raise ProduceError(utf16_file(path)) from None


def check_file(path: Path, ts_unit: str = "ms") -> Counter[str]:
    """How many events of each type the file holds; :class:`ProduceError` naming the first
    malformed line, or saying that there is no event at all."""
    kinds = Counter(event.__struct_config__.tag for _, event in _events(path, ts_unit))
    if not kinds:
        raise ProduceError(f"{path} has no events: nothing to send")
    return kinds


def produce_file(
    path: Path,
    client: dict[str, str],
    prefix: str = "",
    *,
    ts_unit: str = "ms",
    stamp_event_time: bool = False,
    timeout_s: float = 60.0,
) -> Counter[str]:
    """Send every event of ``path`` to ``prefix`` + its type's topic; how many went to each
    topic. ``stamp_event_time``: each record's Kafka timestamp is its event's time.

    Raises :class:`ProduceError` for a malformed line (before anything is sent), an input
    topic that does not exist, or records the broker did not take; a broker that does not
    answer raises ``confluent_kafka.KafkaException``.
    """
    from confluent_kafka import Producer

    try:
        check_file(path, ts_unit)
    except ProduceError as err:
        raise ProduceError(f"{err}; nothing was sent") from None
    producer = Producer(produce_config(client))
    metadata = producer.list_topics(timeout=10)  # KafkaException when nobody answers
    for topic in TOPIC_OF.values():
        if prefix + topic not in metadata.topics:
            raise ProduceError(
                f"topic {prefix}{topic} does not exist: create the topics first with "
                f"`streameval topics create{f' --prefix {prefix}' if prefix else ''}` "
                "(same --bootstrap and -X settings)"
            )
    sent: Counter[str] = Counter()
    failed: list[Any] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failed.append(error)

    for value, event in _events(path, ts_unit):
        topic = prefix + TOPIC_OF[event.__struct_config__.tag]
        stamp = event.ts if stamp_event_time else 0  # 0: the time of sending
        while True:
            try:
                producer.produce(
                    topic, value, event.instance_id.encode(), on_delivery=delivered, timestamp=stamp
                )
                break
            except BufferError:  # the local queue is full: let it drain
                producer.poll(0.1)
        producer.poll(0)
        sent[topic] += 1
    left = producer.flush(timeout_s)
    if failed or left:
        lost = len(failed) + left
        why = f"the first error: {failed[0].str()}" if failed else f"none within {timeout_s:g} s"
        raise ProduceError(
            f"{lost} of {sum(sent.values())} records were not delivered ({why}); the others "
            "were, and a second run sends every line again (the worker counts and ignores "
            "repeated events)"
        )
    return sent
