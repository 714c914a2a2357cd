"""Any bytes at all through every decoder: an event or a dead letter with a reason — never an
exception (the worker's bulk decoder and router, replay's line decoder, the internal batches).
"""

from __future__ import annotations

import math

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streameval.app.router import Router
from streameval.app.wire import (
    INSTANCE,
    LABEL,
    PREDICTION,
    WIRE_VERSION,
    EventBatch,
    Source,
    WireError,
    decode_events,
    decode_outcomes,
    encode,
)
from streameval.codec import (
    BatchDecoder,
    InstanceEvent,
    LabelEvent,
    PredictionEvent,
    decode_event,
)
from streameval.messages import DEAD_LETTER_REASONS, MAX_DEPTH, EventError, StoredMessage
from streameval.records import InstanceRecord, LabelRecord, PredictionRecord
from streameval.topics import INPUT_KINDS

FIELDS = ["type", "instance_id", "model_id", "ts", "label", "scores", "features",
          "model_version", "extra"]  # fmt: skip
TOPICS = list(INPUT_KINDS)


def _json(value) -> bytes:
    """Serialize like a careless producer: NaN and Infinity as bare words, any int."""
    if isinstance(value, float) and not math.isfinite(value):
        return b"NaN" if math.isnan(value) else (b"Infinity" if value > 0 else b"-Infinity")
    if isinstance(value, list):
        return b"[" + b",".join(_json(v) for v in value) + b"]"
    if isinstance(value, dict):
        return b"{" + b",".join(_json(str(k)) + b":" + _json(v) for k, v in value.items()) + b"}"
    if isinstance(value, str):  # lone surrogates pass through as \\u escapes
        return b'"' + value.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode(
            "ascii", "backslashreplace"
        ).replace(b'"', b'\\"') + b'"'  # fmt: skip
    return orjson.dumps(value) if not isinstance(value, int) else str(value).encode()


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from([0, -1, 1_767_225_600_000, 7_258_118_400_001, 2**63, "", "a" * 600]),
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
shaped = st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=7).map(_json)
typed = st.fixed_dictionaries(
    {"instance_id": st.text(min_size=1, max_size=8), "ts": st.integers(0, 2**43)},
    optional={"model_id": st.text(max_size=5), "label": st.one_of(st.text(max_size=5),
              st.integers(-(2**65), 2**65)), "type": st.sampled_from(
              ["instance", "prediction", "label", "other"]), "features": json_values},
).map(_json)  # fmt: skip
deep = st.integers(MAX_DEPTH - 2, 3_000).map(
    lambda n: b'{"instance_id":"d","ts":1,"features":{"x":' + b"[" * n + b"]" * n + b"}}"
)


