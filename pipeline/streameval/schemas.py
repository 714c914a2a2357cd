"""Input messages in, output records out: the decoding and encoding of what
:mod:`streameval.records` defines.

Input messages are decoded and validated with msgspec, in bulk, into records the join uses
directly; anything else — any byte string at all — becomes a :class:`DeadLetter` with a reason
a person can act on and a short code to count by (:data:`DEAD_LETTER_REASONS`). No decoder
here raises on its input. Output records (:mod:`streameval.records`) are encoded with msgspec,
NaN becoming ``null``.

Decoding is about one message alone — its time included: ``ts`` in the unit the settings say
(:func:`event_ms`), or the message's Kafka timestamp; whether a well-formed event may enter the
join at all is :mod:`streameval.event_time`'s question.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, Union

import msgspec
import numpy as np

from streameval.records import (
    MAX_MESSAGE_BYTES,
    MAX_TS,
    MIN_TS,
    InstanceRecord,
    LabelRecord,
    PredictionRecord,
)

__all__ = [
    "BOM",
    "DEAD_LETTER_REASONS",
    "KINDS",
    "MAX_DEPTH",
    "MAX_MESSAGE_BYTES",
    "MAX_TS",
    "MIN_TS",
    "TS_UNITS",
    "BatchDecoder",
    "DeadLetter",
    "Event",
    "EventError",
    "InstanceEvent",
    "InstanceRecord",
    "KafkaTimeDecoder",
    "LabelEvent",
    "LabelRecord",
    "PredictionEvent",
    "PredictionRecord",
    "StoredMessage",
    "decode_event",
    "encode_record",
    "event_ms",
    "kafka_ms",
]

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
    "bad_timestamp": "ts no date from 1973 to 2200 in any unit (or such a Kafka timestamp)",
    "wrong_ts_unit": "ts a date in another unit than ts_unit (seconds sent as milliseconds)",
    "no_timestamp": "with ts_source = 'kafka': a message without a Kafka timestamp",
    "bad_label": "an integer label outside the signed 64-bit range",
    "ts_in_future": "ts later than the message was sent (or than now), beyond max_future_ms",
    "ts_too_old": "ts older than its partition's latest event by more than label_ttl_ms",
    "unknown_topic": "read from a topic that is not an input topic",
    "undecodable": "anything else the decoder could not make sense of",
}


# replay files merge the three topics into one stream: each line says its type
class InstanceEvent(InstanceRecord, tag="instance", tag_field="type", frozen=True):
    pass


class PredictionEvent(PredictionRecord, tag="prediction", tag_field="type", frozen=True):
    pass


class LabelEvent(LabelRecord, tag="label", tag_field="type", frozen=True):
    pass


Event = InstanceEvent | PredictionEvent | LabelEvent
KINDS = ("instance", "prediction", "label")


class EventError(ValueError):
    """A malformed event, with a reason a person can act on and a short code to count by."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


#: ``[time] ts_unit``: the units ``ts`` may come in, with their names and sizes in nanoseconds
TS_UNITS = {
    "s": ("seconds", 10**9),
    "ms": ("milliseconds", 10**6),
    "us": ("microseconds", 10**3),
    "ns": ("nanoseconds", 1),
}


_KAFKA_TS = ' (record timestamps are epoch ms; [time] ts_source = "kafka" reads event time there)'


