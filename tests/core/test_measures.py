"""Every measure under every estimator against independent references, on every prefix."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streameval.core import ConfusionSnapshot, compute_measures, parse_estimator

from tests.core.reference import assert_measures_match, reference_measures

ESTIMATORS = [
    "cumulative",
    "window:1",
    "window:4",
    "window:7",
    "fading:0.5",
    "fading:0.9",
    "fading:1.0",
]


def streams(max_classes: int, max_len: int = 20):
    return st.integers(1, max_len).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(0, max_classes - 1), min_size=n, max_size=n),
            st.lists(st.integers(0, max_classes - 1), min_size=n, max_size=n),
        )
    )


def _check_every_prefix(y_true, y_pred, spec, positive):
    est = parse_estimator(spec)
    for i in range(len(y_true)):
        est.update(np.array(y_true[i : i + 1]), np.array(y_pred[i : i + 1]))
        got = est.measures(positive=positive)
        want = reference_measures(y_true[: i + 1], y_pred[: i + 1], spec, positive=positive)
        assert_measures_match(got, want, context=f"{spec} after {i + 1} outcomes")


@pytest.mark.parametrize("spec", ESTIMATORS)
@settings(max_examples=15)
@given(stream=streams(2))
def test_binary_streams_match_references_on_every_prefix(spec, stream):
    _check_every_prefix(*stream, spec, positive=1)


@pytest.mark.parametrize("spec", ESTIMATORS)
@settings(max_examples=15)
@given(stream=streams(5))
def test_multiclass_streams_match_references_on_every_prefix(spec, stream):
    _check_every_prefix(*stream, spec, positive=3)


def test_long_stream_with_real_batches_matches_references():
    """Batches of many outcomes, a long window and realistic fading, checked at batch ends."""
    rng = np.random.default_rng(7)
    y_true = rng.integers(0, 4, 3000)
    y_pred = np.where(rng.random(3000) < 0.7, y_true, rng.integers(0, 4, 3000))
    for spec in ("cumulative", "window:1000", "fading:0.999"):
        est = parse_estimator(spec)
        for start in range(0, 3000, 700):
            est.update(y_true[start : start + 700], y_pred[start : start + 700])
            end = min(start + 700, 3000)
            want = reference_measures(y_true[:end], y_pred[:end], spec, positive=2)
            assert_measures_match(est.measures(positive=2), want, context=f"{spec} at {end}")


def _snapshot(counts, persistent=(0, 0)):
    counts = np.array(counts)
    n = int(counts.sum())
    return ConfusionSnapshot(counts, persistent[0], persistent[1], n, float(n))


def test_e11_eight_measures():
    """E11 (docs/measures.md): TP=8, FN=2, FP=4, TN=86 (class 1 positive)."""
    m = compute_measures(_snapshot([[86, 4], [2, 8]]), positive=1)
    expected = {
        "accuracy": 0.94,
        "recall_positive": 0.8,
        "precision_positive": 0.666667,
        "balanced_accuracy": 0.877778,
        "g_mean": 0.874325,
        "f1_positive": 16 / 22,
        "kappa": 0.136 / 0.196,
        "mcc": 680 / math.sqrt(950400),
        "p_ran": 0.804,
    }
    for name, value in expected.items():
        assert m[name] == pytest.approx(value, abs=5e-7), name


def test_e11_undefined_cases():
    """E11: with TP = FP = 0 (P=10, N=150) precision, F1 and MCC are undefined."""
    m = compute_measures(_snapshot([[150, 0], [10, 0]]), positive=1)
    assert math.isnan(m["precision_positive"])
    assert math.isnan(m["f1_positive"])
    assert math.isnan(m["mcc"])
    assert m["recall_positive"] == 0
    assert m["g_mean"] == 0
    assert m["kappa"] == 0
    assert m["accuracy"] == 0.9375


def test_e3_kappa_family():
    """E3 (docs/measures.md) under the project's persistent-baseline rule.

    p = 0.7, p_ran = 0.5, κ = 0.4, p_maj = 0.6 as in E3; the first outcome is not scored by the
    no-change predictor, so p_per = P(T) = 7/9 and κ_per = (0.7 − 7/9)/(1 − 7/9) = −0.35, whence
    κ⁺ = 0. (E3 shows κ_per = −0.5 for the two other conventions: y_0 = first class, or scoring
    both p and p_per from t = 2.)
    """
    est = parse_estimator("cumulative")
    est.update(np.array([0, 0, 0, 1, 1, 1, 1, 0, 0, 0]), np.array([0, 0, 1, 1, 1, 0, 1, 0, 0, 1]))
    m = est.measures()
    assert m["accuracy"] == pytest.approx(0.7)
    assert m["p_ran"] == pytest.approx(0.5)
    assert m["kappa"] == pytest.approx(0.4)
    assert m["p_maj"] == pytest.approx(0.6)
    assert m["kappa_m"] == pytest.approx(0.25)
    assert m["p_per"] == pytest.approx(7 / 9)
    assert m["kappa_temporal"] == pytest.approx(-0.35)
    assert m["kappa_plus"] == 0.0
    assert m["p_0"] == 0.5
    # E3's alternative, scoring both from t = 2: (6/9 − 7/9)/(1 − 7/9) = −0.5
    alternative = compute_measures(ConfusionSnapshot(np.array([[3, 2], [1, 3]]), 7, 9, 9, 9.0))
    assert alternative["accuracy"] == pytest.approx(6 / 9)
    assert alternative["kappa_temporal"] == pytest.approx(-0.5)


@pytest.mark.parametrize(
    ("n", "se", "se0", "z"), [(10, 0.28983, 0.31623, 1.2649), (100, None, 0.1, 4.0)]
)
def test_e5_kappa_significance(n, se, se0, z):
    """E5 (docs/measures.md): p = 0.7, p_ran = 0.5."""
    # a balanced 2×2 matrix with accuracy 0.7 has P = P_h = (0.5, 0.5), so p_ran = 0.5
    counts = np.array([[0.35, 0.15], [0.15, 0.35]]) * n
    m = compute_measures(ConfusionSnapshot(counts, 0, 0, n, float(n)))
    assert m["accuracy"] == pytest.approx(0.7)
    assert m["p_ran"] == pytest.approx(0.5)
    if se is not None:
        assert m["kappa_se"] == pytest.approx(se, abs=5e-6)
    assert m["kappa_se0"] == pytest.approx(se0, abs=5e-6)
    assert m["kappa_z"] == pytest.approx(z, abs=5e-5)


def test_fading_standard_error_uses_effective_sample_size():
    """With fading, N in Cohen's standard error is Kish's (Σw)²/Σw² = N_a²/N_(a²), where
    N_a = (1 − a^t)/(1 − a) is the sum of the weights (docs/measures.md)."""
    est = parse_estimator("fading:0.9")
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 50)
    est.update(y, np.where(rng.random(50) < 0.8, y, 1 - y))
    m = est.measures()
    n_a = (1 - 0.9**50) / (1 - 0.9)
    assert m["n_effective"] == pytest.approx(n_a, rel=1e-12)
    n_kish = n_a**2 / ((1 - 0.81**50) / (1 - 0.81))
    assert m["n_kish"] == pytest.approx(n_kish, rel=1e-12)
    p_ran = m["p_ran"]
    assert m["kappa_se0"] == pytest.approx(math.sqrt(p_ran / (n_kish * (1 - p_ran))), rel=1e-12)


def test_empty_estimate_is_all_nan():
    m = parse_estimator("window:10").measures(positive=1)
    assert m["n"] == 0
    assert m["n_kish"] == 0.0
    undefined = [k for k in m if k not in ("n", "n_effective", "n_kish")]
    assert undefined and all(math.isnan(m[k]) for k in undefined)


def test_single_class_stream_is_undefined_not_zero():
    """All true and predicted labels one class: κ, κ_M, MCC undefined; accuracy 1."""
    est = parse_estimator("fading:0.999")
    est.update(np.zeros(50, dtype=int), np.zeros(50, dtype=int))
    m = est.measures()
    assert m["accuracy"] == 1.0
    for name in ("kappa", "kappa_m", "kappa_temporal", "kappa_plus", "mcc", "kappa_z"):
        assert math.isnan(m[name]), name
    assert m["p_ran"] == 1.0 and m["p_maj"] == 1.0 and m["p_per"] == 1.0


def test_kappa_plus_keeps_nan_and_clips_negatives():
    """κ⁺ = sqrt(max(0,κ)·max(0,κ_per)); two negatives never multiply into a positive."""
    est = parse_estimator("cumulative")
    # always wrong while the label rarely changes: κ = −1 and κ_per = (0 − 0.8)/0.2 = −4
    est.update(np.array([0, 0, 0, 1, 1, 1]), np.array([1, 1, 1, 0, 0, 0]))
    m = est.measures()
    assert m["kappa"] < 0 and m["kappa_temporal"] < 0
    assert m["kappa"] == pytest.approx(-1.0)
    assert m["kappa_temporal"] == pytest.approx(-4.0)
    assert m["kappa_plus"] == 0.0
    snap = ConfusionSnapshot(np.array([[3, 1], [1, 3]]), 0, 0, 8, 8.0)  # p_per undefined
    assert math.isnan(compute_measures(snap)["kappa_plus"])


def test_majority_model_has_kappa_plus_zero_despite_fading_rounding():
    """A model that always predicts one class has κ = 0; faded sums leave ±1e-16 behind."""
    est = parse_estimator("fading:0.9")
    est.update(np.array([0, 1, 0]), np.array([0, 0, 0]))
    m = est.measures()
    assert abs(m["kappa"]) < 1e-12
    assert m["kappa_plus"] == 0.0


def test_mcc_of_a_class_faded_to_rounding_noise_is_undefined_not_a_crash():
    """A majority model's faded confusion: the minority prediction column has decayed to 1e-14,
    so (s² − Σp²) is rounding noise or exactly 0 (found by replaying the compose simulator:
    a ZeroDivisionError stopped the worker). MCC is then undefined, as for one class."""
    snap = ConfusionSnapshot(np.array([[681.1, 3.8e-14], [318.9, 2.3e-14]]), 0, 0, 32500, 1000.0)
    m = compute_measures(snap, positive=1)
    assert math.isnan(m["mcc"])
    assert m["accuracy"] == pytest.approx(681.1 / 1000.0)
    # a real model's MCC through the same fading estimator is still there
    est = parse_estimator("fading:0.999")
    est.update(np.array([0, 1, 1, 0] * 50), np.array([0, 1, 0, 0] * 50))
    assert 0 < est.measures()["mcc"] < 1


# -- intervals (docs/measures.md, "Intervals") ---------------------------------------------------


def test_the_same_accuracy_on_40_and_on_40000_labels_is_not_the_same_claim():
    """The issue's case: 0.93 on 40 labels and on 40 000 differ in their intervals."""
    few = compute_measures(ConfusionSnapshot(np.array([[20, 1], [2, 17]]), 0, 0, 40, 40.0))
    many = compute_measures(
        ConfusionSnapshot(np.array([[20_000, 1_400], [1_400, 17_200]]), 0, 0, 40_000, 40_000.0)
    )
    assert few["accuracy"] == pytest.approx(0.925) and many["accuracy"] == pytest.approx(0.93)
    assert few["accuracy_hi"] - few["accuracy_lo"] > 0.15
    assert many["accuracy_hi"] - many["accuracy_lo"] < 0.006
    # error's interval mirrors accuracy's
    assert few["error_lo"] == pytest.approx(1 - few["accuracy_hi"])


