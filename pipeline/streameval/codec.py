"""Input messages in, output records out: the decoding and encoding of what
:mod:`streameval.records` defines.

Input messages are decoded and validated with msgspec, in bulk, into records the join uses
directly; anything else — any byte string at all — becomes a
:class:`~streameval.messages.DeadLetter` whose reason says why
(:mod:`streameval.decode_errors`). No decoder here raises on its input. Output records are
encoded with msgspec, NaN becoming ``null``.

Decoding is about one message alone — its time included: ``ts`` in the unit the settings say,
or the message's Kafka timestamp (:mod:`streameval.event_time`, which also says whether a
well-formed event may enter the join at all).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Any, Union

import msgspec
import numpy as np

from streameval.core.outcome import Label
from streameval.decode_errors import after_mark, explain, too_deep, utf16
from streameval.event_time import TS_UNITS, event_ms, kafka_ms
from streameval.messages import BOM, MAX_DEPTH, DeadLetter, EventError, Message
from streameval.records import MAX_MESSAGE_BYTES, InstanceRecord, LabelRecord, PredictionRecord

__all__ = [
    "KINDS",
    "SCORES_SUM_TOLERANCE",
    "BatchDecoder",
    "Event",
    "InstanceEvent",
    "KafkaTimeDecoder",
    "LabelEvent",
    "NotUtf8",
    "PredictionEvent",
    "canonical_scores",
    "decode_event",
    "encode_record",
    "event_lines",
    "slice_value",
]


#: How far from 1 the probabilities of a prediction's ``scores`` may add up.
SCORES_SUM_TOLERANCE = 1e-6


def canonical_scores(scores: dict[str, float], label: Label) -> tuple:
    """A prediction's ``scores`` (as decoded: 1 to 1000 probabilities from 0 to 1) checked for
    what a schema cannot say, and made one value: ``(class, p, class, p, ...)``, classes in
    order, each named as ``label`` names its class (an integer label's classes are the integers
    the keys spell). Raises :class:`EventError` (``bad_scores``) saying what is wrong: the
    probabilities must add up to 1 within 1e-6, an integer label's classes be digits.

    >>> canonical_scores({"ok": 0.25, "fraud": 0.75}, "ok")
    ('fraud', 0.75, 'ok', 0.25)
    >>> canonical_scores({"1": 0.5, "0": 0.5}, 1)
    (0, 0.5, 1, 0.5)
    >>> canonical_scores({"yes": 0.5, "no": 0.6}, "yes")
    Traceback (most recent call last):
    ...
    streameval.messages.EventError: scores add up to 1.1, not 1: send a probability per class (they sum to 1 within 1e-06)
    """  # noqa: E501
    total = math.fsum(scores.values())
    if abs(total - 1.0) > SCORES_SUM_TOLERANCE:
        raise EventError(
            f"scores add up to {total:.12g}, not 1: send a probability per class (they sum "
            f"to 1 within {SCORES_SUM_TOLERANCE:g})",
            "bad_scores",
        )
    if isinstance(label, int):
        try:
            classes = list(map(int, scores))
        except ValueError:
            classes = None
        if classes is None or list(map(str, classes)) != list(scores):
            raise _not_a_class(next(key for key in scores if not _spells_int(key)))
        if classes and not (-(2**63) <= min(classes) and max(classes) < 2**63):
            raise _not_a_class(str(max(classes, key=abs)))
        pairs = sorted(zip(classes, scores.values(), strict=True))
    else:
        pairs = sorted(scores.items())
    if 0.0 in scores.values():  # -0.0 is 0.0: one representation, whatever the batches
        pairs = [(c, p + 0.0) for c, p in pairs]
    return tuple(chain.from_iterable(pairs))


def _spells_int(key: str) -> bool:
    try:
        return str(int(key)) == key
    except ValueError:
        return False


def _not_a_class(key: str) -> EventError:
    return EventError(
        f"scores key {key!r} names no class: the label is an integer, so scores name classes "
        'by their digits ({"0": 0.2, "1": 0.8})',
        "bad_scores",
    )


# replay files merge the three topics into one stream: each line says its type
class InstanceEvent(InstanceRecord, tag="instance", tag_field="type", frozen=True):
    pass


class PredictionEvent(PredictionRecord, tag="prediction", tag_field="type", frozen=True):
    pass


class LabelEvent(LabelRecord, tag="label", tag_field="type", frozen=True):
    pass


Event = InstanceEvent | PredictionEvent | LabelEvent
KINDS = ("instance", "prediction", "label")


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


def slice_value(instance: InstanceRecord, field: tuple[str, str] | None) -> str:
    """The instance's slice (``slices.by``: ``field`` is ("attributes" or "features", name)):
    the value as text, "" for none — no such field, null, or a list or an object, which name
    no slice. ``true``/``false`` for booleans, a number as Python writes it.

    >>> record = InstanceRecord("i1", 1_767_225_600_000, attributes={"country": "fr", "n": 3})
    >>> slice_value(record, ("attributes", "country")), slice_value(record, ("attributes", "n"))
    ('fr', '3')
    >>> slice_value(record, ("features", "country")), slice_value(record, None)
    ('', '')
    """
    if field is None:
        return ""
    source, name = field
    values = instance.attributes if source == "attributes" else instance.features
    if not values:
        return ""
    value = values.get(name)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value[:512]
    if isinstance(value, int | float):
        return str(value)
    return ""


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
    streameval.messages.EventError: Expected `str` of length >= 1 - at `$.instance_id` (ids and labels must not be empty)

    Any input at all either decodes or raises :class:`EventError`, whose ``code`` is one of
    :data:`~streameval.messages.DEAD_LETTER_REASONS` — never another exception:

    >>> decode_event(b'{"type": "label", "instance_id": "\\xff", "ts": 1, "label": 1}')
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    streameval.messages.EventError: a string is not valid UTF-8 (...); encode text as UTF-8
    """  # noqa: E501
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")  # a lone surrogate: invalid UTF-8 below
    if len(data) > MAX_MESSAGE_BYTES:
        raise EventError(
            f"the line has {len(data)} bytes, over the limit of {MAX_MESSAGE_BYTES}", "oversized"
        )
    if too_deep(data):
        raise explain(RecursionError())
    decode = _event_decoder(ts_unit)
    try:
        event = decode(data)
    except Exception as err:  # whatever the input: EventError and nothing else out of here
        event = after_mark(decode, data, err, None, ts_unit)
    if type(event) is PredictionEvent and event.scores is not None:
        canonical_scores(event.scores, event.label)
    return event


