"""PairEvaluator: pairing, state, continuing under other estimators."""

import json
import math
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streameval.core.forgetting import EstimatorSpec
from streameval.core.outcome import Outcome
from streameval.core.pair import PairEvaluator
from streameval.core.paired_mean import PairedMean

from tests.core.test_model import _drifting, _outcomes, _same


def test_pair_state_round_trip_and_same_model_refused():
    pair = PairEvaluator("a", "b", estimators=["cumulative", "fading:0.9"])
    outcomes = _outcomes([1, 1, 0], [1, 0, 0], "a") + _outcomes([1, 1, 0], [0, 1, 0], "b")
    assert pair.update(outcomes) == 3
    restored = PairEvaluator.from_state(json.loads(json.dumps(pair.state())))
    assert restored.measures() == pair.measures() and restored.n == 3
    with pytest.raises(ValueError, match="two different models"):
        PairEvaluator("a", "a")


def test_pairs_never_cross_incarnations_of_a_reused_id():
    """An id used again after its first resolution is a new instance: its outcomes pair with
    each other, not with the first incarnation's, in one call or split over several."""

    def outcome(model, due, label):
        return Outcome(model, "i1", "a", (due - 5,), (label,), due - 5, due - 1, due)

    stream = [outcome("a", 10, "a"), outcome("b", 10, "b"), outcome("b", 50, "a")]
    stream.append(outcome("a", 50, "b"))
    pair = PairEvaluator("a", "b")
    assert pair.pairs(stream) == [(stream[0], stream[1]), (stream[3], stream[2])]
    whole, split = PairEvaluator("a", "b"), PairEvaluator("a", "b")
    whole.update(stream)
    split.update(stream[:2])
    split.update(stream[2:])
    assert whole.n == split.n == 2
    assert whole.measures() == split.measures()


def test_a_pair_continued_under_more_estimators():
    a, b = _drifting(3000, seed=6, drift_at=2000, model="a"), _drifting(3000, 7, 1000, "b")
    outcomes = [o for pair in zip(a, b, strict=True) for o in pair]
    whole = PairEvaluator("a", "b", estimators=["cumulative"])
    whole.update(outcomes)
    first = PairEvaluator("a", "b", estimators=["cumulative"])
    first.update(outcomes[:2000])
    continued = PairEvaluator.from_state(first.state(), ["window:100", "cumulative"])
    continued.update(outcomes[2000:])
    fresh = PairEvaluator("a", "b", estimators=["window:100"])
    fresh.update(outcomes[2000:])
    measures = continued.measures()
    assert list(measures) == ["window:100", "cumulative"]
    assert _same(measures["cumulative"], whole.measures()["cumulative"])
    assert _same(measures["window:100"], fresh.measures()["window:100"])


def test_an_estimator_a_pair_has_is_never_dropped_silently():
    pair = PairEvaluator("a", "b", estimators=["cumulative", "window:10"])
    with pytest.raises(ValueError, match=r"\['window:10'\]"):
        PairEvaluator.from_state(pair.state(), ["cumulative"])


def _scored_pair(i: int, truth: str, p_a: float | None, p_b: float | None):
    """Outcomes of models a and b for instance i: final prediction's P("a") (None: no scores)."""

    def outcome(model, p):
        scores = () if p is None else (None, ("a", p, "b", 1.0 - p))
        label = "a" if p is None or p >= 0.5 else "b"
        t = 10 * i
        if scores:  # an initial prediction without scores, then the final one with them
            return Outcome(model, f"i{i}", truth, (t, t + 1), (label, label), t, t + 5, t + 5,
                           scores)  # fmt: skip
        return Outcome(model, f"i{i}", truth, (t,), (label,), t, t + 5, t + 5)

    return [outcome("a", p_a), outcome("b", p_b)]


