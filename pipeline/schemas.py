"""The one place that knows the wire format: input messages in, output records out.

Input messages (DESIGN.md "Messages") are decoded and validated with msgspec, in bulk, into
columns the core can use directly; a malformed one becomes a :class:`DeadLetter` with a reason
a person can act on. The JSON Schemas in ``topics/schemas/`` state the same contract for other
languages (a test checks that both accept and reject the same examples). Output records are
plain dicts encoded with orjson, NaN becoming ``null``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol

import msgspec
import numpy as np
import orjson

__all__ = [
    "KINDS",
    "MAX_MESSAGE_BYTES",
    "MAX_TS",
    "BatchDecoder",
    "DeadLetter",
    "DecodedBatch",
    "Event",
    "EventError",
    "InstanceEvent",
    "InstanceRecord",
    "LabelEvent",
    "LabelRecord",
    "PredictionEvent",
    "PredictionRecord",
    "StoredMessage",
    "decode_event",
    "encode_record",
]

#: Event times are epoch milliseconds; anything past the year 2200 is a unit error (µs, ns).
MAX_TS = 7_258_118_400_000
#: Largest input message accepted (bytes); larger ones are dead letters.
MAX_MESSAGE_BYTES = 1_048_576

Id = Annotated[str, msgspec.Meta(min_length=1, max_length=512)]
Timestamp = Annotated[int, msgspec.Meta(ge=0, le=MAX_TS)]
ClassLabel = Annotated[str, msgspec.Meta(min_length=1, max_length=512)] | int


class InstanceRecord(msgspec.Struct, frozen=True):
    """An instance became available (its ``ts`` starts the latency period)."""

    instance_id: Id
    ts: Timestamp
    features: dict[str, Any] | None = None


class PredictionRecord(msgspec.Struct, frozen=True):
    """A model predicted an instance (again, if it re-predicts)."""

    instance_id: Id
    model_id: Id
    ts: Timestamp
    label: ClassLabel
    scores: dict[str, float] | None = None
    model_version: str | None = None


class LabelRecord(msgspec.Struct, frozen=True):
    """The ground truth of an instance arrived."""

    instance_id: Id
    ts: Timestamp
    label: ClassLabel


# replay files merge the three topics into one stream: each line says its type
class InstanceEvent(InstanceRecord, tag="instance", tag_field="type", frozen=True):
    pass


class PredictionEvent(PredictionRecord, tag="prediction", tag_field="type", frozen=True):
    pass


class LabelEvent(LabelRecord, tag="label", tag_field="type", frozen=True):
    pass


Event = InstanceEvent | PredictionEvent | LabelEvent
KINDS = ("instance", "prediction", "label")

_event_decoder = msgspec.json.Decoder(Event)


class EventError(ValueError):
    """A malformed event, with a reason a person can act on and a short code to count by."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def _explain(err: Exception) -> EventError:
    """Turn a msgspec error into a message and a stable reason code."""
    message = str(err)
    if isinstance(err, msgspec.DecodeError) and not isinstance(err, msgspec.ValidationError):
        return EventError(f"not valid JSON: {message}", "invalid_json")
    if "Invalid value" in message and "$.type" in message:
        return EventError(
            message + "; `type` must be one of 'instance', 'prediction', 'label'", "unknown_type"
        )
    if message.startswith("Object missing required field"):
        return EventError(message, "missing_field")
    if message.startswith("Expected `object`"):
        return EventError(message + "; a message is one JSON object", "not_an_object")
    if "$.ts" in message and ("<=" in message or ">=" in message):
        return EventError(
            message + " (ts is epoch milliseconds: is it in seconds, µs or ns?)", "bad_timestamp"
        )
    if "length >=" in message:
        return EventError(message + " (ids and labels must not be empty)", "empty_value")
    return EventError(message, "wrong_type")


def decode_event(data: bytes | str) -> Event:
    """Decode and validate one line of a replay file (a JSON object with a ``type``).

    Examples
    --------
    >>> decode_event('{"type": "label", "instance_id": "i1", "ts": 1000, "label": "fraud"}')
    LabelEvent(instance_id='i1', ts=1000, label='fraud')
    >>> decode_event('{"type": "label", "instance_id": "", "ts": 1000, "label": 1}')
    Traceback (most recent call last):
    ...
    pipeline.schemas.EventError: Expected `str` of length >= 1 - at `$.instance_id` (ids and labels must not be empty)
    """  # noqa: E501
    try:
        return _event_decoder.decode(data)
    except msgspec.DecodeError as err:
        raise _explain(err) from None


def encode_record(record: dict[str, Any]) -> bytes:
    """One output record as JSON; NaN and infinities become ``null``.

    >>> encode_record({"model_id": "m", "kappa": float("nan")})
    b'{"model_id":"m","kappa":null}'
    """
    return orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY)


# -- bulk decoding of topic messages ---------------------------------------------------------


class Message(Protocol):
    """What the decoder needs of a Kafka message (confluent_kafka.Message has it)."""

    def topic(self) -> str: ...
    def partition(self) -> int: ...
    def offset(self) -> int: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...


