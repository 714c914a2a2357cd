"""An input message as the decoders see it, and what a malformed one becomes.

The decoders (:mod:`streameval.codec`) read a :class:`Message` — a Kafka message, or a
:class:`StoredMessage` held in memory — and turn any byte string that is no event into a
:class:`DeadLetter`: the original bytes with a reason a person can act on and a short code to
count by (:data:`DEAD_LETTER_REASONS`), carried by :class:`EventError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from streameval.records import MAX_MESSAGE_BYTES

__all__ = [
    "BOM",
    "DEAD_LETTER_REASONS",
    "MAX_DEPTH",
    "NO_TIMESTAMP",
    "DeadLetter",
    "EventError",
    "Message",
    "StoredMessage",
]

#: A UTF-8 byte order mark: some producers (and editors) put one before the text; tolerated.
BOM = b"\xef\xbb\xbf"

#: Deepest nesting of JSON arrays and objects accepted (``features`` is free-form JSON); a
#: deeper message is a dead letter, refused before it is parsed.
MAX_DEPTH = 64

#: Every reason code a dead letter may carry, with what it means (docs/replay.md lists them).
DEAD_LETTER_REASONS = {
    "invalid_json": "not JSON (a syntax error, NaN or Infinity, a lone UTF-16 surrogate)",
    "schema_registry": "Confluent Schema Registry framing (a magic byte 0, a schema id) first",
    "invalid_utf8": "a string holds bytes that are not UTF-8",
    "too_deep": f"arrays and objects nested deeper than {MAX_DEPTH}",
    "oversized": f"larger than {MAX_MESSAGE_BYTES} bytes",
    "empty_message": "no value at all (a tombstone)",
    "not_an_object": "JSON, but not one object",
    "missing_field": "a required field is absent",
    "unknown_field": "a field the topic's schema does not have",
    "wrong_topic": "the fields of another kind of message (a prediction on the instances topic)",
    "unknown_type": "`type` names no kind, or another kind than its topic carries",
    "wrong_type": "a field of the wrong JSON type (a string for a number, a float for ts ...)",
    "empty_value": "an empty id or label",
    "too_long": "an id, model id, label or attribute value past 512 characters (an attribute's "
    "name past 256, more than 256 attributes)",
    "bad_timestamp": "ts no date from 1973 to 2200 in any unit (or such a Kafka timestamp)",
    "wrong_ts_unit": "ts a date in another unit than ts_unit (seconds sent as milliseconds)",
    "no_timestamp": "with ts_source = 'kafka': a message without a Kafka timestamp",
    "bad_label": "an integer label outside the signed 64-bit range",
    "bad_scores": "scores that are no probabilities, or name no class like the label does",
    "ts_in_future": "ts later than the message was sent (or than now), beyond max_future_ms",
    "ts_too_old": "ts older than its partition's latest event by more than label_ttl_ms",
    "unknown_topic": "read from a topic that is not an input topic",
    "undecodable": "anything else the decoder could not make sense of",
}


class EventError(ValueError):
    """A malformed event, with a reason a person can act on and a short code to count by."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class Message(Protocol):
    """What the decoder needs of a Kafka message (confluent_kafka.Message has it)."""

    def topic(self) -> str: ...
    def partition(self) -> int: ...
    def offset(self) -> int: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def timestamp(self) -> tuple[int, int]: ...


#: ``Message.timestamp()``'s type when the message has no timestamp (librdkafka's value)
NO_TIMESTAMP = 0


class StoredMessage:
    """A :class:`Message` held in memory: input for tests and benchmarks without a broker.
    ``timestamp`` is the Kafka timestamp (epoch ms), None for a message without one."""

    __slots__ = ("_k", "_o", "_p", "_t", "_ts", "_v")

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int | None = None,
    ) -> None:
        self._t, self._p, self._o, self._k, self._v = topic, partition, offset, key, value
        self._ts = (NO_TIMESTAMP, 0) if timestamp is None else (1, timestamp)

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def key(self) -> bytes | None:
        return self._k

    def value(self) -> bytes | None:
        return self._v

    def timestamp(self) -> tuple[int, int]:
        return self._ts


@dataclass(frozen=True)
class DeadLetter:
    """A malformed input message: the original bytes and where they came from, and why."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    reason: str
    code: str

    def headers(self) -> list[tuple[str, bytes]]:
        """Kafka headers of the dead-letter record (``topics/schemas/dead-letter.schema.json``)."""
        headers = [
            ("streameval.source.topic", self.topic.encode()),
            ("streameval.source.partition", str(self.partition).encode()),
            ("streameval.source.offset", str(self.offset).encode()),
            ("streameval.reason", self.reason.encode("utf-8", "backslashreplace")),
            ("streameval.reason.code", self.code.encode()),
        ]
        if self.value is not None and len(self.value) > MAX_MESSAGE_BYTES:
            headers.append(("streameval.value.bytes", str(len(self.value)).encode()))
        return headers

    def payload(self) -> bytes:
        """The dead-letter record's value: the original bytes, cut to the first
        :data:`MAX_MESSAGE_BYTES` if longer (the ``streameval.value.bytes`` header then gives
        the original length), so that it always fits the dead-letters topic."""
        value = self.value or b""
        return value if len(value) <= MAX_MESSAGE_BYTES else value[:MAX_MESSAGE_BYTES]
