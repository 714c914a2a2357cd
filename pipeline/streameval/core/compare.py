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
(:mod:`streameval.core.exact` has the exact sums, :mod:`streameval.core.paired_tallies` the
tallies that keep them).

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
from typing import Any

from streameval.core.exact import canonical, float_log_ratio, log_ratio
from streameval.core.forgetting import EstimatorSpec, check_continued, parse_estimators
from streameval.core.intervals import DEFAULT_CONFIDENCE, kish, normal_quantile
from streameval.core.measures import ROUNDING_NOISE
from streameval.core.paired_tallies import (
    PairBatch,
    Tally,
    make_tally,
    tally_from_state,
    validate_losses,
)

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


def _measures(
    z: float, n: int, q: float, n01: float, n10: float, weight=None, squares=None
) -> dict[str, float]:
    """The measures of one estimator from its tally's summary
    (:meth:`~streameval.core.paired_tallies.Tally.summary`); ``weight`` and ``squares``: Σw and
    Σw² of the pairs covered (n when omitted)."""
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
        self._tallies: dict[str, Tally] = {spec.name: make_tally(spec) for spec in specs}

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
        batch = PairBatch.of(loss_a, loss_b)
        for tally in self._tallies.values():
            tally.update(batch)

    def measures(self, confidence: float = DEFAULT_CONFIDENCE) -> dict[str, dict[str, float]]:
        """``{estimator: {name: value}}`` for the names of :data:`COMPARISON_MEASURES`; the
        interval of ``accuracy_difference`` at ``confidence`` (default 0.95)."""
        z = normal_quantile(confidence)
        return {name: _measures(z, *tally.summary()) for name, tally in self._tallies.items()}

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
            comparison._tallies[name] = tally_from_state(name, tally_state)
        return comparison
