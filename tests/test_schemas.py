"""The wire format: the code and the JSON Schemas in topics/schemas accept the same messages."""

import json
from pathlib import Path

import jsonschema
import msgspec
import pytest
from streameval.codec import (
    BatchDecoder,
    InstanceEvent,
    KafkaTimeDecoder,
    LabelEvent,
    PredictionEvent,
    canonical_scores,
    decode_event,
)
from streameval.decode_errors import explain
from streameval.messages import BOM, DEAD_LETTER_REASONS, EventError, StoredMessage
from streameval.records import MAX_TS, MIN_TS
from streameval.topics import topics_dir

ROOT = Path(__file__).resolve().parents[1]
T = 1_767_225_600_000  # 2026-01-01 in epoch milliseconds
SCHEMAS = {
    kind: json.loads((topics_dir() / f"schemas/{kind}.schema.json").read_text())
    for kind in ("instance", "prediction", "label")
}

EXAMPLES = {  # (kind, message, valid?)
    "instance": [
        ({"instance_id": "i1", "ts": MIN_TS}, True),
        ({"instance_id": "i1", "ts": MIN_TS - 1}, False),  # before 1973-03-03: not ms
        ({"instance_id": "i1", "ts": 1_767_225_600}, False),  # seconds
        ({"instance_id": "i1", "ts": 0}, False),
        ({"instance_id": "i1", "ts": T, "features": {"a": [1, 2], "b": "x"}}, True),
        ({"instance_id": "i1", "ts": MAX_TS}, True),
        ({"instance_id": "i1", "ts": MAX_TS + 1}, False),
        ({"instance_id": "i1", "ts": -1}, False),
        ({"instance_id": "", "ts": T}, False),
        ({"instance_id": 7, "ts": T}, False),
        ({"instance_id": "i1"}, False),
        ({"instance_id": "i1", "ts": 1.5}, False),
        ({"instance_id": "i1", "ts": "1"}, False),
        ({"instance_id": "i1", "ts": T, "features": [1]}, False),
        ({"instance_id": "i1", "ts": T, "source": "web"}, False),  # no other fields
        ({"instance_id": "i1", "ts": T, "model_id": "m", "label": "a"}, False),  # a prediction
    ],
    "prediction": [
        ({"instance_id": "i", "model_id": "m", "ts": T, "label": "a"}, True),
        (
            {
                "instance_id": "i",
                "model_id": "m",
                "ts": T,
                "label": 3,
                "scores": {"3": 0.5, "-4": 0.5},
                "model_version": "v2",
            },
            True,
        ),
        ({"instance_id": "i", "model_id": "m", "ts": T, "label": ""}, False),
        ({"instance_id": "i", "model_id": "m", "ts": T, "label": True}, False),
        ({"instance_id": "i", "model_id": "m", "ts": T, "label": 1.5}, False),
        ({"instance_id": "i", "model_id": "", "ts": T, "label": "a"}, False),
        ({"instance_id": "i", "ts": T, "label": "a"}, False),
        (
            {"instance_id": "i", "model_id": "m", "ts": T, "label": "a", "scores": {"a": "x"}},
            False,
        ),
        ({"instance_id": "i", "model_id": "m", "ts": T, "label": "a", "scores": {"a": 1.0}}, True),
        ({"instance_id": "i", "model_id": "m", "ts": T, "label": 2**63 - 1}, True),
        ({"instance_id": "i", "model_id": "m", "ts": T, "label": 2**63}, False),
        ({"instance_id": "i", "model_id": "m", "ts": T, "label": "a", "confidence": 1}, False),
    ],
    "label": [
        ({"instance_id": "i", "ts": T, "label": "a"}, True),
        ({"instance_id": "i", "ts": T, "label": -4}, True),
        ({"instance_id": "i", "ts": T, "label": None}, False),
        ({"instance_id": "i", "ts": T}, False),
        ({"instance_id": "i" * 513, "ts": T, "label": "a"}, False),
        ({"instance_id": "i", "ts": T, "label": -(2**63)}, True),
        ({"instance_id": "i", "ts": T, "label": -(2**63) - 1}, False),
        ({"instance_id": "i", "model_id": "m", "ts": T, "label": "a"}, False),  # a prediction
    ],
}


class _Message:
    def __init__(self, topic, value):
        self._topic, self._value = topic, value

    def topic(self):
        return self._topic

    def partition(self):
        return 0

    def offset(self):
        return 0

    def key(self):
        return None

    def value(self):
        return self._value


