"""What a comparison of two models keeps under each estimator: the loss sums and McNemar
counts of their paired outcomes — cumulative, over a window or faded — from which
:class:`~streameval.core.compare.ModelComparison` computes its measures, and the check of the
losses it is fed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from streameval.core.exact import (
    ZERO,
    Dyadic,
    add,
    canonical,
    exact_sum,
    float_log_ratio,
    log_ratio,
)
from streameval.core.forgetting import BlockFading, EstimatorSpec, Ring, geometric_sum

__all__ = ["MAX_LOSS", "PairBatch", "Tally", "make_tally", "tally_from_state", "validate_losses"]

#: Largest loss accepted (a 0-1 loss is 1; anything near this is a unit error).
MAX_LOSS = 1e100


def validate_losses(errors_a: Any, errors_b: Any) -> tuple[np.ndarray, np.ndarray]:
    """Check two aligned batches of per-instance losses and return them as float64 arrays.

    Raises ``ValueError`` naming the argument, the value and what is allowed.
    """
    arrays = []
    for name, values in (("errors_a", errors_a), ("errors_b", errors_b)):
        array = np.asarray(values)
        if array.ndim != 1:
            raise ValueError(
                f"{name} has shape {array.shape}; a 1-D array of per-instance losses is needed"
            )
        if array.dtype.kind not in "biuf":
            raise ValueError(
                f"{name} has dtype {array.dtype}; losses must be numbers (0-1 loss: 1 = wrong)"
            )
        array = array.astype(np.float64)
        if array.size:
            finite = np.isfinite(array)
            if not finite.all():
                bad = array[~finite][0]
                raise ValueError(f"{name} contains {bad}; losses must be finite and >= 0")
            if array.min() < 0:
                raise ValueError(f"{name} contains {array.min()}; losses must be >= 0")
            if array.max() > MAX_LOSS:
                raise ValueError(
                    f"{name} contains {array.max()}; losses must be <= {MAX_LOSS:g} "
                    "(fading sums scale them by up to 1e20 inside a block)"
                )
            array += 0.0  # −0.0 becomes 0.0: one representation of "right"
        arrays.append(array)
    if arrays[0].size != arrays[1].size:
        raise ValueError(
            f"errors_a has {arrays[0].size} losses but errors_b has {arrays[1].size}; they must "
            "be aligned (the same instances, both predicted, in the same order)"
        )
    return arrays[0], arrays[1]


@dataclass(frozen=True)
class PairBatch:
    """A validated batch, with what every estimator needs computed once."""

    loss_a: np.ndarray
    loss_b: np.ndarray
    a_only: np.ndarray  # A wrong and B right
    b_only: np.ndarray  # B wrong and A right
    n01: int
    n10: int
    sum_a: Dyadic  # exact loss sums of the batch
    sum_b: Dyadic

    @classmethod
    def of(cls, loss_a: np.ndarray, loss_b: np.ndarray) -> PairBatch:
        wrong_a, wrong_b = loss_a > 0, loss_b > 0
        a_only, b_only = wrong_a & ~wrong_b, wrong_b & ~wrong_a
        return cls(
            loss_a,
            loss_b,
            a_only,
            b_only,
            int(np.count_nonzero(a_only)),
            int(np.count_nonzero(b_only)),
            exact_sum(loss_a),
            exact_sum(loss_b),
        )


class Tally:
    """Loss sums and McNemar counts of one estimator (the base of the three; not used
    directly)."""

    kind: ClassVar[str]

    @property
    def name(self) -> str:
        return self.kind

    def update(self, batch: PairBatch) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def summary(self) -> tuple[float, ...]:  # pragma: no cover - abstract
        """``(n, Q, n01, n10)``, and under fading Σw and Σw² of the pairs covered."""
        raise NotImplementedError

    def state(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def _from_state(cls, state: dict[str, Any]) -> Tally:  # pragma: no cover - abstract
        raise NotImplementedError


class _CumulativeTally(Tally):
    """Exact loss sums and integer counts over all pairs (Gama et al., Algorithm 1)."""

    kind = "cumulative"

    def __init__(self) -> None:
        self._n = 0
        self._sum_a = self._sum_b = ZERO
        self._n01 = self._n10 = 0

    def update(self, batch: PairBatch) -> None:
        self._n += batch.loss_a.size
        self._sum_a = add(self._sum_a, batch.sum_a)
        self._sum_b = add(self._sum_b, batch.sum_b)
        self._n01 += batch.n01
        self._n10 += batch.n10

    def summary(self) -> tuple[float, ...]:
        return self._n, log_ratio(self._sum_a, self._sum_b), self._n01, self._n10

    def state(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "n": self._n,
            "loss_sums": [list(self._sum_a), list(self._sum_b)],  # [m, e]: m·2**e, exact
            "n01": self._n01,
            "n10": self._n10,
        }

    @classmethod
    def _from_state(cls, state: dict[str, Any]) -> _CumulativeTally:
        tally = cls()
        tally._n = state["n"]
        (ma, ea), (mb, eb) = state["loss_sums"]
        tally._sum_a, tally._sum_b = canonical(ma, ea), canonical(mb, eb)
        tally._n01, tally._n10 = state["n01"], state["n10"]
        return tally


class _WindowTally(Tally):
    """Exact loss sums and counts over the last ``window_size`` pairs (Algorithm 2)."""

    kind = "window"

    def __init__(self, window_size: int) -> None:
        self.window_size = window_size
        self._ring = Ring(window_size, a=np.float64, b=np.float64)
        self._sum_a = self._sum_b = ZERO
        self._n01 = self._n10 = 0

    @property
    def name(self) -> str:
        return f"window:{self.window_size}"

    def _count(self, loss_a: np.ndarray, loss_b: np.ndarray, sign: int) -> None:
        if loss_a.size:
            self._sum_a = add(self._sum_a, exact_sum(loss_a), sign)
            self._sum_b = add(self._sum_b, exact_sum(loss_b), sign)
            wrong_a, wrong_b = loss_a > 0, loss_b > 0
            self._n01 += sign * int(np.count_nonzero(wrong_a & ~wrong_b))
            self._n10 += sign * int(np.count_nonzero(wrong_b & ~wrong_a))

    def update(self, batch: PairBatch) -> None:
        entered, left = self._ring.push(a=batch.loss_a, b=batch.loss_b)
        self._count(left["a"], left["b"], -1)
        if entered["a"].size == batch.loss_a.size:  # the whole batch: its sums are known
            self._sum_a = add(self._sum_a, batch.sum_a)
            self._sum_b = add(self._sum_b, batch.sum_b)
            self._n01 += batch.n01
            self._n10 += batch.n10
        else:
            self._count(entered["a"], entered["b"], +1)

    def summary(self) -> tuple[float, ...]:
        return self._ring.n, log_ratio(self._sum_a, self._sum_b), self._n01, self._n10

    def state(self) -> dict[str, Any]:
        """The window's losses as its ring lies; sums and counts are recomputed from them."""
        return {"kind": self.kind, "window_size": self.window_size, "ring": self._ring.dump()}

    @classmethod
    def _from_state(cls, state: dict[str, Any]) -> _WindowTally:
        tally = cls(window_size=state["window_size"])
        if "ring" in state:
            tally._ring.load(state["ring"])
        else:  # written oldest first, before rings were dumped
            tally._ring.restore(state["seen"], a=state["losses_a"], b=state["losses_b"])
        held = tally._ring.held()
        tally._count(held["a"], held["b"], +1)
        return tally


