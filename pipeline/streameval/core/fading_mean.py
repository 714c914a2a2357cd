"""The fading mean both drift detectors keep of a model's errors, the same for any split of the
stream into batches; and how a state of the first checkpoint version reads as one."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from streameval.core import kernels
from streameval.core.forgetting import BlockFading, block_size

__all__ = ["FadingMean"]


class FadingMean:
    """Bias-free fading mean M_a(t) = S_a(t)/N_a(t) of a stream (Gama et al. 2013, Alg. 3).

    S ← e + a·S and N ← 1 + a·N are two bins of a
    :class:`~streameval.core.forgetting.BlockFading`; M_a after every outcome is the ratio of
    its running sums, in which the block's scale cancels.

    Examples
    --------
    >>> import numpy as np
    >>> mean = FadingMean(fading_factor=0.5)
    >>> mean.advance(np.array([1.0, 0.0, 0.0])).round(4).tolist()
    [1.0, 0.3333, 0.1429]
    >>> round(mean.value, 4), mean.n
    (0.1429, 3)

    References
    ----------
    Gama, Sebastião, Rodrigues (2013), *On evaluating stream learning algorithms*, Machine
    Learning 90(3), Algorithm 3 and §3 (fading error, eq. 1).
    """

    def __init__(self, fading_factor: float) -> None:
        self._sums = BlockFading(fading_factor, 2)
        self._last = math.nan  # M_a after the latest outcome, as advance() returned it

    @property
    def n(self) -> int:
        return self._sums.n

    @property
    def value(self) -> float:
        """M_a after the latest outcome (NaN before the first)."""
        return self._last

    def advance(self, losses: np.ndarray) -> np.ndarray:
        """Add a batch of losses (``float64``); return M_a after each of them."""
        if (compiled := kernels.active) is not None:
            means = self._sums.running_ratio(compiled, losses)
            if means.size:
                self._last = float(means[-1])
            return means
        values = np.empty((losses.size, 2))
        values[:, 0] = losses
        values[:, 1] = 1.0
        sums = self._sums.running(values)
        means = sums[:, 0] / sums[:, 1]
        if means.size:
            self._last = float(means[-1])
        return means

    def state(self) -> dict[str, Any]:
        return {**self._sums.state(), "last": None if self._sums.n == 0 else self._last}

    @classmethod
    def from_state(cls, fading_factor: float, state: dict[str, Any]) -> FadingMean:
        mean = cls(fading_factor)
        if "base_sum" in state:  # checkpoint version 1: the same sums, kept apart
            state = _upgraded(fading_factor, state)
        mean._sums.load(state)
        mean._last = math.nan if state["last"] is None else state["last"]
        return mean


def _upgraded(fading_factor: float, old: dict[str, Any]) -> dict[str, Any]:
    """A fading mean's state of checkpoint version 1 as a BlockFading state (the same numbers).

    Version 1 kept S and N apart, with the norm's in-block part read from a table of
    Σ a^(−i), and closed a full block only at the next outcome.
    """
    block, n = old["block"], old["n"]
    decay = np.cumprod(np.concatenate(([1.0], np.full(block, fading_factor))))
    norms = np.cumsum(1.0 / decay[1:])  # Σ a^(−i), i = 1..k, added in order
    norm_partial = float(norms[n % block - 1]) if n % block else 0.0
    base = np.array([old["base_sum"], old["base_norm"]])
    partial = np.array([old["partial"], norm_partial])
    last = None
    if n:  # M_a as version 1 computed it
        k = n % block or block
        last = (old["base_sum"] + old["partial"]) / (old["base_norm"] + float(norms[k - 1]))
    if n and n % block == 0:  # a full block, not yet closed
        base = decay[block] * (base + np.array([old["partial"], float(norms[-1])]))
        partial = np.zeros(2)
    state = {"n": n, "base": base.tolist(), "partial": partial.tolist(), "last": last}
    if block != block_size(fading_factor):
        state["block"] = block
    return state
