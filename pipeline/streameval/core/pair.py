"""Everything the service computes for one pair of models: their comparison on the
instances both predicted (:class:`~streameval.core.compare.ModelComparison` under every
estimator), who leads, whether it is still warming up, and, on the instances both scored, the
difference of their log-losses with its interval
(:class:`~streameval.core.paired_mean.PairedMean`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from streameval.core.compare import ModelComparison, leader
from streameval.core.evaluator import DEFAULT_ESTIMATORS
from streameval.core.forgetting import EstimatorSpec, parse_estimators
from streameval.core.intervals import DEFAULT_CONFIDENCE, normal_quantile
from streameval.core.outcome import Outcome
from streameval.core.paired_mean import PairedMean
from streameval.core.probabilistic import EPSILON

__all__ = ["PairEvaluator"]


class PairEvaluator:
    """Q statistic and signed McNemar of two models over the instances both predicted.

    Each model's 0-1 loss is that of its final prediction. Outcomes of both models for one
    instance come out of the same resolution of the join, so :meth:`update` pairs them within
    the batch it is given. When both final predictions of a pair have scores, the pair also
    enters the log-loss difference log_loss(A) − log_loss(B) (> 0: B is better, the sign of
    the accuracy difference), its estimators counting scored pairs only (``n_scored``).

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
        self._log_loss: dict[str, PairedMean] = {}  # from the first scored pair on
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
            scored = [(a, b) for a, b in pairs if _final_scores(a) and _final_scores(b)]
            if scored:
                if not self._log_loss:
                    self._log_loss = {spec.name: PairedMean(spec) for spec in self.specs}
                differences = _log_loss([a for a, _ in scored]) - _log_loss([b for _, b in scored])
                for mean in self._log_loss.values():
                    mean.update(differences)

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
        (the pairs' effective number below ``min_n``); once a pair had scores on both sides,
        ``n_scored`` and ``log_loss_difference`` (A − B) with its bounds."""
        out = self._comparison.measures(confidence)
        z = normal_quantile(confidence)
        for name, values in out.items():
            values["leader"] = leader(values, self.model_a, self.model_b)
            values["warming_up"] = values["n_kish"] < min_n
            mean = self._log_loss.get(name)
            if mean is not None:
                values["n_scored"] = mean.n
                difference, low, high = mean.interval(z)
                values["log_loss_difference"] = difference
                values["log_loss_difference_lo"] = low
                values["log_loss_difference_hi"] = high
        return out

    def state(self) -> dict[str, Any]:
        return {
            "model_a": self.model_a,
            "model_b": self.model_b,
            "estimators": list(self.estimators),
            "comparison": self._comparison.state(),
            "n": self._n,
            "log_loss": {name: mean.state() for name, mean in self._log_loss.items()},
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
        saved = state.get("log_loss", {})  # states written before scores have none
        if saved:
            pair._log_loss = {
                spec.name: (
                    PairedMean.from_state(spec, saved[spec.name])
                    if spec.name in saved
                    else PairedMean(spec)
                )
                for spec in specs
            }
        return pair


def _final_scores(outcome: Outcome):
    """The scores of the outcome's final prediction (None or () when it had none)."""
    return outcome.scores[-1] if outcome.scores else None


def _log_loss(outcomes: Sequence[Outcome]) -> np.ndarray:
    """−ln p of each outcome's true class under its final prediction's scores (a class they do
    not name has p = 0), p clipped to [ε, 1 − ε] as the model's own log-loss clips it."""
    p = np.fromiter(
        (_probability(o.scores[-1], o.y_true) for o in outcomes),
        dtype=np.float64,
        count=len(outcomes),
    )
    return -np.log(np.clip(p, EPSILON, 1.0 - EPSILON))


def _probability(scores, label) -> float:
    for i in range(0, len(scores), 2):
        if scores[i] == label:
            return scores[i + 1]
    return 0.0