class StoredMessage:
    """A :class:`Message` held in memory: input for tests and benchmarks without a broker."""

    __slots__ = ("_k", "_o", "_p", "_t", "_v")

    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None,
                 value: bytes | None) -> None:  # fmt: skip
        self._t, self._p, self._o, self._k, self._v = topic, partition, offset, key, value

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
        return [
            ("streameval.source.topic", self.topic.encode()),
            ("streameval.source.partition", str(self.partition).encode()),
            ("streameval.source.offset", str(self.offset).encode()),
            ("streameval.reason", self.reason.encode()),
            ("streameval.reason.code", self.code.encode()),
        ]


@dataclass
class DecodedBatch:
    """Valid messages of one batch as columns, in arrival order per kind, plus dead letters.

    ``instances``, ``predictions``, ``labels`` hold the decoded records; ``ts`` columns are
    int64 arrays (epoch ms), ids and labels are lists (the join hashes them).
    """

    instances: list[InstanceRecord] = field(default_factory=list)
    predictions: list[PredictionRecord] = field(default_factory=list)
    labels: list[LabelRecord] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)

    def ts(self, kind: str) -> np.ndarray:
        records = getattr(self, kind + "s")
        return np.fromiter((r.ts for r in records), dtype=np.int64, count=len(records))

    def __len__(self) -> int:
        return len(self.instances) + len(self.predictions) + len(self.labels)


# On a topic the kind is the topic's; a message may still say its `type`, which must agree.
class _InstanceMessage(InstanceRecord, frozen=True):
    type: str | None = None


class _PredictionMessage(PredictionRecord, frozen=True):
    type: str | None = None


class _LabelMessage(LabelRecord, frozen=True):
    type: str | None = None


_RECORDS = {"instance": _InstanceMessage, "prediction": _PredictionMessage, "label": _LabelMessage}


class BatchDecoder:
    """Decode batches of Kafka messages of the three input topics.

    Parameters
    ----------
    topics
        Which topic carries which kind: ``{"instances": "instance", "predictions":
        "prediction", "labels": "label"}`` (with any prefix).
    max_bytes
        Messages larger than this are dead letters (code ``oversized``).

    A message may carry a ``type`` field; it must then name the kind of its topic. Counts of
    dead letters by reason code accumulate in :attr:`counters`.

    Examples
    --------
    >>> class Msg:
    ...     def __init__(self, topic, value, offset=0):
    ...         self._t, self._v, self._o = topic, value, offset
    ...     def topic(self): return self._t
    ...     def partition(self): return 0
    ...     def offset(self): return self._o
    ...     def key(self): return b"i1"
    ...     def value(self): return self._v
    >>> decoder = BatchDecoder({"labels": "label"})
    >>> batch = decoder.decode([Msg("labels", b'{"instance_id": "i1", "ts": 5, "label": 1}'),
    ...                         Msg("labels", b'{"instance_id": "i1", "ts": "5"}', offset=1)])
    >>> [(r.instance_id, r.ts, r.label) for r in batch.labels]
    [('i1', 5, 1)]
    >>> [d.code for d in batch.dead_letters], dict(decoder.counters)
    (['wrong_type'], {'wrong_type': 1})
    """

    def __init__(self, topics: dict[str, str], max_bytes: int = MAX_MESSAGE_BYTES) -> None:
        unknown = {kind for kind in topics.values() if kind not in _RECORDS}
        if unknown:
            raise ValueError(f"topic kinds {sorted(unknown)} are not known; use {KINDS}")
        self.topics = dict(topics)
        self.max_bytes = max_bytes
        self.counters: Counter[str] = Counter()
        #: one msgspec decoder per kind (:class:`~pipeline.app.stages.Router` inlines the
        #: common case of :meth:`decode_message` with them)
        self.decoders = {kind: msgspec.json.Decoder(record) for kind, record in _RECORDS.items()}

    def decode(self, messages: Iterable[Message]) -> DecodedBatch:
        batch = DecodedBatch()
        columns = {"instance": batch.instances, "prediction": batch.predictions,
                   "label": batch.labels}  # fmt: skip
        decode_message = self.decode_message
        for message in messages:
            kind, result = decode_message(message)
            if kind is None:
                batch.dead_letters.append(result)
            else:
                columns[kind].append(result)
        return batch

    def decode_message(
        self, message: Message
    ) -> tuple[str, InstanceRecord | PredictionRecord | LabelRecord] | tuple[None, DeadLetter]:
        """One message: ``(kind, record)``, or ``(None, dead letter)`` (counted)."""
        topic = message.topic()
        kind = self.topics.get(topic)
        value = message.value()
        if kind is None:
            error = EventError(f"topic {topic!r} is not an input topic", "unknown_topic")
        elif value is None:
            error = EventError("the message has no value (a tombstone?)", "empty_message")
        elif len(value) > self.max_bytes:
            error = EventError(
                f"the message has {len(value)} bytes, over the limit of {self.max_bytes}",
                "oversized",
            )
        else:
            try:
                record = self.decoders[kind].decode(value)
            except msgspec.DecodeError as err:
                error = _explain(err)
            else:
                if record.type is None or record.type == kind:
                    return kind, record
                error = EventError(
                    f"`type` is {record.type!r} but topic {topic!r} carries {kind!r} messages",
                    "unknown_type",
                )
        self.counters[error.code] += 1
        letter = DeadLetter(topic, message.partition(), message.offset(), message.key(), value,
                            str(error), error.code)  # fmt: skip
        return None, letter
