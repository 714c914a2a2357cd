"""Ψ_α of the log-loss and Brier score against a plain loop written from Grzenda et al.'s bins
(exact fractions for the bins and the vote's times), on every prefix of random streams, for
any split into batches and through a state round trip."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streameval.core.forgetting import EstimatorSpec
from streameval.core.psi_scores import PsiScores, bin_losses

from tests.core.reference import covered

EPS = float(np.finfo(np.float64).eps)


def reference_bin_vectors(times, proba, t0, t1, bins, rule):
    """The probability vector of bins 0..B, as plainly as possible."""
    out = [list(proba[0])]
    span = t1 - t0
    later = list(range(1, len(times)))

    def bin_of(j):
        return min(bins, 1 + (bins * max(times[j] - t0, 0)) // span)

    for b in range(1, bins + 1):
        if span == 0:
            out.append(list(proba[0]))
            continue
        inside = [j for j in later if bin_of(j) == b]
        carried = ([0] + [j for j in later if bin_of(j) < b])[-1]
        if not inside:
            out.append(list(proba[carried]))
        elif len(inside) == 1 or rule == "last":
            out.append(list(proba[inside[-1]]))
        else:
            start, end = t0 + Fraction(span * (b - 1), bins), t0 + Fraction(span * b, bins)
            points = [(start, carried)] + [(min(max(Fraction(times[j]), start), end), j)
                                           for j in inside]  # fmt: skip
            mix = [0.0] * len(proba[0])
            for (t, j), (t_next, _) in zip(points, [*points[1:], (end, None)], strict=True):
                for c, p in enumerate(proba[j]):
                    mix[c] += float(t_next - t) * p
            total = float(end - start)
            out.append([v / total for v in mix])
    return out


def reference_scores(y, times, proba, t0, t1, bins, alpha, rule):
    """(s of the log-loss, s of the Brier score) of one outcome."""
    raw = [(1.0 / alpha) ** (b / bins) for b in range(bins + 1)]
    weights = [r / sum(raw) for r in raw]
    if len(times) == 1:
        vectors = [list(proba[0])]
        weights = [1.0]
    else:
        vectors = reference_bin_vectors(times, proba, t0, t1, bins, rule)
    log_loss = brier = 0.0
    for w, p in zip(weights, vectors, strict=True):
        log_loss += w * -math.log(min(max(p[y], EPS), 1 - EPS))
        brier += w * sum((p_c - (c == y)) ** 2 for c, p_c in enumerate(p))
    return log_loss, brier


@st.composite
def outcomes(draw, k=3):
    t0 = draw(st.integers(0, 50))
    span = draw(st.integers(0, 60))
    m = draw(st.integers(1, 7))
    # sorted; a prediction may come before the instance's own time (bin 1 takes it)
    times = sorted(draw(st.lists(st.integers(t0 - 5, t0 + span), min_size=m, max_size=m)))
    proba = []
    for _ in range(m):
        raw = draw(st.lists(st.integers(0, 20), min_size=k, max_size=k))
        if sum(raw) == 0:
            raw[0] = 1
        proba.append([r / sum(raw) for r in raw])
    return draw(st.integers(0, k - 1)), times, proba, t0, t0 + span


def _columns(items):
    y = np.array([o[0] for o in items], dtype=np.int64)
    lengths = np.array([len(o[1]) for o in items], dtype=np.int64)
    times = np.array([t for o in items for t in o[1]], dtype=np.int64)
    proba = np.array([p for o in items for p in o[2]], dtype=np.float64)
    t0 = np.array([o[3] for o in items], dtype=np.int64)
    t1 = np.array([o[4] for o in items], dtype=np.int64)
    return y, proba, lengths, times, t0, t1


@pytest.mark.parametrize("rule", ["vote", "last"])
@settings(max_examples=120, deadline=None)
@given(items=st.lists(outcomes(), min_size=1, max_size=8), bins=st.integers(1, 6),
       alpha=st.sampled_from([1.0, 2.0, 7.5]))  # fmt: skip
def test_each_outcomes_weighted_losses_equal_the_plain_loop(rule, items, bins, alpha):
    log_loss, brier = bin_losses(*_columns(items), bins, alpha, rule)
    for i, (y, times, proba, t0, t1) in enumerate(items):
        want = reference_scores(y, times, proba, t0, t1, bins, alpha, rule)
        assert log_loss[i] == pytest.approx(want[0], rel=1e-12, abs=1e-12)
        assert brier[i] == pytest.approx(want[1], rel=1e-12, abs=1e-12)


SPECS = ("cumulative", "window:4", "fading:0.9")


@settings(max_examples=60, deadline=None)
@given(items=st.lists(outcomes(), min_size=1, max_size=14), data=st.data())
def test_every_prefix_any_split_and_a_round_trip_give_the_weighted_means(items, data):
    bins, alpha = 3, 2.0
    specs = [EstimatorSpec.parse(s) for s in SPECS]
    per = [reference_scores(*o, bins, alpha, "vote") for o in items]
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(items)), max_size=4))))
    whole = PsiScores(specs, bins, alpha)
    whole.update(*_columns(items))
    psi = PsiScores(specs, bins, alpha)
    assert psi.measures() == {}
    start = 0
    for stop in [*cuts, len(items)]:
        if stop <= start:
            continue
        psi.update(*_columns(items[start:stop]))
        psi = PsiScores.from_state(json.loads(json.dumps(psi.state())), specs, bins, alpha)
        got = psi.measures()
        for name in SPECS:
            idx, w = covered(stop, name)
            for k, key in enumerate(("psi_log_loss", "psi_brier")):
                values = np.array([per[i][k] for i in idx])
                assert got[name][key] == pytest.approx(float(w @ values / w.sum()), rel=1e-9)
            assert got[name]["n_psi_scored"] == idx.size
        start = stop
    # the same bits as in one batch
    assert json.dumps(psi.state()) == json.dumps(whole.state())
    assert json.dumps(psi.measures()) == json.dumps(whole.measures())


def test_a_new_estimator_starts_at_the_next_outcome():
    item = (1, [0, 4], [[0.5, 0.5], [0.1, 0.9]], 0, 8)
    psi = PsiScores([EstimatorSpec.parse("cumulative")], 4, 2.0)
    psi.update(*_columns([item]))
    specs = [EstimatorSpec.parse("cumulative"), EstimatorSpec.parse("window:10")]
    psi = PsiScores.from_state(psi.state(), specs, 4, 2.0)
    psi.update(*_columns([item]))
    got = psi.measures()
    assert got["cumulative"]["n_psi_scored"] == 2 and got["window:10"]["n_psi_scored"] == 1


def _scores(classes, probabilities):
    """Scores naming only the classes of nonzero probability (so classes come late)."""
    pairs = sorted((c, p) for c, p in zip(classes, probabilities, strict=True) if p > 0)
    return tuple(x for pair in pairs for x in pair)


@settings(max_examples=40, deadline=None)
@given(items=st.lists(outcomes(), min_size=1, max_size=12), data=st.data())
def test_a_model_publishes_them_in_its_delayed_block_for_any_split(items, data):
    """Through the model: the classes named by scores alone (a re-prediction's included)
    take the same indices whatever the batches; outcomes with a prediction without scores
    stay out; the delayed block carries n_psi_scored, psi_log_loss and psi_brier."""
    from streameval.core.model import ModelEvaluator
    from streameval.core.outcome import Outcome

    names = ["b", "a", "c"]  # class 2 ("c") is named by scores alone
    unscored = data.draw(st.sets(st.integers(0, len(items) - 1)))
    rows = []
    for i, (y, times, proba, t0, t1) in enumerate(items):
        scores = tuple(_scores(names, p) for p in proba)
        if i in unscored:
            scores = (None, *scores[1:]) if len(scores) > 1 else ()
        labels = tuple(names[int(np.argmax(p)) % 2] for p in proba)
        rows.append(Outcome("m", f"i{i}", names[y % 2], tuple(times), labels, t0, t1, t0, scores))
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(rows)), max_size=3))))
    whole = ModelEvaluator("m", estimators=["cumulative", "window:3"], bins=3, detectors=[])
    whole.update(rows)
    parts = ModelEvaluator("m", estimators=["cumulative", "window:3"], bins=3, detectors=[])
    for lo, hi in zip([0, *cuts], [*cuts, len(rows)], strict=True):
        if hi > lo:
            parts = ModelEvaluator.from_state(json.loads(json.dumps(parts.state())))
            parts.update(rows[lo:hi])
    assert json.dumps(whole.measures(), sort_keys=True) == json.dumps(
        parts.measures(), sort_keys=True
    )
    kept = [i for i in range(len(items)) if i not in unscored]
    block = whole.measures()["delayed"]["cumulative"]
    if not kept:
        assert "psi_log_loss" not in block
        return
    code = {name: whole.labels.index(name) for name in names if name in whole.labels}
    want = []
    for i in kept:
        y, times, proba, t0, t1 = items[i]
        ordered = [[0.0] * len(code) for _ in proba]  # the model's class order
        for row, p in zip(ordered, proba, strict=True):
            for name, value in zip(names, p, strict=True):
                if value > 0:
                    row[code[name]] = value
        want.append(reference_scores(code[names[y % 2]], times, ordered, t0, t1, 3, 2.0, "vote"))
    assert block["n_psi_scored"] == len(kept)
    assert block["psi_log_loss"] == pytest.approx(np.mean([w[0] for w in want]), rel=1e-9)
    assert block["psi_brier"] == pytest.approx(np.mean([w[1] for w in want]), rel=1e-9)
