"""What a model's mistakes cost: expected cost per decision, beside its baselines' costs.

A model may be given a cost matrix by class name: ``C[i][j]`` is the cost of predicting ``j``
when the truth is ``i`` (a benefit is a negative cost). For every estimator and view its
outcomes then also have

``expected_cost``
    Σ_t w_t·C[y_t, ŷ_t] / Σ_t w_t, the mean cost per decision under the estimator's weights w
    (1; 1 in the window of the last W outcomes; a^(t−i) under fading), read from the
    estimate's confusion matrix: Σ_ij C_ij·N_ij / Σ_ij N_ij (Elkan 2001, *The foundations of
    cost-sensitive learning*, IJCAI: the expected cost of a decision, eq. (1), here averaged
    over the decisions taken; his C(i, j) is indexed predicted, true: the transpose of ours).
``expected_cost_lo``, ``expected_cost_hi``
    Its normal interval at the configured confidence, with the weighted sample variance and
    Kish's effective sample size as for every mean of the core
    (:func:`~streameval.core.paired_mean.paired_mean_interval`), clipped to the smallest and
    largest cost of the matrix (no mean of costs lies outside them).
``cost_majority``
    The mean cost of always predicting the majority class of the same estimate — the class
    with the largest (weighted) count of true labels, the cheapest of them on a tie — on the
    same outcomes: Σ_i N_i·C[i, m] / N (the baseline of κ_M, Bifet et al. 2015).
``cost_no_change``
    The mean cost of the no-change (persistent) predictor, which predicts the previous true
    label, on the same outcomes but the first of the stream: Σ_t w_t·C[y_t, y_(t−1)] / Σ_t w_t
    (the baseline of κ_per, Žliobaitė et al. 2015, §3). It needs the counts of label
    transitions (y_t, y_(t−1)), which only a model with a cost matrix keeps
    (:class:`Transitions`).

A class that the matrix does not name has no cost: a value that would need one (of a held
outcome's truth or prediction for the expected cost, of a truth for the majority baseline, of a
truth or the previous truth for the no-change baseline) is NaN (undefined), never a guess.
docs/measures.md, "Cost", has the definitions and the choices.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from streameval.core.estimators import ConfusionEstimator, make_estimator
from streameval.core.forgetting import EstimatorSpec
from streameval.core.labels import Label
from streameval.core.measures import ConfusionSnapshot
from streameval.core.paired_mean import paired_mean_interval

__all__ = ["COST_MEASURES", "CostMatrix", "Transitions", "cost_measures"]

NAN = math.nan

#: The cost measures of an estimate of a model with a cost matrix, in a stable order
COST_MEASURES = (
    "expected_cost",
    "expected_cost_lo",
    "expected_cost_hi",
    "cost_majority",
    "cost_no_change",
)


class CostMatrix:
    """A model's costs by class name: ``costs[true][predicted]``, validated.

    Every class named (as a true or a predicted class) gets a row and a column; each cell off
    the diagonal must be given, a cell on it is 0 unless given (a right decision costs nothing
    by default). Costs are finite numbers; a negative one is a benefit. Class names are strings
    (TOML keys): the class ``1`` of integer labels is written ``"1"``.

    Examples
    --------
    >>> matrix = CostMatrix({"fraud": {"ok": 100}, "ok": {"fraud": 1}})
    >>> matrix.classes, matrix.cost("fraud", "ok"), matrix.cost("ok", "ok")
    (('fraud', 'ok'), 100.0, 0.0)
    >>> CostMatrix({"fraud": {"ok": 100}, "ok": {"spam": 1}})
    Traceback (most recent call last):
    ...
    ValueError: the cost matrix lacks costs.fraud.spam, costs.ok.fraud, costs.spam.fraud, \