class NotUtf8(ValueError):
    """An events file in UTF-16: none of its lines can be read (``encoding`` says which)."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        super().__init__(
            f"the text is UTF-16 ({encoding}), not UTF-8: convert it first "
            "(iconv -f UTF-16 -t UTF-8)"
        )


def event_lines(lines: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    """The lines of an events file as they are sent to Kafka, each with its number (from 1):
    without surrounding blanks, the first one without a UTF-8 byte order mark, and blank
    lines (a mark alone among them: an editor's empty first line) left out. Raises
    :class:`NotUtf8` at a first line in UTF-16, which no line of the file could be read in.

    >>> list(event_lines([b"\\xef\\xbb\\xbf{}\\n", b"  \\n", b'{"a": 1}\\r\\n']))
    [(1, b'{}'), (3, b'{"a": 1}')]
    """
    for number, line in enumerate(lines, start=1):
        if number == 1:
            encoding = utf16(line)
            if encoding is not None:
                raise NotUtf8(encoding)
            line = line.removeprefix(BOM)
        value = line.strip()
        if value and value != BOM:
            yield number, value


class _Declared(msgspec.Struct):
    type: Any = None


_read_declared = msgspec.json.Decoder(_Declared).decode


def _declared_type(value: bytes) -> str | None:
    """The kind of event a message that did not decode says it is (its ``type``), if it
    says one of the kinds there are."""
    try:
        declared = _read_declared(value.removeprefix(BOM)).type
    except Exception:
        return None
    return declared if type(declared) is str and declared in _RECORDS else None


def _wrong_type(declared: str, topic: str, kind: str) -> EventError:
    return EventError(
        f"`type` is {declared!r} but topic {topic!r} carries {kind!r} messages", "unknown_type"
    )


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
    >>> from streameval.messages import StoredMessage
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
                    record = after_mark(self.decoders[kind], value, err, kind, self.ts_unit)
                except EventError as refused:
                    # an event of another kind says so first, not the fields it lacks
                    declared = _declared_type(value)
                    if declared is not None and declared != kind:
                        return None, self.dead_letter(message, _wrong_type(declared, topic, kind))
                    return None, self.dead_letter(message, refused)
            if record.type is None or record.type == kind:
                if kind == "prediction" and record.scores is not None:
                    try:
                        canonical_scores(record.scores, record.label)
                    except EventError as error:
                        return None, self.dead_letter(message, error)
                return kind, record
            error = _wrong_type(record.type, topic, kind)
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

    >>> from streameval.messages import StoredMessage
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
