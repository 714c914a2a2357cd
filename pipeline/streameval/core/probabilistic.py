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

The AUC needs the scores themselves, in order (:mod:`streameval.core.roc_auc`): the window's,
the fading horizon's (the outcomes whose weight is at least 10⁻¹² of the newest's, 27 618 at
a = 0.999), or all history's counted per distinct value, rounded to a dyadic grid past
``auc_max_values`` distinct values (``roc_auc_grid`` then says its step; 0 while exact).

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
from streameval.core.roc_auc import (
    DEFAULT_AUC_MAX_VALUES,
    CountedAUC,
    HeldAUC,
    auc_horizon,
)

__all__ = [
    "DEFAULT_ECE_BINS",
    "EPSILON",
    "PROBABILISTIC_MEASURES",
    "ScoreEstimator",
    "ScoredBatch",
]

#: Probabilities are clipped to [EPSILON, 1 − EPSILON] before the logarithm (scikit-learn's ε).
EPSILON = float(np.finfo(np.float64).eps)
DEFAULT_ECE_BINS = 10
#: The scalar measures of an estimate, in the order they are published.
PROBABILISTIC_MEASURES = ("n_scored", "log_loss", "brier", "ece", "roc_auc", "roc_auc_grid")

# the summed vector: [count, log-loss, Brier, then per confidence bin: weight, confidence, hits]
_COUNT, _LOSS, _BRIER, _BINS = 0, 1, 2, 3


def prediction_losses(y_true: np.ndarray, proba: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's log-loss −ln p_y (clipped) and Brier score Σ_c (p_c − 1[y = c])²; the
    Brier score summed column by column, so that a column added later for a new class (all
    0) changes no bit. The views and Ψ_α of the scores (streameval.core.psi_scores) share it,
    so an outcome predicted once has the same bits in both."""
    loss = -np.log(np.clip(proba[np.arange(y_true.size), y_true], EPSILON, 1.0 - EPSILON))
    brier = np.zeros(y_true.size)
    for c in range(proba.shape[1]):
        brier += np.square(proba[:, c] - (y_true == c))
    return loss, brier


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
        m = proba.shape[0]
        if m == 0:
            empty = np.empty(0)
            return cls(y_true, proba, empty, empty, empty, empty, np.empty(0, dtype=np.int64))
        rows = np.arange(m)
        loss, brier = prediction_losses(y_true, proba)
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
        self._auc: HeldAUC | CountedAUC
        if spec.kind == "window":
            self._ring = Ring(
                spec.window,
                loss=np.float64,
                brier=np.float64,
                confidence=np.float64,
                hit=np.float64,
                bin=np.int64,
            )
            self._auc = HeldAUC(spec.window, None)
        elif spec.kind == "fading" and spec.factor < 1.0:
            self._sums = BlockFading(spec.factor, size)
            self._auc = HeldAUC(auc_horizon(spec.factor), spec.factor)
        else:
            self._sums = BlockFading(1.0, size)
            self._auc = CountedAUC(auc_max_values)

    @property
    def n(self) -> int:
        """Scored outcomes the estimate covers."""
        return self._ring.n if self._ring is not None else self._sums.n

    def track(self, classes: list[int]) -> None:
        """Keep the AUC of these classes too (every outcome so far had probability 0 for a
        new one)."""
        self._auc.track(classes)

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
        self._auc.update(batch.y_true, batch.proba)

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
        if isinstance(self._auc, CountedAUC):
            out["roc_auc"], out["roc_auc_grid"] = self._auc.auc(positive)
        else:
            out["roc_auc"], out["roc_auc_grid"] = self._auc.auc(positive), 0.0
        return out

    def state(self) -> dict[str, Any]:
        """A JSON-ready snapshot of the whole state."""
        state: dict[str, Any] = {"estimator": self.spec.name, "bins": self.bins}
        if self._ring is not None:
            state["ring"] = self._ring.dump()
        else:
            state["sums"] = self._sums.state()
        state["auc"] = self._auc.state()
        if isinstance(self._auc, CountedAUC):
            state["auc_max_values"] = self.auc_max_values
        return state

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ScoreEstimator:
        est = cls(
            EstimatorSpec.parse(state["estimator"]),
            bins=state["bins"],
            auc_max_values=state.get("auc_max_values", DEFAULT_AUC_MAX_VALUES),
        )
        if est._ring is not None and "ring" in state:
            est._ring.load(state["ring"])
        elif est._ring is not None:  # written oldest first, before rings were dumped
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
