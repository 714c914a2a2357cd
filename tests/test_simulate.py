"""The simulator: deterministic, label delays and drifts as configured, replayable."""

from __future__ import annotations

import io

import numpy as np
import orjson
import pytest
from click.testing import CliRunner
from streameval.cli import main
from streameval.config import load_config
from streameval.replay import replay
from streameval.simulate.system import SimulationConfig, simulate

LEARNING = ("hoeffding_tree", "naive_bayes", "logistic_regression")


def _events(**settings):
    return list(simulate(SimulationConfig(**settings)))


def test_the_same_seed_gives_the_same_events_and_another_seed_does_not():
    settings = dict(instances=400, drifts=[200], models=["hoeffding_tree", "no_change"])
    assert _events(**settings) == _events(**settings)
    assert _events(**settings) != _events(**settings, seed=7)


def test_scores_change_no_predicted_class():
    """With scores the class comes from the same probabilities (asked once); without, from
    River's ``predict_one``: the same classes either way, for every learner and baseline."""
    settings = dict(instances=600, drifts=[300], delay_value=500.0, repredict_every=20)
    scored, plain = _events(**settings), _events(**settings, scores=False)
    assert len(scored) == len(plain)
    predictions = 0
    for a, b in zip(scored, plain, strict=True):
        assert {**a, "scores": None} == {**b, "scores": None}
        predictions += a["type"] == "prediction"
        if a["type"] == "prediction" and a.get("scores") and a["model_id"] in LEARNING:
            best = max(a["scores"].values())
            assert a["scores"][str(a["label"])] == best
    assert predictions > 600 * len(SimulationConfig().models)


def test_events_are_in_time_order_and_predictions_never_follow_their_label():
    events = _events(instances=600, drifts=[300], delay_value=500.0, rate=100.0)
    ts = [e["ts"] for e in events]
    assert ts == sorted(ts)
    label_at = {e["instance_id"]: e["ts"] for e in events if e["type"] == "label"}
    for e in events:
        if e["type"] == "prediction":
            assert e["ts"] <= label_at[e["instance_id"]]


def test_fixed_delays_in_instances_and_in_time():
    events = _events(instances=300, drifts=[150], delay="fixed_instances", delay_value=20,
                     rate=50.0, models=["majority"])  # fmt: skip
    born = {e["instance_id"]: e["ts"] for e in events if e["type"] == "instance"}
    delays = {e["ts"] - born[e["instance_id"]] for e in events if e["type"] == "label"}
    assert delays == {20 * 20}  # 20 instances at 50 instances/s
    events = _events(instances=300, drifts=[150], delay="fixed_ms", delay_value=1234,
                     models=["majority"])  # fmt: skip
    born = {e["instance_id"]: e["ts"] for e in events if e["type"] == "instance"}
    assert {e["ts"] - born[e["instance_id"]] for e in events if e["type"] == "label"} == {1234}


def test_class_delays_make_the_labels_of_a_class_later_and_replay_sees_it(tmp_path):
    events = _events(instances=300, drifts=[150], delay="fixed_ms", delay_value=1000,
                     class_delay={"1": 3.5}, models=["majority"])  # fmt: skip
    born = {e["instance_id"]: e["ts"] for e in events if e["type"] == "instance"}
    delays = {
        (e["label"], e["ts"] - born[e["instance_id"]]) for e in events if e["type"] == "label"
    }
    assert delays == {(0, 1000), (1, 3500)}
    out = tmp_path / "sim.jsonl"
    options = ["simulate", "--instances", "600", "--model", "majority", "--out", str(out)]
    result = CliRunner().invoke(main, [*options, "--class-delay", "1=4"])
    assert result.exit_code == 0, result.output
    records = io.BytesIO()
    replay(out, load_config(), records)
    final = [orjson.loads(line) for line in records.getvalue().splitlines()][-1]
    latency = final["latency_ms"]
    assert latency["classes_differ"]["significant"]
    assert latency["by_class"]["1"]["p50"] > 2.5 * latency["by_class"]["0"]["p50"]
    for bad in ("1", "=2", "1=-1", "1=x"):
        result = CliRunner().invoke(main, [*options, "--class-delay", bad])
        assert result.exit_code == 2 and "CLASS=FACTOR" in result.output, result.output


def test_exponential_delays_have_the_configured_mean_and_some_labels_never_come():
    events = _events(instances=3000, drifts=[1500], delay_value=800.0, unlabelled=0.2,
                     models=["majority"], repredict_every=0)  # fmt: skip
    born = {e["instance_id"]: e["ts"] for e in events if e["type"] == "instance"}
    delays = np.array([e["ts"] - born[e["instance_id"]] for e in events if e["type"] == "label"])
    assert delays.mean() == pytest.approx(800, rel=0.1)
    assert len(delays) / 3000 == pytest.approx(0.8, abs=0.03)


