"""The probabilistic measures of a model's initial and final views, from its predictions' scores.

A view's :class:`~streameval.core.probabilistic.ScoreEstimator` s (one per configured estimator)
start at the view's first outcome whose prediction has scores — the initial view's first
prediction, the final view's last — and take only such outcomes; a model whose predictions
never have scores has none, and its records and series are those of a model without them.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np

from streameval.core.forgetting import EstimatorSpec
from streameval.core.labels import LabelEncoder
from streameval.core.outcome import Scores
from streameval.core.probabilistic import DEFAULT_ECE_BINS, ScoredBatch, ScoreEstimator
from streameval.core.roc_auc import DEFAULT_AUC_MAX_VALUES

__all__ = ["ScoredViews", "score_classes"]

#: which prediction of the timeline each view takes its scores from
_AT = {"initial": 0, "final": -1}


def score_classes(scores: Sequence[tuple[Scores | None, ...]]) -> list[tuple]:
    """The classes each outcome's scores name, its predictions in timeline order (a model
    discovers them after the outcome's truth and predictions)."""
    return [
        tuple(chain.from_iterable(entry[0::2] for entry in entries if entry is not None))
        for entries in scores
    ]


class ScoredViews:
    """Log-loss, Brier score, calibration and ROC AUC of the initial and final views.

    Parameters
    ----------
    specs
        The model's estimators.
    ece_bins, auc_max_values
        Settings of every :class:`~streameval.core.probabilistic.ScoreEstimator`.
    positive
        Whether the model has a positive class: then the AUC is that class's, else the
        one-vs-rest average over its classes.
    """

    def __init__(
        self,
        specs: Sequence[EstimatorSpec],
        ece_bins: int = DEFAULT_ECE_BINS,
        auc_max_values: int = DEFAULT_AUC_MAX_VALUES,
        positive: bool = False,
    ) -> None:
        self.specs = tuple(specs)
        self.ece_bins = ece_bins
        self.auc_max_values = auc_max_values
        self.positive = positive
        self._views: dict[str, dict[str, ScoreEstimator]] = {}

    def update(
        self,
        y_true: np.ndarray,
        scores: Sequence[tuple[Scores | None, ...]],
        labels: LabelEncoder,
        positive: int | None,
    ) -> None:
        """Add a batch: ``y_true`` the class codes, ``scores`` each outcome's (``()``: none),
        ``labels`` the model's classes (every class the scores name is known), ``positive``
        the positive class's code (None: none, or not seen yet)."""
        k = len(labels)
        if self.positive:
            track = [] if positive is None else [positive]
        else:
            track = list(range(k))
        for view, at in _AT.items():
            rows = [i for i, entries in enumerate(scores) if entries and entries[at] is not None]
            if not rows:
                continue
            entries = [scores[i][at] for i in rows]
            classes = labels.lookup(list(chain.from_iterable(e[0::2] for e in entries)))
            probabilities = np.fromiter(
                chain.from_iterable(e[1::2] for e in entries), dtype=np.float64
            )
            sizes = np.fromiter((len(e) // 2 for e in entries), dtype=np.int64, count=len(rows))
            proba = np.zeros((len(rows), k))
            proba[np.repeat(np.arange(len(rows)), sizes), classes] = probabilities
            batch = ScoredBatch.of(y_true[rows], proba, self.ece_bins)
            estimators = self._views.get(view)
            if estimators is None:
                estimators = self._views[view] = {
                    spec.name: ScoreEstimator(spec, self.ece_bins, self.auc_max_values)
                    for spec in self.specs
                }
            for estimator in estimators.values():
                estimator.update(batch, track)

    def measures(self, view: str, positive: int | None) -> dict[str, dict[str, Any]]:
        """``{estimator: {measure: value}}`` of a view ({} before its first scored outcome)."""
        return {
            name: estimator.measures(positive)
            for name, estimator in self._views.get(view, {}).items()
        }

    def state(self) -> dict[str, Any]:
        return {
            view: {name: estimator.state() for name, estimator in estimators.items()}
            for view, estimators in self._views.items()
        }

    @classmethod
    def from_state(
        cls,
        state: dict[str, Any],
        specs: Sequence[EstimatorSpec],
        ece_bins: int = DEFAULT_ECE_BINS,
        auc_max_values: int = DEFAULT_AUC_MAX_VALUES,
        positive: bool = False,
    ) -> ScoredViews:
        """Rebuild from :meth:`state`; an estimator of ``specs`` the state lacks starts at the
        next scored outcome (the state's estimators must all be among ``specs``)."""
        views = cls(specs, ece_bins, auc_max_values, positive)
        for view, saved in state.items():
            views._views[view] = {
                spec.name: (
                    ScoreEstimator.from_state(saved[spec.name])
                    if spec.name in saved
                    else ScoreEstimator(spec, ece_bins, auc_max_values)
                )
                for spec in views.specs
            }
        return views
