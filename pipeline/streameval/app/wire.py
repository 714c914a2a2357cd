"""The internal wire format: micro-batches between the worker's stages (msgpack, versioned).

Two message kinds travel on the internal topics, each carrying many events so that the
per-message cost of Kafka and of the framework is paid once per batch:

* :class:`EventBatch` (ingest → join, ``<prefix>streameval-events``, partition = join
  partition of the ``instance_id``): events, each with the input partition and offset it came
  from (the join drops any it has already applied, so ingest may resend after a crash), and
  the progress of every input partition the sending ingest owns (its largest ``ts`` so far and
  whether it is idle), from which the join computes its watermark.
* :class:`OutcomeBatch` (join → evaluate, ``<prefix>streameval-outcomes``, partition =
  evaluation partition of the model): the outcomes a join partition resolved in one step —
  applying one event batch, or one more slice of the events it made due — identified by that
  batch's offset and the step's number (the evaluator drops repeats), and the join
  partition's frontier: every later outcome from it has ``due`` ≥ the frontier.

A batch whose ``v`` is not :data:`WIRE_VERSION` is refused with a clear error: the stages of
one application must run the same version — but for batches of version 1, written before
predictions carried their scores, which read as batches without scores, and of version 2,
written before outcomes carried their instance's slice, which read as batches without slices
(an upgrade may leave some on the internal topics). The layout of an event and of an outcome
inside a batch is fixed here (:data:`EVENT_LAYOUT`, :data:`OUTCOME_LAYOUT`): the core's tuples
are encoded as they are, for speed, and this module refuses to load if the core's ``Outcome``
no longer has this layout — a change of it is a new wire version, never a silent one.
"""

from __future__ import annotations

import msgspec

from streameval.core.outcome import INSTANCE, LABEL, PREDICTION, EventRow, Label, Outcome

__all__ = [
    "EVENT_LAYOUT",
    "INSTANCE",
    "LABEL",
    "OUTCOME_LAYOUT",
    "PREDICTION",
    "WIRE_VERSION",
    "EventBatch",
    "OutcomeBatch",
    "Source",
    "WireError",
    "decode_events",
    "decode_outcomes",
    "encode",
]

WIRE_VERSION = 3
#: An event on the wire (version 3): a msgpack array of these, in this order; an instance's
#: ``label`` is its slice value ("" for none: so are all of version 2)
EVENT_LAYOUT = ("kind", "instance_id", "model_id", "ts", "label", "source", "offset", "scores")
#: An outcome on the wire (version 3): a msgpack array of these, in this order.
OUTCOME_LAYOUT = (
    "model_id",
    "instance_id",
    "y_true",
    "times",
    "labels",
    "t_instance",
    "t_label",
    "due",
    "scores",
    "slice",
)
if Outcome._fields != OUTCOME_LAYOUT:
    raise ImportError(
        f"streameval.core.outcome.Outcome has the fields {Outcome._fields}, but wire version "
        f"{WIRE_VERSION} carries {OUTCOME_LAYOUT}: a new layout needs a new WIRE_VERSION"
    )


class WireError(ValueError):
    """An internal message this version cannot read."""


class Source(msgspec.Struct, array_like=True, frozen=True):
    """Progress of one input partition: the largest ``ts`` read so far, and idleness."""

    topic: str
    partition: int
    ts: int
    idle: bool


class EventBatch(msgspec.Struct, array_like=True):
    v: int
    sources: list[Source]
    events: list[EventRow]


class OutcomeBatch(msgspec.Struct, array_like=True):
    v: int
    partition: int  # the join partition that resolved them
    offset: int  # offset of the event batch that caused them, in that join partition
    frontier: int
    outcomes: list[Outcome]  # a named tuple: a msgpack array each, decoded in C
    #: the step after the event batch (0: applying it); last and defaulted, so a batch of
    #: the same version without it reads as it did
    part: int = 0


class _EventBatchV1(msgspec.Struct, array_like=True):
    v: int
    sources: list[Source]
    events: list[tuple[int, str, str, int, Label, int, int]]


_encoder = msgspec.msgpack.Encoder()
_events = msgspec.msgpack.Decoder(EventBatch)
_events_v1 = msgspec.msgpack.Decoder(_EventBatchV1)
_outcomes = msgspec.msgpack.Decoder(OutcomeBatch)


def encode(batch: EventBatch | OutcomeBatch) -> bytes:
    return _encoder.encode(batch)


def _check(batch, readable=(WIRE_VERSION,)):
    if batch.v not in readable:
        raise WireError(
            f"internal batch of wire version {batch.v}, this worker reads {WIRE_VERSION}: run "
            "one version of streameval per application id"
        )
    return batch


def decode_events(data: bytes) -> EventBatch:
    """
    >>> batch = EventBatch(WIRE_VERSION, [Source("labels", 0, 5, False)],
    ...                    [(LABEL, "i1", "", 5, "cat", 0, 17, None)])
    >>> decode_events(encode(batch)) == batch
    True
    """
    try:
        batch = _events.decode(data)
    except Exception as err:  # any bytes: WireError and nothing else
        try:
            old = _check(_events_v1.decode(data), readable=(1,))
        except Exception:
            raise WireError(f"not an event batch of wire version {WIRE_VERSION}: {err}") from None
        return EventBatch(WIRE_VERSION, old.sources, [(*row, None) for row in old.events])
    return _check(batch, readable=(2, WIRE_VERSION))  # version 2: no instance had a slice


def decode_outcomes(data: bytes) -> OutcomeBatch:
    try:
        batch = _outcomes.decode(data)
    except Exception as err:  # any bytes: WireError and nothing else
        raise WireError(f"not an outcome batch of wire version {WIRE_VERSION}: {err}") from None
    # an outcome of version 1 has no scores, of version 2 no slice (their defaults: none)
    return _check(batch, readable=(1, 2, WIRE_VERSION))
