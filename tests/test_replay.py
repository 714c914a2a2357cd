"""`streameval replay` end to end on the sample stream: schemas, determinism, bad input."""

import io
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import jsonschema
import pytest
import streameval.replay
from click.testing import CliRunner
from streameval.cli import main
from streameval.codec import decode_event, encode_record
from streameval.config import load_config
from streameval.core.join import Join
from streameval.engine import Engine
from streameval.replay import replay
from streameval.topics import topics_dir

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "docs/examples/sample-events.jsonl"
T0 = 1_767_225_600_000  # 2026-01-01
CONFIG = ROOT / "docs/examples/replay.toml"
SCHEMAS = {
    kind: json.loads((topics_dir() / f"schemas/{name}.schema.json").read_text())
    for kind, name in (("metrics", "metrics"), ("drift_alarm", "drift-alarm"),
                       ("comparison", "comparison"), ("label_maturity", "label-maturity"))
}  # fmt: skip


def _replay_bytes(config=None, **kwargs) -> tuple[bytes, object]:
    out = io.BytesIO()
    result = replay(SAMPLE, config or load_config(CONFIG), out, **kwargs)
    return out.getvalue(), result


@pytest.fixture(scope="module")
def sample_output():
    return _replay_bytes()


def test_sample_file_is_what_its_script_generates(tmp_path):
    target = tmp_path / "events.jsonl"
    subprocess.run(
        [sys.executable, str(ROOT / "docs/examples/make_sample_events.py"), str(target)],
        check=True, capture_output=True,
    )  # fmt: skip
    assert target.read_bytes() == SAMPLE.read_bytes()


def test_every_record_validates_against_its_schema(sample_output):
    data, _result = sample_output
    records = [json.loads(line) for line in data.splitlines()]
    assert {r["kind"] for r in records} == {
        "metrics",
        "drift_alarm",
        "comparison",
        "label_maturity",
    }
    for record in records:
        jsonschema.validate(record, SCHEMAS[record["kind"]], cls=jsonschema.Draft202012Validator)
    assert b"NaN" not in data  # undefined values are null on the wire


def test_every_record_is_its_type_and_decodes_as_one(sample_output):
    """The records the service publishes are what streameval.records defines, and a consumer
    decoding them with it gets them back typed."""
    from streameval.records import (
        FinalMetricsRecord,
        InitialMetricsRecord,
        check_record,
        decode_record,
    )

    data, _result = sample_output
    views = set()
    for line in data.splitlines():
        record = json.loads(line)
        typed = check_record(record)
        assert decode_record(record["kind"], line) == typed
        if record["kind"] == "metrics":
            views.add(type(typed))
    assert views == {InitialMetricsRecord, FinalMetricsRecord}


def test_three_models_the_drift_and_the_comparison(sample_output):
    _, result = sample_output
    models = {model for model, _ in result.final_metrics}
    assert models == {"champion", "challenger", "baseline"}
    # the champion drifts at instance 1200: an alarm after it, none for the others
    assert [a.model_id for a in result.alarms] == ["champion"]
    assert 1200 < result.alarms[0].n < 1700
    final = result.final_metrics["champion", "final"]
    delayed = final.delayed["cumulative"]
    # predictions improve while labels are pending: initial ≤ Ψ ≤ final accuracy
    assert delayed["accuracy_initial"] < delayed["psi_accuracy"] < delayed["accuracy_final"]
    assert final.estimators["cumulative"]["accuracy"] == delayed["accuracy_final"]
    assert "normalized_precision" in final.estimators["window:1000"]
    comparison = result.final_comparisons["champion|challenger"].estimators["window:1000"]
    assert comparison.leader == "challenger" and comparison.significant == 1.0


def test_malformed_lines_are_skipped_and_reported(sample_output):
    _, result = sample_output
    assert [number for number, _ in result.skipped_examples] == [101, 2001, 4001]
    assert sum(result.skipped.values()) == 3
    assert result.events == result.lines - 3


