"""The evaluator of one model and one view: labels in, every measure out."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from streameval.core.estimators import ConfusionEstimator, make_estimator
from streameval.core.forgetting import EstimatorSpec, check_continued, parse_estimators
from streameval.core.intervals import DEFAULT_CONFIDENCE
from streameval.core.labels import DEFAULT_MAX_CLASSES, Label, LabelEncoder
from streameval.core.measures import ConfusionSnapshot, compute_measures
from streameval.core.outcome_batches import persistence, validate_outcomes

__all__ = ["DEFAULT_ESTIMATORS", "Evaluator"]

#: Estimators of an evaluator unless configured otherwise (docs/replay.md, "Settings").
DEFAULT_ESTIMATORS = ("cumulative", "window:1000", "fading:0.999")


class Evaluator:
    """Every configured estimator of one model and one view, fed with class labels.

    Parameters
    ----------
    estimators
        :class:`~streameval.core.forgetting.EstimatorSpec` values or their names:
        ``cumulative``, ``window:W``, ``fading:a``. Default: cumulative, a window of
        1000 outcomes and fading factor 0.999.
    positive_label
        The class whose binary precision, recall and F1 are reported too (optional).
    max_classes
        Cap on the number of distinct classes (default 1000).
    labels
        A label encoder to share with other evaluators of the same model (for example the
        initial and final views), so that a class has one index everywhere.

    Examples
    --------
    >>> ev = Evaluator(estimators=["cumulative", "window:3"], positive_label="fraud")
    >>> ev.update(["ok", "ok", "fraud", "ok"], ["ok", "fraud", "fraud", "ok"])
    >>> m = ev.measures()
    >>> sorted(m)
    ['cumulative', 'window:3']
    >>> m["cumulative"]["accuracy"], m["window:3"]["accuracy"], m["window:3"]["n"]
    (0.75, 0.6666666666666666, 3)
    >>> m["cumulative"]["precision_positive"], m["cumulative"]["recall[fraud]"]
    (0.5, 1.0)

    References
    ----------
    Gama, Sebastião, Rodrigues (2013) for the estimators; Žliobaitė et al. (2015) and
    Brzezinski et al. for the measures (see :mod:`streameval.core.measures`).
    """

    def __init__(
        self,
        estimators: Sequence[str | EstimatorSpec] = DEFAULT_ESTIMATORS,
        positive_label: Label | None = None,
        max_classes: int = DEFAULT_MAX_CLASSES,
        labels: LabelEncoder | None = None,
    ) -> None:
        self.specs = parse_estimators(estimators)
        self.estimators = tuple(spec.name for spec in self.specs)
        self.positive_label = positive_label
        self.max_classes = max_classes
        self._labels = LabelEncoder(max_classes=max_classes) if labels is None else labels
        self._estimators: dict[str, ConfusionEstimator] = {}
        for spec in self.specs:
            self._estimators[spec.name] = make_estimator(spec, max_classes=max_classes)
        if positive_label is not None:
            self._labels.encode([positive_label])  # validates it and gives it a stable index

    @property
    def labels(self) -> LabelEncoder:
        """The label encoder (class names in index order)."""
        return self._labels

    @property
    def names(self) -> list[str]:
        """Wire names of the estimators, in configured order."""
        return list(self._estimators)

    def update(self, y_true: Iterable[Label], y_pred: Iterable[Label]) -> None:
        """Add a batch of outcomes (true and predicted labels, oldest first).

        All-or-nothing: a batch with a bad label, or mismatched lengths, raises ``ValueError``
        and changes nothing.
        """
        y_true = y_true if isinstance(y_true, list | tuple) else list(y_true)
        y_pred = y_pred if isinstance(y_pred, list | tuple) else list(y_pred)
        if len(y_true) != len(y_pred):
            raise ValueError(
                f"y_true has {len(y_true)} outcomes but y_pred has {len(y_pred)}; "
                "they must have the same length"
            )
        labels = self._labels
        true_codes = labels.lookup(y_true)
        pred_codes = labels.lookup(y_pred) if true_codes is not None else None
        if pred_codes is None:  # a new class: encode both at once, all or nothing, and
            # number new classes in outcome order, so that no index depends on batch boundaries
            codes = labels.encode([x for pair in zip(y_true, y_pred, strict=True) for x in pair])
            true_codes, pred_codes = codes[0::2], codes[1::2]
        self.update_indices(true_codes, pred_codes)

    def update_indices(self, y_true: np.ndarray, y_pred: np.ndarray) -> None:
        """Add a batch already encoded with :attr:`labels`."""
        y_true, y_pred = validate_outcomes(y_true, y_pred, len(self._labels))
        if not y_true.size:
            return
        # every estimator sees the same stream: score the no-change predictor once per
        # previous label (one, but for an estimator added to a model with a history, whose
        # first outcome has none: :meth:`from_state`)
        flags_after: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        k = len(self._labels)
        for estimator in self._estimators.values():
            last = estimator.last_label
            flags = flags_after.get(last)
            if flags is None:
                flags = flags_after[last] = persistence(y_true, last)
            estimator.apply(y_true, y_pred, k, *flags)

    def snapshots(self) -> dict[str, ConfusionSnapshot]:
        """The current estimate of every estimator."""
        return {name: est.snapshot() for name, est in self._estimators.items()}

    def measures(
        self, confidence: float = DEFAULT_CONFIDENCE, min_n: float = 0.0
    ) -> dict[str, dict[str, Any]]:
        """``{estimator: {measure: value}}``, NaN where a measure is undefined; the interval
        bounds at ``confidence``, and ``warming_up`` (a bool) while the estimate's effective
        sample size ``n_kish`` is below ``min_n`` (docs/measures.md, "Intervals")."""
        labels = self._labels.classes
        positive = None
        if self.positive_label is not None:
            positive = self._labels.index(self.positive_label)
        out: dict[str, dict[str, Any]] = {}
        for name, est in self._estimators.items():
            values: dict[str, Any] = compute_measures(
                est.snapshot(),
                labels=labels,
                positive=positive,
                n_classes=len(labels),
                confidence=confidence,
            )
            values["warming_up"] = values["n_kish"] < min_n
            out[name] = values
        return out

    def state(self) -> dict[str, Any]:
        """A JSON-ready snapshot of the whole evaluator."""
        return {
            "estimators": list(self.estimators),
            "positive_label": self.positive_label,
            "labels": self._labels.state(),
            "state": {name: est.state() for name, est in self._estimators.items()},
        }

    @classmethod
    def from_state(
        cls, state: dict[str, Any], estimators: Sequence[str | EstimatorSpec] | None = None
    ) -> Evaluator:
        """Rebuild an evaluator from :meth:`state`; with ``estimators``, continue under them:
        each one the state has goes on, one it lacks starts empty, as if it had been there
        from the next outcome on (its persistent baseline scores none before its second).
        Every estimator of the state must be among them (ValueError: its history would go).

        >>> ev = Evaluator(estimators=["cumulative"])
        >>> ev.update(["a", "b", "b"], ["a", "b", "a"])
        >>> more = Evaluator.from_state(ev.state(), ["cumulative", "window:2"])
        >>> more.update(["a"], ["a"])
        >>> m = more.measures()
        >>> m["cumulative"]["n"], m["window:2"]["n"], m["window:2"]["accuracy"]
        (4, 1, 1.0)
        """
        labels = LabelEncoder.from_state(state["labels"])
        saved = state["state"]
        specs = parse_estimators(state["estimators"] if estimators is None else estimators)
        check_continued(state["estimators"], specs)
        evaluator = cls(
            estimators=specs,
            positive_label=state["positive_label"],
            max_classes=labels.max_classes,
        )
        evaluator._labels = labels
        evaluator._estimators = {
            spec.name: ConfusionEstimator.from_state(saved[spec.name])
            if spec.name in saved
            else make_estimator(spec, max_classes=labels.max_classes)
            for spec in specs
        }
        return evaluator