@pytest.mark.parametrize(
    ("kind", "message", "valid"),
    [(kind, m, v) for kind, cases in EXAMPLES.items() for m, v in cases],
)
def test_code_and_json_schema_agree(kind, message, valid):
    schema_says = jsonschema.Draft202012Validator(SCHEMAS[kind]).is_valid(message)
    decoder = BatchDecoder({"t": kind})
    decoded, _ = decoder.decode_message(_Message("t", json.dumps(message).encode()))
    code_says = decoded is not None
    assert schema_says == code_says == valid
    # the replay form (with "type") agrees too
    line = json.dumps({"type": kind, **message})
    schema_says = jsonschema.Draft202012Validator(SCHEMAS[kind]).is_valid({"type": kind, **message})
    try:
        decode_event(line)
        code_says = True
    except ValueError:
        code_says = False
    assert schema_says == code_says == valid


#: scores the types accept and the decoder refuses (bad_scores): what the schema says with an
#: if/then on the label's type, and what no schema can say (a sum), in its description
SCORES_BEYOND_TYPES = [
    ({"label": 3, "scores": {"a": 1.0}}, False),
    ({"label": 3, "scores": {"03": 1.0}}, False),
    ({"label": 3, "scores": {"3": 0.4, "4": 0.5}}, True),
    ({"label": "a", "scores": {"a": 0.5}}, True),
    ({"label": "a", "scores": {"a": 0.5, "b": 0.500002}}, True),
]


@pytest.mark.parametrize(("fields", "schema_accepts"), SCORES_BEYOND_TYPES)
def test_the_decoder_refuses_scores_that_name_no_class_or_are_no_distribution(
    fields, schema_accepts
):
    message = {"instance_id": "i", "model_id": "m", "ts": T, **fields}
    assert jsonschema.Draft202012Validator(SCHEMAS["prediction"]).is_valid(message) is (
        schema_accepts
    )
    kind, letter = BatchDecoder({"t": "prediction"}).decode_message(
        _Message("t", json.dumps(message).encode())
    )
    assert kind is None and letter.code == "bad_scores"
    with pytest.raises(EventError) as caught:
        decode_event(json.dumps({"type": "prediction", **message}))
    assert caught.value.code == "bad_scores" and str(caught.value) == letter.reason
    assert "scores" in letter.reason


def test_scores_that_add_up_to_1_within_the_tolerance_are_kept():
    message = {"instance_id": "i", "model_id": "m", "ts": T, "label": 2}
    message["scores"] = {"2": 0.3, "10": 0.7000009}
    kind, record = BatchDecoder({"t": "prediction"}).decode_message(
        _Message("t", json.dumps(message).encode())
    )
    assert kind == "prediction" and canonical_scores(record.scores, 2) == (2, 0.3, 10, 0.7000009)


@pytest.mark.parametrize("kind", ["instance", "prediction", "label"])
def test_the_types_accept_what_the_schemas_accept(kind):
    import msgspec
    from streameval.records import InstanceMessage, LabelMessage, PredictionMessage

    typed = {"instance": InstanceMessage, "prediction": PredictionMessage, "label": LabelMessage}
    for message, valid in EXAMPLES[kind]:
        for form in (message, {"type": kind, **message}):
            try:
                msgspec.json.decode(json.dumps(form), type=typed[kind])
                accepted = True
            except msgspec.ValidationError:
                accepted = False
            assert accepted == valid, form


def test_a_record_of_one_view_with_the_fields_of_the_other_is_refused():
    import msgspec
    from streameval.records import check_record

    schema = json.loads((topics_dir() / "schemas/metrics.schema.json").read_text())
    measures = {name: 0 for name in ("n", "n_effective")} | {
        name: False if name == "warming_up" else 0.5
        for name in schema["$defs"]["InitialMetricsRecord"]["properties"]["estimators"][
            "additionalProperties"]["required"] if name not in ("n", "n_effective")
    }  # fmt: skip
    initial = {"kind": "metrics", "model_id": "m", "ts": 1, "n": 1, "view": "initial",
               "estimators": {"cumulative": measures}}  # fmt: skip
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid(initial)
    check_record(initial)
    for wrong in ({**initial, "latency_ms": {"mean": 1.0, "max": 1}},
                  {**initial, "view": "final"}):  # fmt: skip
        assert not validator.is_valid(wrong)
        with pytest.raises(msgspec.ValidationError):
            check_record(wrong)