costs.spam.ok; give the cost of every pair of the classes it names \
(costs.<true class>.<predicted class>; a missing diagonal cell is 0)
    """

    def __init__(self, costs: Mapping[str, Mapping[str, Any]]) -> None:
        if not isinstance(costs, Mapping) or not costs:
            raise ValueError(
                f"costs={costs!r} is not allowed; use a table of tables of numbers by class "
                "name: costs.<true class> = { <predicted class> = <cost>, ... }"
            )
        classes: dict[str, None] = {}
        cells: dict[tuple[str, str], float] = {}
        for true, row in costs.items():
            if not isinstance(row, Mapping):
                raise ValueError(
                    f"costs.{true} = {row!r} is not allowed; use a table of costs by "
                    f"predicted class, e.g. costs.{true} = {{ other = 1 }}"
                )
            classes[str(true)] = None
            for predicted, value in row.items():
                classes[str(predicted)] = None
                if (
                    isinstance(value, bool)
                    or not isinstance(value, int | float)
                    or not math.isfinite(value)
                ):
                    raise ValueError(
                        f"costs.{true}.{predicted} = {value!r} is not allowed; use a finite "
                        "number (a negative cost is a benefit)"
                    )
                cells[str(true), str(predicted)] = float(value)
        missing = [(i, j) for i in classes for j in classes if i != j and (i, j) not in cells]
        if missing:
            raise ValueError(
                "the cost matrix lacks "
                + ", ".join(f"costs.{i}.{j}" for i, j in missing)
                + "; give the cost of every pair of the classes it names "
                "(costs.<true class>.<predicted class>; a missing diagonal cell is 0)"
            )
        self.classes = tuple(classes)
        self._cells = {(i, j): cells.get((i, j), 0.0) for i in self.classes for j in self.classes}
        values = self._cells.values()
        self.lowest, self.highest = min(values), max(values)

    def cost(self, true: Label, predicted: Label) -> float:
        """The cost of predicting ``predicted`` when the truth is ``true`` (KeyError: a class
        the matrix does not name)."""
        return self._cells[str(true), str(predicted)]

    def table(self) -> dict[str, dict[str, float]]:
        """The whole matrix as nested mappings (what a model's settings record)."""
        return {i: {j: self._cells[i, j] for j in self.classes} for i in self.classes}

    def dense(self, labels: Sequence[Label]) -> np.ndarray:
        """The k×k matrix of the classes ``labels`` (by index), NaN in a row or column of a class
        the matrix does not name."""
        index = {name: i for i, name in enumerate(self.classes)}
        at = np.array([index.get(str(label), -1) for label in labels], dtype=np.int64)
        full = np.array([[self._cells[i, j] for j in self.classes] for i in self.classes])
        known = at >= 0
        dense = np.full((len(at), len(at)), NAN)
        rows = np.flatnonzero(known)
        dense[np.ix_(rows, rows)] = full[np.ix_(at[known], at[known])]
        return dense

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CostMatrix) and self.table() == other.table()

    def __repr__(self) -> str:
        return f"CostMatrix({self.table()!r})"


def _weighted(counts: np.ndarray, costs: np.ndarray) -> tuple[float, float] | None:
    """(Σ N_ij·C_ij, Σ N_ij·C_ij²) over the cells that hold outcomes; None when one of them
    has no cost."""
    held = counts > 0
    cells = costs[held]
    if np.isnan(cells).any():
        return None
    weights = counts[held]
    return float(weights @ cells), float(weights @ (cells * cells))


