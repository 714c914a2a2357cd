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

__all__ = ["ScoredViews", "named_classes", "score_classes", "view_scores"]


def view_scores(scores: Sequence[tuple[Scores | None, ...]]) -> dict[str, list[Scores | None]]:
    """Per view, the scores each outcome's view takes (None: none): the initial view its first
    prediction's, the final view its last's; the same list when no outcome was re-predicted."""
    first = [entries[0] if entries else None for entries in scores]
    if max(map(len, scores)) <= 1:
        return {"initial": first, "final": first}
    return {"initial": first, "final": [entries[-1] if entries else None for entries in scores]}


def score_classes(scores: Sequence[tuple[Scores | None, ...]]) -> list[tuple]:
    """The classes each outcome's scores name, every prediction's in timeline order (a model
    discovers them after the outcome's truth and predictions)."""
    return [
        tuple(chain.from_iterable(entry[0::2] for entry in entries if entry is not None))
        for entries in scores
    ]


def named_classes(scores: Sequence[tuple[Scores | None, ...]]) -> list:
    """Every class the outcomes' scores name (with repeats), at C speed."""
    return list(chain.from_iterable(filter(None, chain.from_iterable(scores))))[0::2]


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
        #: each view's batch of the latest update (None: none of its outcomes had scores)
        self.last: dict[str, ScoredBatch | None] = {}

    def update(
        self,
        y_true: np.ndarray,
        views: dict[str, list[Scores | None]],
        labels: LabelEncoder,
        positive: int | None,
    ) -> None:
        """Add a batch: ``y_true`` the class codes, ``views`` the scores each view takes of
        each outcome (:func:`view_scores`), ``labels`` the model's classes (every class the
        scores name is known), ``positive`` the positive class's code (None: none, or not seen
        yet)."""
        k = len(labels)
        if self.positive:
            track = [] if positive is None else [positive]
        else:
            track = list(range(k))
        batches: dict[int, ScoredBatch | None] = {}
        self.last = {}
        for view, entries in views.items():
            key = id(entries)
            if key not in batches:  # the views share one list when nothing was re-predicted
                batches[key] = self._batch(y_true, entries, labels, k)
            batch = self.last[view] = batches[key]
            if batch is None:
                # none of the batch's outcomes has scores in this view; its estimators still
                # track the classes the others named, as they would with the batch cut
                # elsewhere (the states are then the same bits for any split)
                for estimator in self._views.get(view, {}).values():
                    estimator.track(track)
                continue
            estimators = self._views.get(view)
            if estimators is None:
                estimators = self._views[view] = {
                    spec.name: ScoreEstimator(spec, self.ece_bins, self.auc_max_values)
                    for spec in self.specs
                }
            for estimator in estimators.values():
                estimator.update(batch, track)

    def _batch(
        self, y_true: np.ndarray, entries: list[Scores | None], labels: LabelEncoder, k: int
    ) -> ScoredBatch | None:
        """The outcomes with scores among ``entries`` as one batch (None: none has)."""
        if None in entries:
            rows = [i for i, entry in enumerate(entries) if entry is not None]
            if not rows:
                return None
            y_true = y_true[rows]
            entries = [entries[i] for i in rows]
        m = len(entries)
        flat = list(chain.from_iterable(entries))
        classes = labels.lookup(flat[0::2])
        probabilities = np.array(flat[1::2], dtype=np.float64)
        sizes = np.fromiter(map(len, entries), dtype=np.int64, count=m) // 2
        proba = np.zeros((m, k))
        proba[np.repeat(np.arange(m), sizes), classes] = probabilities
        return ScoredBatch.of(y_true, proba, self.ece_bins)

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