def test_every_schema_is_valid_json_schema():
    for path in sorted((topics_dir() / "schemas").glob("*.schema.json")):
        jsonschema.Draft202012Validator.check_schema(json.loads(path.read_text()))


def test_the_docs_list_every_dead_letter_reason():
    text = (ROOT / "docs/replay.md").read_text()
    table = text[text.index("## Dead letters") :]
    for code in DEAD_LETTER_REASONS:
        assert f"| `{code}` |" in table, f"docs/replay.md does not explain {code}"


def _decode(value: bytes, kind="label", timestamp=None, **time):
    """What the worker's decoder makes of a message on a topic of ``kind``: (code, record)."""
    message = StoredMessage("t", 0, 0, None, value, timestamp)
    decoder = KafkaTimeDecoder if time.pop("ts_source", "field") == "kafka" else BatchDecoder
    decoded, result = decoder({"t": kind}, **time).decode_message(message)
    return (None, result) if decoded else (result.code, result)


@pytest.mark.parametrize(
    ("ts", "unit", "code", "says"),
    [
        (T // 1000, "ms", "wrong_ts_unit", 'like seconds, not milliseconds (2026-01-01 00:00:00 '
         'UTC in seconds): multiply it by 1000 at the producer, or set [time] ts_unit = "s"'),
        (T * 1000, "ms", "wrong_ts_unit", 'like microseconds, not milliseconds (2026-01-01 '
         '00:00:00 UTC in microseconds): divide it by 1000 at the producer, or set [time] '
         'ts_unit = "us"'),
        (T * 10**6, "ms", "wrong_ts_unit", 'divide it by 1000000 at the producer, or set [time] '
         'ts_unit = "ns"'),
        (T, "s", "wrong_ts_unit", 'like milliseconds, not seconds (2026-01-01 00:00:00 UTC in '
         'milliseconds): divide it by 1000 at the producer, or set [time] ts_unit = "ms"'),
        (T // 1000, "ns", "wrong_ts_unit", 'multiply it by 1000000000 at the producer'),
        (0, "ms", "bad_timestamp", "ts 0 is no date from 1973-03-03 to 2200-01-01, in "
         'milliseconds or any other unit: send the epoch time of the event in milliseconds'),
        (-T, "ms", "bad_timestamp", "no date"),
        (50 * 10**12, "ms", "bad_timestamp", "no date"),  # after 2200 in ms, before 1973 in µs
        (2**63 - 1, "ns", "bad_timestamp", "in nanoseconds or any other unit"),
        (2**70, "us", "bad_timestamp", "no date"),
    ],
)  # fmt: skip
def test_a_ts_in_the_wrong_unit_is_refused_saying_which_unit_and_what_to_do(ts, unit, code, says):
    """A time in seconds used to pass as a date in January 1970 and expire silently later.
    The worker's decoder and replay's give the same reason: one rule."""
    value = b'{"instance_id": "i", "ts": %d, "label": "a"}' % ts
    letter_code, letter = _decode(value, ts_unit=unit)
    assert letter_code == code and says in letter.reason
    with pytest.raises(EventError) as raised:
        decode_event(b'{"type": "label", ' + value[1:], unit)
    assert (raised.value.code, str(raised.value)) == (code, letter.reason)


LONG = b"x" * 513


@pytest.mark.parametrize(
    ("kind", "value", "code", "says"),
    [
        ("label", b'{"instance_id": "%s", "ts": %d, "label": "a"}' % (LONG, T), "too_long",
         "length <= 512 - at `$.instance_id` (ids, model ids, labels and attribute values"),
        ("prediction", b'{"instance_id": "i", "model_id": "%s", "ts": %d, "label": "a"}'
         % (LONG, T), "too_long", "at `$.model_id`"),
        ("label", b'{"instance_id": "i", "ts": %d, "label": "%s"}' % (T, LONG), "too_long",
         "at `$.label`"),
        ("instance", b'{"instance_id": "i", "ts": %d, "attributes": {"c": "%s"}}' % (T, LONG),
         "too_long", "Expected `str` of length <= 512 - at `$.attributes[...]` (ids, model ids, "
         "labels and attribute values are at most 512 characters; an instance has at most 256 "
         "attributes, named by at most 256)"),
        ("instance", b'{"instance_id": "i", "ts": %d, "attributes": {"%s": 1}}' % (T, b"n" * 257),
         "too_long", "Expected `str` of length <= 256 - at `key` in `$.attributes`"),
        ("instance", b'{"instance_id": "i", "ts": %d, "attributes": {%s}}'
         % (T, b", ".join(b'"a%d": 1' % i for i in range(257))), "too_long",
         "Expected `object` of length <= 256 - at `$.attributes`"),
        ("prediction", b'{"instance_id": "i", "model_id": "m", "ts": %d, "label": "a", '
         b'"scores": {"a": 1e400}}' % T, "bad_scores", "a number beyond a 64-bit float's range - "
         "at `$.scores[...]` (scores are a probability from 0 to 1 per class"),
        ("label", b'{"instance_id": "i", "ts": -1e400, "label": "a"}', "bad_timestamp",
         "a number beyond a 64-bit float's range - at `$.ts` (ts is epoch milliseconds)"),
        ("label", b'{"instance_id": "i", "ts": %d, "label": -1e400}' % T, "bad_label",
         "a label is a string or a 64-bit integer"),
        ("instance", b'{"instance_id": "i", "ts": %d, "features": {"x": 1e400}}' % T,
         "wrong_type", "a number beyond a 64-bit float's range - at `$.features[...]`"),
    ],
)  # fmt: skip
def test_a_value_too_long_or_too_large_is_refused_naming_the_bound(kind, value, code, says):
    """A 513-character id used to be a ``wrong_type`` that did not say which bound it broke,
    and a number beyond a float's range (``1e400``) one that said "Number out of range" only.
    The worker's decoder and replay's give the same reason."""
    letter_code, letter = _decode(value, kind)
    assert letter_code == code and says in letter.reason, letter.reason
    with pytest.raises(EventError) as raised:
        decode_event(b'{"type": "%s", ' % kind.encode() + value[1:])
    assert (raised.value.code, str(raised.value)) == (code, letter.reason)


def test_an_unknown_field_is_said_with_the_fields_its_kind_has():
    """An instance's list left out ``attributes``, the one field a user would look for; and
    replay said no list at all (its decoder fails before it knows the line's kind: it reads
    the line's ``type`` then). The worker's decoder and replay's give the same reason."""
    says = {
        "instance": "an instance has instance_id, ts, features, attributes",
        "prediction": "a prediction has instance_id, model_id, ts, label, scores, model_version",
        "label": "a label has instance_id, ts, label",
    }
    for kind, fields in says.items():
        value = b'{"instance_id": "i", "ts": %d, "tags": []}' % T
        want = ("unknown_field", f"Object contains unknown field `tags` ({fields})")
        code, letter = _decode(value, kind)
        assert (code, letter.reason) == want
        with pytest.raises(EventError) as raised:
            decode_event(BOM + b'{"type": "%s", ' % kind.encode() + value[1:])
        assert (raised.value.code, str(raised.value)) == want


def test_a_field_given_twice_counts_its_last_value_as_the_docs_say():
    """docs/replay.md, "Dead letters": not refused, the last one counts, in both decoders."""
    value = b'{"instance_id": "i", "ts": %d, "label": "a", "label": "b"}' % T
    assert _decode(value)[1].label == "b"
    assert decode_event(b'{"type": "label", ' + value[1:]).label == "b"


@pytest.mark.parametrize(("unit", "ts"), [("s", T // 1000), ("ms", T), ("us", T * 1000 + 999),
                                          ("ns", T * 10**6 + 999_999)])  # fmt: skip
def test_ts_unit_says_what_ts_is_in_and_every_time_becomes_milliseconds(unit, ts):
    for kind, value in (
        ("instance", b'{"instance_id": "i", "ts": %d}' % ts),
        ("prediction", b'{"instance_id": "i", "model_id": "m", "ts": %d, "label": 1}' % ts),
        ("label", b'{"instance_id": "i", "ts": %d, "label": "a", "type": "label"}' % ts),
    ):
        code, record = _decode(value, kind, ts_unit=unit)
        assert code is None and record.ts == T, (kind, unit)
        event = decode_event(b'{"type": "%s", ' % kind.encode() + value[1:].replace(
            b', "type": "label"', b""), unit)  # fmt: skip
        assert type(event) in (InstanceEvent, PredictionEvent, LabelEvent) and event.ts == T
    assert _decode(b'{"instance_id": "i", "ts": "%d", "label": 1}' % ts, ts_unit=unit)[0] == (
        "wrong_type"
    )


def test_with_ts_source_kafka_event_time_is_the_record_timestamp():
    """``ts`` may then be absent and is not read; a message without a timestamp, or with one
    in seconds, is a dead letter that says so."""
    kafka = {"ts_source": "kafka"}
    for value in (
        b'{"instance_id": "i", "label": 1}',
        b'{"instance_id": "i", "ts": 5, "label": 1}',
    ):
        code, record = _decode(value, timestamp=T + 7, **kafka)
        assert code is None and record.ts == T + 7
    code, letter = _decode(b'{"instance_id": "i", "label": 1}', **kafka)
    assert code == "no_timestamp" and 'ts_source = "kafka"' in letter.reason
    code, letter = _decode(b'{"instance_id": "i", "label": 1}', timestamp=T // 1000, **kafka)
    assert code == "wrong_ts_unit" and letter.reason.startswith(
        f"the Kafka timestamp {T // 1000} looks like seconds, not milliseconds"
    )
    code, letter = _decode(b'{"instance_id": "i", "ts": "x", "label": 1}', timestamp=T, **kafka)
    assert code == "wrong_type"  # a ts that is there is still an integer
    with pytest.raises(ValueError, match="ts_unit 'sec' is not known"):
        BatchDecoder({"t": "label"}, ts_unit="sec")


LABEL = b'{"instance_id": "i", "ts": 1767225600000, "label": "a"}'


def test_a_utf8_byte_order_mark_before_the_json_is_tolerated():
    """Some producers (and Windows editors) start text with one; it used to be a dead letter,
    "invalid character (byte 0)", and a first line of a file skipped."""
    bom = b"\xef\xbb\xbf"
    code, record = _decode(bom + LABEL)
    assert code is None and (record.instance_id, record.ts) == ("i", T)
    assert decode_event(bom + b'{"type": "label", ' + LABEL[1:]) == LabelEvent("i", T, "a")
    code, letter = _decode(bom + b'{"instance_id": "i", "ts": 1767225600, "label": "a"}')
    assert code == "wrong_ts_unit"  # what follows the mark is judged as any message
    assert letter.value.startswith(bom)  # the dead letter keeps the original bytes
    assert _decode(bom + bom + LABEL)[0] == "invalid_json"  # one mark, not any number


@pytest.mark.parametrize(
    "err",
    [  # what msgspec raises for a string that is not UTF-8: before 0.23, and from 0.23 on
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
        msgspec.DecodeError("Invalid UTF-8 encoded string"),
    ],
    ids=["msgspec<0.23", "msgspec>=0.23"],
)
def test_a_string_that_is_not_utf8_is_said_so_whichever_msgspec_is_installed(err):
    """msgspec 0.23 turned its UnicodeDecodeError into a DecodeError, and the reason became
    invalid_json; it is invalid_utf8 with either (the installed one decodes below)."""
    error = explain(err, "label", b'{"instance_id": "\xff"}')
    assert error.code == "invalid_utf8" and "not valid UTF-8" in str(error)
    assert "byte 0xff in position 17" in str(error)  # its place in the whole message
    assert explain(msgspec.DecodeError("Input data was truncated")).code == "invalid_json"
    code, letter = _decode(b'{"instance_id": "i\xff", "ts": 1767225600000, "label": "a"}')
    assert code == "invalid_utf8" and letter.reason.startswith("a string is not valid UTF-8")
    assert "byte 0xff in position 18" in letter.reason
    # past a byte order mark (3 bytes), still its place in the message as it was produced
    code, letter = _decode(
        b'\xef\xbb\xbf{"instance_id": "i\xff", "ts": 1767225600000, "label": "a"}'
    )
    assert code == "invalid_utf8" and "byte 0xff in position 21" in letter.reason
    with pytest.raises(EventError, match="byte 0xff in position 37"):
        decode_event(b'\xef\xbb\xbf{"type": "label", "instance_id": "\xff", "ts": 1, "label": 1}')


@pytest.mark.parametrize("payload", [LABEL, b"\x02\x12inst-1\x02a"], ids=["json-schema", "avro"])
def test_a_message_in_schema_registry_framing_is_refused_naming_it(payload):
    """Confluent's serializers put a magic byte 0 and a 4-byte schema id before the payload;
    that is said, with what to do, rather than a JSON syntax error at byte 0."""
    value = b"\x00" + (1234).to_bytes(4, "big") + payload
    code, letter = _decode(value)
    assert code == "schema_registry"
    assert "Schema Registry framing (magic byte 0, schema id 1234)" in letter.reason
    assert "plain JSON" in letter.reason
    with pytest.raises(EventError) as raised:
        decode_event(value)
    assert (raised.value.code, str(raised.value)) == (code, letter.reason)


ALARM = {
    "kind": "drift_alarm", "model_id": "m", "ts": T + 9, "view": "final",
    "detector": "page_hinkley", "statistic": 101.5, "threshold": 100.0, "n": 21042,
    "estimate": 0.41, "instance_id": "i21042", "instance_ts": T + 2,
    "change_n": 20310, "change_ts": T + 1, "change_instance_id": "i20310",
    "change_instance_ts": T, "estimate_before": 0.21, "estimate_after": 0.37,
    "settings": {"type": "page_hinkley", "fading_factor": 0.999, "delta": 0.1,
                 "threshold": 100.0, "min_instances": 30},
}  # fmt: skip
UNKNOWN_CHANGE = dict.fromkeys(
    ("change_n", "change_ts", "change_instance_id", "change_instance_ts", "estimate_before",
     "estimate_after")
)  # fmt: skip


@pytest.mark.parametrize(
    ("alarm", "valid"),
    [
        (ALARM, True),
        ({**ALARM, **UNKNOWN_CHANGE}, True),  # restored from a checkpoint that did not keep it
        ({k: v for k, v in ALARM.items() if k != "change_n"}, False),  # every field, always
        ({k: v for k, v in ALARM.items() if k != "settings"}, False),
        ({**ALARM, "change_n": 0}, False),
        ({**ALARM, "change_instance_id": ""}, False),
        ({**ALARM, "instance_id": None}, False),  # the outcome that fired is always known
        ({**ALARM, "instance_ts": -1}, False),
        ({**ALARM, "settings": {"type": "page_hinkley", "threshold": [100]}}, False),
        ({**ALARM, "change_estimate": 0.3}, False),
    ],
)
def test_a_drift_alarm_says_where_the_change_began_in_code_and_schema_alike(alarm, valid):
    import msgspec
    from streameval.records import check_record

    schema = json.loads((topics_dir() / "schemas/drift-alarm.schema.json").read_text())
    assert jsonschema.Draft202012Validator(schema).is_valid(alarm) == valid
    try:
        record = check_record(alarm)
        accepted = True
    except msgspec.ValidationError:
        accepted = False
    assert accepted == valid
    if valid:
        assert (record.change_n, record.settings) == (alarm["change_n"], alarm["settings"])


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-16-be"])
def test_a_message_in_utf16_is_said_so_not_taken_for_schema_registry_framing(codec):
    """UTF-16 (what PowerShell and .NET write by default) puts a NUL in every other byte; one
    starting with a NUL used to be told as Schema Registry framing, with a made-up schema id."""
    code, letter = _decode(LABEL.decode().encode(codec))
    assert code == "invalid_utf8"
    assert "UTF-16" in letter.reason and "not UTF-8" in letter.reason
    assert "Schema Registry" not in letter.reason


def test_a_type_that_is_not_its_topics_kind_is_said_before_the_fields_it_lacks():
    """An instance on the labels topic lacks a label and may have fields a label has not: the
    producer sent it to the wrong topic, which is what the dead letter says."""
    instance = b'{"type": "instance", "instance_id": "i1", "ts": 1767225600000}'
    for value in (instance, instance[:-1] + b', "features": {}}', BOM + instance):
        code, letter = _decode(value, kind="label")
        assert code == "unknown_type", letter.reason
        assert letter.reason == "`type` is 'instance' but topic 't' carries 'label' messages"
    code, letter = _decode(b'{"type": "label", "instance_id": "i1", "ts": 1767225600000}')
    assert code == "missing_field"  # its own kind: what it lacks is what is wrong


def test_a_syntax_error_past_a_byte_order_mark_is_placed_in_the_message_as_produced():
    bad = b'{"instance_id" "i"}'
    assert _decode(bad)[1].reason == "not valid JSON: JSON is malformed: expected ':' (byte 15)"
    code, letter = _decode(BOM + bad)
    assert code == "invalid_json" and letter.reason.endswith(" (byte 18)")