def cost_measures(
    snapshot: ConfusionSnapshot,
    transitions: np.ndarray | None,
    costs: np.ndarray,
    lowest: float,
    highest: float,
    z: float,
) -> dict[str, float]:
    """:data:`COST_MEASURES` of one estimate.

    ``snapshot`` is the model's estimate, ``transitions`` the counts of (y_t, y_(t−1)) under
    the same estimator (None: not kept), ``costs`` the dense matrix of :meth:`CostMatrix.dense`
    (at least as many classes as either), ``lowest`` and ``highest`` the bounds of the matrix's
    costs, ``z`` the normal quantile of the intervals.

    >>> snap = ConfusionSnapshot(np.array([[9, 2], [1, 8]]), 0, 0, 20, 20.0)
    >>> costs = np.array([[0.0, 1.0], [5.0, 0.0]])
    >>> out = cost_measures(snap, np.array([[7, 3], [3, 6]]), costs, 0.0, 5.0, 1.96)
    >>> [round(out[k], 6) for k in COST_MEASURES]
    [0.35, 0.0, 0.848184, 2.25, 0.947368]
    """
    out = dict.fromkeys(COST_MEASURES, NAN)
    counts = np.asarray(snapshot.confusion, dtype=np.float64)
    k = counts.shape[0]
    total = float(counts.sum())
    if total > 0:
        square = costs[:k, :k]
        sums = _weighted(counts, square)
        if sums is not None:
            if snapshot.squares is None:  # every weight 1: Σw² = Σw
                squares = total
            else:
                squares = float(snapshot.squares[:k].sum())  # Σw² over the true classes
            mean, low, high = paired_mean_interval(total, squares, sums[0], sums[1], z)
            out["expected_cost"] = mean
            out["expected_cost_lo"] = low if low != low else min(max(low, lowest), mean)
            out["expected_cost_hi"] = high if high != high else max(min(high, highest), mean)
        true = counts.sum(axis=1)
        held = true > 0
        if not np.isnan(np.diagonal(square)[held]).any():  # every true class has costs
            tied = np.flatnonzero(true == true.max())  # a tie: the cheapest of them
            cheapest = min(float(true[held] @ square[held, m]) for m in tied)
            out["cost_majority"] = cheapest / total
    if transitions is not None:
        moves = np.asarray(transitions, dtype=np.float64)
        scored = float(moves.sum())
        size = moves.shape[0]
        if scored > 0:
            sums = _weighted(moves, costs[:size, :size])
            if sums is not None:
                out["cost_no_change"] = sums[0] / scored
    return out


class Transitions:
    """The counts of label transitions (y_t, y_(t−1)) of one model under every estimator.

    Each estimator is a confusion estimator of its kind fed the pair (true label, previous true
    label) of every outcome but the stream's first: its confusion matrix is the no-change
    predictor's, with the weights the model's estimate gives the same outcomes (the window of
    the last W outcomes holds the last W pairs, or all but the first outcome while it fills;
    under fading the pair of outcome t weighs a^(n−t) as the outcome does). Like the model's own
    estimators, one added to a model with a history starts empty, its first outcome without a
    previous label.

    >>> moves = Transitions([EstimatorSpec.parse("cumulative")])
    >>> moves.update(np.array([0, 0, 1]), 2)
    >>> moves.update(np.array([1, 0]), 2)
    >>> moves.counts("cumulative").tolist()
    [[1, 1], [1, 1]]
    """

    def __init__(self, specs: Sequence[EstimatorSpec], max_classes: int | None = None) -> None:
        extra = {} if max_classes is None else {"max_classes": max_classes}
        self._estimators: dict[str, ConfusionEstimator] = {
            spec.name: make_estimator(spec, **extra) for spec in specs
        }

    def update(self, y_true: np.ndarray, n_classes: int) -> None:
        """Add a non-empty batch of true class indices (below ``n_classes``), oldest first."""
        for estimator in self._estimators.values():
            previous = np.empty_like(y_true)
            previous[0] = estimator.last_label
            previous[1:] = y_true[:-1]
            if previous[0] < 0:  # the stream's first outcome: no previous label
                true, previous = y_true[1:], previous[1:]
            else:
                true = y_true
            if true.size:
                none = np.zeros(true.size, dtype=bool)  # the pairs' own no-change flags: unused
                estimator.apply(true, previous, n_classes, none, none)
            else:
                estimator.last_label = int(y_true[-1])

    def counts(self, name: str) -> np.ndarray:
        """The k×k counts (faded under fading) of (y_t, y_(t−1)) under estimator ``name``."""
        return self._estimators[name].snapshot().confusion

    def state(self) -> dict[str, Any]:
        return {name: est.state() for name, est in self._estimators.items()}

    @classmethod
    def from_state(
        cls, state: Mapping[str, Any], specs: Sequence[EstimatorSpec], max_classes: int
    ) -> Transitions:
        """Those of ``specs`` that ``state`` has go on; the others start empty (and the state's
        others are dropped: only the model's estimators are read)."""
        moves = cls(specs, max_classes)
        for name in moves._estimators:
            if name in state:
                moves._estimators[name] = ConfusionEstimator.from_state(state[name])
        return moves
