"""ROC AUC kept by stream: the scores in order, so that a read walks them once.

The AUC of one class against the rest is the weighted Mann–Whitney statistic: the share of
(positive, negative) pairs, weighted by the product of their weights, in which the positive
scores higher, a tie counting one half — scikit-learn's ``roc_auc_score`` with
``sample_weight``. Two ways to keep what it needs, each updated by batch in O(log n) per
outcome plus one vectorized move of sorted arrays, and read in one pass without a sort (the
prequential AUC of Brzezinski & Stefanowski 2017):

* :class:`HeldAUC`: the outcomes a ring holds (the last W; under fading the last
  :func:`auc_horizon`), each class's probabilities kept sorted with the outcome's index, the
  weights (1, or a^(t−i)) applied when read;
* :class:`CountedAUC`: all history as positives and negatives counted per distinct value; with
  more than ``max_values`` distinct values of a class they are rounded down to the finest dyadic
  grid 2^−q that keeps at most that many (the grid depends only on the values seen, so any
  batch split gives it).

The loops of both run compiled when the ``streameval_kernels`` extension (``pipeline/kernels``,
Rust) is installed: :func:`mann_whitney`, :func:`held_mann_whitney`, :meth:`Ordered.advance`
and the counting of :meth:`CountedAUC.update` each keep a numpy reference that gives the same
bits (every sum sequential, in array order), which the tests check;
:func:`streameval.core.kernels.use` chooses.

References
----------
Brzezinski & Stefanowski (2017), *Prequential AUC: properties of the area under the ROC curve
for data streams with concept drift*, Knowledge and Information Systems 52(2). Hand & Till
(2001), Machine Learning 45 (one-vs-rest averages).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from streameval.core import kernels
from streameval.core.forgetting import Ring

__all__ = [
    "AUC_HORIZON",
    "DEFAULT_AUC_MAX_VALUES",
    "MAX_AUC_HORIZON",
    "CountedAUC",
    "HeldAUC",
    "auc_horizon",
    "held_mann_whitney",
    "mann_whitney",
]

#: The fading AUC holds the outcomes whose weight is at least this share of the newest's...
AUC_HORIZON = 1e-12
#: ...but never more than this many (a factor above 0.99972 reaches the cap)
MAX_AUC_HORIZON = 100_000
DEFAULT_AUC_MAX_VALUES = 4096
# the finest grid tried when a class's distinct values pass the cap: 2^-_FINEST
_FINEST = 40


def auc_horizon(fading_factor: float) -> int:
    """Outcomes the fading AUC holds: the last ⌈ln h / ln a⌉, h = :data:`AUC_HORIZON`, at
    most :data:`MAX_AUC_HORIZON`.

    >>> auc_horizon(0.999), auc_horizon(0.5), auc_horizon(0.999999)
    (27618, 40, 100000)
    """
    horizon = math.ceil(math.log(AUC_HORIZON) / math.log(fading_factor))
    return max(1, min(MAX_AUC_HORIZON, horizon))


def _sequential_sum(values: np.ndarray) -> float:
    """The sum added left to right (``np.sum`` adds pairwise: other bits)."""
    return float(np.cumsum(values)[-1])


def _statistic(values: np.ndarray, positive: np.ndarray, negative: np.ndarray) -> float:
    """U / (P · N) over runs of equal values, every sum sequential in array order."""
    if values.size == 0:
        return math.nan
    change = np.empty(values.size, dtype=bool)
    change[0] = True
    np.not_equal(values[1:], values[:-1], out=change[1:])
    run = np.cumsum(change) - 1
    pos = np.bincount(run, weights=positive)  # bincount adds in array order
    neg = np.bincount(run, weights=negative)
    cum_neg = np.cumsum(neg)
    pairs = _sequential_sum(pos) * float(cum_neg[-1])  # 0 also when the product underflows
    if not pairs > 0:
        return math.nan
    below = cum_neg - neg
    return _sequential_sum(pos * (below + 0.5 * neg)) / pairs


def mann_whitney(values: np.ndarray, positive: np.ndarray, negative: np.ndarray) -> float:
    """Mann–Whitney AUC of weights per value, ``values`` ascending (ties share a run).

    >>> mann_whitney(np.array([0.2, 0.5, 0.5, 0.7]), np.array([0., 1, 0, 1]),
    ...              np.array([1., 0, 1, 0]))
    0.875
    """
    values = np.ascontiguousarray(values, dtype=np.float64)
    positive = np.ascontiguousarray(positive, dtype=np.float64)
    negative = np.ascontiguousarray(negative, dtype=np.float64)
    if (compiled := kernels.active) is not None:
        return compiled.mann_whitney(values, positive, negative)
    return _statistic(values, positive, negative)


def held_mann_whitney(
    values: np.ndarray, codes: np.ndarray, decay: np.ndarray | None = None, newest: int = 0
) -> float:
    """:func:`mann_whitney` of a held order (:class:`Ordered`): an entry is positive when its
    code is odd and weighs ``decay[newest − (code >> 1)]``, or 1 without ``decay``."""
    values = np.ascontiguousarray(values, dtype=np.float64)
    codes = np.ascontiguousarray(codes, dtype=np.int64)
    if decay is not None:
        decay = np.ascontiguousarray(decay, dtype=np.float64)
    if (compiled := kernels.active) is not None:
        return compiled.held_mann_whitney(values, codes, decay, newest)
    of_class = (codes & 1).astype(np.float64)
    if decay is None:
        return _statistic(values, of_class, 1.0 - of_class)
    age = newest - (codes >> 1)
    if age.size and (age.min() < 0 or age.max() >= decay.size):
        raise ValueError("an entry is older than the decay table or newer than newest")
    weights = decay[age]
    positives = weights * of_class
    return _statistic(values, positives, weights - positives)


def merged(old: np.ndarray, at: np.ndarray, new: np.ndarray) -> np.ndarray:
    """``old`` with ``new`` inserted before the positions ``at`` (nondecreasing: each new
    element after the old ones before it and the new ones before it) — ``np.insert`` without
    the sort it does of the positions.

    >>> merged(np.array([1, 3, 5]), np.array([1, 1, 3]), np.array([2, 2, 6])).tolist()
    [1, 2, 2, 3, 5, 6]
    """
    out = np.empty(old.size + new.size, dtype=old.dtype)
    places = at + np.arange(new.size)
    kept = np.ones(out.size, dtype=bool)
    kept[places] = False
    out[places] = new
    out[kept] = old
    return out


@functools.lru_cache(maxsize=16)
def _decay(fading_factor: float, length: int) -> np.ndarray:
    """a^j for j = 0 .. length − 1, as sequential products (the same bits everywhere)."""
    table = np.cumprod(np.concatenate(([1.0], np.full(length - 1, fading_factor))))
    table.flags.writeable = False
    return table


class Ordered:
    """Held outcomes in order of one class's probability, then of their age: ``values`` and
    ``codes``, each outcome's index times two plus 1 if it is of that class (one array to
    move instead of two). The compiled loop writes into a second pair of buffers and swaps,
    keeping both from call to call."""

    def __init__(self) -> None:
        self._values = np.empty(0)
        self._codes = np.empty(0, dtype=np.int64)
        self._n = 0
        self._spare = (np.empty(0), np.empty(0, dtype=np.int64))

    @property
    def values(self) -> np.ndarray:
        return self._values[: self._n]

    @property
    def codes(self) -> np.ndarray:
        return self._codes[: self._n]

    def advance(
        self, first: int, values: np.ndarray, index: np.ndarray, positive: np.ndarray
    ) -> None:
        """Drop the outcomes older than ``first`` (those a ring let go: the oldest), then add
        outcomes newer than every one held (``index`` ascending)."""
        codes = index.astype(np.int64) * 2 + positive
        values = np.ascontiguousarray(values, dtype=np.float64)
        if (compiled := kernels.active) is not None:
            out_values, out_codes = self._spare
            needed = self._n + values.size
            if needed > out_values.size:
                room = max(needed, 2 * out_values.size)
                out_values, out_codes = np.empty(room), np.empty(room, dtype=np.int64)
            n = compiled.ordered_advance(
                self._values, self._codes, self._n, 2 * first, values, codes, out_values, out_codes
            )
            self._spare = (self._values, self._codes)
            self._values, self._codes, self._n = out_values, out_codes, n
            return
        held_values, held_codes = self.values, self.codes
        if held_codes.size and held_codes.min() < 2 * first:
            kept = held_codes >= 2 * first
            held_values, held_codes = held_values[kept], held_codes[kept]
        order = np.argsort(values, kind="stable")
        values, codes = values[order], codes[order]
        at = np.searchsorted(held_values, values, side="right")
        self._values = merged(held_values, at, values)
        self._codes = merged(held_codes, at, codes)
        self._n = self._values.size


class HeldAUC:
    """AUC of the outcomes a ring holds (a window, or a fading horizon), weights at read."""

    def __init__(self, size: int, fading_factor: float | None) -> None:
        self.size = size
        self.fading_factor = fading_factor
        self.tracked: list[int] = []
        self._ring = Ring(size, y=np.int64, p=(np.float64, (0,)))
        self._ordered: list[Ordered] = []

    def track(self, classes: list[int]) -> None:
        """Start a column for each new class (its probability was 0 in every held outcome)."""
        new = [c for c in classes if c not in self.tracked]
        if not new:
            return
        held, seen = self._ring.held(), self._ring.seen
        width = len(self.tracked) + len(new)
        p = np.zeros((held["y"].size, width))
        p[:, : len(self.tracked)] = held["p"]
        self.tracked += new
        ring = Ring(self.size, y=np.int64, p=(np.float64, (width,)))
        ring.restore(seen, y=held["y"], p=p)
        ring.pack_as_wide_as(self._ring)
        self._ring = ring
        first = seen - held["y"].size
        for c in new:
            ordered = Ordered()
            index = np.arange(first, seen, dtype=np.int64)
            ordered.advance(first, np.zeros(held["y"].size), index, held["y"] == c)
            self._ordered.append(ordered)

    def update(self, y_true: np.ndarray, proba: np.ndarray) -> None:
        if not self.tracked:
            self._ring.push(y=y_true, p=np.zeros((y_true.size, 0)))
            return
        seen = self._ring.seen
        entered, _ = self._ring.push(y=y_true, p=proba[:, self.tracked])
        m, n_in = y_true.size, entered["y"].size
        index_in = np.arange(seen + m - n_in, seen + m, dtype=np.int64)
        first = self._ring.seen - self._ring.n  # the oldest the ring holds now
        for j, ordered in enumerate(self._ordered):
            ordered.advance(first, entered["p"][:, j], index_in, entered["y"] == self.tracked[j])

    def auc(self, positive: int | None) -> float:
        """The positive class's AUC, or the macro average over the tracked classes."""
        if not self.tracked:
            return math.nan
        seen = self._ring.seen
        classes = [positive] if positive is not None else self.tracked
        results = []
        for c in classes:
            if c not in self.tracked:
                continue
            ordered = self._ordered[self.tracked.index(c)]
            if self.fading_factor is None:
                value = held_mann_whitney(ordered.values, ordered.codes)
            else:  # a^(t−i): i within the horizon, so t − 1 − i < size
                decay = _decay(self.fading_factor, self.size)
                value = held_mann_whitney(ordered.values, ordered.codes, decay, seen - 1)
            if not math.isnan(value):
                results.append(value)
        if positive is not None:
            return results[0] if results else math.nan
        return float(np.mean(results)) if results else math.nan

    def state(self) -> dict[str, Any]:
        """The tracked classes and the ring as it lies (:meth:`Ring.dump`: a checkpoint
        writes what moved in it); the order is rebuilt from them."""
        return {"tracked": list(self.tracked), "ring": self._ring.dump()}

    def load(self, state: dict[str, Any]) -> None:
        self.tracked = list(state["tracked"])
        width = len(self.tracked)
        self._ring = Ring(self.size, y=np.int64, p=(np.float64, (width,)))
        if "ring" in state:
            self._ring.load(state["ring"])
        else:  # written oldest first, before rings were dumped
            y = np.asarray(state["y"], dtype=np.int64)
            p = np.asarray(state["p"], dtype=np.float64).reshape(y.size, width)
            self._ring.restore(state["seen"], y=y, p=p)
        held = self._ring.held()
        y, p, seen = held["y"], held["p"], self._ring.seen
        first = seen - y.size
        index = np.arange(first, seen, dtype=np.int64)
        self._ordered = []
        for j in range(width):
            ordered = Ordered()
            ordered.advance(first, p[:, j], index, y == self.tracked[j])
            self._ordered.append(ordered)


