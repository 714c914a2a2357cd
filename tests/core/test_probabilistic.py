"""Probabilistic measures: scikit-learn with the estimator's weights on every prefix, any batch
split bit for bit, exact state round trips, classes that arrive late, the AUC's grid."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn import metrics
from streameval.core.forgetting import EstimatorSpec
from streameval.core.probabilistic import EPSILON, ScoredBatch, ScoreEstimator
from streameval.core.roc_auc import auc_horizon

SPECS = [
    "cumulative",
    "window:1",
    "window:3",
    "window:10",
    "fading:0.5",
    "fading:0.9",
    "fading:1.0",
]
#: a few values, so that ties (of scores, of confidences) are common
LEVELS = [0.0, 0.05, 0.1, 0.25, 0.3, 0.5, 0.7, 0.75, 0.9, 1.0]


@st.composite
def scored_streams(draw, longest: int = 60):
    """(y, proba, cuts): k classes, rows on the simplex, often tied; classes may arrive late."""
    n = draw(st.integers(1, longest))
    k = draw(st.integers(2, 4))
    tied = draw(st.booleans())
    rows = []
    for _ in range(n):
        if tied:
            raw = np.array([draw(st.sampled_from(LEVELS)) for _ in range(k)]) + 1e-3
        else:
            raw = np.array([draw(st.floats(0.001, 1.0)) for _ in range(k)])
        rows.append(raw / raw.sum())
    proba = np.array(rows)
    if draw(st.booleans()):  # some rows score one class only (others 0)
        for i in draw(st.lists(st.integers(0, n - 1), max_size=n // 3)):
            proba[i] = 0.0
            proba[i, draw(st.integers(0, k - 1))] = 1.0
    y = np.array([draw(st.integers(0, k - 1)) for _ in range(n)], dtype=np.int64)
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=5)))
    return y, proba, [0, *cuts, n]


def discovered(y: np.ndarray, proba: np.ndarray, upto: int) -> int:
    """Classes known after ``upto`` outcomes, if a class is discovered at its first truth or
    nonzero probability (the model evaluator numbers them so)."""
    seen = set(y[:upto].tolist()) | set(np.flatnonzero(proba[:upto].sum(axis=0) > 0).tolist())
    return max(seen) + 1 if seen else 0


def feed(est: ScoreEstimator, y, proba, lo, hi, positive, bins):
    """Feed outcomes lo..hi with the columns of the classes known by then."""
    k = discovered(y, proba, hi)
    batch = ScoredBatch.of(y[lo:hi], proba[lo:hi, :k], bins)
    track = [positive] if positive is not None and positive < k else []
    est.update(batch, track if positive is not None else list(range(k)))


def weights_of(spec: EstimatorSpec, t: int) -> np.ndarray:
    """The weight of outcome i < t in the estimate after t outcomes."""
    i = np.arange(t)
    if spec.kind == "window":
        return (i >= t - spec.window).astype(float)
    if spec.kind == "fading":
        return spec.factor ** (t - 1 - i).astype(float)
    return np.ones(t)


def ece_loop(y, proba, w, bins):
    """ECE straight from its definition (Guo et al. 2017, eq. 3), a plain loop."""
    weight = [0.0] * bins
    conf = [0.0] * bins
    hits = [0.0] * bins
    for yi, row, wi in zip(y, proba, w, strict=True):
        top = int(np.argmax(row))
        b = min(int(row[top] * bins), bins - 1)
        weight[b] += wi
        conf[b] += wi * row[top]
        hits[b] += wi * (top == yi)
    total = sum(weight)
    return sum(abs(h - c) for h, c in zip(hits, conf, strict=True)) / total


def auc_reference(y, scores, w, c) -> float:
    positive = y == c
    keep = w > 0
    if not (positive & keep).any() or not (~positive & keep).any():
        return math.nan
    return metrics.roc_auc_score(positive[keep], scores[keep], sample_weight=w[keep])


def check_prefix(est, spec, y, proba, t, positive, bins):
    got = est.measures(positive)
    w = weights_of(spec, t)
    keep = w > 0
    yk, pk, wk = y[:t][keep], proba[:t][keep], w[keep]
    k = proba.shape[1]
    assert got["n_scored"] == int(keep.sum())
    ref_loss = metrics.log_loss(yk, pk, sample_weight=wk, labels=list(range(k)))
    assert math.isclose(got["log_loss"], ref_loss, rel_tol=1e-9, abs_tol=1e-9)
    ref_brier = metrics.brier_score_loss(
        yk, pk, sample_weight=wk, labels=list(range(k)), scale_by_half=False
    )
    assert math.isclose(got["brier"], ref_brier, rel_tol=1e-9, abs_tol=1e-9)
    assert math.isclose(got["ece"], ece_loop(yk, pk, wk, bins), rel_tol=1e-9, abs_tol=1e-9)
    # the AUC: all history or the fading horizon
    if spec.kind == "fading" and spec.factor < 1:
        w = np.where(np.arange(t) >= t - auc_horizon(spec.factor), w, 0.0)
    classes = [positive] if positive is not None else range(discovered(y, proba, t))
    values = [auc_reference(y[:t], proba[:t, c], w, c) for c in classes]
    values = [v for v in values if not math.isnan(v)]
    ref_auc = float(np.mean(values)) if values else math.nan
    if math.isnan(ref_auc):
        assert math.isnan(got["roc_auc"])
    else:
        assert math.isclose(got["roc_auc"], ref_auc, rel_tol=1e-9, abs_tol=1e-9)


@pytest.mark.parametrize("spec_name", SPECS)
@pytest.mark.parametrize("by_positive", [False, True])
@settings(max_examples=25)
@given(stream=scored_streams())
def test_every_prefix_equals_scikit_learn_with_the_estimators_weights(
    spec_name, by_positive, stream
):
    y, proba, _ = stream
    spec, bins = EstimatorSpec.parse(spec_name), 5
    positive = 1 if by_positive else None
    est = ScoreEstimator(spec, bins=bins)
    for t in range(1, y.size + 1):
        feed(est, y, proba, t - 1, t, positive, bins)
        check_prefix(est, spec, y, proba, t, positive, bins)


def _same(a: dict, b: dict) -> None:
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@pytest.mark.parametrize("spec_name", SPECS)
@settings(max_examples=25)
@given(stream=scored_streams(), by_positive=st.booleans(), restart=st.booleans())
def test_any_split_and_restore_gives_the_same_bits(spec_name, stream, by_positive, restart):
    y, proba, cuts = stream
    spec, bins = EstimatorSpec.parse(spec_name), 4
    positive = 0 if by_positive else None
    single, batched = ScoreEstimator(spec, bins=bins), ScoreEstimator(spec, bins=bins)
    for t in range(1, y.size + 1):
        feed(single, y, proba, t - 1, t, positive, bins)
    for lo, hi in itertools.pairwise(cuts):
        if restart:
            batched = ScoreEstimator.from_state(json.loads(json.dumps(batched.state())))
        feed(batched, y, proba, lo, hi, positive, bins)
    _same(single.measures(positive), batched.measures(positive))
    _same(single.state(), batched.state())


def test_blocks_of_fading_sums_are_crossed_exactly():
    rng = np.random.default_rng(5)
    n = 2600
    proba = rng.dirichlet([1.0, 1.0, 1.0], size=n)
    y = rng.integers(0, 3, size=n)
    spec = EstimatorSpec.parse("fading:0.999")
    one, many = ScoreEstimator(spec), ScoreEstimator(spec)
    one.update(ScoredBatch.of(y, proba, 10), [0, 1, 2])
    for lo in range(0, n, 97):
        many.update(ScoredBatch.of(y[lo : lo + 97], proba[lo : lo + 97], 10), [0, 1, 2])
    _same(one.measures(), many.measures())
    w = 0.999 ** np.arange(n - 1, -1, -1.0)
    got = one.measures()
    assert math.isclose(got["log_loss"], metrics.log_loss(y, proba, sample_weight=w), rel_tol=1e-12)
    ref = np.mean([metrics.roc_auc_score(y == c, proba[:, c], sample_weight=w) for c in range(3)])
    assert math.isclose(got["roc_auc"], ref, rel_tol=1e-12)


def on_grid(values, q):
    return values if q is None else np.ldexp(np.floor(np.ldexp(values, q)), -q)


def grid_for(values, cap):
    """The finest grid (None = exact, then 2^-40, 2^-39, ...) keeping at most cap values."""
    for q in [None, *range(40, -1, -1)]:
        if np.unique(on_grid(values, q)).size <= cap:
            return q
    raise AssertionError


@settings(max_examples=40)
@given(
    values=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=80),
    cap=st.integers(2, 12),
    cuts=st.lists(st.integers(0, 80), max_size=5),
)
def test_all_history_auc_keeps_at_most_its_values_on_the_finest_grid(values, cap, cuts):
    p = np.array(values)
    proba = np.column_stack([1.0 - p, p])
    y = (np.arange(p.size) % 3 == 0).astype(np.int64)
    spec = EstimatorSpec.parse("cumulative")
    single = ScoreEstimator(spec, auc_max_values=cap)
    batched = ScoreEstimator(spec, auc_max_values=cap)
    for t in range(1, p.size + 1):
        single.update(ScoredBatch.of(y[t - 1 : t], proba[t - 1 : t], 10), [1])
        q = grid_for(p[:t], cap)
        got = single.measures(positive=1)
        ref = auc_reference(y[:t], on_grid(p[:t], q), np.ones(t), 1)
        if math.isnan(ref):
            assert math.isnan(got["roc_auc"])
        else:
            assert math.isclose(got["roc_auc"], ref, rel_tol=1e-12)
            assert got["roc_auc_grid"] == (0.0 if q is None else math.ldexp(1.0, -q))
    bounds = [0, *sorted(c for c in cuts if c <= p.size), p.size]
    for lo, hi in itertools.pairwise(bounds):
        batched.update(ScoredBatch.of(y[lo:hi], proba[lo:hi], 10), [1])
    _same(single.state(), batched.state())


def test_a_probability_of_zero_for_the_truth_costs_the_clipped_log():
    est = ScoreEstimator(EstimatorSpec.parse("cumulative"))
    est.update(ScoredBatch.of(np.array([0]), np.array([[0.0, 1.0]]), 10), [0, 1])
    m = est.measures()
    assert m["log_loss"] == -math.log(EPSILON)
    assert m["brier"] == 2.0
    assert math.isnan(m["roc_auc"])  # one outcome: no negatives for class 0


def test_reliability_bins_say_confidence_accuracy_and_weight():
    est = ScoreEstimator(EstimatorSpec.parse("window:4"), bins=2)
    proba = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.45, 0.55]])
    est.update(ScoredBatch.of(np.array([0, 0, 1, 1]), proba, 2), [0, 1])
    rel = est.measures()["reliability"]
    assert rel["weight"] == [0.0, 1.0]
    assert math.isnan(rel["confidence"][0]) and math.isnan(rel["accuracy"][0])
    assert rel["confidence"][1] == pytest.approx((0.9 + 0.8 + 0.6 + 0.55) / 4)
    assert rel["accuracy"][1] == 0.5


def test_an_empty_estimate_is_nan():
    for name in SPECS:
        m = ScoreEstimator(EstimatorSpec.parse(name)).measures()
        assert m["n_scored"] == 0
        assert all(math.isnan(m[key]) for key in ("log_loss", "brier", "ece", "roc_auc"))
