"""The mean of paired differences under one estimator, with its normal interval.

Used for the log-loss difference of two models on the instances both scored: per pair
d_i = loss_A,i − loss_B,i, and under the estimator's weights w_i (1; 1 in the window of the last
W pairs; a^(t−i) under fading)

    d̄ = Σ w_i d_i / Σ w_i,   s² = (Σ w_i d_i² / Σ w_i − d̄²) · n_eff / (n_eff − 1),
    d̄ ± z · s / √n_eff,

n_eff being Kish's effective size (Σw)²/Σw² (n without fading). It is the interval of a paired
mean difference (the paired t interval with the normal quantile, Wasserman 2004, *All of
Statistics*, §7.1 and §10.1, Wald tests); undefined (NaN) below two effective pairs.

The sums are float sums kept split-invariant as everywhere in the core: through
:class:`~streameval.core.forgetting.BlockFading` under all history and fading, read from a
:class:`~streameval.core.forgetting.Ring` of the differences in a window.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from streameval.core.forgetting import BlockFading, EstimatorSpec, Ring, geometric_sum
from streameval.core.intervals import kish

__all__ = ["PairedMean", "paired_mean_interval"]

_INDEX = np.array([0, 1])


def paired_mean_interval(
    weight: float, squares: float, total: float, total_sq: float, z: float
) -> tuple[float, float, float]:
    """(d̄, low, high) from Σw, Σw², Σw·d and Σw·d² (see the module docstring).

    >>> [round(x, 6) for x in paired_mean_interval(4, 4, 2.0, 3.0, 1.959963984540054)]
    [0.5, -0.300152, 1.300152]
    """
    if not weight > 0:
        return math.nan, math.nan, math.nan
    mean = total / weight
    size = kish(weight, squares)
    if not size > 1:
        return mean, math.nan, math.nan
    square = total_sq / weight
    spread = max(0.0, square - mean * mean)
    # rounding leaves ~1e-16 of the squares' scale when every difference is the same
    if spread <= 1e-12 * square:
        spread = 0.0
    half = z * math.sqrt(spread / (size - 1.0))
    return mean, mean - half, mean + half


class PairedMean:
    """Σw, Σw², Σw·d and Σw·d² of paired differences d under one estimator.

    Examples
    --------
    >>> mean = PairedMean(EstimatorSpec.parse("window:3"))
    >>> mean.update(np.array([5.0, 1.0, -1.0, 0.5]))
    >>> mean.n, [round(x, 6) for x in mean.interval(1.959963984540054)]
    (3, [0.166667, -1.011125, 1.344458])
    """

    def __init__(self, spec: EstimatorSpec) -> None:
        self.spec = spec
        self._ring: Ring | None = None
        self._sums: BlockFading | None = None
        if spec.kind == "window":
            self._ring = Ring(spec.window, d=np.float64)
        else:
            self._sums = BlockFading(spec.factor if spec.kind == "fading" else 1.0, 2)

    @property
    def n(self) -> int:
        """Pairs the estimate covers."""
        return self._ring.n if self._ring is not None else self._sums.n

    def update(self, differences: np.ndarray) -> None:
        """Add a batch of differences, oldest first."""
        if differences.size == 0:
            return
        if self._ring is not None:
            self._ring.push(d=differences)
            return

        def contribute(rows: slice, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            d = differences[rows]
            index = np.repeat(_INDEX, d.size)
            return index, np.concatenate([weights * d, weights * d * d])

        self._sums.update(differences.size, contribute)

    def sums(self) -> tuple[float, float, float, float]:
        """(Σw, Σw², Σw·d, Σw·d²) of the pairs covered."""
        n = self.n
        if self._ring is not None:
            d = self._ring.held()["d"]
            return float(n), float(n), float(d.sum()), float(np.dot(d, d))
        total, total_sq = (float(x) for x in self._sums.value())
        a = self._sums.fading_factor
        if a == 1.0:
            return float(n), float(n), total, total_sq
        return geometric_sum(a, n), geometric_sum(a * a, n), total, total_sq

    def interval(self, z: float) -> tuple[float, float, float]:
        """(d̄, low, high) at the normal quantile ``z``."""
        return paired_mean_interval(*self.sums(), z)

    def state(self) -> dict[str, Any]:
        if self._ring is not None:
            return {"ring": self._ring.dump()}
        return {"sums": self._sums.state()}

    @classmethod
    def from_state(cls, spec: EstimatorSpec, state: dict[str, Any]) -> PairedMean:
        mean = cls(spec)
        if mean._ring is not None and "ring" in state:
            mean._ring.load(state["ring"])
        elif mean._ring is not None:  # written oldest first, before rings were dumped
            mean._ring.restore(state["seen"], d=np.asarray(state["held"], dtype=np.float64))
        else:
            mean._sums.load(state["sums"])
        return mean