def on_grid(values: np.ndarray, q: int | None) -> np.ndarray:
    """``values`` rounded down to multiples of 2^−q (exact: a power of two scales exactly)."""
    return values if q is None else np.ldexp(np.floor(np.ldexp(values, q)), -q)


class CountedAUC:
    """AUC over all history: positives and negatives counted per distinct value of each class."""

    def __init__(self, max_values: int) -> None:
        if isinstance(max_values, bool) or not isinstance(max_values, int) or max_values < 2:
            raise ValueError(
                f"auc_max_values={max_values!r} is not allowed; use an integer >= 2 (the "
                "distinct scores per class the AUC over all history keeps exactly)"
            )
        self.max_values = max_values
        self.tracked: list[int] = []
        self._n = 0
        self._values: list[np.ndarray] = []
        self._positive: list[np.ndarray] = []
        self._negative: list[np.ndarray] = []
        self._grid: list[int | None] = []

    def track(self, classes: list[int]) -> None:
        """Count a new class: every outcome so far had probability 0 for it and was negative."""
        for c in classes:
            if c in self.tracked:
                continue
            self.tracked.append(c)
            some = self._n > 0
            self._values.append(np.zeros(1) if some else np.empty(0))
            self._positive.append(np.zeros(int(some), dtype=np.int64))
            self._negative.append(np.full(int(some), self._n, dtype=np.int64))
            self._grid.append(None)

    def update(self, y_true: np.ndarray, proba: np.ndarray) -> None:
        for j, c in enumerate(self.tracked):
            self._add(j, on_grid(proba[:, c], self._grid[j]), y_true == c)
            if self._values[j].size > self.max_values:
                self._coarsen(j)
        self._n += y_true.size

    def _add(self, j: int, values: np.ndarray, positive: np.ndarray) -> None:
        values = np.ascontiguousarray(values, dtype=np.float64) + 0.0  # −0 counts as +0
        if np.isnan(values).any():  # equal to no value: it would have no tally of its own
            raise ValueError("a value to count is NaN")
        if (compiled := kernels.active) is not None:
            self._values[j], self._positive[j], self._negative[j] = compiled.counted_add(
                self._values[j],
                self._positive[j],
                self._negative[j],
                values,
                np.ascontiguousarray(positive, dtype=bool),
            )
            return
        distinct, inverse = np.unique(values, return_inverse=True)
        pos = np.bincount(inverse, weights=positive, minlength=distinct.size).astype(np.int64)
        neg = np.bincount(inverse, minlength=distinct.size) - pos
        known = self._values[j]
        at = np.searchsorted(known, distinct)
        hit = at < known.size
        hit[hit] = known[at[hit]] == distinct[hit]
        self._positive[j][at[hit]] += pos[hit]
        self._negative[j][at[hit]] += neg[hit]
        new = ~hit
        if new.any():
            where = at[new]
            self._values[j] = merged(known, where, distinct[new])
            self._positive[j] = merged(self._positive[j], where, pos[new])
            self._negative[j] = merged(self._negative[j], where, neg[new])

    def _coarsen(self, j: int) -> None:
        """The finest grid coarser than the current one that keeps at most max_values."""
        q = self._grid[j]
        q = _FINEST + 1 if q is None else q
        values = self._values[j]
        while True:
            q -= 1
            rounded = on_grid(values, q)
            starts = np.flatnonzero(np.concatenate(([True], rounded[1:] != rounded[:-1])))
            if starts.size <= self.max_values:
                break
        self._values[j] = rounded[starts]
        self._positive[j] = np.add.reduceat(self._positive[j], starts)
        self._negative[j] = np.add.reduceat(self._negative[j], starts)
        self._grid[j] = q

    def auc(self, positive: int | None) -> tuple[float, float]:
        """(AUC, the coarsest grid step used, 0 when exact)."""
        js = [j for j, c in enumerate(self.tracked) if positive is None or c == positive]
        results, step = [], 0.0
        for j in js:
            value = mann_whitney(
                self._values[j],
                self._positive[j].astype(np.float64),
                self._negative[j].astype(np.float64),
            )
            if not math.isnan(value):
                results.append(value)
                if self._grid[j] is not None:
                    step = max(step, math.ldexp(1.0, -self._grid[j]))
        return (float(np.mean(results)) if results else math.nan), step

    def state(self) -> dict[str, Any]:
        return {
            "tracked": list(self.tracked),
            "n": self._n,
            "values": [v.tolist() for v in self._values],
            "positive": [v.tolist() for v in self._positive],
            "negative": [v.tolist() for v in self._negative],
            "grid": list(self._grid),
        }

    def load(self, state: dict[str, Any]) -> None:
        self.tracked = list(state["tracked"])
        self._n = state["n"]
        self._values = [np.asarray(v, dtype=np.float64) for v in state["values"]]
        self._positive = [np.asarray(v, dtype=np.int64) for v in state["positive"]]
        self._negative = [np.asarray(v, dtype=np.int64) for v in state["negative"]]
        self._grid = list(state["grid"])