def test_kappa_intervals_are_cohens_standard_error_around_kappa():
    """E5's p = 0.7, p_ran = 0.5 at N = 100: κ = 0.4, se = 0.0916515, κ ± 1.96·se."""
    snap = ConfusionSnapshot(np.array([[35, 15], [15, 35]]), 0, 0, 100, 100.0)
    m = compute_measures(snap)
    se = math.sqrt(0.7 * 0.3 / 100) / 0.5
    assert m["kappa_se"] == pytest.approx(se, rel=1e-12)
    assert m["kappa_lo"] == pytest.approx(0.4 - 1.959963984540054 * se, rel=1e-12)
    assert m["kappa_hi"] == pytest.approx(0.4 + 1.959963984540054 * se, rel=1e-12)
    # κ_M against p_maj = 0.5 has the same se here; a wider confidence, a wider interval
    wide = compute_measures(snap, confidence=0.99)
    assert wide["kappa_hi"] - wide["kappa_lo"] > m["kappa_hi"] - m["kappa_lo"]


def test_a_bad_confidence_names_the_value_and_what_is_allowed():
    snap = ConfusionSnapshot(np.array([[1]]), 0, 0, 1, 1.0)
    for bad in (0, 1, 95, -0.5, True):
        with pytest.raises(
            ValueError, match=r"confidence=.* is not allowed; use a number in \(0, 1\)"
        ):
            compute_measures(snap, confidence=bad)