def _date(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def event_ms(ts: int, unit: str = "ms", kafka: bool = False) -> int:
    """``ts``, a time in ``unit``, as epoch milliseconds — if it is a date from 1973-03-03 to
    2200-01-01 (:data:`MIN_TS` .. :data:`MAX_TS` in ms). Else :class:`EventError`, saying in
    which unit it would be a date and what to do; ``kafka``: ``ts`` is a Kafka timestamp
    (milliseconds by the protocol: only its producer can fix it).

    The one rule of the worker's decoder and replay's, so that they refuse the same events.
    The units' ranges are 1000 times apart and each spans a factor of 73, so a value can be a
    date in one unit only: today is about 1.8e9 in seconds, 1.8e12 in ms, 1.8e15 in µs.

    >>> event_ms(1_767_225_600, "s")
    1767225600000
    >>> event_ms(1_767_225_600)
    Traceback (most recent call last):
    ...
    streameval.schemas.EventError: ts 1767225600 looks like seconds, not milliseconds (2026-01-01 00:00:00 UTC in seconds): multiply it by 1000 at the producer, or set [time] ts_unit = "s"
    """  # noqa: E501
    name, size = TS_UNITS[unit]
    ms = ts * size // 1_000_000
    if MIN_TS <= ms <= MAX_TS:
        return ms
    what = "the Kafka timestamp" if kafka else "ts"
    for other, (other_name, other_size) in TS_UNITS.items():
        as_ms = ts * other_size // 1_000_000
        if other != unit and MIN_TS <= as_ms <= MAX_TS:
            factor = other_size // size or size // other_size
            fix = f"{'multiply' if other_size > size else 'divide'} it by {factor} at the producer"
            fix += _KAFKA_TS if kafka else f', or set [time] ts_unit = "{other}"'
            raise EventError(
                f"{what} {ts} looks like {other_name}, not {name} ({_date(as_ms)} in "
                f"{other_name}): {fix}",
                "wrong_ts_unit",
            )
    raise EventError(
        f"{what} {ts} is no date from 1973-03-03 to 2200-01-01, in {name} or any other unit: "
        f"send the epoch time of the event in {name}"
        + (_KAFKA_TS if kafka else f' ([time] ts_unit = "{unit}")'),
        "bad_timestamp",
    )


def kafka_ms(timestamp: tuple[int, int]) -> int:
    """Event time from a message's Kafka timestamp (``Message.timestamp()``), for
    ``[time] ts_source = "kafka"``; :class:`EventError` if it has none or no plausible one."""
    stamped, ms = timestamp
    if stamped == NO_TIMESTAMP:
        raise EventError(
            'the message has no Kafka timestamp, and [time] ts_source = "kafka" reads event '
            "time from it: send it with one (the producer's send time, or timestamp=), or put "
            'ts in the message and set ts_source = "field"',
            "no_timestamp",
        )
    return event_ms(ms, "ms", kafka=True)


def _retimed(cls: Any, ts_type: Any, default: Any = msgspec.NODEFAULT) -> Any:
    """``cls`` with another type of ``ts``: a time in another unit, or one not read at all."""
    fields = []
    for field in msgspec.structs.fields(cls):
        kind, value = (ts_type, default) if field.name == "ts" else (field.type, field.default)
        fields.append(
            (field.name, kind) if value is msgspec.NODEFAULT else (field.name, kind, value)
        )
    config = cls.__struct_config__
    return msgspec.defstruct(
        cls.__name__,
        fields,
        kw_only=True,
        frozen=True,
        forbid_unknown_fields=True,
        tag=config.tag,
        tag_field=config.tag_field,
    )


def _in_unit(decode: Any, unit: str, canonical: dict[Any, Any] | None = None) -> Any:
    """``decode``, its record's ``ts`` read in ``unit`` and made epoch milliseconds (the
    record made an instance of ``canonical[type(record)]``, if given)."""

    def decode_in_unit(value: bytes) -> Any:
        record = decode(value)
        ts = event_ms(record.ts, unit)
        if canonical is None:
            return msgspec.structs.replace(record, ts=ts)
        return canonical[type(record)](**{**msgspec.structs.asdict(record), "ts": ts})

    return decode_in_unit


_EVENTS = (InstanceEvent, PredictionEvent, LabelEvent)
#: replay's line decoder per unit of ``ts`` (made when first asked for)
_event_decoders = {"ms": msgspec.json.Decoder(Event).decode}


def _event_decoder(unit: str) -> Any:
    if unit not in _event_decoders:
        canonical = {_retimed(cls, int): cls for cls in _EVENTS}
        decode = msgspec.json.Decoder(Union[tuple(canonical)]).decode  # noqa: UP007
        _event_decoders[unit] = _in_unit(decode, unit, canonical)
    return _event_decoders[unit]


#: A UTF-8 byte order mark: some producers (and editors) put one before the text; tolerated.
BOM = b"\xef\xbb\xbf"


#: fields that give away a message of another kind, per kind of topic
_FOREIGN = {
    "instance": {"model_id": "a prediction", "label": "a prediction or a label"},
    "label": {"model_id": "a prediction"},
    "prediction": {},
}
_FIELDS = {
    "instance": "instance_id, ts, features",
    "prediction": "instance_id, model_id, ts, label, scores, model_version",
    "label": "instance_id, ts, label",
}


class _Ts(msgspec.Struct):
    ts: Any = None


_read_ts = msgspec.json.Decoder(_Ts).decode


def _explain(
    err: BaseException, kind: str | None = None, value: bytes = b"", unit: str = "ms"
) -> EventError:
    """Any exception of the decoder as a message and a stable reason code (``kind``: the kind
    of message expected, if known; ``value``: the message; ``unit``: that of its ``ts``)."""
    if isinstance(err, EventError):
        return err
    if value[:1] == b"\x00" and len(value) >= 5:  # JSON text never starts with a NUL
        schema = int.from_bytes(value[1:5], "big")
        return EventError(
            f"the message starts with Confluent Schema Registry framing (magic byte 0, schema "
            f"id {schema}) before its payload: streameval reads plain JSON values; produce the "
            "JSON text as UTF-8 bytes, not with a Schema Registry serializer (JSONSerializer, "
            "AvroSerializer, ProtobufSerializer)",
            "schema_registry",
        )
    message = str(err)
    if isinstance(err, UnicodeDecodeError):
        return EventError(
            f"a string is not valid UTF-8 ({message}); encode text as UTF-8", "invalid_utf8"
        )
    if isinstance(err, RecursionError):
        return EventError(f"nested deeper than {MAX_DEPTH} levels", "too_deep")
    if not isinstance(err, msgspec.DecodeError):
        return EventError(f"could not be decoded ({type(err).__name__}: {message})", "undecodable")
    if not isinstance(err, msgspec.ValidationError):
        return EventError(f"not valid JSON: {message}", "invalid_json")
    if "Invalid value" in message and "$.type" in message:
        return EventError(
            message + "; `type` must be one of 'instance', 'prediction', 'label'", "unknown_type"
        )
    if message.startswith("Object contains unknown field"):
        name = message.split("`")[1] if message.count("`") >= 2 else ""
        foreign = _FOREIGN.get(kind or "", {}).get(name)
        if foreign:
            return EventError(
                f"{message}: this looks like {foreign}, not a {kind}; send it to its own topic",
                "wrong_topic",
            )
        allowed = f" (a {kind} has {_FIELDS[kind]})" if kind in _FIELDS else ""
        return EventError(message + allowed, "unknown_field")
    if message.startswith("Object missing required field"):
        return EventError(message, "missing_field")
    if message.startswith("Expected `object`"):
        return EventError(message + "; a message is one JSON object", "not_an_object")
    if "$.ts" in message and ("<=" in message or ">=" in message):
        try:  # say which unit it looks like
            event_ms(_read_ts(value).ts, unit)
        except EventError as error:
            return error
        except Exception:
            pass
        return EventError(message + f" (ts is epoch {TS_UNITS[unit][0]})", "bad_timestamp")
    if "$.label" in message and ("<=" in message or ">=" in message) and "length" not in message:
        return EventError(message + " (integer labels are 64-bit)", "bad_label")
    if "length >=" in message:
        return EventError(message + " (ids and labels must not be empty)", "empty_value")
    return EventError(message, "wrong_type")


def _nesting(value: bytes) -> int:
    """How deep arrays and objects nest in a JSON text (brackets inside strings do not count),
    without parsing it: a bound checked before msgspec recurses into ``features``."""
    data = np.frombuffer(value, dtype=np.uint8)
    backslash = data == 0x5C
    # a quote is escaped when an odd run of backslashes precedes it
    index = np.arange(data.size)
    last_plain = np.maximum.accumulate(np.where(backslash, -1, index))
    run = index - 1 - np.concatenate(([-1], last_plain[:-1]))
    quote = (data == 0x22) & (run % 2 == 0)
    outside = np.cumsum(quote) % 2 == 0  # a string's content lies between odd and even quotes
    step = ((data == 0x5B) | (data == 0x7B)).astype(np.int64)
    step -= (data == 0x5D) | (data == 0x7D)
    step[~outside] = 0
    return int(np.cumsum(step).max(initial=0))


def _after_mark(decode: Any, value: bytes, err: BaseException, kind: str | None, unit: str) -> Any:
    """After ``decode`` refused ``value`` with ``err``: the record of what follows a UTF-8 byte
    order mark, if there is one and it decodes; else the :class:`EventError` saying why not."""
    if value.startswith(BOM):
        value = value[len(BOM) :]
        try:
            return decode(value)
        except Exception as again:
            err = again
    raise _explain(err, kind, value, unit) from None


def too_deep(value: bytes) -> bool:
    """Whether ``value`` nests arrays and objects deeper than :data:`MAX_DEPTH`; cheap for
    the usual message, which has far fewer brackets than that.

    >>> too_deep(b'{"features": {"x": [[1, 2], [3]]}}'), too_deep(b"[" * 65 + b"]" * 65)
    (False, True)
    >>> too_deep(b'{"s": "' + b"[" * 100 + b'"}')  # inside a string: not nesting
    False
    """
    if value.count(b"[") + value.count(b"{") <= MAX_DEPTH:
        return False
    return _nesting(value) > MAX_DEPTH


def decode_event(data: bytes | str, ts_unit: str = "ms") -> Event:
    """Decode and validate one line of a replay file (a JSON object with a ``type``; its
    ``ts`` in ``ts_unit``, the event's ``ts`` in milliseconds).

    Examples
    --------
    >>> decode_event('{"type": "label", "instance_id": "i1", "ts": 1767225600000, "label": "no"}')
    LabelEvent(instance_id='i1', ts=1767225600000, label='no')
    >>> decode_event('{"type": "label", "instance_id": "i1", "ts": 1767225600, "label": 1}', "s")
    LabelEvent(instance_id='i1', ts=1767225600000, label=1)
    >>> decode_event('{"type": "label", "instance_id": "", "ts": 1767225600000, "label": 1}')
    Traceback (most recent call last):
    ...
    streameval.schemas.EventError: Expected `str` of length >= 1 - at `$.instance_id` (ids and labels must not be empty)

    Any input at all either decodes or raises :class:`EventError`, whose ``code`` is one of
    :data:`DEAD_LETTER_REASONS` — never another exception:

    >>> decode_event(b'{"type": "label", "instance_id": "\\xff", "ts": 1, "label": 1}')
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    streameval.schemas.EventError: a string is not valid UTF-8 (...); encode text as UTF-8
    """  # noqa: E501
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")  # a lone surrogate: invalid UTF-8 below
    if len(data) > MAX_MESSAGE_BYTES:
        raise EventError(
            f"the line has {len(data)} bytes, over the limit of {MAX_MESSAGE_BYTES}", "oversized"
        )
    if too_deep(data):
        raise _explain(RecursionError())
    decode = _event_decoder(ts_unit)
    try:
        return decode(data)
    except Exception as err:  # whatever the input: EventError and nothing else out of here
        return _after_mark(decode, data, err, None, ts_unit)


def _numpy_scalar(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise NotImplementedError(f"{type(value).__name__} is not a JSON value")


_record_encoder = msgspec.json.Encoder(enc_hook=_numpy_scalar)


def encode_record(record: Any) -> bytes:
    """One output record (:data:`streameval.records.Record`) as JSON; NaN and infinities
    become ``null``.

    >>> encode_record({"model_id": "m", "kappa": float("nan"), "n": np.int64(3)})
    b'{"model_id":"m","kappa":null,"n":3}'
    """
    return _record_encoder.encode(record)


# -- bulk decoding of topic messages ---------------------------------------------------------


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


# On a topic the kind is the topic's; a message may still say its `type`, which must agree.
class _InstanceMessage(InstanceRecord, frozen=True):
    type: str | None = None


class _PredictionMessage(PredictionRecord, frozen=True):
    type: str | None = None


class _LabelMessage(LabelRecord, frozen=True):
    type: str | None = None


_RECORDS = {"instance": _InstanceMessage, "prediction": _PredictionMessage, "label": _LabelMessage}


def _deep_checked(decode: Any) -> Any:
    """``decode`` refusing, before it parses, a message nested deeper than :data:`MAX_DEPTH`
    (for instances, whose ``features`` are free-form JSON: the other kinds have typed fields
    only, which msgspec refuses at the first bracket it does not expect)."""

    def decode_instance(value: bytes) -> Any:
        if len(value) > MAX_DEPTH and too_deep(value):
            raise RecursionError
        return decode(value)

    return decode_instance


class BatchDecoder:
    """Decode batches of Kafka messages of the three input topics.

    Parameters
    ----------
    topics
        Which topic carries which kind: ``{"instances": "instance", "predictions":
        "prediction", "labels": "label"}`` (with any prefix).
    max_bytes
        Messages larger than this are dead letters (code ``oversized``).
    ts_unit
        The unit of ``ts`` (one of :data:`TS_UNITS`); records have it in milliseconds.
        Event time from the Kafka timestamp instead: :class:`KafkaTimeDecoder`.

    A message may carry a ``type`` field; it must then name the kind of its topic. Any byte
    string is either decoded or a dead letter: the decoder never raises on its input. Counts
    of dead letters by reason code accumulate in :attr:`counters`.

    Examples
    --------
    >>> decoder = BatchDecoder({"labels": "label"})
    >>> kind, record = decoder.decode_message(StoredMessage(
    ...     "labels", 0, 0, b"i1", b'{"instance_id": "i1", "ts": 1767225600000, "label": 1}'))
    >>> kind, record.instance_id, record.ts, record.label
    ('label', 'i1', 1767225600000, 1)
    >>> letters = [decoder.decode_message(message)[1] for message in (
    ...     StoredMessage("labels", 0, 1, b"i1", b'{"instance_id": "i1", "ts": "5"}'),
    ...     StoredMessage("labels", 0, 2, None, b'{"instance_id": "i\\xff", "ts": 5}'))]
    >>> [letter.code for letter in letters], dict(decoder.counters)
    (['wrong_type', 'invalid_utf8'], {'wrong_type': 1, 'invalid_utf8': 1})
    >>> BatchDecoder({"labels": "label"}, ts_unit="s").decode_message(StoredMessage(
    ...     "labels", 0, 3, b"i1", b'{"instance_id": "i1", "ts": 1767225600, "label": 1}'))[1].ts
    1767225600000
    """

    #: where event time comes from: the ``ts`` field (``[time] ts_source``)
    ts_source = "field"

    def __init__(
        self, topics: dict[str, str], max_bytes: int = MAX_MESSAGE_BYTES, ts_unit: str = "ms"
    ) -> None:
        unknown = {kind for kind in topics.values() if kind not in _RECORDS}
        if unknown:
            raise ValueError(f"topic kinds {sorted(unknown)} are not known; use {KINDS}")
        if ts_unit not in TS_UNITS:
            raise ValueError(f"ts_unit {ts_unit!r} is not known; use one of {list(TS_UNITS)}")
        self.topics = dict(topics)
        self.max_bytes = max_bytes
        self.ts_unit = ts_unit
        self.counters: Counter[str] = Counter()
        #: one decode function per kind (:class:`~streameval.app.router.Router` inlines the
        #: common case of :meth:`decode_message` with them); each raises on bad input, which
        #: :meth:`decode_message` explains
        self.decoders = self._decoders()
        self.decoders["instance"] = _deep_checked(self.decoders["instance"])

    def _decoders(self) -> dict[str, Any]:
        if self.ts_unit == "ms":
            return {kind: msgspec.json.Decoder(cls).decode for kind, cls in _RECORDS.items()}
        return {
            kind: _in_unit(msgspec.json.Decoder(_retimed(cls, int)).decode, self.ts_unit)
            for kind, cls in _RECORDS.items()
        }

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
                record = self.decoders[kind](value)
            except Exception as err:  # any bytes at all: a dead letter, never a crash
                try:
                    record = _after_mark(self.decoders[kind], value, err, kind, self.ts_unit)
                except EventError as error:
                    return None, self.dead_letter(message, error)
            if record.type is None or record.type == kind:
                return kind, record
            error = EventError(
                f"`type` is {record.type!r} but topic {topic!r} carries {kind!r} messages",
                "unknown_type",
            )
        return None, self.dead_letter(message, error)

    def dead_letter(self, message: Message, error: EventError) -> DeadLetter:
        """``message`` as a dead letter for ``error`` (counted)."""
        self.counters[error.code] += 1
        return DeadLetter(
            message.topic(),
            message.partition(),
            message.offset(),
            message.key(),
            message.value(),
            str(error),
            error.code,
        )


class KafkaTimeDecoder(BatchDecoder):
    """A :class:`BatchDecoder` for ``[time] ts_source = "kafka"``: an event's time is its
    message's Kafka timestamp (the producer's or the broker's), and a ``ts`` field is not read
    — it may be absent. A message without a timestamp, or with one that is no date in
    milliseconds, is a dead letter (``no_timestamp``, ``bad_timestamp``, ``wrong_ts_unit``).

    >>> KafkaTimeDecoder({"labels": "label"}).decode_message(StoredMessage(
    ...     "labels", 0, 0, b"i1", b'{"instance_id": "i1", "label": 1}', 1767225600000))[1].ts
    1767225600000
    """

    ts_source = "kafka"

    def _decoders(self) -> dict[str, Any]:
        return {
            kind: msgspec.json.Decoder(_retimed(cls, int | None, None)).decode
            for kind, cls in _RECORDS.items()
        }

    def decode_message(
        self, message: Message
    ) -> tuple[str, InstanceRecord | PredictionRecord | LabelRecord] | tuple[None, DeadLetter]:
        kind, record = super().decode_message(message)
        if kind is None:
            return kind, record
        try:
            ts = kafka_ms(message.timestamp())
        except EventError as error:
            return None, self.dead_letter(message, error)
        return kind, msgspec.structs.replace(record, ts=ts)
