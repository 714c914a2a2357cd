"""PairEvaluator: pairing, state, continuing under other estimators."""

import json

import pytest
from streameval.core.outcome import Outcome
from streameval.core.pair import PairEvaluator

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
