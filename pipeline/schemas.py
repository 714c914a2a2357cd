"""The one place that knows the wire format: input events in, output records out.

Input messages (DESIGN.md "Messages") are decoded and validated with msgspec; the JSON Schemas
in ``topics/schemas/`` describe the same contract for other languages (a test checks that the
two agree). Output records are plain dicts encoded with orjson, NaN becoming ``null``.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import orjson

__all__ = [
    "MAX_TS",
    "Event",
    "EventError",
    "InstanceEvent",
    "LabelEvent",
    "PredictionEvent",
    "decode_event",
    "encode_record",
]

#: Event times are epoch milliseconds; anything past the year 2200 is a unit error (µs, ns).
MAX_TS = 7_258_118_400_000

Id = Annotated[str, msgspec.Meta(min_length=1, max_length=512)]
Timestamp = Annotated[int, msgspec.Meta(ge=0, le=MAX_TS)]
ClassLabel = Annotated[str, msgspec.Meta(min_length=1, max_length=512)] | int


class InstanceEvent(msgspec.Struct, tag="instance", tag_field="type", frozen=True):
    """An instance became available (its ``ts`` is the start of the latency period)."""

    instance_id: Id
    ts: Timestamp
    features: dict[str, Any] | None = None


class PredictionEvent(msgspec.Struct, tag="prediction", tag_field="type", frozen=True):
    """A model predicted an instance (again, if it re-predicts)."""

    instance_id: Id
    model_id: Id
    ts: Timestamp
    label: ClassLabel
    scores: dict[str, float] | None = None
    model_version: str | None = None


class LabelEvent(msgspec.Struct, tag="label", tag_field="type", frozen=True):
    """The ground truth of an instance arrived."""

    instance_id: Id
    ts: Timestamp
    label: ClassLabel


Event = InstanceEvent | PredictionEvent | LabelEvent

_decoder = msgspec.json.Decoder(Event)


class EventError(ValueError):
    """A malformed event, with a reason a person can act on."""


def decode_event(data: bytes | str) -> Event:
    """Decode and validate one event (a JSON object with a ``type`` field).

    Examples
    --------
    >>> decode_event('{"type": "label", "instance_id": "i1", "ts": 1000, "label": "fraud"}')
    LabelEvent(instance_id='i1', ts=1000, label='fraud')
    >>> decode_event('{"type": "label", "instance_id": "", "ts": 1000, "label": 1}')
    Traceback (most recent call last):
    ...
    pipeline.schemas.EventError: Expected `str` of length >= 1 - at `$.instance_id`
    """
    try:
        return _decoder.decode(data)
    except msgspec.ValidationError as err:
        raise EventError(_explain(str(err))) from None
    except msgspec.DecodeError as err:
        raise EventError(f"not valid JSON: {err}") from None


def _explain(message: str) -> str:
    if "Invalid value" in message and "$.type" in message:
        return message + "; `type` must be one of 'instance', 'prediction', 'label'"
    if "<=" in message and "$.ts" in message:
        return message + " (ts is epoch milliseconds: is it in µs or ns?)"
    return message


def encode_record(record: dict[str, Any]) -> bytes:
    """One output record as JSON; NaN and infinities become ``null``.

    >>> encode_record({"model_id": "m", "kappa": float("nan")})
    b'{"model_id":"m","kappa":null}'
    """
    return orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY)
