"""Latency bins, Λ(T, b) and Ψ_α against E13 (docs/measures.md), a slow reference and the
estimators."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streameval.core import parse_estimator
from streameval.core.delayed import DelayedBatch, DelayedEvaluator, bin_predictions, psi_weights

E13 = DelayedBatch.from_timelines(
    [1, 1], [([0, 3, 5, 7, 8], [0, 1, 1, 0, 1]), ([0], [1])], t_instance=[0, 0], t_label=[8, 8]
)


def test_e13_bins_lambda_and_psi():
    assert bin_predictions(E13, bins=4).tolist()[0] == [0, 0, 1, 1, 0, 1]
    for alpha, psi in ((2.0, 0.678678), (1.0, 0.7)):
        ev = DelayedEvaluator(estimators=["cumulative"], bins=4, alpha=alpha)
        ev.update(E13)
        m = ev.measures()["cumulative"]
        lam = [m["accuracy_initial"], *m["binned_accuracy"], m["accuracy_final"]]
        assert lam == [0.5, 0.5, 1.0, 1.0, 0.5, 1.0]
        assert m["psi_accuracy"] == pytest.approx(psi, abs=5e-7)
    # Ψ_2 is also the mean of the per-instance scores: (0.357357 + 1)/2
    w = psi_weights(4, 2.0)
    assert float(w @ np.array([0, 0, 1, 1, 0])) == pytest.approx(0.357357, abs=5e-7)


def test_e13_multi_prediction_bin_vote_and_last():
    """Δ = 40, B = 4: re-predictions t=12 → 1 and t=18 → 0 both in bin 2 = [10, 20)."""
    batch = DelayedBatch.from_timelines([0], [([0, 12, 18], [0, 1, 0])], [0], [40])
    assert bin_predictions(batch, bins=4, rule="vote").tolist() == [[0, 0, 1, 0, 0, 0]]
    assert bin_predictions(batch, bins=4, rule="last").tolist() == [[0, 0, 0, 0, 0, 0]]


def reference_bins(times, labels, t0, t1, bins, rule):
    """Grzenda et al.'s bins written as plainly as possible, with exact fractions."""
    from fractions import Fraction

    out = [labels[0]]
    span = t1 - t0
    re = list(zip(times[1:], labels[1:], strict=True))
    for b in range(1, bins + 1):
        if span == 0:
            out.append(labels[0])
            continue
        start, end = t0 + Fraction(span * (b - 1), bins), t0 + Fraction(span * b, bins)
        inside = [(t, y) for t, y in re if min(bins, 1 + (bins * max(t - t0, 0)) // span) == b]
        # the prediction in force at the bin start: the last one of an earlier bin
        earlier = [labels[0]] + [
            y for t, y in re if min(bins, 1 + (bins * max(t - t0, 0)) // span) < b
        ]
        carried = earlier[-1]
        if not inside:
            out.append(carried)
        elif len(inside) == 1 or rule == "last":
            out.append(inside[-1][1])
        else:
            tally = {}
            points = [(start, carried)] + [
                (min(max(Fraction(t), start), end), y) for t, y in inside
            ]
            for (t, y), (t_next, _) in zip(points, [*points[1:], (end, None)], strict=True):
                tally[y] = tally.get(y, 0) + (t_next - t)
            best = max(tally.values())
            out.append(min(y for y, v in tally.items() if v == best))
    out.append(labels[-1])
    return out


@st.composite
def timelines(draw):
    t0 = draw(st.integers(0, 50))
    span = draw(st.integers(0, 60))
    n_re = draw(st.integers(0, 8))
    times = sorted(draw(st.lists(st.integers(t0, t0 + span), min_size=n_re, max_size=n_re)))
    labels = draw(st.lists(st.integers(0, 3), min_size=n_re + 1, max_size=n_re + 1))
    return [t0, *times], labels, t0, t0 + span


@pytest.mark.parametrize("rule", ["vote", "last"])
@settings(max_examples=150)
@given(items=st.lists(timelines(), min_size=1, max_size=6), bins=st.integers(1, 7))
def test_binning_matches_the_slow_reference(rule, items, bins):
    batch = DelayedBatch.from_timelines(
        [0] * len(items),
        [(t, y) for t, y, _, _ in items],
        [t0 for *_, t0, _ in items],
        [t1 for *_, t1 in items],
    )
    got = bin_predictions(batch, bins=bins, rule=rule).tolist()
    want = [reference_bins(t, y, t0, t1, bins, rule) for t, y, t0, t1 in items]
    assert got == want


def _random_batch(rng, n, k=3):
    y_true, timelines_, t0s, t1s = [], [], [], []
    for _ in range(n):
        t0 = int(rng.integers(0, 1000))
        span = int(rng.integers(0, 500))
        m = int(rng.integers(0, 5))
        times = [t0, *sorted(rng.integers(t0, t0 + span + 1, m).tolist())]
        y = int(rng.integers(0, k))
        labels = [y if rng.random() < 0.6 else int(rng.integers(0, k)) for _ in times]
        y_true.append(y)
        timelines_.append((times, labels))
        t0s.append(t0)
        t1s.append(t0 + span)
    return DelayedBatch.from_timelines(y_true, timelines_, t0s, t1s)


def _slice(batch, lo, hi):
    keep = (batch.owner >= lo) & (batch.owner < hi)
    return DelayedBatch(
        batch.y_true[lo:hi], batch.initial[lo:hi], batch.final[lo:hi],
        batch.t_instance[lo:hi], batch.t_label[lo:hi], batch.owner[keep] - lo,
        batch.times[keep], batch.labels[keep],
    )  # fmt: skip


SPECS = ["cumulative", "window:7", "fading:0.9"]


def test_every_bin_equals_an_estimator_fed_that_bins_predictions():
    """Λ(T, b) of accuracy, κ, κ⁺ = the core estimator fed (y_true, bin-b predictions)."""
    rng = np.random.default_rng(5)
    batch = _random_batch(rng, 60)
    grid = bin_predictions(batch, bins=5)
    ev = DelayedEvaluator(estimators=SPECS, bins=5)
    for lo in range(0, 60, 13):
        ev.update(_slice(batch, lo, min(lo + 13, 60)))
    for spec in SPECS:
        block = ev.measures()[spec]
        for measure in ("accuracy", "kappa", "kappa_plus"):
            lam = [
                block[f"{measure}_initial"],
                *block[f"binned_{measure}"],
                block[f"{measure}_final"],
            ]
            for b in range(7):
                est = parse_estimator(spec)
                est.update(batch.y_true, grid[:, b])
                want = est.measures()[measure]
                assert math.isclose(lam[b], want, rel_tol=1e-9, abs_tol=1e-12) or (
                    math.isnan(want) and math.isnan(lam[b])
                ), (spec, measure, b)
            w = psi_weights(5, 2.0)
            assert block[f"psi_{measure}"] == pytest.approx(float(w @ np.array(lam[:6])))


def test_batch_split_and_state_round_trip():
    rng = np.random.default_rng(11)
    batch = _random_batch(rng, 80)
    whole = DelayedEvaluator(estimators=SPECS, bins=6)
    whole.update(batch)
    parts = DelayedEvaluator(estimators=SPECS, bins=6)
    for lo, hi in ((0, 1), (1, 30), (30, 31), (31, 80)):
        parts.update(_slice(batch, lo, hi))
        parts = DelayedEvaluator.from_state(json.loads(json.dumps(parts.state())))
    # bit-identical, fading included (streameval.core.forgetting.BlockFading)
    assert json.dumps(whole.measures()) == json.dumps(parts.measures())


def test_fading_bins_are_split_invariant_across_blocks():
    rng = np.random.default_rng(12)
    batch = _random_batch(rng, 2600)
    whole = DelayedEvaluator(estimators=["fading:0.999"], bins=4)
    whole.update(batch)
    parts = DelayedEvaluator(estimators=["fading:0.999"], bins=4)
    for lo in range(0, 2600, 333):
        parts.update(_slice(batch, lo, min(lo + 333, 2600)))
    assert json.dumps(whole.measures()) == json.dumps(parts.measures())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bins": 0}, "bins=0"),
        ({"alpha": 0.5}, "alpha=0.5"),
        ({"alpha": float("inf")}, "alpha=inf"),
        ({"bin_rule": "first"}, "bin_rule='first'"),
        ({"estimators": ["window:0"]}, "window_size=0"),
    ],
)
def test_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DelayedEvaluator(**kwargs)


def test_a_negative_latency_is_refused():
    batch = DelayedBatch.from_timelines([0], [([10], [0])], t_instance=[10], t_label=[0])
    with pytest.raises(ValueError, match="t_label=0 before t_instance=10"):
        bin_predictions(batch, bins=4)


@st.composite
def mixed_batches(draw):
    """Batches of outcomes, most with a single prediction (the uniform fast path), some with
    re-predictions that change bins, some whose re-predictions repeat the first one."""
    k = draw(st.integers(1, 4))
    outcomes = []
    for _ in range(draw(st.integers(1, 40))):
        t0 = draw(st.integers(0, 100))
        span = draw(st.integers(0, 80))
        kind = draw(st.sampled_from(["single", "single", "varied", "repeated"]))
        first = draw(st.integers(0, k - 1))
        m = 0 if kind == "single" else draw(st.integers(1, 4))
        times = sorted(draw(st.lists(st.integers(t0, t0 + span), min_size=m, max_size=m)))
        if kind == "varied":
            rest = draw(st.lists(st.integers(0, k - 1), min_size=m, max_size=m))
        else:
            rest = [first] * m
        outcomes.append((draw(st.integers(0, k - 1)), [t0, *times], [first, *rest], t0, span))
    cuts = sorted(draw(st.lists(st.integers(0, len(outcomes)), max_size=4)))
    return outcomes, cuts


def _feed(outcomes, cuts, fast, specs=("cumulative", "window:5", "fading:0.9")):
    ev = DelayedEvaluator(estimators=specs, bins=4)
    ev._uniform_fast_path = fast
    for lo, hi in zip([0, *cuts], [*cuts, len(outcomes)], strict=True):
        part = outcomes[lo:hi]
        if part:
            ev.update(DelayedBatch.from_timelines(
                [y for y, *_ in part], [(t, p) for _, t, p, _, _ in part],
                [t0 for *_, t0, _ in part], [t0 + span for *_, t0, span in part],
            ))  # fmt: skip
        ev = DelayedEvaluator.from_state(json.loads(json.dumps(ev.state())))
        ev._uniform_fast_path = fast
    return ev.measures()


@settings(max_examples=200, deadline=None)
@given(data=mixed_batches())
def test_the_uniform_fast_path_equals_the_general_path(data):
    """Outcomes whose bins all hold one prediction update every view at once; the counts of
    the cumulative and window estimates are the general path's exactly, the fading sums up to
    the order of float additions — exactly when every outcome is uniform."""
    outcomes, cuts = data
    fast, general = _feed(outcomes, cuts, True), _feed(outcomes, cuts, False)
    for spec in ("cumulative", "window:5"):
        assert json.dumps(fast[spec]) == json.dumps(general[spec])
    uniform = all(len(set(p)) == 1 for _, _, p, _, _ in outcomes)
    if uniform:
        assert json.dumps(fast["fading:0.9"]) == json.dumps(general["fading:0.9"])
    for key, value in general["fading:0.9"].items():
        assert np.allclose(fast["fading:0.9"][key], value, rtol=1e-12, atol=1e-14, equal_nan=True)
