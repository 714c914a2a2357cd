"""Estimators: batch = one-by-one, exact state round-trips, E1, and bad input."""

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streameval.core import (
    ConfusionEstimator,
    CumulativeConfusion,
    FadingConfusion,
    WindowConfusion,
    parse_estimator,
)

SPECS = [
    "cumulative",
    "window:1",
    "window:3",
    "window:10",
    "fading:0.5",
    "fading:0.999",
    "fading:1.0",
]


@st.composite
def split_streams(draw):
    # short streams, and some long enough to cross the fading blocks of 1024 outcomes
    n = draw(st.one_of(st.integers(0, 40), st.integers(1000, 2100)))
    k = draw(st.integers(1, 6))
    y_true = draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n))
    y_pred = draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n))
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=6)))
    return np.array(y_true, dtype=np.int64), np.array(y_pred, dtype=np.int64), [0, *cuts, n]


def _same_measures(a: dict, b: dict, exact: bool) -> None:
    assert a.keys() == b.keys()
    for key in a:
        x, y = a[key], b[key]
        if math.isnan(x):
            assert math.isnan(y), key
        elif exact:
            assert x == y, key
        else:
            assert math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12), key


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=30)
@given(stream=split_streams())
def test_any_batch_split_equals_one_by_one(spec, stream):
    y_true, y_pred, cuts = stream
    batched, single = parse_estimator(spec), parse_estimator(spec)
    for lo, hi in itertools.pairwise(cuts):
        batched.update(y_true[lo:hi], y_pred[lo:hi])
    for i in range(len(y_true)):
        single.update(y_true[i : i + 1], y_pred[i : i + 1])
    # bit-identical for every estimator, fading included (streameval.core.forgetting.BlockFading)
    a, b = batched.snapshot(), single.snapshot()
    assert np.array_equal(a.confusion, b.confusion)
    assert (a.persistent_correct, a.persistent_total, a.n, a.n_effective) == (
        b.persistent_correct,
        b.persistent_total,
        b.n,
        b.n_effective,
    )
    if a.squares is not None:  # fading: the squared-weight sums too
        assert a.squares.tolist() == b.squares.tolist()
    assert batched.state() == single.state()
    _same_measures(batched.measures(positive=0), single.measures(positive=0), exact=True)


@pytest.mark.parametrize("factor", [0.5, 0.9, 0.999, 1.0])
@settings(max_examples=25)
@given(stream=split_streams())
def test_fading_squared_weights_match_a_plain_loop_on_every_prefix(factor, stream):
    """Σw² per true class, per predicted class and of the scored persistent outcomes, and
    n_kish = (Σw)²/Σw², against a loop over the weights a^(n−1−j) after every batch."""
    y_true, y_pred, cuts = stream
    est = FadingConfusion(fading_factor=factor)
    for lo, hi in itertools.pairwise(cuts):
        est.update(y_true[lo:hi], y_pred[lo:hi])
        n = hi
        if n == 0:
            continue
        k = est.n_classes
        rows, cols, scored = [0.0] * k, [0.0] * k, 0.0
        total = total_sq = 0.0
        for j in range(n):
            weight = factor ** (n - 1 - j)
            rows[y_true[j]] += weight * weight
            cols[y_pred[j]] += weight * weight
            if j > 0:
                scored += weight * weight
            total += weight
            total_sq += weight * weight
        got = est.snapshot().squares
        assert np.allclose(got, [*rows, *cols, scored], rtol=1e-9, atol=1e-300)
        assert math.isclose(est.measures()["n_kish"], total * total / total_sq, rel_tol=1e-9)


