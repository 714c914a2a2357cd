"""Comparing two classifiers on the same stream: the Q statistic and the signed McNemar test.

A :class:`ModelComparison` is fed, batch by batch, the per-instance losses of model A and model
B on the instances *both* models predicted (aligned, oldest first). Under each configured
estimator (``cumulative``, ``window:W``, ``fading:a``, as in
:class:`~streameval.core.forgetting.EstimatorSpec`) it keeps

- the two loss sums S^A and S^B behind the Q statistic Q = ln(S^A/S^B);
- the McNemar counts n01 = #(A wrong, B right) and n10 = #(B wrong, A right) behind the signed
  McNemar statistic M = sign(n01 − n10)·(n01 − n10)²/(n01 + n10).

Reading the signs: Q < 0 (A has the smaller loss) or M < 0 (A makes fewer exclusive errors) means
A is better, M > 0 that B is better. ``|M| > 6.635`` rejects "no difference" at the 99 % level
(χ² with one degree of freedom, no continuity correction). :func:`leader` applies this rule.

Next to them, the difference of the two models' accuracies on the paired outcomes,
d = accuracy(B) − accuracy(A) = (n01 − n10)/n (> 0: B is better, the sign of M), with the Wald
interval for a difference of paired proportions, d ± z·sqrt((b + c − (b − c)²)/n) with
b = n01/n, c = n10/n (Agresti 2002, §10.1); under fading n01, n10 and n are faded and the n
under the root is Kish's effective size (Σw)²/Σw² (docs/measures.md, "Intervals").

Undefined values: Q is NaN when either loss sum is 0; M is 0 when n01 + n10 = 0 — no exclusive
error of either model is no evidence of a difference (docs/measures.md).

Exactness: cumulative and window loss sums are kept as exact binary fractions (every finite
float is one), so any split of a stream into batches gives the very same state and measures,
real-valued losses included, and a window never drifts when large losses leave it. Fading sums
are floats kept with :class:`~streameval.core.forgetting.BlockFading`, bit-identical for any split
(:mod:`streameval.core.exact` has the exact sums).

References
----------
Gama, Sebastião, Rodrigues (2013), *On evaluating stream learning algorithms*, Machine
Learning 90(3), §4 "Comparative assessment": the Q statistic Q_i(A, B) = log(S_i^A/S_i^B)
and its fading form Q_i^α (Figs. 4–5); §4.1 "The 0–1 loss function": the signed McNemar
statistic and the threshold 6.635; §4.2: McNemar over sliding windows and with fading factors
(Figs. 6–7). Worked examples E6 and E7 of docs/measures.md. Agresti (2002), *Categorical Data
Analysis*, 2nd ed., §10.1 "Comparing dependent proportions": the Wald interval of the
difference of paired proportions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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
from streameval.core.forgetting import (
    BlockFading,
    EstimatorSpec,
    Ring,
    check_continued,
    geometric_sum,
    parse_estimators,
)
from streameval.core.measures import DEFAULT_CONFIDENCE, ROUNDING_NOISE, kish, normal_quantile

__all__ = [
    "COMPARISON_MEASURES",
    "MCNEMAR_THRESHOLD",
    "ModelComparison",
    "leader",
    "mcnemar",
    "q_statistic",
]

#: χ² (1 d.f.) quantile at 0.99: ``|M|`` above it is a significant difference (Gama et al.).
MCNEMAR_THRESHOLD = 6.635

#: Largest loss accepted (a 0-1 loss is 1; anything near this is a unit error).
MAX_LOSS = 1e100

#: Keys of the measures of one estimator, in a stable order.
COMPARISON_MEASURES = (
    "n",
    "q_statistic",
    "mcnemar",
    "n01",
    "n10",
    "significant",
    "n_kish",
    "accuracy_difference",
    "accuracy_difference_lo",
    "accuracy_difference_hi",
)

NAN = math.nan


def q_statistic(loss_sum_a: float, loss_sum_b: float) -> float:
    """Q = ln(S^A/S^B) of two accumulated (or windowed, or faded) non-negative loss sums.

    Negative: A has accumulated less loss. NaN when either sum is 0.

    Examples
    --------
    >>> round(q_statistic(3, 1), 6), round(q_statistic(0.8125, 0.25), 6)
    (1.098612, 1.178655)
    >>> q_statistic(1, 3) == -q_statistic(3, 1)
    True
    >>> q_statistic(2, 0)
    nan
    """
    if isinstance(loss_sum_a, int) and isinstance(loss_sum_b, int):
        if loss_sum_a < 0 or loss_sum_b < 0:
            return NAN
        return log_ratio(canonical(loss_sum_a, 0), canonical(loss_sum_b, 0))
    return float_log_ratio(float(loss_sum_a), float(loss_sum_b))


def mcnemar(n01: float, n10: float) -> float:
    """Signed McNemar statistic M = sign(n01 − n10)·(n01 − n10)²/(n01 + n10).

    ``n01`` counts instances A got wrong and B right, ``n10`` the reverse (faded counts are
    allowed). M > 0: B is better; M < 0: A is better; ``|M| > 6.635`` is significant at 99 %.
    M = 0 when n01 + n10 = 0: neither model made an exclusive error.

    Examples
    --------
    >>> mcnemar(3, 1), mcnemar(0, 5), mcnemar(0, 0)
    (1.0, -5.0, 0.0)
    >>> round(mcnemar(0.9**7 + 0.9**4 + 0.9**2, 1), 6)
    0.302909
    """
    total = n01 + n10
    if total == 0:
        return 0.0
    difference = n01 - n10
    return float(difference * abs(difference) / total)


def paired_difference(
    n01: float, n10: float, weight: float, size: float, z: float
) -> tuple[float, float, float]:
    """accuracy(B) − accuracy(A) of paired outcomes and its Wald interval (Agresti 2002, §10.1).

    ``n01`` (A wrong, B right) and ``n10`` (B wrong, A right) out of ``weight`` pairs (faded
    counts allowed), ``size`` the effective number of pairs. d = (n01 − n10)/weight and
    d ± z·sqrt((b + c − (b − c)²)/size) with b = n01/weight, c = n10/weight, within [−1, 1].
    NaN without pairs.

    >>> [round(x, 6) for x in paired_difference(3, 1, 8, 8, 1.959963984540054)]
    [0.25, -0.208345, 0.708345]
    """
    if not weight > 0 or not size > 0:
        return NAN, NAN, NAN
    b, c = min(1.0, n01 / weight), min(1.0, n10 / weight)
    difference = b - c
    variance = b + c - difference * difference
    # faded shares of all-disagreeing pairs leave 1e-16 of rounding noise, not a variance
    variance = variance if variance > ROUNDING_NOISE else 0.0
    half = z * math.sqrt(variance / size)
    return difference, max(-1.0, difference - half), min(1.0, difference + half)


def leader(
    measures: dict[str, float],
    a_name: str = "A",
    b_name: str = "B",
    *,
    significant_only: bool = False,
) -> str | None:
    """Which model leads by the sign of McNemar's M in the measures of one estimator.

    M < 0 (A makes fewer exclusive errors) → ``a_name``; M > 0 → ``b_name``; M = 0 or NaN →
    ``None``. With ``significant_only`` a lead counts only when ``|M| > 6.635``
    (:data:`MCNEMAR_THRESHOLD`). The Q statistic reads the same way (Q < 0: A has less loss)
    but is not a test; it is not used here.

    Examples
    --------
    >>> leader({"mcnemar": 1.0}, "nb", "nb-ddm")
    'nb-ddm'
    >>> leader({"mcnemar": -9.0}, "nb", "nb-ddm", significant_only=True)
    'nb'
    >>> leader({"mcnemar": 1.0}, "nb", "nb-ddm", significant_only=True) is None
    True
    """
    value = measures["mcnemar"]
    if value != value or value == 0:
        return None
    if significant_only and not abs(value) > MCNEMAR_THRESHOLD:
        return None
    return b_name if value > 0 else a_name


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
class _Batch:
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
    def of(cls, loss_a: np.ndarray, loss_b: np.ndarray) -> _Batch:
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


class _Tally:
    """Loss sums and McNemar counts of one estimator (not used directly)."""

    kind: ClassVar[str]

    @property
    def name(self) -> str:
        return self.kind

    def update(self, batch: _Batch) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def state(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def _from_state(cls, state: dict[str, Any]) -> _Tally:  # pragma: no cover - abstract
        raise NotImplementedError

    def measures(self, z: float) -> dict[str, float]:  # pragma: no cover - abstract
        raise NotImplementedError

    @staticmethod
    def _measures(
        n: int, q: float, n01: float, n10: float, z: float, weight=None, squares=None
    ) -> dict[str, float]:
        """``weight`` and ``squares``: Σw and Σw² of the pairs covered (n when omitted)."""
        statistic = mcnemar(n01, n10)
        weight = float(n) if weight is None else weight
        size = float(n) if squares is None else kish(weight, squares)
        difference, low, high = paired_difference(n01, n10, weight, size, z)
        return {
            "n": n,
            "q_statistic": q,
            "mcnemar": statistic,
            "n01": float(n01),
            "n10": float(n10),
            "significant": 1.0 if abs(statistic) > MCNEMAR_THRESHOLD else 0.0,
            "n_kish": size,
            "accuracy_difference": difference,
            "accuracy_difference_lo": low,
            "accuracy_difference_hi": high,
        }


class _CumulativeTally(_Tally):
    """Exact loss sums and integer counts over all pairs (Gama et al., Algorithm 1)."""

    kind = "cumulative"

    def __init__(self) -> None:
        self._n = 0
        self._sum_a = self._sum_b = ZERO
        self._n01 = self._n10 = 0

    def update(self, batch: _Batch) -> None:
        self._n += batch.loss_a.size
        self._sum_a = add(self._sum_a, batch.sum_a)
        self._sum_b = add(self._sum_b, batch.sum_b)
        self._n01 += batch.n01
        self._n10 += batch.n10

    def measures(self, z: float) -> dict[str, float]:
        q = log_ratio(self._sum_a, self._sum_b)
        return self._measures(self._n, q, self._n01, self._n10, z)

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


class _WindowTally(_Tally):
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

    def update(self, batch: _Batch) -> None:
        entered, left = self._ring.push(a=batch.loss_a, b=batch.loss_b)
        self._count(left["a"], left["b"], -1)
        if entered["a"].size == batch.loss_a.size:  # the whole batch: its sums are known
            self._sum_a = add(self._sum_a, batch.sum_a)
            self._sum_b = add(self._sum_b, batch.sum_b)
            self._n01 += batch.n01
            self._n10 += batch.n10
        else:
            self._count(entered["a"], entered["b"], +1)

    def measures(self, z: float) -> dict[str, float]:
        q = log_ratio(self._sum_a, self._sum_b)
        return self._measures(self._ring.n, q, self._n01, self._n10, z)

    def state(self) -> dict[str, Any]:
        """The window's losses oldest first; sums and counts are recomputed from them."""
        held = self._ring.held()
        return {
            "kind": self.kind,
            "window_size": self.window_size,
            "seen": self._ring.seen,
            "losses_a": held["a"].tolist(),
            "losses_b": held["b"].tolist(),
        }

    @classmethod
    def _from_state(cls, state: dict[str, Any]) -> _WindowTally:
        tally = cls(window_size=state["window_size"])
        tally._ring.restore(state["seen"], a=state["losses_a"], b=state["losses_b"])
        held = tally._ring.held()
        tally._count(held["a"], held["b"], +1)
        return tally