def test_rerun_gives_identical_output(sample_output):
    assert _replay_bytes()[0] == sample_output[0]


def test_output_does_not_depend_on_how_events_are_chunked(sample_output, monkeypatch):
    monkeypatch.setattr(streameval.replay, "CHUNK", 7)
    assert _replay_bytes()[0] == sample_output[0]


def test_label_maturity_does_not_depend_on_the_positive_label():
    """A model numbers its classes with its ``positive_label`` first, so the setting changes
    the order of its label-delay histograms' rows; label maturity, which no model setting
    shapes, must stay the same bits (before Kruskal-Wallis's H summed order-free, 25 of
    these 111 records differed in H's last digits)."""
    from tests.streaming import COSTS, make_config, make_stream, replay_finals

    stream = make_stream()
    plain = {"champion": {"costs": COSTS}}
    positive = {m: {"positive_label": "no"} for m in ("challenger", "baseline")}
    without = replay_finals(stream, make_config(models=plain))["maturity"]
    given = replay_finals(stream, make_config(models=plain | positive))["maturity"]
    assert len(without) == 111
    assert given == without


def test_engine_state_round_trip_continues_exactly(sample_output):
    events = [decode_event(line) for line in SAMPLE.read_bytes().splitlines()[4100:9000]
              if b"feedback" not in line]  # fmt: skip
    config = load_config(CONFIG)
    whole = Engine(config)
    expected = whole.process(events) + whole.finish()
    first = Engine(config)
    records = first.process(events[:2345])
    join = Join.restore(first.join.changes().items())
    restored = Engine.from_state(config, json.loads(json.dumps(first.state())), join)
    records += restored.process(events[2345:]) + restored.finish()
    assert [encode_record(r) for r in records] == [encode_record(r) for r in expected]


def test_cli_replay_writes_records_plot_and_summary(tmp_path):
    out, plot = tmp_path / "records.jsonl", tmp_path / "report.png"
    result = CliRunner().invoke(
        main, ["replay", str(SAMPLE), "--config", str(CONFIG), "--out", str(out),
               "--plot", str(plot)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == _replay_bytes()[0]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "champion" in result.output and "line 101" in result.output
    # the champion has a cost matrix (docs/examples/replay.toml): its cost and its baselines'
    assert "champion: cost per decision " in result.output and "no-change " in result.output
    assert "challenger: cost per decision" not in result.output


def test_strict_stops_at_the_first_malformed_line(tmp_path):
    result = CliRunner().invoke(main, ["replay", str(SAMPLE), "--strict", "--quiet",
                                       "--out", str(tmp_path / "x")])  # fmt: skip
    assert result.exit_code == 1
    assert "line 101" in result.output and "without --strict" in result.output


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("estimators = ['window:0']", "estimators = ['window:0']"),
        ("[join]\nlabel_grace_ms = -5", "join.label_grace_ms = -5"),
        ("[delayed]\nalpha = 0.5", "delayed.alpha = 0.5"),
        ("[[comparisons]]\na = 'x'\nb = 'x'", "with itself"),
        ("detectors = [{type = 'page_hinkley', lambda = 3}]", "no setting 'lambda'"),
        ("publish_evry = 10", "publish_evry = 10: unknown key"),
        ("not toml at all", "not valid TOML"),
        ("[time]\nts_unit = 'sec'", "time.ts_unit = 'sec': Input should be 'ms', 's', 'us' or"),
        ("[time]\nts_source = 'header'", "time.ts_source = 'header'"),
    ],
)
def test_config_errors_name_the_key_before_any_work(tmp_path, toml, message):
    config = tmp_path / "bad.toml"
    config.write_text(toml)
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(
        main, ["replay", str(SAMPLE), "--config", str(config), "--out", str(out)]
    )
    assert result.exit_code == 2
    assert message in result.output
    assert not out.exists()  # nothing was started


def test_defaults_need_no_file():
    _data, result = _replay_bytes(config=load_config())
    assert result.records["metrics"] > 0
    assert result.final_comparisons == {}


