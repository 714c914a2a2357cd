"""Fading-factor sums that are bit-identical whatever the batch boundaries.

A fading sum S_t = Σ_j a^(t−j)·s_j, updated by batch in closed form, rounds differently for
different batch splits (S ← a^m·S + Σ … is not the same float operation as m single steps).
The streaming service batches its input as Kafka delivers it, yet must publish exactly the
numbers that ``replay`` computes, so the fading estimators use :class:`BlockFading`: outcomes
are grouped in blocks of :data:`BLOCK` aligned on their count since the start of the stream;
the sum is stored at the last block boundary, and the current value is
a^p·S_boundary + Σ_{i<p} a^(p−1−i)·s_i over the p outcomes of the unfinished block, summed
from its buffered rows in row order. Every quantity therefore goes through the same floating
point operations for any split. The price is a sum over at most one block per update.

The statistics ``s_j`` are whatever the caller needs (a confusion matrix, several arrays): the
caller's ``stat(rows, weights)`` returns a tuple of arrays with the weighted sums, and must sum
in row order (``np.bincount`` with weights, or a reduction over axis 0) so that the result
depends only on the rows and the weights, never on memory layout.

References
----------
Gama, Sebastião, Rodrigues (2013), *On evaluating stream learning algorithms*, Machine
Learning 90(3): Algorithm 3, fading factors (SPEC §1.3).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["BLOCK", "BlockFading", "decay_table", "ordered_sum"]

#: Outcomes per block.
BLOCK = 1024

Stats = tuple[np.ndarray, ...]


@functools.lru_cache(maxsize=64)
def decay_table(fading_factor: float, block: int = BLOCK) -> np.ndarray:
    """a^0, a^1, ..., a^block as sequential products (the same bits on every machine)."""
    table = np.cumprod(np.concatenate(([1.0], np.full(block, fading_factor))))
    table.flags.writeable = False
    return table


def ordered_sum(values: np.ndarray) -> float:
    """Sum of a 1-D float array in index order (independent of alignment and of SIMD)."""
    if values.size == 0:
        return 0.0
    return float(np.bincount(np.zeros(values.size, dtype=np.intp), weights=values)[0])


class BlockFading:
    """The fading sums of a stream of rows, kept split-invariant (see the module docstring).

    Parameters
    ----------
    fading_factor
        Gama's a in (0, 1].
    width, dtype
        Shape of one row of raw data kept for the unfinished block.
    zero
        The statistics of no outcome (a tuple of zero arrays).

    Examples
    --------
    >>> stat = lambda rows, w: (np.bincount(np.zeros(len(rows), dtype=int),
    ...                                     weights=w * rows[:, 0], minlength=1),)
    >>> one = BlockFading(0.5, width=1, dtype=np.float64, zero=(np.zeros(1),))
    >>> two = BlockFading(0.5, width=1, dtype=np.float64, zero=(np.zeros(1),))
    >>> x = np.arange(3000, dtype=np.float64).reshape(-1, 1)
    >>> a = one.update(x, stat)
    >>> for lo in range(0, 3000, 7):
    ...     b = two.update(x[lo:lo + 7], stat)
    >>> a[0].tolist() == b[0].tolist()
    True
    """

    def __init__(self, fading_factor: float, width: int, dtype: Any, zero: Stats) -> None:
        self.fading_factor = fading_factor
        self._decay = decay_table(fading_factor)
        self._rows = np.zeros((0, width), dtype=dtype)
        self._base: Stats = tuple(zero)
        self._n = 0

    @property
    def n(self) -> int:
        """Rows seen."""
        return self._n

    @property
    def base(self) -> Stats:
        return self._base

    def reshape(self, fn: Callable[[Stats], Stats]) -> None:
        """Replace the stored statistics by ``fn(base)`` (e.g. to pad for a new class)."""
        self._base = tuple(fn(self._base))

    def update(self, rows: np.ndarray, stat: Callable[[np.ndarray, np.ndarray], Stats]) -> Stats:
        """Add rows (oldest first); return the current faded statistics."""
        buffer = np.concatenate([self._rows, rows]) if self._rows.size else np.array(rows)
        decay = self._decay
        start = 0
        while buffer.shape[0] - start >= BLOCK:
            block = buffer[start : start + BLOCK]
            summed = stat(block, decay[BLOCK - 1 :: -1])
            self._base = tuple(
                decay[BLOCK] * b + s for b, s in zip(self._base, summed, strict=True)
            )
            start += BLOCK
        self._rows = buffer[start:].copy()
        self._n += rows.shape[0]
        return self.value(stat)

    def value(self, stat: Callable[[np.ndarray, np.ndarray], Stats]) -> Stats:
        """a^p·S_boundary + Σ_{i<p} a^(p−1−i)·s_i over the unfinished block."""
        p = self._rows.shape[0]
        if p == 0:
            return self._base
        summed = stat(self._rows, np.ascontiguousarray(self._decay[p - 1 :: -1]))
        return tuple(self._decay[p] * b + s for b, s in zip(self._base, summed, strict=True))

    def state(self) -> dict[str, Any]:
        return {
            "n": self._n,
            "rows": self._rows.tolist(),
            "base": [b.tolist() for b in self._base],
        }

    def load(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`state` (into an object built with the same settings)."""
        self._n = state["n"]
        width, dtype = self._rows.shape[1], self._rows.dtype
        self._rows = np.array(state["rows"], dtype=dtype).reshape(-1, width)
        self._base = tuple(np.array(b, dtype=np.float64) for b in state["base"])