@st.composite
def corrupted(draw):
    """Well-shaped JSON with bytes flipped, cut or inserted (invalid UTF-8 included)."""
    data = bytearray(draw(st.one_of(shaped, typed)))
    for _ in range(draw(st.integers(0, 3))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        op = draw(st.sampled_from(["flip", "cut", "insert"]))
        if op == "flip":
            data[at] = draw(st.integers(0, 255))
        elif op == "cut":
            del data[at:]
        else:
            data[at:at] = draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\\"]))
    return bytes(data)


# a byte order mark, or Schema Registry framing (a magic byte 0 and a schema id), before it
framed = st.tuples(st.sampled_from([b"\xef\xbb\xbf", b"\x00\x00\x00\x00\x07"]), typed).map(b"".join)
anything = st.one_of(st.binary(max_size=200), shaped, typed, deep, corrupted(), framed)
values = st.one_of(st.none(), anything)


def _letter_ok(letter) -> None:
    assert letter.code in DEAD_LETTER_REASONS, letter.code
    assert letter.reason
    for name, value in letter.headers():
        assert isinstance(name, str) and isinstance(value, bytes)


@settings(max_examples=1500)
@given(data=anything)
def test_a_replay_line_is_an_event_or_a_reason(data):
    try:
        event = decode_event(data)
    except EventError as err:
        assert err.code in DEAD_LETTER_REASONS, err.code
        assert str(err)
    else:
        assert type(event) in (InstanceEvent, PredictionEvent, LabelEvent)


RECORDS = {"instance": InstanceRecord, "prediction": PredictionRecord, "label": LabelRecord}


@settings(max_examples=1500)
@given(value=values, topic=st.sampled_from([*TOPICS, "elsewhere"]))
def test_a_message_is_a_record_or_a_dead_letter(value, topic):
    decoder = BatchDecoder(INPUT_KINDS)
    kind, result = decoder.decode_message(StoredMessage(topic, 0, 7, b"k", value))
    if kind is None:
        _letter_ok(result)
        assert (result.topic, result.offset, result.value) == (topic, 7, value)
        assert sum(decoder.counters.values()) == 1
    else:
        assert isinstance(result, RECORDS[kind]) and INPUT_KINDS[topic] == kind


@settings(max_examples=500)
@given(
    batch=st.lists(
        st.tuples(st.sampled_from(TOPICS), st.integers(0, 1), values,
                  st.one_of(st.none(), st.integers(-5, 2**45))),
        max_size=25,
    )
)  # fmt: skip
def test_the_router_routes_or_dead_letters_every_message(batch):
    router = Router(INPUT_KINDS, 3)
    router.assign([(t, p) for t in TOPICS for p in (0, 1)])
    offsets: dict = {}
    messages = []
    for topic, partition, value, timestamp in batch:
        offset = offsets[topic, partition] = offsets.get((topic, partition), -1) + 1
        messages.append(StoredMessage(topic, partition, offset, None, value, timestamp))
    per_partition, letters = router.route(messages)
    rows = [row for rows in per_partition for row in rows]
    assert len(rows) + len(letters) == len(messages)
    for letter in letters:
        _letter_ok(letter)
    sources = router.sources(0.0)
    decoded = decode_events(encode(EventBatch(WIRE_VERSION, sources, rows)))  # msgpack-safe
    assert len(decoded.events) == len(rows)


@settings(max_examples=1000)
@given(data=st.one_of(st.binary(max_size=200), anything))
def test_an_internal_batch_decodes_or_raises_wire_error(data):
    for decode in (decode_events, decode_outcomes):
        try:
            decode(data)
        except WireError:
            pass


def test_the_wire_layout_of_events_and_outcomes_is_fixed():
    """Version 3 of the internal batches, byte for byte: a change of the core's tuples that
    would change these bytes must come with a new WIRE_VERSION (wire.py refuses to load)."""
    import msgspec
    from streameval.app.wire import EVENT_LAYOUT, OUTCOME_LAYOUT, OutcomeBatch
    from streameval.core.outcome import Outcome

    scores = ("cat", 0.75, "dog", 0.25)
    event = (PREDICTION, "i1", "m", 5, "cat", 0, 17, scores)
    instance = (INSTANCE, "i1", "", 3, "fr", 1, 9, None)  # its label: its slice value
    outcome = Outcome("m", "i1", "cat", (3, 4), ("dog", "cat"), 3, 5, 5, (None, scores), "fr")
    events = encode(EventBatch(WIRE_VERSION, [Source("labels", 0, 5, False)], [event, instance]))
    outcomes = encode(OutcomeBatch(WIRE_VERSION, 1, 17, 5, [outcome], 2))
    assert msgspec.msgpack.decode(events) == [
        3,
        [["labels", 0, 5, False]],
        [
            [1, "i1", "m", 5, "cat", 0, 17, ["cat", 0.75, "dog", 0.25]],
            [0, "i1", "", 3, "fr", 1, 9, None],
        ],
    ]
    assert msgspec.msgpack.decode(outcomes) == [
        3,
        1,
        17,
        5,
        [
            [
                *["m", "i1", "cat", [3, 4], ["dog", "cat"], 3, 5, 5],
                *[[None, ["cat", 0.75, "dog", 0.25]], "fr"],
            ]
        ],
        2,
    ]
    assert len(EVENT_LAYOUT) == len(event) and OUTCOME_LAYOUT == Outcome._fields
    assert decode_outcomes(outcomes).outcomes == [outcome]
    assert decode_events(events).events == [event, instance]


def test_batches_of_wire_versions_1_and_2_read_as_batches_without_scores_or_slices():
    """What an upgrade may find on the internal topics: version 1, before scores; version
    2, before slices."""
    import msgspec
    from streameval.core.outcome import Outcome

    events = msgspec.msgpack.encode(
        [1, [["labels", 0, 5, False]], [[2, "i1", "", 5, "cat", 0, 17]]]
    )
    outcomes = msgspec.msgpack.encode(
        [1, 1, 17, 5, [["m", "i1", "cat", [3, 4], ["dog", "cat"], 3, 5, 5]], 2]
    )
    assert decode_events(events).events == [(LABEL, "i1", "", 5, "cat", 0, 17, None)]
    assert decode_outcomes(outcomes).outcomes == [
        Outcome("m", "i1", "cat", (3, 4), ("dog", "cat"), 3, 5, 5)
    ]
    events = msgspec.msgpack.encode([2, [], [[0, "i1", "", 5, "", 0, 17, None]]])
    outcomes = msgspec.msgpack.encode(
        [2, 1, 17, 5, [["m", "i1", "cat", [3], ["dog"], 3, 5, 5, []]], 2]
    )
    assert decode_events(events).events == [(INSTANCE, "i1", "", 5, "", 0, 17, None)]
    assert decode_outcomes(outcomes).outcomes[0].slice is None
    with pytest.raises(WireError, match="wire version 4, this worker reads 3"):
        decode_events(msgspec.msgpack.encode([4, [], []]))


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 2_000, 200_000])
def test_deep_nesting_is_refused_before_it_is_parsed(levels):
    value = (
        b'{"instance_id":"x","ts":1767225600000,"features":{"x":'
        + b"[" * levels
        + b"]" * levels
        + b"}}"
    )
    kind, letter = BatchDecoder(INPUT_KINDS).decode_message(
        StoredMessage("instances", 0, 0, None, value)
    )
    assert (kind, letter.code) == (None, "too_deep")
    with pytest.raises(EventError, match="nested deeper than"):
        decode_event(b'{"type":"instance",' + value[1:])
    shallow = (
        b'{"instance_id":"x","ts":1767225600000,"features":{"x":' + b"[" * 60 + b"]" * 60 + b"}}"
    )
    assert (
        BatchDecoder(INPUT_KINDS).decode_message(StoredMessage("instances", 0, 0, None, shallow))[0]
        == "instance"
    )


def test_the_router_routes_what_follows_a_byte_order_mark():
    router = Router(INPUT_KINDS, 1)
    router.assign([("labels", 0)])
    label = b'{"instance_id": "i1", "ts": 1767225600000, "label": "a"}'
    rows, letters = router.route([
        StoredMessage("labels", 0, 0, None, b"\xef\xbb\xbf" + label),
        StoredMessage("labels", 0, 1, None, b"\x00\x00\x00\x00\x07" + label),
    ], now_ms=1767225600000)  # fmt: skip
    assert rows == [[(LABEL, "i1", "", 1767225600000, "a", 0, 0, None)]]
    assert [letter.code for letter in letters] == ["schema_registry"]
    assert router.decoder.counters == {"schema_registry": 1}