def test_re_predictions_come_every_k_labels():
    events = _events(instances=500, drifts=[250], delay="fixed_instances", delay_value=50,
                     repredict_every=10, models=["no_change"])  # fmt: skip
    per_instance = {}
    for e in events:
        if e["type"] == "prediction":
            per_instance[e["instance_id"]] = per_instance.get(e["instance_id"], 0) + 1
    # waiting ~50 labels with a re-prediction every 10: initial + ~4 + final
    assert 5 <= int(np.median(list(per_instance.values()))) <= 7


def test_the_drift_is_where_it_was_put_and_a_learner_notices():
    events = _events(instances=6000, drifts=[3000], delay_value=300.0, models=["hoeffding_tree"])
    source = io.BytesIO(b"".join(orjson.dumps(e) + b"\n" for e in events))
    result = replay(source, load_config(), io.BytesIO())
    assert result.alarms, "no alarm after the drift"
    first = min(a.n for a in result.alarms)
    assert 3000 < first < 4500


def test_no_drift_keeps_the_first_concept_throughout():
    settings = dict(instances=400, models=["majority"], delay="fixed_instances", delay_value=5)
    labels = {}
    for drifts in ([], [399]):
        events = _events(**settings, drifts=drifts)
        labels[len(drifts)] = {e["instance_id"]: e["label"] for e in events if e["type"] == "label"}
    last = "sim-42-00000399"  # the only instance the drift at 399 draws from the next concept
    assert {i: y for i, y in labels[0].items() if i != last} == {
        i: y for i, y in labels[1].items() if i != last
    }
    assert len(labels[0]) == 400


def test_the_cli_asks_for_no_drift(tmp_path):
    out = tmp_path / "sim.jsonl"
    options = ["simulate", "--instances", "200", "--model", "majority", "--out", str(out)]
    result = CliRunner().invoke(main, [*options, "--no-drift"])
    assert result.exit_code == 0, result.output
    expected = _events(instances=200, drifts=[], models=["majority"], start_ms=1_767_225_600_000)
    assert [orjson.loads(line) for line in out.read_bytes().splitlines()] == expected
    result = CliRunner().invoke(main, [*options, "--no-drift", "--drift", "50"])
    assert result.exit_code != 0
    assert "--no-drift and --drift 50" in result.output


def test_class_imbalance():
    events = _events(instances=2000, drifts=[1000], positive_share=0.1, models=["majority"])
    labels = [e["label"] for e in events if e["type"] == "label"]
    assert np.mean(np.asarray(labels) == 1) == pytest.approx(0.1, abs=0.03)


def test_bad_settings_are_refused_with_the_setting_named():
    with pytest.raises(ValueError, match="generator='nope'"):
        SimulationConfig(generator="nope").check()
    with pytest.raises(ValueError, match=r"drifts=\[50\]"):
        SimulationConfig(instances=10, drifts=[50]).check()


def test_a_class_the_generator_has_not_and_a_share_it_cannot_keep_are_refused():
    """Both were accepted without a word: a delay for class "x" (or "yes") changed nothing,
    and a positive share kept LED's classes 0 and 1 alone of its ten."""
    with pytest.raises(ValueError, match="x is no class of agrawal, whose classes are 0, 1"):
        SimulationConfig(class_delay={"x": 5.0}).check()
    with pytest.raises(ValueError, match="led has 10 classes; the share of class 1 is for"):
        SimulationConfig(generator="led", positive_share=0.1).check()
    SimulationConfig(generator="led", class_delay={"7": 2.0}).check()  # a class of LED's


def test_simulate_names_a_missing_output_folder_before_it_runs(tmp_path):
    """It was a FileNotFoundError traceback."""
    target = tmp_path / "missing" / "sim.jsonl"
    result = CliRunner().invoke(main, ["simulate", "--instances", "10", "--out", str(target)])
    assert result.exit_code == 2, result.output
    assert f"the folder {tmp_path / 'missing'} does not exist" in result.output


def test_the_file_output_replays(tmp_path):
    out = tmp_path / "sim.jsonl"
    result = CliRunner().invoke(main, ["simulate", "--instances", "300", "--generator", "sea",
                                       "--out", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    replayed = CliRunner().invoke(main, ["replay", str(out), "--quiet"])
    assert replayed.exit_code == 0, replayed.output
    models = {orjson.loads(line)["model_id"] for line in replayed.output.splitlines()
              if line.startswith("{") and '"metrics"' in line}  # fmt: skip
    assert models == {"hoeffding_tree", "naive_bayes", "logistic_regression", "no_change",
                      "majority"}  # fmt: skip
