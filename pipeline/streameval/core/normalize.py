"""Histogram-based normalization N(M, P:N, x) of a binary classification measure.

For a data set with P positives and N negatives every binary confusion matrix with those row
sums — TP ∈ 0..P, FP ∈ 0..N, FN = P − TP, TN = N − FP, (P+1)(N+1) matrices — is taken as
equally likely; N(M, P:N, x) is the fraction of them whose value of measure M is at most x:
the empirical CDF of M at the observed value. 0.84 reads "better than 84 % of all possible
results on this data set", comparable across data sets and class ratios. It depends on the
counts P and N, not only on their ratio.

Conventions
-----------
- A matrix whose measure is undefined (e.g. precision with TP + FP = 0) counts as value 0.
  This is the only convention that reproduces the paper's 506/1661 and 1650/1661.
- "At most x" is tested as M ≤ x + 1e-12 (:data:`TIE_TOLERANCE`) so that a matrix whose value
  *is* x still counts when x was computed along another floating-point path. Distinct values
  closer than that to x are only possible for counts in the millions.
- Defined for exact counts (cumulative or windowed confusion matrices), not for faded ones.

Measures (names as in :data:`MEASURES`; formulas (1)–(8) of the paper, undefined → 0)
------------------------------------------------------------------------------------
``accuracy`` (TP + TN)/n; ``balanced_accuracy`` (TP/P + TN/N)/2; ``kappa``
2(TP·TN − FN·FP)/(P·N̂ + P̂·N) (Cohen's κ of the binary matrix); ``g_mean`` sqrt(TP/P · TN/N);
``f1`` 2TP/(2TP + FP + FN); ``precision`` TP/(TP + FP); ``recall`` TP/P; ``mcc``
(TP·TN − FP·FN)/sqrt(P̂·P·N·N̂); with P̂ = TP + FP and N̂ = FN + TN.

Algorithm
---------
For a fixed FP every one of the eight measures is non-decreasing in TP, undefined → 0 cells
included. Accuracy, balanced accuracy, G-mean, recall are increasing or constant; precision
TP/(TP + FP) and F1 = 2TP/(TP + FP + P) increase. With FP fixed, κ = 2(N·TP − P·FP)/(P(P+N) +
(N−P)(TP+FP)) is a Möbius function of TP whose derivative has the sign of NP + FP(N−P) ≥ 0;
MCC's derivative in u = TP + FP has the sign of u(N − 2FP) + FP(P+N), which is ≥ 0 at both ends
u = FP and u = FP + P and so on the whole column. Undefined cells sit where 0 keeps the order:
MCC's at TP = FP = 0 (next value > 0) and TP = P, FP = N (previous value < 0), precision's at
TP = FP = 0, κ's only when P = 0 or N = 0 (then every value is 0). The tests check it on every
grid with P, N ≤ 24.

The matrices at most x in an FP column are therefore a prefix TP = 0..t*(FP), and t* is found
by bisection over TP — for all FP columns at once with numpy, ⌈log2(P + 2)⌉ steps over blocks
of columns: O(N log P) work, O(block) memory, no (P+1)×(N+1) grid.

References
----------
Brzezinski, Stefanowski, Susmaga, Szczęch, *On the dynamics of classification measures for
imbalanced and streaming data*, IEEE TNNLS: measures (1)–(8), histogram-based normalization
eq. (10) and the worked example N(precision, 150:10, 0.9) = 506/1661 (§III-B), worked example
E12 of docs/measures.md.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import numpy as np

__all__ = ["MEASURES", "TIE_TOLERANCE", "count_at_most", "measure_values", "normalize"]

#: Names of the measures that can be normalized.
MEASURES = (
    "accuracy",
    "balanced_accuracy",
    "kappa",
    "g_mean",
    "f1",
    "precision",
    "recall",
    "mcc",
)

#: A matrix counts as "at most x" when its value is ≤ x + TIE_TOLERANCE.
TIE_TOLERANCE = 1e-12

_BLOCK = 1 << 16  # FP columns bisected together: bounds the memory of a query


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator/denominator, 0 where the denominator is 0 (the undefined → 0 convention)."""
    out = np.zeros(np.broadcast(numerator, denominator).shape)
    return np.divide(numerator, denominator, out=out, where=denominator != 0)


# Each measure maps float arrays TP, FP (same shape) and the counts P, N to float values.
def _accuracy(tp, fp, p, n):
    return (tp + (n - fp)) / (p + n)


def _balanced_accuracy(tp, fp, p, n):
    if p == 0 or n == 0:
        return np.zeros(tp.shape)
    return (tp / p + (n - fp) / n) / 2


def _kappa(tp, fp, p, n):
    fn, tn = p - tp, n - fp
    return _ratio(2 * (tp * tn - fn * fp), p * (fn + tn) + (tp + fp) * n)


def _g_mean(tp, fp, p, n):
    if p == 0 or n == 0:
        return np.zeros(tp.shape)
    return np.sqrt((tp / p) * ((n - fp) / n))


def _f1(tp, fp, p, n):
    return _ratio(2 * tp, 2 * tp + fp + (p - tp))


def _precision(tp, fp, p, n):
    return _ratio(tp, tp + fp)


def _recall(tp, fp, p, n):
    if p == 0:
        return np.zeros(tp.shape)
    return tp / p


def _mcc(tp, fp, p, n):
    fn, tn = p - tp, n - fp
    return _ratio(tp * tn - fp * fn, np.sqrt((tp + fp) * (fn + tn)) * math.sqrt(p * n))


