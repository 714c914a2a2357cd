"""How good a model's scores are: log-loss, Brier score, calibration and ROC AUC, per estimator.

A prediction may carry ``scores``, a probability per class. The outcomes of one view whose
prediction has them enter a :class:`ScoreEstimator` (one per estimator: all history, a window of
the last W scored outcomes, or a fading factor over them) as a batch of true classes and a
probability matrix (one column per class of the model, 0 where a class has no score). Outcomes
without scores do not enter: the measures here cover the scored outcomes only (``n_scored``).

Per outcome i with true class y_i and probabilities p_i:

* log-loss −ln p_iy, with p clipped to [ε, 1 − ε], ε the float64 machine epsilon (as
  scikit-learn's ``log_loss``);
* Brier score Σ_c (p_ic − 1[y_i = c])² (Brier 1950: the multi-class sum, in [0, 2]; for two
  classes twice scikit-learn's default ``brier_score_loss``, equal to it with
  ``scale_by_half=False``);
* the top class's confidence max_c p_ic and whether the top class is y_i, for the expected
  calibration error over B equal-width confidence bins (Guo et al. 2017, eq. 3):
  ECE = Σ_b |Σ_{i∈b} w_i (1[top_i = y_i] − conf_i)| / Σ_i w_i, and per bin the reliability
  (mean confidence, accuracy, share of the weight);
* ROC AUC, the weighted Mann–Whitney statistic (a tie counts one half), of one class against
  the rest: of the positive class when the model has one, else averaged over the classes that
  have both positive and negative outcomes in the estimate (one-vs-rest macro AUC).

Every estimate is the weighted mean of the per-outcome values with the estimator's weights (1,
1 in the window, a^(t−i) under fading). The sums are kept split-invariant as everywhere in the
core: fading and all-history float sums through
:class:`~streameval.core.forgetting.BlockFading`, window sums read from the window itself.

The AUC needs the scores themselves, kept in order of each tracked class's probability so that
a read walks them once (no sort per read) and an update costs O(log n) per outcome plus one
vectorized move of the sorted arrays per batch (the prequential AUC of Brzezinski &
Stefanowski 2017):

* window: the last W scored outcomes;
* fading: the outcomes whose weight is at least :data:`AUC_HORIZON` of the newest's, i.e. the
  last ⌈ln 10⁻¹² / ln a⌉ (27 618 at a = 0.999), weighted a^(t−i) when read;
* all history (and ``fading:1``): a count of positives and negatives per distinct value. With
  more than ``auc_max_values`` distinct values of a class, its values are rounded down to the
  finest dyadic grid 2^−q that keeps at most that many; ``roc_auc_grid`` then says q's step
  (0 while exact). The grid depends only on the values seen, so any batch split gives it.

References
----------
Brier (1950), *Verification of forecasts expressed in terms of probability*, Monthly Weather
Review 78(1), eq. 1. Guo, Pleiss, Sun, Weinberger (2017), *On calibration of modern neural
networks*, ICML, §2 (ECE, reliability diagrams). Hand & Till (2001), *A simple generalisation
of the area under the ROC curve for multiple class classification problems*, Machine Learning
45 (one-vs-rest averages). Brzezinski & Stefanowski (2017), *Prequential AUC: properties of the
area under the ROC curve for data streams with concept drift*, Knowledge and Information
Systems 52(2). Gama, Sebastião, Rodrigues (2013), Algorithms 1–3 (the estimators).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from streameval.core.forgetting import BlockFading, EstimatorSpec, Ring

__all__ = [
    "AUC_HORIZON",
    "DEFAULT_AUC_MAX_VALUES",
    "DEFAULT_ECE_BINS",
    "EPSILON",
    "PROBABILISTIC_MEASURES",
    "ScoreEstimator",
    "ScoredBatch",
    "auc_horizon",
]

#: Probabilities are clipped to [EPSILON, 1 − EPSILON] before the logarithm (scikit-learn's ε).
EPSILON = float(np.finfo(np.float64).eps)
DEFAULT_ECE_BINS = 10
#: The fading AUC holds the outcomes whose weight is at least this share of the newest's.
AUC_HORIZON = 1e-12
DEFAULT_AUC_MAX_VALUES = 100_000
#: The scalar measures of an estimate, in the order they are published.
PROBABILISTIC_MEASURES = ("n_scored", "log_loss", "brier", "ece", "roc_auc", "roc_auc_grid")

# the summed vector: [count, log-loss, Brier, then per confidence bin: weight, confidence, hits]
_COUNT, _LOSS, _BRIER, _BINS = 0, 1, 2, 3
# the finest grid tried when a class's distinct values pass the cap: 2^-_FINEST
_FINEST = 40


def auc_horizon(fading_factor: float) -> int:
    """Outcomes the fading AUC holds: the last ⌈ln h / ln a⌉, h = :data:`AUC_HORIZON`.

    >>> auc_horizon(0.999), auc_horizon(0.5)
    (27618, 40)
    """
    return max(1, math.ceil(math.log(AUC_HORIZON) / math.log(fading_factor)))


@dataclass(frozen=True)
class ScoredBatch:
    """Scored outcomes of one view, oldest first: true class codes and a probability per class.

    Build it with :meth:`of`, which computes each outcome's values once for every estimator.
    """

    y_true: np.ndarray  # (m,) int64 class codes
    proba: np.ndarray  # (m, k) float64; column c is class c's probability, 0 where unscored
    loss: np.ndarray  # (m,) −ln p_y, clipped
    brier: np.ndarray  # (m,) Σ_c (p_c − 1[y = c])²
    confidence: np.ndarray  # (m,) max_c p_c
    hit: np.ndarray  # (m,) float64 1.0 where the top class is y
    bin: np.ndarray  # (m,) int64 confidence bin

    @classmethod
    def of(cls, y_true: np.ndarray, proba: np.ndarray, bins: int) -> ScoredBatch:
        """The batch with its per-outcome values.

        >>> b = ScoredBatch.of(np.array([1, 0]), np.array([[0.2, 0.8], [0.4, 0.6]]), bins=10)
        >>> b.loss.round(6).tolist(), b.brier.round(6).tolist(), b.bin.tolist()
        ([0.223144, 0.916291], [0.08, 0.72], [8, 6])
        """
        m, k = proba.shape
        if m == 0:
            empty = np.empty(0)
            return cls(y_true, proba, empty, empty, empty, empty, np.empty(0, dtype=np.int64))
        rows = np.arange(m)
        loss = -np.log(np.clip(proba[rows, y_true], EPSILON, 1.0 - EPSILON))
        # column by column, so that a column added later for a new class (all 0) changes no bit
        brier = np.zeros(m)
        for c in range(k):
            brier += np.square(proba[:, c] - (y_true == c))
        top = np.argmax(proba, axis=1)  # the first class of the largest probability
        confidence = proba[rows, top]
        which = np.minimum((confidence * bins).astype(np.int64), bins - 1)
        hit = (top == y_true).astype(np.float64)
        return cls(y_true, proba, loss, brier, confidence, hit, which)

    def __len__(self) -> int:
        return self.y_true.size


def _contributions(batch: ScoredBatch, bins: int):
    """The summed vector's (index, value) pairs of a slice of the batch, weighted."""

    def contribute(rows: slice, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m = weights.size
        at = _BINS + 3 * batch.bin[rows]
        index = np.concatenate(
            [np.full(m, _COUNT), np.full(m, _LOSS), np.full(m, _BRIER), at, at + 1, at + 2]
        )
        values = np.concatenate(
            [
                weights,
                weights * batch.loss[rows],
                weights * batch.brier[rows],
                weights,
                weights * batch.confidence[rows],
                weights * batch.hit[rows],
            ]
        )
        return index, values

    return contribute


def _from_sums(sums: np.ndarray, bins: int) -> dict[str, Any]:
    """Log-loss, Brier, ECE and the reliability bins of a summed vector."""
    total = float(sums[_COUNT])
    per_bin = sums[_BINS:].reshape(bins, 3)
    weight, confidence, hits = per_bin[:, 0], per_bin[:, 1], per_bin[:, 2]
    if total <= 0:
        nan = [math.nan] * bins
        return {
            "log_loss": math.nan,
            "brier": math.nan,
            "ece": math.nan,
            "reliability": {"confidence": nan, "accuracy": nan, "weight": [0.0] * bins},
        }
    filled = weight > 0
    safe = np.where(filled, weight, 1.0)
    return {
        "log_loss": float(sums[_LOSS]) / total,
        "brier": float(sums[_BRIER]) / total,
        "ece": float(np.sum(np.abs(hits - confidence))) / total,
        "reliability": {
            "confidence": np.where(filled, confidence / safe, math.nan).tolist(),
            "accuracy": np.where(filled, hits / safe, math.nan).tolist(),
            "weight": (weight / total).tolist(),
        },
    }


def _auc(values: np.ndarray, positive: np.ndarray, negative: np.ndarray) -> float:
    """Mann–Whitney AUC of weights per value, ``values`` ascending (ties share a run)."""
    if values.size == 0:
        return math.nan
    starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
    pos = np.add.reduceat(positive, starts)
    neg = np.add.reduceat(negative, starts)
    total_pos, total_neg = float(pos.sum()), float(neg.sum())
    if total_pos <= 0 or total_neg <= 0:
        return math.nan
    below = np.cumsum(neg) - neg
    return float(np.sum(pos * (below + 0.5 * neg))) / (total_pos * total_neg)


class _Ordered:
    """Held outcomes in order of one class's probability, then of their index (age)."""

    def __init__(self) -> None:
        self.values = np.empty(0)
        self.index = np.empty(0, dtype=np.int64)

    def insert(self, values: np.ndarray, index: np.ndarray) -> None:
        """Add outcomes newer than every one held (``index`` ascending)."""
        order = np.argsort(values, kind="stable")
        values, index = values[order], index[order]
        at = np.searchsorted(self.values, values, side="right")
        self.values = np.insert(self.values, at, values)
        self.index = np.insert(self.index, at, index)

    def remove(self, values: np.ndarray, index: np.ndarray) -> None:
        """Drop outcomes older than every one that stays."""
        if values.size == 0:
            return
        order = np.lexsort((index, values))
        values, index = values[order], index[order]
        first = np.searchsorted(self.values, values, side="left")
        # of equal values the oldest come first, and those leaving are the oldest of all
        run = np.concatenate(([True], values[1:] != values[:-1]))
        starts = np.flatnonzero(run)
        rank = np.arange(values.size) - np.repeat(starts, np.diff(np.append(starts, values.size)))
        at = first + rank
        if not np.array_equal(self.index[at], index):  # pragma: no cover - an invariant
            raise RuntimeError("the AUC's ordered scores lost their order")
        self.values = np.delete(self.values, at)
        self.index = np.delete(self.index, at)


class _HeldAUC:
    """AUC of the outcomes a ring holds (a window, or a fading horizon), weights at read."""

    def __init__(self, size: int, fading_factor: float | None) -> None:
        self.size = size
        self.fading_factor = fading_factor
        self.tracked: list[int] = []
        self._ring = Ring(size, y=np.int64, p=(np.float64, (0,)))
        self._ordered: list[_Ordered] = []

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
        self._ring = Ring(self.size, y=np.int64, p=(np.float64, (width,)))
        self._ring.restore(seen, y=held["y"], p=p)
        first = seen - held["y"].size
        for _ in new:
            ordered = _Ordered()
            ordered.insert(np.zeros(held["y"].size), np.arange(first, seen, dtype=np.int64))
            self._ordered.append(ordered)

    def update(self, batch: ScoredBatch) -> None:
        if not self.tracked:
            self._ring.push(y=batch.y_true, p=np.zeros((len(batch), 0)))
            return
        seen, held = self._ring.seen, self._ring.n
        entered, left = self._ring.push(y=batch.y_true, p=batch.proba[:, self.tracked])
        m, n_in, n_out = len(batch), entered["y"].size, left["y"].size
        index_in = np.arange(seen + m - n_in, seen + m, dtype=np.int64)
        index_out = np.arange(seen - held, seen - held + n_out, dtype=np.int64)  # the oldest
        for j, ordered in enumerate(self._ordered):
            ordered.remove(left["p"][:, j], index_out)
            ordered.insert(entered["p"][:, j], index_in)

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
            index = ordered.index
            if self.fading_factor is None:
                weights = np.ones(index.size)
            else:
                weights = np.power(self.fading_factor, (seen - 1 - index).astype(np.float64))
            is_positive = self._ring.at("y", index) == c
            value = _auc(
                ordered.values,
                np.where(is_positive, weights, 0.0),
                np.where(is_positive, 0.0, weights),
            )
            if not math.isnan(value):
                results.append(value)
        if positive is not None:
            return results[0] if results else math.nan
        return float(np.mean(results)) if results else math.nan

    def state(self) -> dict[str, Any]:
        held = self._ring.held()
        return {
            "tracked": list(self.tracked),
            "seen": self._ring.seen,
            "y": held["y"].tolist(),
            "p": held["p"].tolist(),
        }

    def load(self, state: dict[str, Any]) -> None:
        self.tracked = list(state["tracked"])
        width = len(self.tracked)
        self._ring = Ring(self.size, y=np.int64, p=(np.float64, (width,)))
        y = np.asarray(state["y"], dtype=np.int64)
        p = np.asarray(state["p"], dtype=np.float64).reshape(y.size, width)
        self._ring.restore(state["seen"], y=y, p=p)
        first = state["seen"] - y.size
        index = np.arange(first, state["seen"], dtype=np.int64)
        self._ordered = []
        for j in range(width):
            ordered = _Ordered()
            ordered.insert(p[:, j], index)
            self._ordered.append(ordered)


def _on_grid(values: np.ndarray, q: int | None) -> np.ndarray:
    """``values`` rounded down to multiples of 2^−q (exact: a power of two scales exactly)."""
    return values if q is None else np.ldexp(np.floor(np.ldexp(values, q)), -q)


class _CountedAUC:
    """AUC over all history: positives and negatives counted per distinct value of each class."""

    def __init__(self, max_values: int) -> None:
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

    def update(self, batch: ScoredBatch) -> None:
        for j, c in enumerate(self.tracked):
            self._add(j, _on_grid(batch.proba[:, c], self._grid[j]), batch.y_true == c)
            if self._values[j].size > self.max_values:
                self._coarsen(j)
        self._n += len(batch)

    def _add(self, j: int, values: np.ndarray, positive: np.ndarray) -> None:
        known, pos, neg = self._values[j], self._positive[j], self._negative[j]
        at = np.searchsorted(known, values)
        hit = at < known.size
        hit[hit] = known[at[hit]] == values[hit]
        np.add.at(pos, at[hit & positive], 1)
        np.add.at(neg, at[hit & ~positive], 1)
        new, inverse = np.unique(values[~hit], return_inverse=True)
        if new.size:
            ones = positive[~hit]
            new_pos = np.bincount(inverse, weights=ones, minlength=new.size).astype(np.int64)
            new_neg = np.bincount(inverse, weights=~ones, minlength=new.size).astype(np.int64)
            where = np.searchsorted(known, new)
            self._values[j] = np.insert(known, where, new)
            self._positive[j] = np.insert(pos, where, new_pos)
            self._negative[j] = np.insert(neg, where, new_neg)

    def _coarsen(self, j: int) -> None:
        """The finest grid coarser than the current one that keeps at most max_values."""
        q = self._grid[j]
        q = _FINEST + 1 if q is None else q
        values = self._values[j]
        while True:
            q -= 1
            rounded = _on_grid(values, q)
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
            value = _auc(
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


class ScoreEstimator:
    """Log-loss, Brier score, ECE with its reliability bins, and ROC AUC under one estimator.

    Parameters
    ----------
    spec
        How the estimate forgets (:class:`~streameval.core.forgetting.EstimatorSpec`).
    bins
        Equal-width confidence bins of the calibration error.
    auc_max_values
        Under all history: distinct values per class kept exactly (see the module docstring).

    Examples
    --------
    >>> est = ScoreEstimator(EstimatorSpec.parse("cumulative"), bins=2)
    >>> proba = np.array([[0.9, 0.1], [0.3, 0.7], [0.6, 0.4], [0.2, 0.8]])
    >>> est.update(ScoredBatch.of(np.array([0, 1, 1, 0]), proba, bins=2), track=[0, 1])
    >>> m = est.measures(positive=1)
    >>> m["n_scored"], round(m["log_loss"], 6), round(m["brier"], 6), m["roc_auc"]
    (4, 0.746941, 0.55, 0.5)
    >>> round(m["ece"], 6), m["reliability"]["accuracy"]
    (0.25, [nan, 0.5])

    References
    ----------
    Brier (1950), eq. 1; Guo et al. (2017), eq. 3; Brzezinski & Stefanowski (2017): see the
    module docstring.
    """

    def __init__(
        self,
        spec: EstimatorSpec,
        bins: int = DEFAULT_ECE_BINS,
        auc_max_values: int = DEFAULT_AUC_MAX_VALUES,
    ) -> None:
        self.spec = spec
        self.bins = bins
        self.auc_max_values = auc_max_values
        size = _BINS + 3 * bins
        self._ring: Ring | None = None
        self._sums: BlockFading | None = None
        self._auc: _HeldAUC | _CountedAUC
        if spec.kind == "window":
            self._ring = Ring(
                spec.window,
                loss=np.float64,
                brier=np.float64,
                confidence=np.float64,
                hit=np.float64,
                bin=np.int64,
            )
            self._auc = _HeldAUC(spec.window, None)
        elif spec.kind == "fading" and spec.factor < 1.0:
            self._sums = BlockFading(spec.factor, size)
            self._auc = _HeldAUC(auc_horizon(spec.factor), spec.factor)
        else:
            self._sums = BlockFading(1.0, size)
            self._auc = _CountedAUC(auc_max_values)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def n(self) -> int:
        """Scored outcomes the estimate covers."""
        return self._ring.n if self._ring is not None else self._sums.n

    @property
    def tracked(self) -> list[int]:
        """The classes whose AUC is kept."""
        return list(self._auc.tracked)

    def update(self, batch: ScoredBatch, track: list[int]) -> None:
        """Add scored outcomes; ``track`` lists the classes whose AUC is needed (new ones are
        added, the ones tracked stay)."""
        self._auc.track(track)
        if len(batch) == 0:
            return
        if self._ring is not None:
            self._ring.push(
                loss=batch.loss,
                brier=batch.brier,
                confidence=batch.confidence,
                hit=batch.hit,
                bin=batch.bin,
            )
        else:
            self._sums.update(len(batch), _contributions(batch, self.bins))
        self._auc.update(batch)

    def _summed(self) -> np.ndarray:
        if self._ring is None:
            return self._sums.value()
        held = self._ring.held()
        at = _BINS + 3 * held["bin"]
        sums = np.zeros(_BINS + 3 * self.bins)
        sums[_COUNT] = held["bin"].size
        sums[_LOSS] = held["loss"].sum()
        sums[_BRIER] = held["brier"].sum()
        size = sums.size
        sums += np.bincount(at, minlength=size)
        sums += np.bincount(at + 1, weights=held["confidence"], minlength=size)
        sums += np.bincount(at + 2, weights=held["hit"], minlength=size)
        return sums

    def measures(self, positive: int | None = None) -> dict[str, Any]:
        """Every measure of the estimate; ``positive`` is the positive class's code, if any."""
        out: dict[str, Any] = {"n_scored": self.n, **_from_sums(self._summed(), self.bins)}
        if isinstance(self._auc, _CountedAUC):
            out["roc_auc"], out["roc_auc_grid"] = self._auc.auc(positive)
        else:
            out["roc_auc"], out["roc_auc_grid"] = self._auc.auc(positive), 0.0
        return out

    def state(self) -> dict[str, Any]:
        """A JSON-ready snapshot of the whole state."""
        state: dict[str, Any] = {"estimator": self.spec.name, "bins": self.bins}
        if self._ring is not None:
            held = self._ring.held()
            state["seen"] = self._ring.seen
            state["held"] = {name: column.tolist() for name, column in held.items()}
        else:
            state["sums"] = self._sums.state()
        state["auc"] = self._auc.state()
        if isinstance(self._auc, _CountedAUC):
            state["auc_max_values"] = self.auc_max_values
        return state

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ScoreEstimator:
        est = cls(
            EstimatorSpec.parse(state["estimator"]),
            bins=state["bins"],
            auc_max_values=state.get("auc_max_values", DEFAULT_AUC_MAX_VALUES),
        )
        if est._ring is not None:
            held = state["held"]
            est._ring.restore(
                state["seen"],
                **{
                    name: np.asarray(held[name], dtype=np.int64 if name == "bin" else np.float64)
                    for name in ("loss", "brier", "confidence", "hit", "bin")
                },
            )
        else:
            est._sums.load(state["sums"])
        est._auc.load(state["auc"])
        return est
