"""The Evaluator: default estimators, JSON-ready output, state, atomic bad input."""

import json
import math

import numpy as np
import pytest
from streameval.core import SCALAR_MEASURES, Evaluator, parse_estimator


def test_defaults_are_cumulative_window_1000_and_fading_0999():
    ev = Evaluator()
    assert ev.names == ["cumulative", "window:1000", "fading:0.999"]
    ev.update([1, 0], [1, 1])
    assert set(ev.measures()) == {"cumulative", "window:1000", "fading:0.999"}


def test_measures_are_flat_json_ready_floats_with_nan_for_undefined():
    ev = Evaluator(positive_label="yes")
    ev.update(["no"] * 5, ["no"] * 5)
    out = ev.measures()
    for measures in out.values():
        assert set(SCALAR_MEASURES) <= set(measures)
        assert type(measures.pop("warming_up")) is bool
        assert all(type(v) in (int, float) for v in measures.values())
        assert math.isnan(measures["kappa"])  # one class everywhere
        assert math.isnan(measures["recall_positive"])  # no positive seen
    json.dumps(out)  # NaN is still valid for Python's json (null on the wire comes later)


def test_evaluator_equals_estimators_fed_with_encoded_labels():
    rng = np.random.default_rng(1)
    names = np.array(["cat", "dog", "emu"])
    y_true = names[rng.integers(0, 3, 500)]
    y_pred = np.where(rng.random(500) < 0.6, y_true, names[rng.integers(0, 3, 500)])
    ev = Evaluator(estimators=["window:100", "fading:0.99"], positive_label="dog")
    ev.update(y_true.tolist(), y_pred.tolist())
    codes = {name: i for i, name in enumerate(ev.labels.classes)}
    t = np.array([codes[v] for v in y_true])
    h = np.array([codes[v] for v in y_pred])
    for spec in ("window:100", "fading:0.99"):
        est = parse_estimator(spec)
        est.update(t, h)
        want = est.measures(labels=ev.labels.classes, positive=codes["dog"])
        got = ev.measures()[spec]
        assert got.pop("warming_up") is False  # min_n = 0
        assert got.keys() == want.keys()
        assert all(
            g == w or (math.isnan(g) and math.isnan(w))
            for g, w in zip(got.values(), want.values(), strict=True)
        )
    assert "recall[emu]" in ev.measures()["window:100"]


def test_state_round_trip_through_json():
    ev = Evaluator(positive_label=1)
    ev.update([0, 1, 1, 2], [0, 1, 0, 2])
    restored = Evaluator.from_state(json.loads(json.dumps(ev.state())))
    assert json.dumps(restored.measures()) == json.dumps(ev.measures())
    ev.update([2, 0], [1, 0])
    restored.update([2, 0], [1, 0])
    assert restored.state() == ev.state()


def test_bad_batches_change_nothing():
    ev = Evaluator(max_classes=3)
    ev.update(["a", "b"], ["a", "a"])
    before = ev.state()
    with pytest.raises(ValueError, match="same length"):
        ev.update(["a"], ["a", "b"])
    with pytest.raises(ValueError, match="max_classes=3"):
        ev.update(["c", "d"], ["a", "a"])
    with pytest.raises(ValueError, match="must be a str or an int"):
        ev.update(["a"], [None])
    assert ev.state() == before


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"estimators": ["cumulative", "median"]}, "'median' is not known"),
        ({"estimators": "cumulative"}, "single string"),
        ({"estimators": []}, "empty"),
        ({"estimators": ["window:10", "window:10"]}, "configured twice"),
        ({"estimators": ["fading:0"]}, "fading_factor=0.0"),
        ({"positive_label": 2.5}, "must be a str or an int"),
    ],
)
def test_bad_configuration(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Evaluator(**kwargs)


def test_new_classes_are_numbered_in_outcome_order_however_the_batch_is_cut():
    whole, split = Evaluator(), Evaluator()
    whole.update(["A", "C"], ["B", "A"])
    split.update(["A"], ["B"])
    split.update(["C"], ["A"])
    assert whole.labels.classes == split.labels.classes == ["A", "B", "C"]
    assert json.dumps(whole.measures()) == json.dumps(split.measures())


def test_a_class_faded_to_nothing_leaves_kappa_undefined_not_a_crash():
    """Under fading:0.999 a class seen once, 10⁵ outcomes ago, weighs 3.5e-44: p_ran, p_maj
    and p_per round to exactly 1.0 although two classes hold mass. κ, κ_M, κ_per and κ's
    standard errors are then NaN (as good as one class), never a ZeroDivisionError."""
    ev = Evaluator(estimators=["fading:0.999", "cumulative"])
    ev.update(["a", "b"], ["a", "b"])
    ev.update(["a"] * 100_000, ["a"] * 100_000)
    faded = ev.measures()["fading:0.999"]
    assert faded["accuracy"] == 1.0
    for name in ("kappa", "kappa_m", "kappa_temporal", "kappa_plus", "kappa_se", "kappa_z"):
        assert math.isnan(faded[name]), name
    assert not math.isnan(ev.measures()["cumulative"]["kappa"])  # exact counts: defined


def test_an_estimate_below_min_n_is_warming_up():
    """min_n compares with n_kish: the window and cumulative counts, Kish's size under fading."""
    ev = Evaluator(estimators=["cumulative", "window:50", "fading:0.9"])
    ev.update([0, 1] * 60, [0, 1] * 60)
    m = ev.measures(min_n=100)
    assert m["cumulative"]["n_kish"] == 120 and m["cumulative"]["warming_up"] is False
    assert m["window:50"]["n_kish"] == 50 and m["window:50"]["warming_up"] is True
    # a = 0.9: N_a²/N_(a²), which tends to (1 + a)/(1 − a) = 19
    n_a, n_a2 = (1 - 0.9**120) / 0.1, (1 - 0.81**120) / 0.19
    assert m["fading:0.9"]["n_kish"] == pytest.approx(n_a**2 / n_a2, rel=1e-12)
    assert m["fading:0.9"]["warming_up"] is True
    assert all(not values["warming_up"] for values in ev.measures(min_n=0).values())
