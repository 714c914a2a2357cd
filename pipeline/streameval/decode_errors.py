"""Why a message did not decode, in words a producer can act on.

Any exception of a decoder becomes an :class:`~streameval.messages.EventError` with a reason
code (:func:`explain`), after a second try past a UTF-8 byte order mark (:func:`after_mark`);
the nesting bound is checked before msgspec parses (:func:`too_deep`).
"""

from __future__ import annotations

import re
import shlex
from typing import Any

import msgspec
import numpy as np

from streameval.event_time import TS_UNITS, event_ms
from streameval.messages import BOM, MAX_DEPTH, EventError

__all__ = ["after_mark", "explain", "too_deep", "utf16", "utf16_file"]


#: fields that give away a message of another kind, per kind of topic
_FOREIGN = {
    "instance": {"model_id": "a prediction", "label": "a prediction or a label"},
    "label": {"model_id": "a prediction"},
    "prediction": {},
}
_FIELDS = {
    "instance": "an instance has instance_id, ts, features, attributes",
    "prediction": "a prediction has instance_id, model_id, ts, label, scores, model_version",
    "label": "a label has instance_id, ts, label",
}
#: what a prediction's scores may be
_SCORES = (
    " (scores are a probability from 0 to 1 per class, for 1 to 1000 classes named by 1 to 512 "
    "characters)"
)


class _Said(msgspec.Struct):
    """What a message that failed to decode says in the two fields its reason may need (any
    JSON there; the other fields are skipped): read on the error path only."""

    ts: Any = None
    type: Any = None


_read_said = msgspec.json.Decoder(_Said).decode


def _kind_of(value: bytes) -> str | None:
    """The kind a replay line names in its ``type``, if it names one (else None)."""
    try:
        named = _read_said(value).type
    except Exception:
        return None
    return named if type(named) is str else None


def explain(
    err: BaseException,
    kind: str | None = None,
    value: bytes = b"",
    unit: str = "ms",
    whole: bytes | None = None,
) -> EventError:
    """Any exception of the decoder as a message and a stable reason code (``kind``: the kind
    of message expected, if known; ``value``: the message; ``unit``: that of its ``ts``;
    ``whole``: the message as produced, when ``value`` is what follows its byte order mark,
    so that a position is told in it)."""
    if isinstance(err, EventError):
        return err
    produced = value if whole is None else whole
    encoding = utf16(produced)
    if encoding is not None:  # (before the framing: a NUL starts big-endian UTF-16 as well)
        return EventError(
            f"the text is UTF-16 ({encoding}), not UTF-8: produce the JSON text as UTF-8 bytes",
            "invalid_utf8",
        )
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
    if len(produced) > len(value):  # a place past the mark: in the message
        shift = len(produced) - len(value)
        message = re.sub(r"\(byte (\d+)\)", lambda m: f"(byte {int(m[1]) + shift})", message)
    # msgspec < 0.23 raised UnicodeDecodeError for a string that is not UTF-8; 0.23 raises a
    # DecodeError "Invalid UTF-8 encoded string": the same fault, the same code
    if isinstance(err, UnicodeDecodeError) or (
        type(err) is msgspec.DecodeError and "Invalid UTF-8" in message
    ):
        try:  # the bad byte and where it is in the message, whichever error was raised
            produced.decode("utf-8")
        except UnicodeDecodeError as bad:
            message = str(bad)
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
        # (a replay line's decoder fails before it knows its kind: its ``type`` tells)
        named = kind or _kind_of(value)
        allowed = f" ({_FIELDS[named]})" if named in _FIELDS else ""
        return EventError(message + allowed, "unknown_field")
    if message.startswith("Number out of range"):  # beyond a float64 (1e400): say so, by field
        message = "a number beyond a 64-bit float's range" + message[len("Number out of range") :]
        if "$.ts" in message:
            return EventError(message + f" (ts is epoch {TS_UNITS[unit][0]})", "bad_timestamp")
        if "$.scores" in message:
            return EventError(message + _SCORES, "bad_scores")
        if "$.label" in message:
            return EventError(message + " (a label is a string or a 64-bit integer)", "bad_label")
        return EventError(message, "wrong_type")
    if "$.scores" in message and ("<=" in message or ">=" in message):
        return EventError(message + _SCORES, "bad_scores")
    if "length <=" in message:
        return EventError(
            message + " (ids, model ids, labels and attribute values are at most 512 "
            "characters; an instance has at most 256 attributes, named by at most 256)",
            "too_long",
        )
    if message.startswith("Object missing required field"):
        return EventError(message, "missing_field")
    if message.startswith("Expected `object`"):
        return EventError(message + "; a message is one JSON object", "not_an_object")
    if "$.ts" in message and ("<=" in message or ">=" in message):
        try:  # say which unit it looks like
            event_ms(_read_said(value).ts, unit)
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


def utf16(value: bytes) -> str | None:
    """Which UTF-16 ``value`` is written in ("little-endian", "big-endian"), or None: it starts
    with UTF-16's byte order mark, or its first characters are ASCII with a NUL beside each (as
    JSON text starts in UTF-16; Schema Registry framing has NULs side by side).

    >>> [utf16('{"a": 1}'.encode(c)) for c in ("utf-16", "utf-16-le", "utf-16-be", "utf-8")]
    ['little-endian', 'little-endian', 'big-endian', None]
    >>> utf16(b"\\x00\\x00\\x00\\x04\\xd2{}")  # magic byte 0, schema id 1234
    """
    if value[:2] == b"\xff\xfe":
        return "little-endian"
    if value[:2] == b"\xfe\xff":
        return "big-endian"
    head = value[: min(8, len(value) // 2 * 2)]
    if len(head) < 4:
        return None
    for nul, text, name in ((head[1::2], head[0::2], "little-endian"),
                            (head[0::2], head[1::2], "big-endian")):  # fmt: skip
        if not any(nul) and all(0 < c < 0x80 for c in text):
            return name
    return None


def utf16_file(path: Any) -> str:
    """What to say of an events file written in UTF-16, with the command that converts it."""
    name, out = shlex.quote(str(path)), shlex.quote(f"{path}.utf8")
    return (
        f"{path} is UTF-16 text, and events files are UTF-8: convert it first, e.g. "
        f"iconv -f UTF-16 -t UTF-8 {name} > {out}"
    )


def after_mark(decode: Any, value: bytes, err: BaseException, kind: str | None, unit: str) -> Any:
    """After ``decode`` refused ``value`` with ``err``: the record of what follows a UTF-8 byte
    order mark, if there is one and it decodes; else the :class:`EventError` saying why not."""
    whole = None
    if value.startswith(BOM):
        whole, value = value, value[len(BOM) :]
        try:
            return decode(value)
        except Exception as again:
            err = again
    raise explain(err, kind, value, unit, whole) from None


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