def test_fading_state_without_squared_weights_restores_and_converges():
    """A checkpoint written before the squared weights were kept: the total is exact, each
    denominator is estimated in proportion to its weight, and the estimate fades out."""
    rng = np.random.default_rng(11)
    y_true = rng.integers(0, 3, 4000)
    y_pred = np.where(rng.random(4000) < 0.8, y_true, rng.integers(0, 3, 4000))
    est = FadingConfusion(fading_factor=0.99)
    est.update(y_true[:1500], y_pred[:1500])
    old = json.loads(json.dumps(est.state()))
    del old["squares"]
    restored = ConfusionEstimator.from_state(old)
    exact, guessed = est.snapshot(), restored.snapshot()
    k = est.n_classes
    assert math.isclose(guessed.squares[:k].sum(), exact.squares[:k].sum(), rel_tol=1e-12)
    assert np.allclose(guessed.squares, exact.squares, rtol=0.2)  # a guess, near
    assert "squares" in restored.state()
    est.update(y_true[1500:], y_pred[1500:])
    restored.update(y_true[1500:], y_pred[1500:])
    # 2500 outcomes later the guess weighs 0.99^5000 ≈ 1.5e-22 of the sums
    assert np.allclose(restored.snapshot().squares, est.snapshot().squares, rtol=1e-12)
    assert math.isclose(restored.measures()["n_kish"], est.measures()["n_kish"], rel_tol=1e-12)


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=40)
@given(stream=split_streams())
def test_state_round_trips_exactly_through_json(spec, stream):
    y_true, y_pred, cuts = stream
    est = parse_estimator(spec)
    half = cuts[len(cuts) // 2]
    est.update(y_true[:half], y_pred[:half])
    restored = ConfusionEstimator.from_state(json.loads(json.dumps(est.state())))
    assert restored.state() == est.state()
    _same_measures(restored.measures(), est.measures(), exact=True)
    # and it continues exactly like the original
    est.update(y_true[half:], y_pred[half:])
    restored.update(y_true[half:], y_pred[half:])
    assert restored.state() == est.state()
    _same_measures(restored.measures(), est.measures(), exact=True)


def test_e1_prequential_window_fading():
    """E1 (docs/measures.md): losses e = [1,0,0,1,0,1] as outcomes (true 0, predicted 1 when
    e = 1)."""
    errors = [1, 0, 0, 1, 0, 1]
    expected = {
        "cumulative": [1, 0.5, 1 / 3, 0.5, 0.4, 0.5],
        "window:3": [1, 0.5, 1 / 3, 1 / 3, 1 / 3, 2 / 3],
        "fading:0.9": [1, 0.473684, 0.298893, 0.502762, 0.379991, 0.512313],
    }
    for spec, values in expected.items():
        est = parse_estimator(spec)
        for e, value in zip(errors, values, strict=True):
            est.update(np.array([0]), np.array([e]))
            assert est.measures()["error"] == pytest.approx(value, abs=5e-7), spec
    fading = parse_estimator("fading:0.9")
    fading.update(np.zeros(6, dtype=int), np.array(errors))
    snap = fading.snapshot()
    assert snap.n_effective == pytest.approx((1 - 0.9**6) / 0.1)  # N_6 = 4.68559
    assert snap.confusion[0, 1] == pytest.approx(2.40049, abs=5e-6)  # S_6


def test_window_reports_n_before_it_is_full():
    est = WindowConfusion(window_size=5)
    est.update(np.array([0, 1]), np.array([0, 0]))
    assert est.measures()["n"] == 2
    est.update(np.arange(7) % 2, np.zeros(7, dtype=int))
    assert est.measures()["n"] == 5


def test_classes_may_appear_late():
    est = CumulativeConfusion()
    est.update(np.array([0, 1]), np.array([0, 1]))
    est.update(np.array([4]), np.array([2]))
    assert est.n_classes == 5
    assert est.snapshot().confusion.sum() == 3


BAD_UPDATES = [
    (np.array([0, 1]), np.array([0]), "same length"),
    (np.array([0, -1]), np.array([0, 0]), "must be >= 0"),
    (np.array([0, 1000]), np.array([0, 0]), "max_classes=1000"),
    (np.array([0.0, np.nan]), np.array([0, 0]), "finite"),
    (np.array([0.5]), np.array([0]), "integers"),
    (np.array(["a"]), np.array([0]), "LabelEncoder"),
    (np.array([[0]]), np.array([[0]]), "1-D"),
]


@pytest.mark.parametrize("spec", ["cumulative", "window:3", "fading:0.9"])
@pytest.mark.parametrize(("y_true", "y_pred", "message"), BAD_UPDATES)
def test_bad_batches_raise_and_change_nothing(spec, y_true, y_pred, message):
    est = parse_estimator(spec)
    est.update(np.array([0, 1, 1]), np.array([0, 1, 0]))
    before = est.state()
    with pytest.raises(ValueError, match=message):
        est.update(y_true, y_pred)
    assert est.state() == before


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        (lambda: WindowConfusion(window_size=0), "window_size=0"),
        (lambda: WindowConfusion(window_size=-5), "window_size=-5"),
        (lambda: WindowConfusion(window_size=2.5), "window_size=2.5"),
        (lambda: FadingConfusion(fading_factor=0.0), r"fading_factor=0.0 .* \(0, 1\]"),
        (lambda: FadingConfusion(fading_factor=1.5), "fading_factor=1.5"),
        (lambda: FadingConfusion(fading_factor=float("nan")), "fading_factor=nan"),
        (lambda: parse_estimator("sliding:100"), "'sliding:100' is not known"),
        (lambda: parse_estimator("window:ten"), "'window:ten' is not allowed"),
        (lambda: parse_estimator("window:0"), "window_size=0"),
        (lambda: parse_estimator("fading:2"), "fading_factor=2.0"),
        (lambda: parse_estimator("fading:inf"), "'fading:inf' is not allowed"),
        (lambda: parse_estimator("cumulative:5"), "'cumulative:5' is not known"),
        (lambda: CumulativeConfusion(max_classes=0), "max_classes=0"),
    ],
)
def test_bad_settings_name_the_value_and_what_is_allowed(factory, message):
    with pytest.raises(ValueError, match=message):
        factory()


def test_names_on_the_wire():
    assert [parse_estimator(s).name for s in ("cumulative", "window:1000", "fading:0.999")] == [
        "cumulative",
        "window:1000",
        "fading:0.999",
    ]


def test_e2_fading_conventions():
    """E2 (docs/measures.md): x = [1, 0, 1, 1]; Gama's a = 0.9 gives M = 2.629/3.439 = 0.764466, and
    Žliobaitė's biased estimate with η = 1 − a from 0 is (1 − a^t)·M = 0.2629."""
    est = parse_estimator("fading:0.9")
    est.update(np.zeros(4, dtype=int), np.array([1, 0, 1, 1]))  # loss 1 = wrong
    error = est.measures()["error"]
    assert error == pytest.approx(2.629 / 3.439, abs=1e-12)
    assert error == pytest.approx(0.764466, abs=5e-7)
    biased = 0.0
    for x in (1, 0, 1, 1):
        biased = 0.1 * x + 0.9 * biased
    assert biased == pytest.approx((1 - 0.9**4) * error, abs=1e-12)
