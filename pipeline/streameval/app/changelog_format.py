"""The changelog's format, pure (no Kafka): the records one checkpoint writes, and how a
partition's records fold back into the state they hold.

Every stage partition (join or evaluation) has a partition of its own in a changelog topic. A
stage reports what changed since its last checkpoint as key/value pairs (None: deleted), and a
checkpoint writes, in this order (:func:`checkpoint_records`):

1. **intent**: the changes, in chunks of at most :data:`CHUNK_BYTES`, under keys of their own
   (``i`` + checkpoint number + chunk number);
2. **seal**: one record (key ``S``) naming the checkpoint and its number of chunks, and what it
   holds (the stage's summary) — the checkpoint exists once this record does;
3. **materialize**: each change again under its own key (``s`` + key; a deletion is a
   tombstone), so that compaction keeps only the latest value of every key;
4. the previous checkpoint's intent chunks, deleted (tombstones).

A reader folds every ``s`` record into a state, and then the latest sealed intent over it
(:class:`Restorer`): whatever a crash cut off after the last seal is ignored, and whatever of
the last checkpoint was not yet materialized comes from its intent.

Under exactly-once the records of a checkpoint are written in the worker's Kafka transaction,
which read_committed readers see whole or not at all: no crash can leave a checkpoint sealed
and half materialized, so there is no intent (step 1; the seal says 0 chunks) and every change
is written once instead of twice.

A seal also says whose checkpoint it is (:class:`Sealed`): its writer's *lineage* — a random
name each restore gives the checkpoints it writes next — and the checkpoints that restores
continued from (its *roots*, :func:`rooted`). A disk store remembers the lineage and number of
the checkpoint it holds, and :func:`descends` tells from the latest seal alone whether that
checkpoint is still part of the partition's history, or was taken back (an aborted
transaction) and written over by others. Compaction keeps only the latest seal, so the seal
carries what the check needs.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec

__all__ = [
    "CHECKPOINT_VERSION",
    "CHUNK_BYTES",
    "INTENT",
    "READABLE_VERSIONS",
    "ROOTS_KEEP_S",
    "ROOTS_MAX",
    "SEAL",
    "STATE",
    "Restorer",
    "Sealed",
    "checkpoint_records",
    "decode_record",
    "descends",
    "intent_number",
    "live",
    "rooted",
]

#: The changelog format; a worker refuses a changelog of another version. Version 2 seals say
#: what the checkpoint holds and under which settings; version 1 seals did not (read still:
#: the state itself records every part's settings). Version 3 writes the evaluation states'
#: rings as they lie, their columns packed and first (streameval.app.statekeys.encode_state);
#: it reads the states of 1 and 2, which list each window oldest first, and they cannot read
#: its states. Version 4 writes a join's events waiting for its clock in chunks
#: (streameval.core.waiting); it reads the events of 1 to 3, one under each key, and those
#: would not see its chunks.
CHECKPOINT_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
#: Size of an intent chunk (bytes of encoded pairs, about: pairs are split evenly), far below
#: the changelog topics' message limit.
CHUNK_BYTES = 512 * 1024
STATE, INTENT, SEAL = b"s", b"i", b"S"
_NUMBERS = struct.Struct(">QI")
_encode = msgspec.msgpack.Encoder().encode
#: a seal's value, an intent chunk's pairs
decode_record = msgspec.msgpack.Decoder().decode


#: How long (s of wall time) a seal keeps a root: longer than a disk store is trusted for
#: (``STORE_MAX_AGE_S``, 6 days, in streameval.app.checkpoint; a store is written after its
#: checkpoint, and a restore from that checkpoint comes later still), with a day for the clocks
#: of the machines the workers run on.
ROOTS_KEEP_S = 7 * 86_400
#: At most this many roots, one per lineage, the latest kept: a store whose root was dropped is
#: rebuilt from the changelog — slower, never wrong.
ROOTS_MAX = 256


class Sealed(NamedTuple):
    """A checkpoint of a changelog partition, as a disk store records the one it holds."""

    number: int
    chunks: int  # its intent chunks
    lineage: str | None = None  # whose (None: a release before lineages, or none yet)


def rooted(seal: dict[str, Any], now: float) -> list[list[Any]]:
    """The roots of the checkpoints a restore from ``seal`` writes: the seal's own roots of
    the last :data:`ROOTS_KEEP_S`, and the seal's checkpoint; one per lineage (its latest
    checkpoint: the earlier ones of a lineage are in its history anyway), each ``[number,
    lineage, when]``, at most :data:`ROOTS_MAX`.

    >>> rooted({"n": 5, "lineage": "b", "roots": [[3, "a", 0], [2, "z", -10**7]]}, 10)
    [[3, 'a', 0], [5, 'b', 10]]
    >>> rooted({"n": 7, "lineage": "b", "roots": [[5, "b", 10]]}, 20)  # b restored again
    [[7, 'b', 20]]
    >>> rooted({"n": 4, "v": 4}, 0)  # a seal of a release before lineages: nothing to root
    []
    """
    roots = {  # (indexed, not unpacked: a later release may add to a root, kept as it is)
        root[1]: list(root) for root in seal.get("roots", ()) if now - root[2] <= ROOTS_KEEP_S
    }
    lineage = seal.get("lineage")
    if lineage is not None:
        roots.pop(lineage, None)  # keeps the order: the latest root last
        roots[lineage] = [seal["n"], lineage, int(now)]
    return list(roots.values())[-ROOTS_MAX:]


def descends(seal: dict[str, Any] | None, held: Sealed) -> bool:
    """Whether the checkpoint of ``seal`` (a partition's latest; None: it has none) continues
    ``held``, the checkpoint a disk store holds: it is ``held`` or a later one of its lineage,
    or one written after a restore from a checkpoint of that lineage at least as late. If not,
    ``held`` is not in the partition's history (its transaction was aborted), and the store
    must be rebuilt from the changelog. A seal or a store of a release before lineages tells
    nothing: True.

    >>> seal = {"n": 9, "lineage": "c", "roots": [[4, "a", 0], [7, "b", 0]]}
    >>> [descends(seal, Sealed(n, 0, lineage)) for n, lineage in [(9, "c"), (8, "c"), (7, "b")]]
    [True, True, True]
    >>> [descends(seal, Sealed(n, 0, lineage)) for n, lineage in [(10, "c"), (5, "a"), (1, "d")]]
    [False, False, False]
    >>> descends(None, Sealed(1, 0, "a")), descends({"n": 3}, Sealed(5, 0, "a"))
    (False, True)
    """
    if held.lineage is None:
        return True
    if seal is None:
        return False
    if "lineage" not in seal:
        return True
    if seal["lineage"] == held.lineage:
        return seal["n"] >= held.number
    return any(root[1] == held.lineage and root[0] >= held.number for root in seal.get("roots", ()))


def intent_number(key: bytes) -> tuple[int, int]:
    """The checkpoint and chunk numbers of an intent record's key."""
    return _NUMBERS.unpack_from(key, 1)


def _intent_key(checkpoint: int, chunk: int) -> bytes:
    return INTENT + _NUMBERS.pack(checkpoint, chunk)


def checkpoint_records(
    number: int,
    changes: dict[bytes, bytes | None],
    previous_chunks: int,
    seal: dict[str, Any],
    intent: bool = True,
) -> tuple[list[tuple[bytes, bytes | None]], int]:
    """The changelog records of checkpoint ``number`` in the order they must be written
    (the steps above), and how many intent chunks it has. The first checkpoint after a
    restore must include the restorer's :attr:`Restorer.carry` in ``changes``.

    ``seal`` goes into the seal record with the numbers (a version and the configuration's
    fingerprint, for whoever restores). ``intent=False`` (exactly-once: the records go out in
    one transaction) leaves the intent out.

    >>> records, chunks = checkpoint_records(2, {b"k": b"v", b"gone": None}, 1, {})
    >>> [key[:1] for key, _ in records], chunks
    ([b'i', b'S', b's', b's', b'i'], 1)
    >>> records, chunks = checkpoint_records(3, {b"k": b"w"}, 1, {}, intent=False)
    >>> [key[:1] for key, _ in records], chunks
    ([b'S', b's', b'i'], 0)
    """
    records: list[tuple[bytes, bytes | None]] = []
    if intent:
        pairs = list(changes.items())
        encoded = _encode(pairs)
        parts = max(1, -(-len(encoded) // CHUNK_BYTES))  # about CHUNK_BYTES each
        if parts == 1:
            records.append((_intent_key(number, 0), encoded))
        else:
            step = -(-len(pairs) // parts)
            records += [
                (_intent_key(number, i), _encode(pairs[start : start + step]))
                for i, start in enumerate(range(0, len(pairs), step))
            ]
    chunks = len(records)
    records.append((SEAL, _encode({**seal, "n": number, "chunks": chunks})))
    records += [(STATE + key, value) for key, value in changes.items()]
    records += [(_intent_key(number - 1, c), None) for c in range(previous_chunks)]
    return records, chunks


@dataclass
class Restorer:
    """Folds a changelog partition's records, in log order, into the latest sealed state.

    Feed it every record from where the state it starts from was covered (the beginning for an
    empty state); :meth:`finish` then gives the changes to apply: the ``s`` values read, and
    over them the latest sealed checkpoint's intent. Records after the last seal (a checkpoint
    a crash cut short) change nothing.

    With a ``sink`` the ``s`` values are not kept but handed to it in batches as they come (a
    disk store writes them: a state larger than RAM is restored in bounded memory), and
    :meth:`finish` gives only the intent, which the sink's owner applies last; ``lookup``
    then reads the sink's current values of some keys.

    >>> log, _ = checkpoint_records(1, {b"a": b"1"}, 0, {"v": 1})
    >>> more, _ = checkpoint_records(2, {b"a": b"2", b"b": b"3"}, 1, {"v": 1})
    >>> r = Restorer()
    >>> for key, value in log + more[:1]:  # the second checkpoint: cut after its intent
    ...     r.add(key, value)
    >>> r.finish(), r.seal["n"]
    ({b'a': b'1'}, 1)
    """

    sink: Callable[[list[tuple[bytes, bytes | None]]], None] | None = None
    lookup: Callable[[list[bytes]], list[bytes | None]] | None = None
    #: the latest seal read (None: no checkpoint yet)
    seal: dict[str, Any] | None = None
    state: dict[bytes, bytes | None] = field(default_factory=dict)
    #: after :meth:`finish`: what the last checkpoint's intent holds and the topic does not
    #: under the keys themselves (a crash cut its materialization short) — the next
    #: checkpoint must write it again, before the intent it is in is deleted
    carry: dict[bytes, bytes | None] = field(default_factory=dict)
    _intents: dict[tuple[int, int], bytes] = field(default_factory=dict)
    _batch: list[tuple[bytes, bytes | None]] = field(default_factory=list)

    def add(self, key: bytes, value: bytes | None) -> None:
        kind = key[:1]
        if kind == STATE:
            if self.sink is None:
                self.state[key[1:]] = value
            else:
                self._batch.append((key[1:], value))
                if len(self._batch) >= 50_000:
                    self.sink(self._batch)
                    self._batch = []
        elif kind == INTENT:
            number, chunk = _NUMBERS.unpack_from(key, 1)
            if value is None:
                self._intents.pop((number, chunk), None)
            else:
                self._intents[number, chunk] = value
        elif kind == SEAL and value is not None:
            self.seal = decode_record(value)

    def finish(self) -> dict[bytes, bytes | None]:
        """The state's changes up to the latest seal (None: deleted), intent applied last;
        with a sink, the intent only (the values read went to the sink)."""
        if self.sink is not None and self._batch:
            self.sink(self._batch)
            self._batch = []
        intent: dict[bytes, bytes | None] = {}
        if self.seal is not None:
            number = self.seal["n"]
            for chunk in range(self.seal["chunks"]):
                data = self._intents.get((number, chunk))
                if data is None:
                    raise ValueError(
                        f"checkpoint {number} is sealed but its intent chunk {chunk} is missing"
                    )
                for key, value in decode_record(data):
                    intent[key] = value
        if self.sink is None:
            current = [self.state.get(key) for key in intent]
            out = dict(self.state)
        else:
            current = self.lookup(list(intent)) if intent and self.lookup else []
            out = {}
        self.carry = {
            k: v for (k, v), now in zip(intent.items(), current, strict=False) if now != v
        }
        out.update(intent)
        return out


def live(changes: dict[bytes, bytes | None]) -> Iterable[tuple[bytes, bytes]]:
    """The pairs that are still there (not deleted)."""
    return ((k, v) for k, v in changes.items() if v is not None)