_FORMULAS: dict[str, Callable[..., np.ndarray]] = {
    "accuracy": _accuracy,
    "balanced_accuracy": _balanced_accuracy,
    "kappa": _kappa,
    "g_mean": _g_mean,
    "f1": _f1,
    "precision": _precision,
    "recall": _recall,
    "mcc": _mcc,
}


def measure_values(measure: str, tp, fp, positives: int, negatives: int) -> np.ndarray:
    """Values of ``measure`` for the matrices (TP, FP) of a data set with P and N examples.

    Undefined values are 0 (the normalization's convention, not the rest of the project's NaN).

    Examples
    --------
    >>> measure_values("precision", [0, 9, 3], [0, 1, 0], 150, 10).tolist()
    [0.0, 0.9, 1.0]
    """
    _check_measure(measure)
    positives, negatives = _check_counts(positives, negatives)
    tp, fp = np.broadcast_arrays(np.asarray(tp, np.float64), np.asarray(fp, np.float64))
    return _FORMULAS[measure](tp, fp, float(positives), float(negatives))


def _check_measure(measure: str) -> None:
    if not isinstance(measure, str) or measure not in _FORMULAS:
        allowed = ", ".join(repr(name) for name in MEASURES)
        raise ValueError(f"measure={measure!r} is not known; use one of {allowed}")


def _check_counts(positives: int, negatives: int) -> tuple[int, int]:
    for name, count in (("positives", positives), ("negatives", negatives)):
        if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 0:
            raise ValueError(
                f"{name}={count!r} is not allowed; use a count of examples (an integer >= 0)"
            )
    if positives + negatives == 0:
        raise ValueError(
            "positives=0 and negatives=0: there is no confusion matrix; "
            "use counts with positives + negatives >= 1"
        )
    return int(positives), int(negatives)


def _check_value(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"value={value!r} is not allowed; use the measure's value (a number)")
    return float(value)


def count_at_most(measure: str, positives: int, negatives: int, value: float) -> int:
    """Number of confusion matrices with ``positives`` and ``negatives`` whose measure ≤ value.

    The numerator of :func:`normalize`; the denominator is (positives + 1)(negatives + 1).
    Undefined measure values count as 0; ties are matched within :data:`TIE_TOLERANCE`.

    Parameters
    ----------
    measure
        One of :data:`MEASURES`.
    positives, negatives
        P and N, the numbers of actual positive and negative examples (integers >= 0, P + N > 0).
    value
        The threshold x (±inf allowed; NaN is rejected — :func:`normalize` returns NaN for it).

    Examples
    --------
    E12 (docs/measures.md): 506 of the 1661 matrices with P = 150, N = 10 have precision
    ≤ 0.9 (the 10 with precision exactly 0.9 and the undefined one included).

    >>> count_at_most("precision", 150, 10, 0.9), count_at_most("precision", 10, 150, 0.9)
    (506, 1650)
    >>> count_at_most("mcc", 80, 80, 0.9)
    6517
    """
    _check_measure(measure)
    positives, negatives = _check_counts(positives, negatives)
    x = _check_value(value)
    if math.isnan(x):
        raise ValueError(
            f"value={value!r} is not allowed; count matrices at most a number "
            "(normalize() returns NaN for an undefined value)"
        )
    formula = _FORMULAS[measure]
    threshold = x + TIE_TOLERANCE
    p, n = float(positives), float(negatives)
    steps = (positives + 1).bit_length()  # 2**steps >= P + 2: the bisection always ends
    total = 0
    for start in range(0, negatives + 1, _BLOCK):
        fp = np.arange(start, min(start + _BLOCK, negatives + 1), dtype=np.float64)
        # Invariant per column: TP <= low qualifies (low = −1: none known), TP >= high does not.
        low = np.full(fp.size, -1.0)
        high = np.full(fp.size, p + 1)
        for _ in range(steps):
            middle = np.floor((low + high) / 2)
            open_ = high - low > 1
            middle = np.where(open_, middle, 0.0)  # closed columns: any valid TP, ignored
            qualifies = formula(middle, fp, p, n) <= threshold
            low = np.where(open_ & qualifies, middle, low)
            high = np.where(open_ & ~qualifies, middle, high)
        total += int((low + 1).astype(np.int64).sum())
    return total


def normalize(measure: str, positives: int, negatives: int, value: float) -> float:
    """Histogram-based normalization N(M, P:N, x) in [0, 1]; NaN when ``value`` is NaN.

    The share of the (P+1)(N+1) confusion matrices with P positives and N negatives whose
    ``measure`` is at most ``value`` (undefined values count as 0): the probability that a
    result drawn uniformly from all possible results is no better. Higher means less room to
    improve on this data set.

    Examples
    --------
    E12 (docs/measures.md): precision 0.9 is a strong result with 10 positives among 160
    examples and a weak one with 150.

    >>> [round(normalize("precision", p, n, 0.9), 4) for p, n in [(150, 10), (10, 150)]]
    [0.3046, 0.9934]
    >>> normalize("recall", 10, 150, float("nan"))
    nan
    >>> normalize("kappa", 3, 5, 1.0), normalize("kappa", 3, 5, -1.5)
    (1.0, 0.0)
    >>> normalize("f1", 10, -1, 0.5)
    Traceback (most recent call last):
    ...
    ValueError: negatives=-1 is not allowed; use a count of examples (an integer >= 0)

    References
    ----------
    Brzezinski et al., eq. (10) and the example of §III-B (undefined → 0, ≤).
    """
    _check_measure(measure)
    positives, negatives = _check_counts(positives, negatives)
    if math.isnan(_check_value(value)):
        return math.nan
    count = count_at_most(measure, positives, negatives, value)
    return count / ((positives + 1) * (negatives + 1))