def _run_lines(tmp_path, lines, **config):
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    out = io.BytesIO()
    result = replay(path, load_config(**config), out)
    return [json.loads(r) for r in out.getvalue().splitlines()], result


def _stream(n, model="m", label=lambda i: "a"):
    lines = []
    for i in range(n):
        lines.append({"type": "prediction", "instance_id": f"{model}-{i}", "model_id": model,
                      "ts": T0 + 100 * i, "label": "a"})  # fmt: skip
        lines.append({"type": "label", "instance_id": f"{model}-{i}", "ts": T0 + 100 * i + 50,
                      "label": label(i)})  # fmt: skip
    return lines


def test_labels_still_in_their_grace_at_the_end_are_evaluated(tmp_path):
    """The default grace (5 s) outlasts this whole file: the end of the file resolves them."""
    records, result = _run_lines(tmp_path, _stream(4))
    assert [(r["view"], r["n"]) for r in records] == [("initial", 4), ("final", 4)]
    assert result.pending == 0


def test_final_records_are_not_repeated(tmp_path):
    records, _ = _run_lines(tmp_path, _stream(4), publish_every=2)
    assert [(r["view"], r["n"]) for r in records] == [
        ("initial", 2), ("final", 2), ("initial", 4), ("final", 4)
    ]  # fmt: skip


def test_a_model_over_its_class_limit_does_not_stop_the_others(tmp_path):
    lines = _stream(5, model="good") + _stream(5, model="bad", label=lambda i: f"c{i}")
    records, result = _run_lines(tmp_path, lines, max_classes=3)
    final = {r["model_id"]: r for r in records if r["view"] == "final"}
    assert final["good"]["n"] == 5
    assert final["bad"]["n"] == 2  # classes a, c0, c1; c2, c3, c4 would pass the limit
    assert result.rejected == {("bad", "class_limit"): 3}
    assert "max_classes=3" in result.problems[0]


def test_a_model_whose_every_outcome_is_refused_publishes_nothing_and_stops_nothing(tmp_path):
    """With ``max_classes=1`` a wrong prediction needs a second class: every outcome of "bad"
    is refused, so the model exists with no outcome. Its end-of-stream records used to look
    up a last timestamp it never had (KeyError: the worker's publish tick died the same
    way)."""
    lines = _stream(4, model="good") + _stream(3, model="bad", label=lambda i: "b")
    records, result = _run_lines(tmp_path, lines, max_classes=1)
    assert {(r["model_id"], r["view"], r["n"]) for r in records} == {
        ("good", "initial", 4), ("good", "final", 4)
    }  # fmt: skip
    assert result.rejected == {("bad", "class_limit"): 3}


def test_a_label_named_as_a_class_of_the_other_type_is_refused_for_that_reason():
    """1 and "1" cannot both be classes: the second is refused as a clash, not as a class over
    ``max_classes`` (the reason the worker's /metrics and alert show), and the engine keeps
    each model's latest refusal and their count for the worker's log."""
    from streameval.core.outcome import Outcome

    engine = Engine(load_config(publish_every=1000))
    one = Outcome("m", "i1", 1, (T0 + 10,), (1,), T0 + 10, T0 + 20, T0 + 20)
    clash = [Outcome("m", f"i{k}", "1", (T0 + 10,), ("1",), T0 + 10, T0 + 20, T0 + 20)
             for k in (2, 3)]  # fmt: skip
    engine.evaluate([one, *clash])
    assert engine.rejected == {("m", "label_type_clash"): 2}
    said, count = engine.refusals["m"]
    assert count == 2 and "would be the same class name '1' on the wire" in said


