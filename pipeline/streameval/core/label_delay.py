"""How late labels come, by class: delay quantiles and a test of whether the delay depends on it.

When frauds are confirmed later than non-frauds, every estimate over recent outcomes holds
fewer frauds than the traffic had until their labels come, and every window measure leans
toward the fast class. :class:`LabelDelays` keeps, per true class, the label delays
t_label − t_instance of a model's outcomes (all history) in a fixed-bucket log histogram, and
reads from it:

* the p50, p90 and p99 of the delay overall and per class, each the nearest-rank quantile
  (the smallest delay with at least ⌈q·n⌉ delays at or below it) of the bucketed delays,
  reported as its bucket's geometric midpoint: within ±4.4 % of the exact nearest-rank
  quantile (:data:`SUBBUCKETS` buckets per doubling; a delay under 1 ms is 0);
* the Kruskal–Wallis H test of "the delay has the same distribution in every class" on the
  bucketed delays, ties by bucket taking their mid-ranks and H corrected for them (Kruskal &
  Wallis 1952, *Use of ranks in one-criterion variance analysis*, JASA 47, eqs. (1.1) and
  (1.3)); with two classes it is the two-sided Mann–Whitney test. Its p-value is the χ²
  distribution's with (classes − 1) degrees of freedom.

The histogram is mergeable (bucket counts add), exact under any batch split, and its size
depends on the number of classes and the longest delay, never on the number of outcomes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["QUANTILES", "SUBBUCKETS", "LabelDelays", "chi2_survival", "kruskal_wallis"]

#: buckets per doubling of the delay: each spans a factor 2^(1/8) = 1.09
SUBBUCKETS = 8
#: the bucket edges, 2^(j/8) ms up to 2^44 ms (557 years): a delay under 1 ms is bucket 0, a
#: delay d ≥ 1 bucket j + 1 with 2^(j/8) ≤ d < 2^((j+1)/8)
_EDGES = np.exp2(np.arange(44 * SUBBUCKETS + 1) / SUBBUCKETS)
#: each bucket's representative delay: 0, then the geometric midpoint of its edges
_MIDDLES = np.concatenate([[0.0], np.exp2((np.arange(_EDGES.size) + 0.5) / SUBBUCKETS)])
#: the published quantiles, in percent
QUANTILES = (50, 90, 99)


def bucket_of(delays: np.ndarray) -> np.ndarray:
    """The bucket of each delay (ms)."""
    return np.searchsorted(_EDGES, delays, side="right")


def _quantiles(counts: np.ndarray) -> dict[str, float]:
    """``p50``, ``p90``, ``p99`` (ms) of one histogram (NaN when it is empty)."""
    n = int(counts.sum())
    if n == 0:
        return {f"p{q}": math.nan for q in QUANTILES}
    cumulative = np.cumsum(counts)
    # nearest rank ⌈q·n/100⌉, in integers
    ranks = np.array([(q * n + 99) // 100 for q in QUANTILES])
    at = np.searchsorted(cumulative, np.maximum(ranks, 1), side="left")
    return {f"p{q}": float(_MIDDLES[b]) for q, b in zip(QUANTILES, at.tolist(), strict=True)}


def chi2_survival(x: float, df: int) -> float:
    """P(χ²_df ≥ x), the regularized upper incomplete gamma Q(df/2, x/2), summed up from
    Q(1/2, y) = erfc(√y) or Q(1, y) = e^(−y) by Q(a + 1, y) = Q(a, y) + y^a·e^(−y)/Γ(a + 1).

    >>> round(chi2_survival(3.841458820694124, 1), 6), round(chi2_survival(5.991464547107979, 2), 6)
    (0.05, 0.05)
    >>> chi2_survival(0.0, 3), round(chi2_survival(11.070497693516351, 5), 6)
    (1.0, 0.05)
    """
    if df < 1:
        raise ValueError(f"df={df!r}: the χ² distribution needs at least one degree of freedom")
    if not x > 0:
        return 1.0
    y = x / 2.0
    if df % 2:
        a, q = 0.5, math.erfc(math.sqrt(y))
    else:
        a, q = 1.0, math.exp(-y)
    log_y = math.log(y)
    while a < df / 2.0:
        q += math.exp(a * log_y - y - math.lgamma(a + 1.0))
        a += 1.0
    return min(1.0, q)


def kruskal_wallis(counts: np.ndarray) -> tuple[float, int, float]:
    """(H, degrees of freedom, p-value) of the Kruskal–Wallis test on bucketed values:
    ``counts[i, b]`` values of group i in bucket b, a bucket's values tied. Groups without
    values take no part; with fewer than two, or every value in one bucket (nothing to rank),
    H is 0 and p 1 — no evidence of a difference (and df 0 with fewer than two groups).

    >>> h, df, p = kruskal_wallis(np.array([[2, 1, 0], [0, 1, 2]]))
    >>> round(h, 6), df, round(p, 6)
    (3.333333, 1, 0.067889)
    """
    groups = counts[counts.sum(axis=1) > 0].astype(np.float64)
    if groups.shape[0] < 2:
        return 0.0, 0, 1.0
    sizes = groups.sum(axis=1)
    totals = groups.sum(axis=0)
    n = float(sizes.sum())
    ties = float(((totals**3) - totals).sum())
    correction = 1.0 - ties / (n**3 - n)
    df = groups.shape[0] - 1
    if not correction > 1e-12:
        return 0.0, df, 1.0
    below = np.cumsum(totals) - totals
    midranks = below + (totals + 1.0) / 2.0
    # correctly rounded sums (math.fsum), not matrix products: the same bits whatever the
    # order of the groups (a model's classes are numbered as its outcomes name them, its
    # positive label first), which BLAS's products do not give
    mean_ranks = np.array([math.fsum(row) for row in groups * midranks]) / sizes
    # Σ n_i·(R̄_i − (N + 1)/2)², free of the cancellation of Σ R_i²/n_i − 3(N + 1)
    spread = math.fsum(sizes * (mean_ranks - (n + 1.0) / 2.0) ** 2)
    h = 12.0 * spread / (n * (n + 1.0)) / correction
    return h, df, chi2_survival(h, df)


class LabelDelays:
    """The label delays of one model's outcomes, by true class, in a log histogram.

    >>> delays = LabelDelays()
    >>> delays.update(np.array([0, 0, 1, 1]), np.array([1000, 1200, 86_400_000, 90_000_000]))
    >>> out = delays.measures(["ok", "fraud"], alpha=0.05)
    >>> out["p50"], out["by_class"]["fraud"]["p50"] > 80_000_000, out["by_class"]["ok"]["n"]
    (1166.1195619908522, True, 2)
    """

    def __init__(self) -> None:
        self._counts = np.zeros((0, 0), dtype=np.int64)  # [class, bucket]

    @property
    def n(self) -> int:
        return int(self._counts.sum())

    def update(self, y_true: np.ndarray, delays: np.ndarray) -> None:
        """Add a batch: true class indices and their label delays (ms; under 1 counts as 0)."""
        if not y_true.size:
            return
        buckets = bucket_of(delays)
        k = max(self._counts.shape[0], int(y_true.max()) + 1)
        width = max(self._counts.shape[1], int(buckets.max()) + 1)
        if (k, width) != self._counts.shape:
            grown = np.zeros((k, width), dtype=np.int64)
            grown[: self._counts.shape[0], : self._counts.shape[1]] = self._counts
            self._counts = grown
        cells = np.bincount(y_true * width + buckets, minlength=k * width)
        self._counts += cells.reshape(k, width)

    def measures(self, labels: Sequence[Any], alpha: float) -> dict[str, Any]:
        """``n``, ``p50``, ``p90``, ``p99`` overall; ``by_class``: the same per class (by name,
        the classes with outcomes); ``classes_differ``: the Kruskal–Wallis ``h``, ``df``,
        ``p_value`` and ``significant`` (p below ``alpha``)."""
        counts = self._counts
        out: dict[str, Any] = {"n": self.n, **_quantiles(counts.sum(axis=0))}
        out["by_class"] = {
            str(labels[i]): {"n": int(row.sum()), **_quantiles(row)}
            for i, row in enumerate(counts)
            if row.any()
        }
        h, df, p = kruskal_wallis(counts)
        out["classes_differ"] = {"h": h, "df": df, "p_value": p, "significant": p < alpha}
        return out

    def state(self) -> list[list[int]]:
        """The bucket counts per class, each row without its trailing empty buckets."""
        rows = []
        for row in self._counts.tolist():
            while row and not row[-1]:
                row.pop()
            rows.append(row)
        return rows

    @classmethod
    def from_state(cls, rows: Sequence[Sequence[int]]) -> LabelDelays:
        delays = cls()
        width = max((len(r) for r in rows), default=0)
        delays._counts = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            delays._counts[i, : len(row)] = row
        return delays
