"""A model's scores: both views against scikit-learn, classes first named by scores, any batch
split and restore bit for bit, and nothing at all for a model without scores."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn import metrics
from streameval.core.model import ModelEvaluator
from streameval.core.outcome import Outcome
from streameval.core.probabilistic import PROBABILISTIC_MEASURES

ESTIMATORS = ["cumulative", "window:7", "fading:0.9"]
CLASSES = ["no", "yes", "maybe"]


def _scores(probabilities):
    return tuple(x for c, p in sorted(zip(CLASSES, probabilities, strict=False)) for x in (c, p))


@st.composite
def scored_outcomes(draw):
    """Outcomes with one or two predictions each; each prediction may have scores (over the
    first two classes, or over all three: 'maybe' may be named by scores alone)."""
    n = draw(st.integers(1, 40))
    outcomes = []
    for i in range(n):
        truth = draw(st.sampled_from(CLASSES[:2]))
        count = draw(st.integers(1, 2))
        labels, scores = [], []
        for _ in range(count):
            labels.append(draw(st.sampled_from(CLASSES[:2])))
            if draw(st.booleans()):
                k = draw(st.sampled_from([2, 3]))
                raw = np.array([draw(st.integers(1, 8)) for _ in range(k)], dtype=float)
                scores.append(_scores(raw / raw.sum()))
            else:
                scores.append(None)
        times = tuple(range(i, i + count))
        entries = tuple(scores) if any(s is not None for s in scores) else ()
        outcomes.append(Outcome("m", f"i{i}", truth, times, tuple(labels), i, i + 5, i, entries))
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=4)))
    return outcomes, [0, *cuts, n]


def _reference(outcomes, view, estimator, positive):
    """scikit-learn on the outcomes of ``view`` that have scores, with the estimator's weights."""
    at = 0 if view == "initial" else -1
    rows = [o for o in outcomes if o.scores and o.scores[at] is not None]
    if not rows:
        return None
    k = 3 if any(len(o.scores[at]) == 6 for o in rows) else 2
    y = np.array([o.y_true for o in rows])
    named = [dict(zip(s[0::2], s[1::2], strict=True)) for s in (o.scores[at] for o in rows)]
    columns = sorted(CLASSES[:k])  # scikit-learn's order of the classes
    proba = np.array([[p.get(c, 0.0) for c in columns] for p in named])
    t = len(rows)
    if estimator.startswith("window"):
        w = (np.arange(t) >= t - 7).astype(float)
    elif estimator.startswith("fading"):
        w = 0.9 ** (t - 1 - np.arange(t)).astype(float)
    else:
        w = np.ones(t)
    keep = w > 0
    loss = metrics.log_loss(y[keep], proba[keep], sample_weight=w[keep], labels=columns)
    classes = [positive] if positive else [c for c in CLASSES[:k]]
    aucs = []
    for c in classes:
        j = columns.index(c)
        pos = y[keep] == c
        if pos.any() and (~pos).any():
            aucs.append(metrics.roc_auc_score(pos, proba[keep][:, j], sample_weight=w[keep]))
    return {
        "n_scored": int(keep.sum()),
        "log_loss": loss,
        "roc_auc": np.mean(aucs) if aucs else math.nan,
    }


@settings(max_examples=60, deadline=None)
@given(stream=scored_outcomes(), positive=st.sampled_from([None, "yes"]))
def test_both_views_are_scikit_learns_over_their_scored_outcomes(stream, positive):
    outcomes, _ = stream
    model = ModelEvaluator("m", estimators=ESTIMATORS, positive_label=positive, detectors=[])
    model.update(outcomes)
    views = model.measures()["views"]
    for view in ("initial", "final"):
        for estimator in ESTIMATORS:
            got = views[view][estimator]
            want = _reference(outcomes, view, estimator, positive)
            if want is None:
                assert "log_loss" not in got  # no scored outcome in this view: no such keys
                continue
            assert got["n_scored"] == want["n_scored"]
            assert math.isclose(got["log_loss"], want["log_loss"], rel_tol=1e-9)
            if math.isnan(want["roc_auc"]):
                assert math.isnan(got["roc_auc"])
            else:
                assert math.isclose(got["roc_auc"], want["roc_auc"], rel_tol=1e-9)


@settings(max_examples=60, deadline=None)
@given(stream=scored_outcomes(), restart=st.booleans())
def test_any_split_and_restore_of_scored_outcomes_gives_the_same_bits(stream, restart):
    outcomes, cuts = stream
    whole = ModelEvaluator("m", estimators=ESTIMATORS, detectors=[])
    whole.update(outcomes)
    parts = ModelEvaluator("m", estimators=ESTIMATORS, detectors=[])
    for lo, hi in itertools.pairwise(cuts):
        if restart:
            parts = ModelEvaluator.from_state(json.loads(json.dumps(parts.state())))
        parts.update(outcomes[lo:hi])
        parts.flush()  # the estimators take each piece as it comes, not gathered
    assert whole.labels.classes == parts.labels.classes  # a class named by scores alone too
    assert json.dumps(whole.measures(), sort_keys=True) == json.dumps(
        parts.measures(), sort_keys=True
    )
    assert json.dumps(whole.state(), sort_keys=True) == json.dumps(parts.state(), sort_keys=True)


def test_a_model_without_scores_has_no_probabilistic_measures_nor_their_state():
    model = ModelEvaluator("m", estimators=["cumulative"], detectors=[])
    model.update([Outcome("m", "i1", "a", (0,), ("a",), 0, 5)])
    estimate = model.measures()["views"]["final"]["cumulative"]
    assert not set(PROBABILISTIC_MEASURES) & set(estimate) and "reliability" not in estimate
    assert "scored" not in model.state()


def test_a_state_from_before_scores_goes_on_with_them():
    """A checkpoint written before scores were kept: the views start at the next scored
    outcome, as they would for a model whose predictions begin to carry scores."""
    model = ModelEvaluator("m", estimators=["cumulative"], detectors=[])
    model.update([Outcome("m", "i1", "a", (0,), ("a",), 0, 5)])
    old = model.state()
    assert "ece_bins" not in old["config"]  # no scores yet: the settings shape nothing
    restored = ModelEvaluator.from_state(json.loads(json.dumps(old)), ece_bins=4)
    restored.update([Outcome("m", "i2", "b", (6,), ("a",), 6, 9, 6, (("a", 0.4, "b", 0.6),))])
    final = restored.measures()["views"]["final"]["cumulative"]
    assert final["n"] == 2 and final["n_scored"] == 1
    assert math.isclose(final["log_loss"], -math.log(0.6))
    # the configured value applied, and the state now records it
    assert len(final["reliability"]["weight"]) == 4
    assert restored.state()["config"]["ece_bins"] == 4
    again = ModelEvaluator.from_state(restored.state(), ece_bins=10)  # the state's own wins
    assert again.ece_bins == 4
