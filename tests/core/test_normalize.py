"""Histogram normalization: E12, the paper's reference counts, a brute-force grid, errors."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streameval.core.normalize import (
    MEASURES,
    TIE_TOLERANCE,
    count_at_most,
    measure_values,
    normalize,
)

#: [BS]: numerators at x = 0.9, n = 160, undefined → 0, for P:N = 10:150 ... 150:10.
COUNTS = [(10, 150), (32, 128), (80, 80), (128, 32), (150, 10)]
REFERENCE = {
    "accuracy": [1540, 4121, 6425, 4121, 1540],
    "balanced_accuracy": [1616, 4159, 6425, 4159, 1616],
    "kappa": [1657, 4238, 6525, 4238, 1657],
    "g_mean": [1617, 4162, 6425, 4162, 1617],
    "f1": [1657, 4230, 6416, 3901, 1401],
    "precision": [1650, 4183, 6165, 3282, 506],
    "recall": [1510, 3741, 5913, 3828, 1496],
    "mcc": [1657, 4236, 6517, 4236, 1657],
}


def literal_value(measure: str, tp: int, fn: int, fp: int, tn: int) -> float:
    """The measure straight from [BS]'s formulas (1)–(8); undefined → 0."""
    positives, negatives = tp + fn, fp + tn
    predicted_pos, predicted_neg, n = tp + fp, fn + tn, tp + fn + fp + tn
    precision = tp / predicted_pos if predicted_pos else None
    recall = tp / positives if positives else None
    specificity = tn / negatives if negatives else None
    value = None
    if measure == "accuracy":
        value = (tp + tn) / n
    elif measure == "balanced_accuracy" and recall is not None and specificity is not None:
        value = (recall + specificity) / 2
    elif measure == "kappa" and positives * predicted_pos + negatives * predicted_neg != n * n:
        accuracy = (tp + tn) / n
        chance = (positives * predicted_pos + negatives * predicted_neg) / n**2
        value = (accuracy - chance) / (1 - chance)
    elif measure == "g_mean" and recall is not None and specificity is not None:
        value = math.sqrt(recall * specificity)
    elif measure == "f1" and precision is not None and recall is not None and tp > 0:
        value = 2 * precision * recall / (precision + recall)
    elif measure == "precision":
        value = precision
    elif measure == "recall":
        value = recall
    elif measure == "mcc":
        denominator = predicted_pos * positives * negatives * predicted_neg
        if denominator:
            value = (tp * tn - fp * fn) / math.sqrt(denominator)
    return 0.0 if value is None else value


def brute_force_count(measure: str, positives: int, negatives: int, x: float) -> int:
    """A slow obvious double loop over all (P+1)(N+1) matrices."""
    return sum(
        1
        for tp in range(positives + 1)
        for fp in range(negatives + 1)
        if literal_value(measure, tp, positives - tp, fp, negatives - fp) <= x + TIE_TOLERANCE
    )


def test_e12_precision_example_of_the_paper():
    """E12 (docs/measures.md) / Brzezinski et al. §III-B: 506/1661 ≈ 0.30 and 1650/1661 ≈ 0.99."""
    assert count_at_most("precision", 150, 10, 0.9) == 506
    assert normalize("precision", 150, 10, 0.9) == 506 / 1661
    assert count_at_most("precision", 10, 150, 0.9) == 1650
    assert normalize("precision", 10, 150, 0.9) == 1650 / 1661


def test_precision_ties_at_exactly_x_count():
    """The 10 matrices of P=150, N=10 with precision exactly 9/10 are included."""
    ties = [(9 * fp, fp) for fp in range(1, 11)]
    assert all(measure_values("precision", tp, fp, 150, 10) == 0.9 for tp, fp in ties)
    assert count_at_most("precision", 150, 10, 0.9) - count_at_most(
        "precision", 150, 10, math.nextafter(0.9, 0) - 2 * TIE_TOLERANCE
    ) == len(ties)


@pytest.mark.parametrize("measure", MEASURES)
@pytest.mark.parametrize(("column", "counts"), list(enumerate(COUNTS)))
def test_reference_numerators_of_spec_5_4(measure, column, counts):
    positives, negatives = counts
    assert count_at_most(measure, positives, negatives, 0.9) == REFERENCE[measure][column]
    assert normalize(measure, positives, negatives, 0.9) == pytest.approx(
        REFERENCE[measure][column] / ((positives + 1) * (negatives + 1)), abs=0
    )