def _reference_difference(d: list[float], spec: str, z: float) -> tuple[float, float, float]:
    """The log-loss difference's mean and interval by the definition: a loop over the
    estimator's weights (docs/measures.md, "Comparisons")."""
    if spec.startswith("window:"):
        d = d[-int(spec.split(":")[1]) :]
        weights = [1.0] * len(d)
    elif spec.startswith("fading:"):
        a = float(spec.split(":")[1])
        weights = [a ** (len(d) - 1 - j) for j in range(len(d))]
    else:
        weights = [1.0] * len(d)
    total = sum(weights)
    mean = sum(w * x for w, x in zip(weights, d, strict=True)) / total
    size = total * total / sum(w * w for w in weights)
    if size <= 1:
        return mean, math.nan, math.nan
    spread = sum(w * (x - mean) ** 2 for w, x in zip(weights, d, strict=True)) / total
    half = z * math.sqrt(spread / (size - 1))
    return mean, mean - half, mean + half


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),
            st.one_of(st.none(), st.floats(0.0, 1.0)),
            st.one_of(st.none(), st.floats(0.0, 1.0)),
        ),
        min_size=1,
        max_size=80,
    ),
    cuts=st.lists(st.integers(1, 80), max_size=5),
)
def test_log_loss_difference_is_the_weighted_mean_of_scored_pairs(rows, cuts):
    """On every prefix: log_loss(A) − log_loss(B) over the pairs both scored, and its interval,
    equal a loop over the estimator's weights (1e-9); any split gives the same bits; a state
    round trip changes nothing; pairs without scores on both sides leave it alone."""
    estimators = ["cumulative", "window:7", "fading:0.9"]
    z = NormalDist().inv_cdf(0.975)
    whole = PairEvaluator("a", "b", estimators=estimators)
    split = PairEvaluator("a", "b", estimators=estimators)
    outcomes = [o for i, row in enumerate(rows) for o in _scored_pair(i, *row)]
    differences = []
    bounds = sorted({2 * min(c, len(rows)) for c in cuts} | {2 * len(rows)})
    start = 0
    for end in bounds:
        split.update(outcomes[start:end])
        start = end
    for i, (truth, p_a, p_b) in enumerate(rows):
        whole.update(outcomes[2 * i : 2 * i + 2])
        if p_a is not None and p_b is not None:
            differences.append(_clipped_loss(p_a, truth) - _clipped_loss(p_b, truth))
        measures = whole.measures()
        for spec in estimators:
            values = measures[spec]
            if not differences:
                assert "log_loss_difference" not in values
                continue
            expected = _reference_difference(differences, spec, z)
            got = (
                values["log_loss_difference"],
                values["log_loss_difference_lo"],
                values["log_loss_difference_hi"],
            )
            assert values["n_scored"] == min(len(differences), 7 if spec == "window:7" else 10**9)
            for g, e in zip(got, expected, strict=True):
                assert (math.isnan(g) and math.isnan(e)) or g == pytest.approx(
                    e, rel=1e-9, abs=1e-9
                )
    assert _same(split.measures(), whole.measures())
    restored = PairEvaluator.from_state(json.loads(json.dumps(whole.state())))
    assert _same(restored.measures(), whole.measures())


def _clipped_loss(p_a: float, truth: str) -> float:
    p = p_a if truth == "a" else 1.0 - p_a
    eps = np.finfo(np.float64).eps
    return -math.log(min(max(p, eps), 1.0 - eps))


def test_the_interval_of_tiny_differences_keeps_its_width():
    """Differences of 1e-7 give an interval of their own scale, not a point."""
    rng = np.random.default_rng(1)
    d = 1e-7 + 1e-7 * rng.standard_normal(1000)
    mean = PairedMean(EstimatorSpec.parse("cumulative"))
    mean.update(d)
    z = NormalDist().inv_cdf(0.975)
    _, low, high = mean.interval(z)
    half = z * d.std(ddof=1) / math.sqrt(d.size)
    assert low == pytest.approx(d.mean() - half, rel=1e-6)
    assert high == pytest.approx(d.mean() + half, rel=1e-6)
    same = PairedMean(EstimatorSpec.parse("cumulative"))
    same.update(np.full(10, 0.3))
    assert same.interval(z) == (pytest.approx(0.3), pytest.approx(0.3), pytest.approx(0.3))