class _FadingTally(_Tally):
    """Faded loss sums S ← L + a·S and faded counts n01 ← a·n01 + 1[...] (Algorithm 3), in a
    :class:`~streameval.core.forgetting.BlockFading`: any batch split gives the same bits."""

    kind = "fading"

    def __init__(self, fading_factor: float) -> None:
        self.fading_factor = fading_factor
        self._fading = BlockFading(fading_factor, 4)  # bins: S_A, S_B, n01, n10

    @property
    def name(self) -> str:
        return f"fading:{self.fading_factor!r}"

    def update(self, batch: _Batch) -> None:
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

    def measures(self, z: float) -> dict[str, float]:
        sum_a, sum_b, n01, n10 = self._fading.value().tolist()
        # every pair counts in the difference's denominator: Σw and Σw² are geometric sums
        n, a = self._fading.n, self.fading_factor
        weight, squares = geometric_sum(a, n), geometric_sum(a * a, n)
        q = float_log_ratio(sum_a, sum_b)
        return self._measures(n, q, n01, n10, z, weight, squares)

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


_TALLIES: dict[str, type[_Tally]] = {
    tally.kind: tally for tally in (_CumulativeTally, _WindowTally, _FadingTally)
}


def _make_tally(spec: EstimatorSpec) -> _Tally:
    if spec.kind == "window":
        return _WindowTally(spec.window)
    if spec.kind == "fading":
        return _FadingTally(spec.factor)
    return _CumulativeTally()