class _FadingTally(Tally):
    """Faded loss sums S ← L + a·S and faded counts n01 ← a·n01 + 1[...] (Algorithm 3), in a
    :class:`~streameval.core.forgetting.BlockFading`: any batch split gives the same bits."""

    kind = "fading"

    def __init__(self, fading_factor: float) -> None:
        self.fading_factor = fading_factor
        self._fading = BlockFading(fading_factor, 4)  # bins: S_A, S_B, n01, n10

    @property
    def name(self) -> str:
        return f"fading:{self.fading_factor!r}"

    def update(self, batch: PairBatch) -> None:
        loss_a, loss_b, a_only, b_only = batch.loss_a, batch.loss_b, batch.a_only, batch.b_only

        def contribute(rows: slice, weights: np.ndarray):
            only_a, only_b = a_only[rows], b_only[rows]
            index = np.concatenate(
                [
                    np.zeros(weights.size, dtype=np.intp),
                    np.ones(weights.size, dtype=np.intp),
                    np.full(int(only_a.sum()), 2),
                    np.full(int(only_b.sum()), 3),
                ]
            )
            values = np.concatenate(
                [weights * loss_a[rows], weights * loss_b[rows], weights[only_a], weights[only_b]]
            )
            return index, values

        self._fading.update(loss_a.size, contribute)

    def summary(self) -> tuple[float, ...]:
        sum_a, sum_b, n01, n10 = self._fading.value().tolist()
        # every pair counts in the difference's denominator: Σw and Σw² are geometric sums
        n, a = self._fading.n, self.fading_factor
        weight, squares = geometric_sum(a, n), geometric_sum(a * a, n)
        q = float_log_ratio(sum_a, sum_b)
        return n, q, n01, n10, weight, squares

    def state(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "fading_factor": self.fading_factor,
            "fading": self._fading.state(),
        }

    @classmethod
    def _from_state(cls, state: dict[str, Any]) -> _FadingTally:
        tally = cls(fading_factor=state["fading_factor"])
        tally._fading.load(state["fading"])
        return tally


_TALLIES: dict[str, type[Tally]] = {
    tally.kind: tally for tally in (_CumulativeTally, _WindowTally, _FadingTally)
}


def make_tally(spec: EstimatorSpec) -> Tally:
    """An empty tally of the estimator ``spec``."""
    if spec.kind == "window":
        return _WindowTally(spec.window)
    if spec.kind == "fading":
        return _FadingTally(spec.factor)
    return _CumulativeTally()


def tally_from_state(name: str, state: dict[str, Any]) -> Tally:
    """The tally of estimator ``name`` from its :meth:`~Tally.state`."""
    kind = state.get("kind")
    if kind not in _TALLIES:
        raise ValueError(
            f"comparison state of {name!r} has kind={kind!r}; expected cumulative, window or fading"
        )
    return _TALLIES[kind]._from_state(state)