@st.composite
def queries(draw):
    """Counts P, N <= 30 and a threshold: random, attained by some matrix, or just off one."""
    positives = draw(st.integers(0, 30))
    negatives = draw(st.integers(0 if positives else 1, 30))
    kind = draw(st.sampled_from(["random", "attained", "below", "above", "special"]))
    if kind == "random":
        return positives, negatives, draw(st.floats(-1.5, 1.5)), None
    if kind == "special":
        return (
            positives,
            negatives,
            draw(st.sampled_from([0.0, 1.0, -1.0, math.inf, -math.inf])),
            None,
        )
    tp = draw(st.integers(0, positives))
    fp = draw(st.integers(0, negatives))
    offset = {"attained": 0.0, "below": -1e-9, "above": 1e-9}[kind]
    return positives, negatives, offset, (tp, fp)


@pytest.mark.parametrize("measure", MEASURES)
@settings(max_examples=60)
@given(query=queries())
def test_counts_equal_a_brute_force_double_loop(measure, query):
    positives, negatives, x, cell = query
    if cell is not None:  # a value some matrix attains, computed the literal way (plus offset)
        tp, fp = cell
        x += literal_value(measure, tp, positives - tp, fp, negatives - fp)
    want = brute_force_count(measure, positives, negatives, x)
    assert count_at_most(measure, positives, negatives, x) == want
    assert normalize(measure, positives, negatives, x) == want / ((positives + 1) * (negatives + 1))


@pytest.mark.parametrize("measure", MEASURES)
def test_every_measure_is_non_decreasing_in_tp_for_fixed_fp(measure):
    """The assumption behind the bisection, for P, N <= 24 with undefined → 0."""
    for positives in range(25):
        for negatives in range(0 if positives else 1, 25):
            tp = np.arange(positives + 1)[:, None]
            fp = np.arange(negatives + 1)[None, :]
            grid = measure_values(measure, tp, fp, positives, negatives)
            assert grid.shape == (positives + 1, negatives + 1)
            assert np.all(np.diff(grid, axis=0) >= -1e-15), (positives, negatives)


@pytest.mark.parametrize("measure", MEASURES)
@settings(max_examples=20)
@given(
    positives=st.integers(0, 12),
    negatives=st.integers(0, 12),
)
def test_measure_values_equal_the_literal_formulas(measure, positives, negatives):
    if positives + negatives == 0:
        return
    tp, fp = np.meshgrid(np.arange(positives + 1), np.arange(negatives + 1), indexing="ij")
    got = measure_values(measure, tp, fp, positives, negatives)
    for i, j in np.ndindex(got.shape):
        want = literal_value(measure, i, positives - i, j, negatives - j)
        assert got[i, j] == pytest.approx(want, abs=1e-14), (i, j)


def test_large_counts_run_without_a_grid():
    """P = N = 10^6: 10^12 matrices, counted by bisection (closed forms of the counts)."""
    p = n = 10**6
    # precision ≤ 3/4 ⇔ TP ≤ 3·FP: 1 (the undefined cell) + Σ_{FP=1..N} (min(P, 3·FP) + 1)
    fp = np.arange(1, n + 1)
    assert count_at_most("precision", p, n, 0.75) == 1 + int(np.minimum(p, 3 * fp).sum()) + n
    assert normalize("recall", p, n, 0.25) == (p // 4 + 1) / (p + 1)


def test_bounds_nan_and_infinities():
    assert math.isnan(normalize("mcc", 10, 10, math.nan))
    assert normalize("mcc", 10, 10, math.inf) == 1.0
    assert normalize("mcc", 10, 10, -math.inf) == 0.0
    assert normalize("mcc", 10, 10, -1.0) == pytest.approx(1 / 121)  # only TP = 0, FP = N
    assert normalize("accuracy", 7, 0, 1.0) == 1.0
    assert count_at_most("precision", 0, 5, 0.0) == 6  # no positives: every value undefined → 0
    assert normalize(measure="g_mean", positives=np.int64(3), negatives=4, value=np.float32(0)) > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("f_score", 10, 10, 0.5), "measure='f_score' is not known; use one of 'accuracy'"),
        ((None, 10, 10, 0.5), "measure=None is not known"),
        (("f1", -1, 10, 0.5), r"positives=-1 is not allowed; use .* integer >= 0"),
        (("f1", 10, 2.5, 0.5), "negatives=2.5 is not allowed"),
        (("f1", True, 10, 0.5), "positives=True is not allowed"),
        (("f1", "10", 10, 0.5), "positives='10' is not allowed"),
        (("f1", 0, 0, 0.5), "positives=0 and negatives=0"),
        (("f1", 10, 10, "high"), "value='high' is not allowed"),
        (("f1", 10, 10, None), "value=None is not allowed"),
    ],
)
def test_bad_arguments_name_the_value_and_what_is_allowed(args, message):
    with pytest.raises(ValueError, match=message):
        normalize(*args)
    with pytest.raises(ValueError, match=message):
        count_at_most(*args)


def test_count_at_most_rejects_nan():
    with pytest.raises(ValueError, match="value=nan is not allowed"):
        count_at_most("f1", 10, 10, math.nan)