class ModelComparison:
    """Q statistic and signed McNemar test of model A against model B, under every estimator.

    Feed :meth:`update` the per-instance losses of both models on the instances both of them
    predicted (0-1 loss: 1 = wrong; any finite non-negative loss is accepted for Q, and a loss
    > 0 counts as "wrong" for McNemar). :meth:`measures` returns, per estimator name,

    ``n``
        Pairs the estimate covers (all pairs seen for cumulative and fading).
    ``q_statistic``
        Q = ln(S^A/S^B), natural log; NaN when either sum is 0. Q < 0: A has less loss.
    ``mcnemar``
        M = sign(n01 − n10)·(n01 − n10)²/(n01 + n10); 0 when n01 + n10 = 0. M > 0: B better.
    ``n01``, ``n10``
        #(A wrong, B right) and #(B wrong, A right); faded counts under ``fading:a``.
    ``significant``
        1.0 when ``|M| > 6.635`` (99 %, χ² with 1 d.f.), else 0.0.
    ``n_kish``
        The effective number of pairs: ``n``, Kish's (Σw)²/Σw² under fading.
    ``accuracy_difference``, ``accuracy_difference_lo``, ``accuracy_difference_hi``
        accuracy(B) − accuracy(A) on the pairs, (n01 − n10)/n, and its Wald interval for paired
        proportions at the confidence :meth:`measures` is given (Kish's n under fading).

    Parameters
    ----------
    estimators
        Estimator names: ``cumulative``, ``window:W`` (the last W pairs), ``fading:a``
        (S ← L + a·S; n01 ← a·n01 + 1[A wrong, B right]). Default: cumulative, a window of
        1000 pairs and fading factor 0.999.

    Examples
    --------
    E6 (docs/measures.md): Q after each pair (cumulative, and fading with a = 0.5).

    >>> cmp = ModelComparison(estimators=["cumulative", "fading:0.5"])
    >>> for a, b in zip([1, 0, 1, 1, 0], [0, 0, 1, 0, 0]):
    ...     cmp.update([a], [b])
    ...     m = cmp.measures()
    ...     print(*(round(m[name]["q_statistic"], 6) for name in cmp.names))
    nan nan
    nan nan
    0.693147 0.223144
    1.098612 1.178655
    1.098612 1.178655

    E7: error indicators of A and B; A makes more exclusive errors, not significantly.

    >>> cmp = ModelComparison(estimators=["cumulative", "window:4", "fading:0.9"])
    >>> cmp.update([1, 1, 0, 1, 0, 1, 1, 0], [0, 1, 0, 0, 0, 0, 1, 1])
    >>> m = cmp.measures()
    >>> m["cumulative"]  # doctest: +NORMALIZE_WHITESPACE
    {'n': 8, 'q_statistic': 0.5108256237659907, 'mcnemar': 1.0, 'n01': 3.0, 'n10': 1.0,
     'significant': 0.0, 'n_kish': 8.0, 'accuracy_difference': 0.25,
     'accuracy_difference_lo': -0.20834460753532363, 'accuracy_difference_hi': 0.7083446075353237}
    >>> m["window:4"]["n01"], m["window:4"]["n10"], m["window:4"]["mcnemar"]
    (1.0, 1.0, 0.0)
    >>> fading = m["fading:0.9"]
    >>> round(fading["n01"], 6), fading["n10"], round(fading["mcnemar"], 6)
    (1.944397, 1.0, 0.302909)
    >>> leader(m["cumulative"], "A", "B")
    'B'

    References
    ----------
    Gama, Sebastião, Rodrigues (2013), Machine Learning 90(3), §4 (Q statistic and its fading
    form Q_i^α), §4.1 (signed McNemar M, 6.635) and §4.2 (McNemar over windows and with fading
    factors). The fading McNemar counts and M = 0 are the project's choices, not the paper's
    (docs/measures.md).
    """

    def __init__(
        self,
        estimators: Sequence[str | EstimatorSpec] = ("cumulative", "window:1000", "fading:0.999"),
    ):
        specs = parse_estimators(estimators)
        self.estimators = tuple(spec.name for spec in specs)
        self._tallies: dict[str, _Tally] = {spec.name: _make_tally(spec) for spec in specs}

    @property
    def names(self) -> list[str]:
        """Wire names of the estimators, in configured order."""
        return list(self._tallies)

    def update(self, errors_a: Any, errors_b: Any) -> None:
        """Add a batch of aligned per-instance losses of model A and model B, oldest first.

        All-or-nothing: a bad batch raises ``ValueError`` and changes nothing.
        """
        loss_a, loss_b = validate_losses(errors_a, errors_b)
        if not loss_a.size:
            return
        batch = _Batch.of(loss_a, loss_b)
        for tally in self._tallies.values():
            tally.update(batch)

    def measures(self, confidence: float = DEFAULT_CONFIDENCE) -> dict[str, dict[str, float]]:
        """``{estimator: {name: value}}`` for the names of :data:`COMPARISON_MEASURES`; the
        interval of ``accuracy_difference`` at ``confidence`` (default 0.95)."""
        z = normal_quantile(confidence)
        return {name: tally.measures(z) for name, tally in self._tallies.items()}

    def state(self) -> dict[str, Any]:
        """A JSON-ready snapshot of the whole comparison (round-trips exactly)."""
        return {
            "estimators": list(self.estimators),
            "state": {name: tally.state() for name, tally in self._tallies.items()},
        }

    @classmethod
    def from_state(
        cls, state: dict[str, Any], estimators: Sequence[str | EstimatorSpec] | None = None
    ) -> ModelComparison:
        """Rebuild a comparison from :meth:`state`; with ``estimators``, continue under them:
        the state's go on, the others start empty (every estimator of the state must be among
        them: ValueError otherwise)."""
        specs = parse_estimators(state["estimators"] if estimators is None else estimators)
        check_continued(state["estimators"], specs)
        comparison = cls(estimators=specs)
        saved = state["state"]
        if set(saved) != set(state["estimators"]):
            raise ValueError(
                f"comparison state has estimators {sorted(saved)} but its configuration names "
                f"{sorted(state['estimators'])}; they must be the same"
            )
        for name, tally_state in saved.items():
            kind = tally_state.get("kind")
            if kind not in _TALLIES:
                raise ValueError(
                    f"comparison state of {name!r} has kind={kind!r}; "
                    "expected cumulative, window or fading"
                )
            comparison._tallies[name] = _TALLIES[kind]._from_state(tally_state)
        return comparison
