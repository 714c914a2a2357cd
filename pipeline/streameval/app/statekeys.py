"""The keys a stage's checkpoint writes besides the join's own (streameval.core.state).

Both stages keep their scalars under :data:`STAGE`. An evaluation partition writes each
model's and pair's state, and a model's label maturity, as JSON cut into chunks of
:data:`STATE_CHUNK` bytes, under :data:`MODEL`, :data:`PAIR` or :data:`MATURITY`, the name and
the chunk's number, so that a checkpoint writes only the chunks that changed
(:func:`encode_state` puts a state's long strings — a window's columns, packed as its ring
lies — first, at offsets that do not move: a window costs what moved in it); and each run of
outcomes waiting for the frontiers under :data:`OUTCOME` and the run's number (:data:`RUN`).
:mod:`~streameval.app.eval_stage` writes and reads them; :mod:`~streameval.app.edits`
rewrites them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

import orjson

__all__ = [
    "BUFFER",
    "CHUNK_INDEX",
    "GATHERED",
    "MATURITY",
    "MODEL",
    "OUTCOME",
    "PAIR",
    "PARTS",
    "RUN",
    "SLICE",
    "SLICES",
    "STAGE",
    "STATE_CHUNK",
    "WHOLE",
    "decode_state",
    "encode_name",
    "encode_state",
    "model_of",
    "owner_of",
    "state_chunks",
]

#: a stage's own scalars among its checkpoint's keys (the join's use other first bytes)
STAGE = b"t"
#: keys of an evaluation stage's checkpoint: a model's, a pair's state, a run of waiting
#: outcomes (by the arrival number of its first); the waiting outcomes in chunks, before that
MODEL, PAIR, OUTCOME, BUFFER = b"M", b"P", b"O", b"B"
#: ... a model's label maturity (streameval.core.maturity): its owner is the model
MATURITY = b"L"
#: ... a model's slices (streameval.core.sliced): their tracker and index (owner: the model),
#: a slice's evaluator (owner: the model and the slice, :func:`slice_owner`), and the pieces
#: of the outcomes a slice gathered (the same owner; the piece's number where a chunk's is)
SLICES, SLICE, GATHERED = b"S", b"E", b"G"
#: the tags of the parts an owner has, written whole (in chunks) when it changed
PARTS = (MODEL, PAIR, MATURITY, SLICES, SLICE)
#: a run's number, after :data:`OUTCOME`
RUN = struct.Struct(">Q")
#: bytes per chunk of a model's encoded state
STATE_CHUNK = 16 * 1024
#: a chunk's number, at the end of its key
CHUNK_INDEX = struct.Struct(">I")
_LENGTH = struct.Struct(">H")
#: the step of an outcome batch applied whole (checkpoints from before steps were numbered)
WHOLE = 2**62


def encode_name(name: str) -> bytes:
    """A model's or pair's name as its chunk keys hold it (after the tag)."""
    data = name.encode()
    return _LENGTH.pack(len(data)) + data


def owner_of(key: bytes) -> str | None:
    """The model or pair a chunk key belongs to (a slice's parts: the model, NUL, the slice)."""
    if key[:1] not in PARTS and key[:1] != GATHERED:
        return None
    return key[3:-4].decode()


def model_of(owner: str) -> str:
    """The model an owner is or belongs to (a model, a slice of it; a pair is its own)."""
    return owner.partition("\x00")[0]


def state_chunks(head: bytes, data: bytes) -> Iterable[tuple[bytes, bytes]]:
    """``data`` cut into chunks under ``head`` + chunk number (at least one chunk)."""
    for i, start in enumerate(range(0, max(len(data), 1), STATE_CHUNK)):
        yield head + CHUNK_INDEX.pack(i), data[start : start + STATE_CHUNK]


#: a string at least this long (a ring's packed column) is written before the rest of a state
LONG_STRING = 1024
# the two keys of a state encoded with its long strings first (no state() has a key with NUL)
_LONG, _REST, _AT = "\x00long", "\x00rest", "\x00at"


def _hoisted(value: Any, long: list[str]) -> Any:
    if isinstance(value, dict):
        return {key: _hoisted(item, long) for key, item in value.items()}
    if isinstance(value, list):
        if value and isinstance(value[0], (int, float)):
            return value  # a column of numbers: nothing inside to take out
        return [_hoisted(item, long) for item in value]
    if isinstance(value, str) and len(value) >= LONG_STRING:
        long.append(value)
        return {_AT: len(long) - 1}
    return value


def _restored(value: Any, long: list[str]) -> Any:
    if isinstance(value, dict):
        if len(value) == 1 and _AT in value:
            return long[value[_AT]]
        return {key: _restored(item, long) for key, item in value.items()}
    if isinstance(value, list):
        if value and isinstance(value[0], (int, float)):
            return value
        return [_restored(item, long) for item in value]
    return value


def encode_state(state: Any) -> bytes:
    """A part's state as its chunks hold it: JSON, its long strings first.

    A window's columns are long strings whose length does not follow what they hold
    (:meth:`Ring.dump <streameval.core.forgetting.Ring.dump>`) and whose bytes change only
    where outcomes moved in; written first, each keeps its offset whatever the numbers after it
    do, so only the chunks over what moved change. A state without long strings is plain JSON.

    >>> column = "f8:" + "A" * 2000
    >>> data = encode_state({"n": 3, "ring": {"seen": 9, "x": column}})
    >>> data.index(column.encode()) < data.index(b'"n"')
    True
    >>> decode_state(data) == {"n": 3, "ring": {"seen": 9, "x": column}}
    True
    """
    long: list[str] = []
    rest = _hoisted(state, long)
    if not long:
        return orjson.dumps(state)
    return orjson.dumps({_LONG: long, _REST: rest})


def decode_state(data: bytes) -> Any:
    """The state :func:`encode_state` encoded (or plain JSON, as written before it)."""
    value = orjson.loads(data)
    if isinstance(value, dict) and _LONG in value and _REST in value:
        return _restored(value[_REST], value[_LONG])
    return value