def test_an_outcome_labelled_before_its_instance_is_refused_for_that_reason():
    """The join drops such labels (``label_before_instance``); an outcome built without it
    is refused by the model, counted under the same reason, and changes no number."""
    from streameval.core.outcome import Outcome

    engine = Engine(load_config(publish_every=1000))
    early = Outcome("m", "i1", "a", (T0 + 10,), ("a",), T0 + 10, T0, T0)
    fine = Outcome("m", "i2", "a", (T0 + 10,), ("a",), T0 + 10, T0 + 20, T0 + 20)
    assert engine.evaluate([early]) == []
    assert engine.finish() == []
    engine.evaluate([fine])
    assert [(r.view, r.n) for r in engine.finish()] == [("initial", 1), ("final", 1)]
    assert engine.rejected == {("m", "label_before_instance"): 1}


def test_lines_that_would_crash_or_move_the_clock_are_skipped_with_a_reason(sample_output):
    """The landed replay died on the first two (a traceback); an event stamped far in the
    future would have moved the join's clock past every pending label's grace, one stamped in
    seconds would have joined as a label from 1970 (now: the wrong unit, said so). Each is a
    skipped line with its reason,
    and the records are those of the file without them."""
    bad = [
        b'{"type":"instance","instance_id":"bad\xff\xfe","ts":1767225600002}',
        b'{"type":"instance","instance_id":"x","ts":1,"features":{"x":' + b"[" * 2000
        + b"]" * 2000 + b"}}",
        b'{"type":"label","instance_id":"inst-00400","ts":5680281600000,"label":"fraud"}',
        b'{"type":"label","instance_id":"inst-00400","ts":1767225640,"label":"ok"}',
        b'{"type":"prediction","instance_id":"x","model_id":"m","ts":1767225600001,"label":1,'
        b'"extra":1}',
    ]  # fmt: skip
    lines = SAMPLE.read_bytes().splitlines()
    for i, line in enumerate(bad):
        lines.insert(3000 + 500 * i, line)
    out = io.BytesIO()
    result = replay(io.BytesIO(b"\n".join(lines) + b"\n"), load_config(CONFIG), out)
    assert out.getvalue() == sample_output[0]
    codes = ("invalid_utf8", "too_deep", "ts_in_future", "wrong_ts_unit", "unknown_field")
    assert {code: result.skipped[code] for code in codes} == dict.fromkeys(codes, 1)


def test_the_present_of_a_replay_can_be_set(tmp_path):
    """A file stamped in the future of the machine's clock (a simulation) replays with
    ``now_ms`` set, or with a larger ``join.max_future_ms``."""
    lines = [{**line, "ts": line["ts"] + 4 * 10**12} for line in _stream(4)]  # 2152
    records, result = _run_lines(tmp_path, lines)
    assert records == [] and result.skipped["ts_in_future"] == 8
    path = tmp_path / "events.jsonl"
    out = io.BytesIO()
    result = replay(path, load_config(), out, now_ms=lines[-1]["ts"])
    assert result.skipped == {} and len(out.getvalue().splitlines()) == 2
    records, result = _run_lines(tmp_path, lines, join={"max_future_ms": 200 * 365 * 86_400_000})
    assert len(records) == 2


