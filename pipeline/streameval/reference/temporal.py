"""Temporal dependence: Žliobaitė et al.'s Algorithm 1, P(T), Δ(ℓ), temporal correction.

The service's estimators compute κ, κ_per and κ⁺ from confusion counts under Gama's fading
(bias-free S/N). This module adds the paper's own formulation — Algorithm 1, whose fading
estimates start from uniform priors and weight the newest value by η — for users who want the
paper's numbers exactly, and the diagnostics that tell whether a stream has temporal dependence
at all.

References
----------
Žliobaitė, Bifet, Read, Pfahringer, Holmes (2015), *Evaluation methods and decision theory for
classification of streaming data with temporal dependence*, Machine Learning 98(3):
Algorithm 1 (§4.6), P(T) (Table 3), Definition 1 (Δ(ℓ)), the Temporal Correction classifier
(§5.1). Worked examples E4 and E14 of docs/measures.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "ZliobaiteKappa",
    "label_persistence",
    "temporal_correction",
    "temporal_dependence",
]


class ZliobaiteKappa:
    """Algorithm 1 of Žliobaitė et al.: faded p, P(i), P_h(i), P(i|i) and κ, κ_per, κ⁺.

    Parameters
    ----------
    n_classes
        k; classes are 0..k−1.
    new_weight
        η in (0, 1): the weight of the newest observation (Gama's fading factor is a = 1 − η).

    Notes
    -----
    Starts from p = 0 and uniform P, P_h, P(i|i) = 1/k with y_prev = 0, as the paper does, so
    early values are biased toward those priors for about 1/η steps; P(i|i) is refreshed only
    when the current label is i ([ZB] Algorithm 1). Per outcome O(k): meant for checks and small
    streams, not for the hot path.

    Examples
    --------
    E4 (docs/measures.md) (k = 2, η = 0.5, y = 0,0,0,1, ŷ = 0,0,1,1):

    >>> z = ZliobaiteKappa(n_classes=2, new_weight=0.5)
    >>> z.update([0, 0, 0, 1], [0, 0, 1, 1])
    >>> m = z.measures()
    >>> [round(m[k], 6) for k in ("accuracy", "p_ran", "p_per", "kappa", "kappa_temporal",
    ...                           "kappa_plus")]
    [0.6875, 0.517578, 0.572266, 0.352227, 0.269406, 0.308046]
    """

    def __init__(self, n_classes: int, new_weight: float = 0.01) -> None:
        if isinstance(n_classes, bool) or not isinstance(n_classes, int) or n_classes < 1:
            raise ValueError(f"n_classes={n_classes!r} is not allowed; use an integer >= 1")
        if not isinstance(new_weight, int | float) or not 0 < new_weight < 1:
            raise ValueError(
                f"new_weight={new_weight!r} is not allowed; use η in (0, 1) "
                "(the weight of the newest value; Gama's fading factor is 1 − η)"
            )
        self.n_classes, self.new_weight = n_classes, float(new_weight)
        k = n_classes
        self._p = 0.0
        self._prior = np.full(k, 1 / k)
        self._predicted = np.full(k, 1 / k)
        self._same = np.full(k, 1 / k)  # P(i|i)
        self._previous = 0

    def update(self, y_true: Sequence[int], y_pred: Sequence[int]) -> None:
        """Add outcomes (class indices), oldest first."""
        y_true, y_pred = list(y_true), list(y_pred)
        if len(y_true) != len(y_pred):
            raise ValueError(f"y_true has {len(y_true)} outcomes but y_pred has {len(y_pred)}")
        bad = [
            v
            for v in y_true + y_pred
            if not (isinstance(v, int | np.integer) and 0 <= v < self.n_classes)
        ]
        if bad:
            raise ValueError(f"class {bad[0]!r} is not in 0..{self.n_classes - 1}")
        eta, keep = self.new_weight, 1 - self.new_weight
        for y, h in zip(y_true, y_pred, strict=True):
            self._p = eta * (y == h) + keep * self._p
            self._prior *= keep
            self._prior[y] += eta
            self._predicted *= keep
            self._predicted[h] += eta
            self._same[y] = eta * (self._previous == y) + keep * self._same[y]
            self._previous = y

    def measures(self) -> dict[str, float]:
        p = self._p
        p_ran = float(self._prior @ self._predicted)
        p_per = float(self._prior @ self._same)
        kappa = (p - p_ran) / (1 - p_ran) if p_ran != 1 else math.nan
        temporal = (p - p_per) / (1 - p_per) if p_per != 1 else math.nan
        plus = math.nan
        if not (math.isnan(kappa) or math.isnan(temporal)):
            plus = math.sqrt(max(0.0, kappa) * max(0.0, temporal))
        return {
            "accuracy": p,
            "p_ran": p_ran,
            "p_per": p_per,
            "kappa": kappa,
            "kappa_temporal": temporal,
            "kappa_plus": plus,
        }

    def state(self) -> dict[str, Any]:
        return {
            "n_classes": self.n_classes,
            "new_weight": self.new_weight,
            "p": self._p,
            "prior": self._prior.tolist(),
            "predicted": self._predicted.tolist(),
            "same": self._same.tolist(),
            "previous": self._previous,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ZliobaiteKappa:
        z = cls(state["n_classes"], state["new_weight"])
        z._p, z._previous = state["p"], state["previous"]
        z._prior = np.array(state["prior"])
        z._predicted = np.array(state["predicted"])
        z._same = np.array(state["same"])
        return z


def label_persistence(y: Sequence[int]) -> float:
    """P(T): the share of consecutive equal labels, the accuracy of the no-change classifier.

    >>> label_persistence([0, 0, 0, 1, 1, 1, 1, 0, 0, 0])  # E3: 7/9
    0.7777777777777778
    """
    y = np.asarray(y)
    if y.size < 2:
        return math.nan
    return float(np.mean(y[1:] == y[:-1]))


def temporal_dependence(y: Sequence[int], order: int, cls: int) -> float:
    """Δ(ℓ) of Definition 1 for class ``cls``: P(y_t = i | the ℓ previous labels are i) −
    P(y_t = i | the ℓ + 1 previous labels are i); NaN when a conditioning run never occurs.

    >>> round(temporal_dependence([0, 0, 0, 1, 1, 1, 1, 0, 0, 0], order=1, cls=0), 4)  # E14
    0.1333
    """
    if isinstance(order, bool) or not isinstance(order, int) or order < 1:
        raise ValueError(f"order={order!r} is not allowed; use ℓ >= 1")
    y = np.asarray(y)

    def following(run: int) -> float:
        # positions t whose `run` previous labels are all cls
        hits = total = 0
        for t in range(run, y.size):
            if np.all(y[t - run : t] == cls):
                total += 1
                hits += int(y[t] == cls)
        return hits / total if total else math.nan

    return following(order) - following(order + 1)


def temporal_correction(
    posterior: Sequence[float], transition_from_previous: Sequence[float], prior: Sequence[float]
) -> np.ndarray:
    """The Temporal Correction classifier's posterior (§5.1):
    P(y_t = i | x_t, y_{t−1}) ∝ P(y_t = i | y_{t−1}) / P(y_t = i) · P(y_t = i | x_t).
    Classes with a zero prior are dropped (probability 0).

    >>> temporal_correction([0.6, 0.4], [0.1, 0.9], [0.5, 0.5]).round(6).tolist()  # E14
    [0.142857, 0.857143]
    """
    posterior = np.asarray(posterior, dtype=np.float64)
    transition = np.asarray(transition_from_previous, dtype=np.float64)
    prior = np.asarray(prior, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        scores = np.where(prior > 0, transition / prior * posterior, 0.0)
    total = scores.sum()
    if total <= 0:
        raise ValueError("every class has score 0: check the prior and the transition row")
    return scores / total
