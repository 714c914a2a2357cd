"""Fading-factor sums that are bit-identical whatever the batch boundaries.

A fading sum S_t = Σ_j a^(t−j)·s_j, updated by batch in closed form, rounds differently for
different batch splits (S ← a^m·S + Σ … is not the same float operation as m single steps).
The streaming service batches its input as Kafka delivers it, yet must publish exactly the
numbers that ``replay`` computes, so every fading estimator keeps its sums in a
:class:`BlockFading`:

* outcomes are grouped in blocks of L aligned on their count since the start of the stream;
* inside the block that started after outcome b, S_t = a^(t−b)·(S_b + P_t) with
  P_t = Σ_{j=b+1..t} a^(−(j−b))·s_j: each outcome's weight depends only on its position;
* P is accumulated with ``np.bincount`` whose first inputs are the carried values of P, and
  bincount adds its inputs strictly in order, so P goes through exactly the additions of a
  one-by-one update, for any split; at the end of a block S_{b+L} = a^L·(S_b + P), P = 0.

The statistics s_j live in one flat vector of bins whose layout the caller owns (a confusion
matrix, per-bin counts, two loss sums ...). An update costs one bincount over the batch.

References
----------
Gama, Sebastião, Rodrigues (2013), *On evaluating stream learning algorithms*, Machine
Learning 90(3): Algorithm 3, fading factors.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["BlockFading", "block_size"]

#: Longest block; shorter for small fading factors so that a^(−L) stays ≤ 1e20.
LONGEST_BLOCK = 1024

Contribution = Callable[[slice, np.ndarray], tuple[np.ndarray, np.ndarray]]


def block_size(fading_factor: float) -> int:
    """Outcomes per block: at most 1024, and a^(−k) ≤ 1e20 inside a block."""
    decay = np.cumprod(np.full(LONGEST_BLOCK, fading_factor))
    return max(1, int(np.count_nonzero(decay >= 1e-20)))


@functools.lru_cache(maxsize=64)
def _tables(fading_factor: float) -> tuple[np.ndarray, np.ndarray]:
    """a^k and a^(−k) for k = 0..L as sequential products (the same bits everywhere)."""
    length = block_size(fading_factor)
    decay = np.cumprod(np.concatenate(([1.0], np.full(length, fading_factor))))
    growth = 1.0 / decay
    for table in (decay, growth):
        table.flags.writeable = False
    return decay, growth


class BlockFading:
    """Split-invariant fading sums of a vector of ``size`` bins (see the module docstring).

    Parameters
    ----------
    fading_factor
        Gama's a in (0, 1].
    size
        Number of bins of the statistics vector.

    Examples
    --------
    Sum of the values 0..2999 faded with a = 0.5, in one batch or in batches of 7:

    >>> def contribute(rows, x):
    ...     return lambda where, weights: (np.zeros(where.stop - where.start, dtype=np.intp),
    ...                                    weights * x[where])
    >>> x = np.arange(3000, dtype=np.float64)
    >>> one, two = BlockFading(0.5, size=1), BlockFading(0.5, size=1)
    >>> a = one.update(3000, contribute(None, x))
    >>> for lo in range(0, 3000, 7):
    ...     b = two.update(min(7, 3000 - lo), contribute(None, x[lo:]))
    >>> a.tolist() == b.tolist(), round(float(a[0]), 6)
    (True, 5996.0)
    """

    def __init__(self, fading_factor: float, size: int) -> None:
        self.fading_factor = fading_factor
        self._decay, self._growth = _tables(fading_factor)
        self._block = self._decay.size - 1
        self._base = np.zeros(size)  # S at the start of the current block
        self._partial = np.zeros(size)  # P, in the growth scale of the current block
        self._bins = np.arange(size)
        self._n = 0

    @property
    def n(self) -> int:
        """Outcomes seen."""
        return self._n

    def relayout(self, fn: Callable[[np.ndarray], np.ndarray]) -> None:
        """Map both stored vectors to a new layout (e.g. padded for a new class)."""
        self._base = fn(self._base)
        self._partial = fn(self._partial)
        self._bins = np.arange(self._base.size)

    def update(self, count: int, contribute: Contribution) -> np.ndarray:
        """Add ``count`` outcomes; return the current sums.

        ``contribute(rows, weights)`` gets a slice of the batch's outcomes and their weights
        and returns (bin index, value) pairs: every outcome adds ``value`` to its bins.
        Contributions must come in outcome order.
        """
        start, block = 0, self._block
        while start < count:
            position = self._n % block
            take = min(block - position, count - start)
            weights = self._growth[position + 1 : position + take + 1]
            index, values = contribute(slice(start, start + take), weights)
            size = self._base.size
            if size <= 4 * index.size + 64:
                # carried values first, then the contributions in order: sequential sums
                self._partial = np.bincount(
                    np.concatenate([self._bins, index]),
                    np.concatenate([self._partial, values]),
                    minlength=size,
                )
            else:  # many bins, few touched: the same additions on the touched bins only
                touched, inverse = np.unique(index, return_inverse=True)
                self._partial[touched] = np.bincount(
                    np.concatenate([np.arange(touched.size), inverse]),
                    np.concatenate([self._partial[touched], values]),
                    minlength=touched.size,
                )
            self._n += take
            start += take
            if self._n % block == 0:
                self._base = self._decay[block] * (self._base + self._partial)
                self._partial = np.zeros(self._base.size)
        return self.value()

    def value(self) -> np.ndarray:
        """S_t = a^(t−b)·(S_b + P_t)."""
        return self._decay[self._n % self._block] * (self._base + self._partial)

    def state(self) -> dict[str, Any]:
        return {"n": self._n, "base": self._base.tolist(), "partial": self._partial.tolist()}

    def load(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`state` (into an object built with the same fading factor)."""
        self._n = state["n"]
        self._base = np.array(state["base"], dtype=np.float64)
        self._partial = np.array(state["partial"], dtype=np.float64)
        self._bins = np.arange(self._base.size)