def test_a_file_in_seconds_replays_with_ts_unit_and_is_reported_without(tmp_path):
    """Without ``ts_unit`` every line of a file in seconds is skipped, and the summary says
    what they look like and what to do; with it, the records are those of the file in ms."""
    in_ms = _stream(4)
    expected, _ = _run_lines(tmp_path, in_ms)
    in_seconds = [{**line, "ts": line["ts"] // 1000} for line in _stream(4)]
    records, result = _run_lines(tmp_path, in_seconds)
    assert records == [] and result.skipped == {"wrong_ts_unit": 8}
    assert result.skipped_examples[0] == (1, "ts 1767225600 looks like seconds, not milliseconds "
        "(2026-01-01 00:00:00 UTC in seconds): multiply it by 1000 at the producer, or set [time] "
        'ts_unit = "s"')  # fmt: skip
    whole_seconds = [{**line, "ts": line["ts"] // 1000 * 1000} for line in in_ms]
    records, result = _run_lines(tmp_path, in_seconds, time={"ts_unit": "s"})
    assert records == _run_lines(tmp_path, whole_seconds)[0] and result.skipped == {}
    assert [r["n"] for r in records] == [r["n"] for r in expected]


@pytest.mark.parametrize("units", [{}, {"ts_unit": "s"}, {"ts_unit": "us"}])
def test_the_router_and_replay_refuse_the_same_events_for_the_same_reasons(tmp_path, units):
    """One rule: the same lines through the worker's router (one partition per type, as replay
    takes them, and no Kafka timestamps) and through replay are refused alike."""
    from streameval.app.router import Router
    from streameval.messages import StoredMessage
    from streameval.topics import INPUT_KINDS

    second = 1000
    stamps = [T0, T0 // second, T0 * second, T0 * second**2, 0, -T0, 5 * 10**13, T0 + 10**12,
              T0 + 7 * 10**8, T0 // second + 1, T0 * second + 2, T0]  # fmt: skip
    lines = [{"type": "label", "instance_id": f"i{n}", "ts": ts, "label": "a"}
             for n, ts in enumerate(stamps)]  # fmt: skip
    _, result = _run_lines(tmp_path, lines, time=units)
    config = load_config(time=units)
    router = Router(INPUT_KINDS, 1, rules=config.time_rules())
    router.assign([("labels", 0)])
    messages = [StoredMessage("labels", 0, n, None, json.dumps(line).encode())
                for n, line in enumerate(lines)]  # fmt: skip
    rows, letters = router.route(messages, now_ms=int(time.time() * 1000))
    routed = {row[1] for row in rows[0]}
    replayed = [line for line in lines if line["instance_id"] in routed]
    assert result.events == len(routed) > 0 and len(replayed) == len(routed)
    assert dict(result.skipped) == dict(Counter(letter.code for letter in letters))
    reasons = {letter.offset + 1: letter.reason for letter in letters}
    assert all(reasons[number] == reason for number, reason in result.skipped_examples)


def test_an_alarm_names_the_instances_and_times_of_where_it_fired_and_where_the_change_began(
    sample_output,
):
    """docs/examples: the champion drifts at instance 1200; every alarm's instance ids and
    times are those of the events, its change point lies before it, and its settings are those
    of a detector of the model."""
    from streameval.core.drift import canonical_spec

    data, _result = sample_output
    alarms = [r for r in map(json.loads, data.splitlines()) if r["kind"] == "drift_alarm"]
    assert alarms
    instance_ts, label_ts = {}, {}
    for line in SAMPLE.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # the sample's malformed lines
        if event.get("type") == "instance":
            instance_ts[event["instance_id"]] = event["ts"]
        elif event.get("type") == "label":
            label_ts.setdefault(event["instance_id"], event["ts"])
    config = load_config(CONFIG)
    for alarm in alarms:
        assert alarm["instance_ts"] == instance_ts[alarm["instance_id"]]
        assert alarm["ts"] == label_ts[alarm["instance_id"]]
        assert alarm["change_instance_ts"] == instance_ts[alarm["change_instance_id"]]
        assert alarm["change_ts"] == label_ts[alarm["change_instance_id"]] <= alarm["ts"]
        assert 1 <= alarm["change_n"] < alarm["n"]
        assert alarm["estimate_before"] < alarm["estimate_after"]
        detectors = [canonical_spec(d) for d in config.detectors_of(alarm["model_id"])]
        assert canonical_spec(alarm["settings"]) in detectors


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (
            {"confidence": 95},
            r"confidence = 95: confidence=95 is not allowed; use a number in \(0, 1\)",
        ),
        ({"confidence": 1.0}, r"confidence=1.0 is not allowed"),
        ({"min_n": -5}, r"min_n = -5: min_n=-5 is not allowed; use a number >= 0"),
    ],
)
def test_interval_settings_are_checked_with_the_value_and_what_is_allowed(setting, message):
    from streameval.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        load_config(**setting)


def test_interval_settings_reach_the_records():
    """confidence widens the bounds; min_n marks estimates warming_up (docs/measures.md)."""
    lines = SAMPLE.read_bytes().splitlines()[4100:9000]
    events = [decode_event(line) for line in lines if b"feedback" not in line]
    wide = Engine(load_config(CONFIG, confidence=0.99, min_n=10**9)).process(events)
    narrow = Engine(load_config(CONFIG, confidence=0.8, min_n=0)).process(events)
    metrics = [(w, n) for w, n in zip(wide, narrow, strict=True) if w.kind == "metrics"]
    assert metrics
    for w, n in metrics:
        for name, values in w.estimators.items():
            other = n.estimators[name]
            assert values["warming_up"] is True and other["warming_up"] is False
            assert values["accuracy"] == other["accuracy"]
            assert values["accuracy_lo"] <= other["accuracy_lo"] <= other["accuracy_hi"]
            assert other["accuracy_hi"] <= values["accuracy_hi"]


def test_a_file_in_utf16_is_refused_at_once_saying_how_to_convert_it(tmp_path):
    """PowerShell 5's `>` writes UTF-16 with a byte order mark; every line used to be skipped
    as malformed (most of them as Schema Registry framing), one more than the file has."""
    path = tmp_path / "events.jsonl"
    text = "\r\n".join(json.dumps(line) for line in _stream(3)) + "\r\n"
    path.write_bytes(text.encode("utf-16"))
    result = CliRunner().invoke(main, ["replay", str(path), "--quiet"])
    assert result.exit_code == 1
    assert "UTF-16" in result.output and "iconv -f UTF-16 -t UTF-8" in result.output
    assert "Traceback" not in result.output and "Schema Registry" not in result.output
    from streameval.produce import ProduceError, check_file

    with pytest.raises(ProduceError, match="is UTF-16 text, and events files are UTF-8"):
        check_file(path)  # `streameval produce` says the same
    for codec in ("utf-16-le", "utf-16-be"):  # without the mark
        path.write_bytes(text.encode(codec))
        with pytest.raises(streameval.replay.NotUtf8):
            replay(path, load_config(), io.BytesIO())
        with pytest.raises(ProduceError, match="UTF-16"):
            check_file(path)


def test_a_line_of_only_a_byte_order_mark_is_blank_and_the_limit_is_the_lines_own(tmp_path):
    """Replay reads a line as `produce` sends it: a line that is only a byte order mark (an
    editor's empty first line) is blank, and a line of exactly the 1 MiB limit is within it,
    its line ending not counted."""
    from streameval.messages import BOM, MAX_MESSAGE_BYTES
    from streameval.produce import check_file

    head = b'{"type": "instance", "instance_id": "i", "ts": %d, "features": {"pad": "' % T0
    instance = head + b"x" * (MAX_MESSAGE_BYTES - len(head) - 3) + b'"}}'
    assert len(instance) == MAX_MESSAGE_BYTES
    path = tmp_path / "events.jsonl"
    path.write_bytes(BOM + b"\r\n" + instance + b"\r\n")
    assert check_file(path) == Counter(instance=1)
    result = replay(path, load_config(), io.BytesIO(), strict=True)
    assert (result.events, dict(result.skipped)) == (1, {})
    path.write_bytes(instance[:-3] + b'x"}}\n')  # one byte more
    result = replay(path, load_config(), io.BytesIO())
    assert dict(result.skipped) == {"oversized": 1}


def test_a_models_table_whose_model_never_appears_is_said_with_the_id_it_likely_means(
    tmp_path,
):
    """``[models.champoin]`` gave its positive label to no model, without a word."""
    _records, result = _run_lines(
        tmp_path, _stream(4, model="champion"), models={"champoin": {"positive_label": "a"}}
    )
    assert result.problems == [
        "[models] 'champoin': no outcome of that model (models seen: champion); its settings "
        "apply to no model: did you mean 'champion'?"
    ]
    _records, result = _run_lines(
        tmp_path, _stream(4, model="champion"), models={"champion": {"positive_label": "a"}}
    )
    assert result.problems == []
