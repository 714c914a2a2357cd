"""Everything the service computes for one pair of models: their comparison on the
instances both predicted (:class:`~streameval.core.compare.ModelComparison` under every
estimator), who leads, and whether it is still warming up."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from streameval.core.compare import ModelComparison, leader
from streameval.core.evaluator import DEFAULT_ESTIMATORS
from streameval.core.forgetting import EstimatorSpec, parse_estimators
from streameval.core.intervals import DEFAULT_CONFIDENCE
from streameval.core.outcome import Outcome

__all__ = ["PairEvaluator"]


class PairEvaluator:
    """Q statistic and signed McNemar of two models over the instances both predicted.

    Each model's 0-1 loss is that of its final prediction. Outcomes of both models for one
    instance come out of the same resolution of the join, so :meth:`update` pairs them within
    the batch it is given.

    Examples
    --------
    >>> from streameval.core.outcome import Outcome
    >>> pair = PairEvaluator("champion", "challenger", estimators=["cumulative"])
    >>> pair.update([  # returns how many pairs it found
    ...     Outcome("champion", "i1", 1, (0,), (0,), 0, 5),
    ...     Outcome("challenger", "i1", 1, (0,), (1,), 0, 5),
    ...     Outcome("challenger", "i2", 0, (0,), (0,), 0, 5),  # champion did not predict i2
    ... ])
    1
    >>> m = pair.measures()["cumulative"]
    >>> m["n"], m["n01"], m["n10"], m["mcnemar"], m["leader"]
    (1, 1.0, 0.0, 1.0, 'challenger')

    References
    ----------
    Gama, Sebastião, Rodrigues (2013), §4.
    """

    def __init__(
        self,
        model_a: str,
        model_b: str,
        estimators: Sequence[str | EstimatorSpec] = DEFAULT_ESTIMATORS,
    ) -> None:
        if model_a == model_b:
            raise ValueError(f"comparison {model_a!r} vs {model_b!r}: pick two different models")
        self.model_a, self.model_b = model_a, model_b
        self.specs = parse_estimators(estimators)
        self.estimators = tuple(spec.name for spec in self.specs)
        self._comparison = ModelComparison(estimators=self.specs)
        self._n = 0

    @property
    def n(self) -> int:
        """Paired instances seen."""
        return self._n

    @property
    def key(self) -> str:
        """The pair's key on the comparisons topic: ``a|b``."""
        return f"{self.model_a}|{self.model_b}"

    def pairs(self, outcomes: Iterable[Outcome]) -> list[tuple[Outcome, Outcome]]:
        """The (A, B) outcome pairs of the instances both models predicted, in B's order.

        One resolution of an instance gives all its models' outcomes the same ``due``: an id
        used again later (a new incarnation, resolved later) is a different instance, so
        outcomes pair by (instance_id, due), never across incarnations — whatever the calls.
        """
        outcomes = list(outcomes)
        a, b = self.model_a, self.model_b
        of_a = {(o.instance_id, o.due): o for o in outcomes if o.model_id == a}
        return [
            (of_a[o.instance_id, o.due], o)
            for o in outcomes
            if o.model_id == b and (o.instance_id, o.due) in of_a
        ]

    def update_pairs(self, pairs: Sequence[tuple[Outcome, Outcome]]) -> None:
        """Add pairs found by :meth:`pairs` (final predictions' 0-1 losses)."""
        if pairs:
            # labels[-1] is the final prediction (a field, cheaper than the .final property)
            errors_a = np.fromiter((a.labels[-1] != a.y_true for a, _ in pairs), dtype=np.float64)
            errors_b = np.fromiter((b.labels[-1] != b.y_true for _, b in pairs), dtype=np.float64)
            self._comparison.update(errors_a, errors_b)
            self._n += len(pairs)

    def update(self, outcomes: Iterable[Outcome]) -> int:
        """Add the pairs found among ``outcomes``; return how many."""
        pairs = self.pairs(outcomes)
        self.update_pairs(pairs)
        return len(pairs)

    def measures(
        self, confidence: float = DEFAULT_CONFIDENCE, min_n: float = 0.0
    ) -> dict[str, dict[str, Any]]:
        """Per estimator: n, q_statistic, mcnemar, n01, n10, significant, the accuracy
        difference (B − A) with its bounds at ``confidence``, ``leader`` and ``warming_up``
        (the pairs' effective number below ``min_n``)."""
        out = self._comparison.measures(confidence)
        for values in out.values():
            values["leader"] = leader(values, self.model_a, self.model_b)
            values["warming_up"] = values["n_kish"] < min_n
        return out

    def state(self) -> dict[str, Any]:
        return {
            "model_a": self.model_a,
            "model_b": self.model_b,
            "estimators": list(self.estimators),
            "comparison": self._comparison.state(),
            "n": self._n,
        }

    @classmethod
    def from_state(
        cls, state: dict[str, Any], estimators: Sequence[str | EstimatorSpec] | None = None
    ) -> PairEvaluator:
        """Rebuild from :meth:`state`; with ``estimators``, continue under them (those of
        the state go on, the others start empty; every one of the state must be among them)."""
        specs = parse_estimators(state["estimators"] if estimators is None else estimators)
        pair = cls(state["model_a"], state["model_b"], specs)
        pair._comparison = ModelComparison.from_state(state["comparison"], specs)
        pair._n = state["n"]
        return pair
