"""ModelEvaluator and PairEvaluator: normalization, alarms, state."""

import json
import math
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streameval.core.join import Outcome
from streameval.core.model import NORMALIZED_MEASURES, ModelEvaluator, PairEvaluator
from streameval.core.normalize import normalize


def _outcomes(y_true, y_pred, model="m"):
    return [
        Outcome(model, f"i{i}", t, (i, i + 1), (p, p), i, i + 5)
        for i, (t, p) in enumerate(zip(y_true, y_pred, strict=True))
    ]


def test_normalized_values_are_those_of_the_positive_class_counts():
    rng = np.random.default_rng(4)
    y = rng.choice(["yes", "no"], 300, p=[0.2, 0.8]).tolist()
    p = [t if rng.random() < 0.8 else ("no" if t == "yes" else "yes") for t in y]
    model = ModelEvaluator("m", estimators=["cumulative", "window:100"], positive_label="yes")
    model.update(_outcomes(y, p))
    window = model.measures()["views"]["final"]["window:100"]
    positives = sum(1 for t in y[-100:] if t == "yes")
    assert window["normalized_precision"] == normalize(
        "precision", positives, 100 - positives, window["precision_positive"]
    )
    assert set(NORMALIZED_MEASURES) == {k.removeprefix("normalized_") for k in window
                                        if k.startswith("normalized_")}  # fmt: skip


def test_normalized_values_are_nan_without_both_classes():
    model = ModelEvaluator("m", estimators=["cumulative"], positive_label="yes")
    model.update(_outcomes(["no"] * 10, ["no"] * 9 + ["yes"]))
    cumulative = model.measures()["views"]["final"]["cumulative"]
    assert cumulative["accuracy"] == 0.9
    assert all(math.isnan(cumulative[f"normalized_{m}"]) for m in NORMALIZED_MEASURES)


def test_normalization_stops_past_its_count_limit():
    model = ModelEvaluator("m", estimators=["cumulative"], positive_label="a",
                           normalize_max_count=5)  # fmt: skip
    model.update(_outcomes(["a", "b"] * 3, ["a", "b"] * 3))
    assert "normalized_accuracy" not in model.measures()["views"]["final"]["cumulative"]


def test_alarm_and_state_round_trip():
    rng = np.random.default_rng(9)
    y = ["a"] * 6000
    p = ["a" if rng.random() < (0.9 if i < 3000 else 0.4) else "b" for i in range(6000)]
    whole = ModelEvaluator("m")
    alarms = whole.update(_outcomes(y, p))
    assert alarms and all(a.index > 3000 for a in alarms)
    part = ModelEvaluator("m")
    got = part.update(_outcomes(y[:2500], p[:2500]))
    part = ModelEvaluator.from_state(json.loads(json.dumps(part.state())))
    rest = _outcomes(y, p)[2500:]
    got += part.update(rest)
    assert got == alarms
    assert json.dumps(part.measures()) == json.dumps(whole.measures())


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

    stream = [outcome("a", 10, "a"), outcome("b", 10, "b"), outcome("b", 50, "a"),
              outcome("a", 50, "b")]  # fmt: skip
    pair = PairEvaluator("a", "b")
    assert pair.pairs(stream) == [(stream[0], stream[1]), (stream[3], stream[2])]
    whole, split = PairEvaluator("a", "b"), PairEvaluator("a", "b")
    whole.update(stream)
    split.update(stream[:2])
    split.update(stream[2:])
    assert whole.n == split.n == 2
    assert whole.measures() == split.measures()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from("ABCD"), st.lists(st.sampled_from("ABCD"), min_size=1,
                                                     max_size=3)),
        min_size=1, max_size=40,
    ),
    st.lists(st.integers(0, 40), max_size=4),
)  # fmt: skip
def test_classes_are_discovered_in_outcome_order_however_the_batches_fall(rows, cuts):
    """A class's index (and so every sum's order, to the last bit) must not depend on where
    the batches are cut: truth then predictions, outcome by outcome."""
    outcomes = [
        Outcome("m", f"i{i}", truth, tuple(range(i, i + len(labels))), tuple(labels), i, i + 9)
        for i, (truth, labels) in enumerate(rows)
    ]
    whole, split = ModelEvaluator("m"), ModelEvaluator("m")
    whole.update(outcomes)
    bounds = [0, *sorted(c for c in cuts if c < len(outcomes)), len(outcomes)]
    for start, end in pairwise(bounds):
        split.update(outcomes[start:end])
    first_seen = list(dict.fromkeys(x for truth, labels in rows for x in (truth, *labels)))
    assert whole.labels.classes == split.labels.classes == first_seen
    assert json.dumps(split.measures()) == json.dumps(whole.measures())


def test_a_faded_out_class_in_the_delayed_block_is_no_crash():
    """The delayed block's κ under fading, with the same faded-away class (see
    test_evaluator.py): NaN, not a ZeroDivisionError."""
    model = ModelEvaluator("m", estimators=["fading:0.999"])
    model.update(_outcomes(["a", "b"], ["a", "b"]))
    model.update(_outcomes(["a"] * 100_000, ["a"] * 100_000))
    delayed = model.measures()["delayed"]["fading:0.999"]
    assert math.isnan(delayed["kappa_final"])
