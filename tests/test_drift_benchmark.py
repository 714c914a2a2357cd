"""benchmarks/drift_detection.py: its scoring by hand, and its streams against the events."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from streameval.simulate.system import SimulationConfig, simulate

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "drift_detection.py"
_SPEC = importlib.util.spec_from_file_location("drift_detection", _PATH)
bench = sys.modules.setdefault("drift_detection", importlib.util.module_from_spec(_SPEC))
_SPEC.loader.exec_module(bench)


def test_one_stream_scored_by_hand():
    # 50 outcomes, the first post-drift one is the 10th: 9 before it
    alarms = np.array([3, 12, 15, 40])
    assert bench.score_stream(alarms, 50, 10, horizon=10) == {
        "outcomes": 50, "pre_alarms": 1, "pre_outcomes": 9, "delay": 3,  # 12 - 10 + 1
    }  # fmt: skip
    # horizon 10: outcomes 10..19 may detect it; the first alarm after is at 25
    assert bench.score_stream(np.array([3, 25]), 50, 10, horizon=10)["delay"] is None
    assert bench.score_stream(np.array([3, 19]), 50, 10, horizon=10)["delay"] == 10
    assert bench.score_stream(np.array([10]), 50, 10, horizon=10)["delay"] == 1
    # the stream's end comes before the horizon
    assert bench.score_stream(np.array([]), 12, 10, horizon=10)["delay"] is None
    assert bench.score_stream(np.array([5, 9, 30]), 40, None, horizon=10) == {
        "outcomes": 40, "false_alarms": 3, "quiet_outcomes": 40,
    }  # fmt: skip


def test_a_tally_of_streams_by_hand():
    tally = bench.Tally()
    tally.add(bench.score_stream(np.array([3, 12]), 50, 10, 10), seconds=0.5)  # delay 3, 1 early
    tally.add(bench.score_stream(np.array([25]), 50, 10, 10), seconds=0.5)  # missed
    tally.add(bench.score_stream(np.array([14]), 30, 5, 20), seconds=0.0)  # delay 10
    tally.add(bench.score_stream(np.array([7, 8]), 100, None, 10), seconds=1.0)  # 2 false
    s = tally.summary()
    assert tally.outcomes == 230 and tally.changes == 3 and tally.delays == [3, 10]
    assert s["mean_delay"] == 6.5
    assert s["p90_delay"] == pytest.approx(3 + 0.9 * 7)  # numpy's linear interpolation
    assert s["missed"] == pytest.approx(1 / 3)
    assert s["false_per_1e5"] == pytest.approx(2e5 / 100)
    assert s["pre_per_1e5"] == pytest.approx(1e5 * 1 / (9 + 9 + 4))
    assert s["us_per_outcome"] == pytest.approx(2.0 * 1e6 / 230)


def test_a_project_detector_scored_on_the_worked_example():
    # E9 of docs/measures.md: error rate 0.2 for 200 outcomes, then 0.8; one alarm, at 212
    i = np.arange(1, 401)
    errors = np.where(i <= 200, i % 5 == 0, i % 5 != 0).astype(np.uint8)
    spec = {"type": "ratio_page_hinkley", "long_factor": 0.99, "short_factor": 0.9,
            "threshold": 10.0}  # fmt: skip
    alarms = bench.project_alarms(spec, errors)
    assert alarms.tolist() == [212]
    score = bench.score_stream(alarms, 400, 201, horizon=100)
    assert score["delay"] == 12 and score["pre_alarms"] == 0 and score["pre_outcomes"] == 200


def test_a_river_detector_sees_every_value_once():
    errors = np.r_[np.zeros(1000), np.ones(1000)].astype(np.uint8)
    alarms, seconds = bench.river_alarms("river DDM", errors)
    assert alarms.size and alarms[0] > 1000 and seconds >= 0


def test_the_error_streams_are_the_final_predictions_in_label_order():
    config = SimulationConfig(instances=300, drifts=[150], models=["naive_bayes", "no_change"],
                              delay_value=400.0, repredict_every=0, seed=3)  # fmt: skip
    streams = bench.error_streams(config)
    events = list(simulate(config))
    for model in config.models:
        final = {}  # the model's latest prediction of each instance, as the label arrives
        errors, instances = [], []
        for e in events:
            if e["type"] == "prediction" and e["model_id"] == model:
                final[e["instance_id"]] = e["label"]
            elif e["type"] == "label":
                errors.append(int(final[e["instance_id"]] != e["label"]))
                instances.append(int(e["instance_id"].rsplit("-", 1)[1]))
        got_errors, got_instances = streams[model]
        assert got_instances.tolist() == instances
        assert got_errors.tolist() == errors
        # the first post-drift outcome, counted by hand in label order
        expected = next(k for k, i in enumerate(instances, start=1) if i >= 150)
        assert expected < 300 and any(i < 150 for i in instances[expected:])  # labels overtake
        assert bench.first_post_drift(got_instances, 150) == expected


def test_re_predictions_do_not_change_the_final_errors():
    settings = dict(instances=400, drifts=[200], models=["hoeffding_tree", "logistic_regression"],
                    delay_value=1000.0, seed=5)  # fmt: skip
    with_them = bench.error_streams(SimulationConfig(**settings, repredict_every=10))
    without = bench.error_streams(SimulationConfig(**settings, repredict_every=0))
    for model in settings["models"]:
        for got, expected in zip(without[model], with_them[model], strict=True):
            np.testing.assert_array_equal(got, expected)


def test_streams_are_cached_by_their_settings(tmp_path):
    scenario = bench.Scenario("tiny", "abrupt", "sea", 200, 100)
    streams, seconds = bench.cached_streams(scenario, 7, tmp_path)
    assert len(list(tmp_path.glob("*.npz"))) == 1 and seconds > 0
    again, _ = bench.cached_streams(scenario, 7, tmp_path)
    for a, b in zip(streams, again, strict=True):
        np.testing.assert_array_equal(a.errors, b.errors)
        assert a.change == b.change == bench.first_post_drift(a.instances, 100)
    other = bench.Scenario("tiny", "abrupt", "sea", 200, 100, delay_value=500.0)
    assert bench.stream_key(other, 7) != bench.stream_key(scenario, 7)


def test_every_setting_of_the_grids_is_written_out():
    """A setting left out would take the service's default (``make_detector``), so a grid row
    would silently be another detector whenever the default changes."""
    from streameval.core.drift import make_detector

    for spec in (*bench.grid_specs(), *bench.fine_grid_specs(), *bench.PAPER_DETECTORS):
        assert set(spec) == set(make_detector(spec).spec()), spec
    assert len(bench.grid_specs()) == 1084 and len(bench.fine_grid_specs()) == 1122
