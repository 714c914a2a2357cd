"""The wire format: the code and the JSON Schemas in topics/schemas accept the same messages."""

import json
from pathlib import Path

import jsonschema
import pytest
from streameval.schemas import DEAD_LETTER_REASONS, MAX_TS, BatchDecoder, decode_event
from streameval.topics import topics_dir

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = {
    kind: json.loads((topics_dir() / f"schemas/{kind}.schema.json").read_text())
    for kind in ("instance", "prediction", "label")
}

EXAMPLES = {  # (kind, message, valid?)
    "instance": [
        ({"instance_id": "i1", "ts": 0}, True),
        ({"instance_id": "i1", "ts": 5, "features": {"a": [1, 2], "b": "x"}}, True),
        ({"instance_id": "i1", "ts": MAX_TS}, True),
        ({"instance_id": "i1", "ts": MAX_TS + 1}, False),
        ({"instance_id": "i1", "ts": -1}, False),
        ({"instance_id": "", "ts": 1}, False),
        ({"instance_id": 7, "ts": 1}, False),
        ({"instance_id": "i1"}, False),
        ({"instance_id": "i1", "ts": 1.5}, False),
        ({"instance_id": "i1", "ts": "1"}, False),
        ({"instance_id": "i1", "ts": 1, "features": [1]}, False),
        ({"instance_id": "i1", "ts": 1, "source": "web"}, False),  # no other fields
        ({"instance_id": "i1", "ts": 1, "model_id": "m", "label": "a"}, False),  # a prediction
    ],
    "prediction": [
        ({"instance_id": "i", "model_id": "m", "ts": 1, "label": "a"}, True),
        (
            {
                "instance_id": "i",
                "model_id": "m",
                "ts": 1,
                "label": 3,
                "scores": {"a": 0.5},
                "model_version": "v2",
            },
            True,
        ),
        ({"instance_id": "i", "model_id": "m", "ts": 1, "label": ""}, False),
        ({"instance_id": "i", "model_id": "m", "ts": 1, "label": True}, False),
        ({"instance_id": "i", "model_id": "m", "ts": 1, "label": 1.5}, False),
        ({"instance_id": "i", "model_id": "", "ts": 1, "label": "a"}, False),
        ({"instance_id": "i", "ts": 1, "label": "a"}, False),
        (
            {"instance_id": "i", "model_id": "m", "ts": 1, "label": "a", "scores": {"a": "x"}},
            False,
        ),
        ({"instance_id": "i", "model_id": "m", "ts": 1, "label": "a", "scores": {"a": 0.5}}, True),
        ({"instance_id": "i", "model_id": "m", "ts": 1, "label": 2**63 - 1}, True),
        ({"instance_id": "i", "model_id": "m", "ts": 1, "label": 2**63}, False),
        ({"instance_id": "i", "model_id": "m", "ts": 1, "label": "a", "confidence": 1}, False),
    ],
    "label": [
        ({"instance_id": "i", "ts": 1, "label": "a"}, True),
        ({"instance_id": "i", "ts": 1, "label": -4}, True),
        ({"instance_id": "i", "ts": 1, "label": None}, False),
        ({"instance_id": "i", "ts": 1}, False),
        ({"instance_id": "i" * 513, "ts": 1, "label": "a"}, False),
        ({"instance_id": "i", "ts": 1, "label": -(2**63)}, True),
        ({"instance_id": "i", "ts": 1, "label": -(2**63) - 1}, False),
        ({"instance_id": "i", "model_id": "m", "ts": 1, "label": "a"}, False),  # a prediction
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


def test_the_committed_schemas_are_the_ones_the_types_generate():
    """topics/schemas/ is generated from streameval.records: `python -m streameval.records
    --write` after a change of a type, and this test holds the files to it."""
    from streameval.records import generated_schemas

    for name, text in generated_schemas().items():
        assert (topics_dir() / "schemas" / name).read_text() == text, (
            f"{name} differs from what streameval.records generates; run "
            "`python -m streameval.records --write`"
        )


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
        name: 0.5 for name in schema["$defs"]["InitialMetricsRecord"]["properties"]["estimators"][
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


def test_the_schema_command_checks_writes_and_names_a_wrong_folder(tmp_path, capsys):
    from streameval.records import generated_schemas, main

    assert main([]) == 0  # the package's files are up to date
    assert main([str(tmp_path)]) == 1 and "differ from the types" in capsys.readouterr().out
    assert main(["--write", str(tmp_path)]) == 0
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == generated_schemas()
    assert main([str(tmp_path / "missing")]) == 2
    assert "is not a folder" in capsys.readouterr().err
