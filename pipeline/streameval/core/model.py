"""Everything the service computes for one model (for a pair: :mod:`streameval.core.pair`).

:class:`ModelEvaluator` turns the outcomes of one model (from :class:`~streameval.core.join.Join`)
into the initial and final views (every measure under every estimator), the delayed-label block
(Λ and Ψ_α), normalized binary measures and drift alarms.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import replace
from itertools import chain
from typing import Any

import numpy as np

from streameval.core.alarm import Alarm
from streameval.core.cost import CostMatrix, Transitions, cost_measures
from streameval.core.delayed import DelayedBatch, DelayedEvaluator, check_latency
from streameval.core.drift import (
    DEFAULT_DETECTORS,
    canonical_spec,
    detector_from_state,
    make_detector,
    saved_spec,
)
from streameval.core.evaluator import DEFAULT_ESTIMATORS, Evaluator
from streameval.core.forgetting import EstimatorSpec, parse_estimators
from streameval.core.intervals import DEFAULT_CONFIDENCE, normal_quantile
from streameval.core.label_delay import LabelDelays
from streameval.core.labels import DEFAULT_MAX_CLASSES, Label, LabelEncoder
from streameval.core.measures import ConfusionSnapshot, compute_measures
from streameval.core.normalize import normalize
from streameval.core.outcome import Outcome, Scores
from streameval.core.outcome_batches import within
from streameval.core.probabilistic import DEFAULT_ECE_BINS
from streameval.core.psi_scores import PsiScores
from streameval.core.roc_auc import DEFAULT_AUC_MAX_VALUES
from streameval.core.scored import ScoredViews, named_classes, score_classes, view_scores

__all__ = ["GATHER_MAX", "NORMALIZED_MEASURES", "VIEWS", "ModelEvaluator"]

#: A model's estimators take what it gathered once it holds at least this many outcomes, a
#: number read or not: what one update amortizes well (a larger batch saves little and costs
#: memory: the delayed block is (n, bins + 2) while it works)
GATHER_MAX = 2048

#: The two views of a model: its initial prediction and its final (test-then-train) one.
VIEWS = ("initial", "final")

#: The binary measures that get a normalized value, and their key in the measures mapping.
NORMALIZED_MEASURES = {
    "accuracy": "accuracy",
    "balanced_accuracy": "balanced_accuracy",
    "kappa": "kappa",
    "g_mean": "g_mean",
    "mcc": "mcc",
    "precision": "precision_positive",
    "recall": "recall_positive",
    "f1": "f1_positive",
}


class ModelEvaluator:
    """Initial and final views, delayed-label block, normalization and drift for one model.

    Parameters
    ----------
    model_id
        The model's name.
    estimators
        Estimator names (default cumulative, window:1000, fading:0.999).
    positive_label
        The positive class, for binary precision/recall/F1 and the normalized measures.
    max_classes
        Cap on the number of distinct classes.
    bins, alpha, bin_rule
        Settings of the delayed-label block (:class:`~streameval.core.delayed.DelayedEvaluator`).
    detectors
        Drift detector configurations (:func:`~streameval.core.drift.make_detector`); they watch
        the final view's 0-1 errors. Their alarms' ``at`` and ``change_at`` are the
        ``(instance_id, t_instance, t_label)`` of the outcome that fired and of the one where
        the change is estimated to begin (:class:`~streameval.core.alarm.Alarm`).
    normalize_max_count
        Largest estimate (in outcomes) whose normalized measures are computed: the exact
        normalization costs O(N log P) per measure and read (about 130 ms for all eight at
        100k outcomes), so larger cumulative estimates omit the ``normalized_*`` keys.
    costs
        The cost matrix by class name, ``costs[true][predicted]``
        (:class:`~streameval.core.cost.CostMatrix`): every estimate then has the expected cost
        of the model's decisions and of its majority-class and no-change baselines
        (:mod:`streameval.core.cost`). Only what :meth:`measures` reads depends on the costs;
        the label transitions the no-change baseline needs are kept while there are costs.

    Examples
    --------
    >>> from streameval.core.outcome import Outcome
    >>> ev = ModelEvaluator("fraud-v2", estimators=["cumulative"], bins=4)
    >>> alarms = ev.update([
    ...     Outcome("fraud-v2", "i1", "ok", (0, 5), ("fraud", "ok"), 0, 8),
    ...     Outcome("fraud-v2", "i2", "fraud", (1,), ("fraud",), 1, 9),
    ... ])
    >>> views = ev.measures()["views"]
    >>> views["initial"]["cumulative"]["accuracy"], views["final"]["cumulative"]["accuracy"]
    (0.5, 1.0)
    >>> ev.measures()["delayed"]["cumulative"]["binned_accuracy"]
    [0.5, 0.5, 1.0, 1.0]

    References
    ----------
    Gama et al. (2013), Žliobaitė et al. (2015), Brzezinski et al., Grzenda et al. (2020): see
    :mod:`streameval.core.measures`, :mod:`streameval.core.delayed`, :mod:`streameval.core.drift`,
    :mod:`streameval.core.normalize`.
    """

    def __init__(
        self,
        model_id: str,
        estimators: Sequence[str | EstimatorSpec] = DEFAULT_ESTIMATORS,
        positive_label: Label | None = None,
        max_classes: int = DEFAULT_MAX_CLASSES,
        bins: int = 100,
        alpha: float = 2.0,
        bin_rule: str = "vote",
        detectors: Sequence[dict[str, Any]] = DEFAULT_DETECTORS,
        normalize_max_count: int = 50_000,
        ece_bins: int = DEFAULT_ECE_BINS,
        auc_max_values: int = DEFAULT_AUC_MAX_VALUES,
        costs: CostMatrix | dict[str, dict[str, float]] | None = None,
    ) -> None:
        self.model_id = model_id
        self.normalize_max_count = normalize_max_count
        self.specs = parse_estimators(estimators)
        self.estimators = tuple(spec.name for spec in self.specs)
        self.positive_label = positive_label
        self.max_classes = max_classes
        self.bins, self.alpha, self.bin_rule = bins, alpha, bin_rule
        self.detectors = tuple(dict(d) for d in detectors)
        self.ece_bins, self.auc_max_values = ece_bins, auc_max_values
        self._labels = LabelEncoder(max_classes=max_classes)
        self._views = {
            view: Evaluator(self.specs, positive_label, max_classes, labels=self._labels)
            for view in VIEWS
        }
        self._delayed = DelayedEvaluator(self.specs, bins, alpha, bin_rule, max_classes)
        self._scored = ScoredViews(
            self.specs, ece_bins, auc_max_values, positive=positive_label is not None
        )
        self._psi = PsiScores(self.specs, bins, alpha, bin_rule)
        self.costs = costs if costs is None or isinstance(costs, CostMatrix) else CostMatrix(costs)
        self._transitions = None if self.costs is None else Transitions(self.specs, max_classes)
        self._detectors = [make_detector(spec) for spec in self.detectors]
        #: per detector, the model's outcomes before it was added (:meth:`from_state`): its
        #: alarms' indices count the model's outcomes
        self._detector_starts = [0] * len(self._detectors)
        self._n = 0
        self._latency = [0, 0, 0]  # outcomes with a latency, sum and max of t_label − t_instance
        self._delays = LabelDelays()  # t_label − t_instance by true class, a log histogram
        #: outcomes the detectors have seen and the estimators have not taken yet (:meth:`update`)
        self._gathered: list[Outcome] = []
        #: of those, how many the label delays counted already (:meth:`label_delays` counts
        #: them without the estimators' work, as a label-maturity record reads them)
        self._delays_counted = 0

    @property
    def n(self) -> int:
        """Outcomes seen."""
        return self._n

    @property
    def labels(self) -> LabelEncoder:
        return self._labels

    def update(self, outcomes: Sequence[Outcome]) -> list[Alarm]:
        """Add a batch of this model's outcomes (in resolution order); return the alarms.

        The detectors see the batch now, and its classes are known from now on (a class over
        ``max_classes``, or a label before its instance, raises ``ValueError`` and changes
        nothing); the estimators take the
        outcomes *gathered* over calls, at the latest when :data:`GATHER_MAX` have gathered
        or when a number is read (:meth:`measures`, :meth:`state`, :meth:`flush`). Every
        estimate is the same for any split of its outcomes, so this changes no number, only
        how many outcomes each of their numpy calls works on: a model among a hundred gets a
        few dozen outcomes a call, and an update costs about as much per call as per few
        hundred outcomes.
        """
        n = len(outcomes)
        if n == 0:
            return []
        # the outcomes' fields as columns, transposed at C speed (Outcome is a named tuple)
        _, ids, y_trues, _, labels, t_instances, t_labels, _, scores, _ = zip(
            *outcomes, strict=True
        )
        # what the estimators would refuse when they take it: refused now
        if any(map(operator.lt, t_labels, t_instances)):  # at C speed: rare, and it raises
            check_latency(t_instances, t_labels)
        codes = self._codes(y_trues, labels, scores)
        y_true, final = codes[:n], codes[n:]
        if final.size != n:  # re-predictions: each outcome's last
            final = final[np.cumsum(_lengths(labels)) - 1]
        self._gathered += outcomes
        if len(self._gathered) >= GATHER_MAX:
            self.flush()
        self._n += n
        errors = (final != y_true).astype(np.float64)
        places = _Places(ids, t_instances, t_labels)
        alarms = [
            alarm if not start else _shifted(alarm, start)
            for det, start in zip(self._detectors, self._detector_starts, strict=True)
            for alarm in det.update_checked(errors, places)
        ]
        return sorted(alarms, key=lambda a: a.index)

    def _codes(
        self,
        y_trues: Sequence[Label],
        labels: Sequence[Sequence[Label]],
        scores: Sequence[tuple[Scores | None, ...]],
        lengths: np.ndarray | None = None,
    ) -> np.ndarray:
        """Codes of the truths, then of every prediction; new classes added (all or nothing).
        ``lengths``: the predictions of each outcome, if known."""
        codes = self._labels.lookup([*y_trues, *chain.from_iterable(labels)])
        if codes is not None and any(scores):
            if self._labels.lookup(named_classes(scores)) is None:
                codes = None
        if codes is None:  # a new class
            extra = score_classes(scores) if any(scores) else None
            if lengths is None:
                lengths = _lengths(labels)
            codes = _discover(self._labels, y_trues, labels, lengths, extra)
        return codes

    def flush(self) -> bool:
        """Give the estimators the outcomes gathered since they last took some (every read
        does it first); whether there were any."""
        gathered = self._gathered
        if not gathered:
            return False
        self._gathered = []
        counted, self._delays_counted = self._delays_counted, 0
        self._absorb(gathered, counted)
        return True

    def _absorb(self, outcomes: Sequence[Outcome], delays_counted: int = 0) -> None:
        """The estimators' part of :meth:`update`: views, transitions, the delayed block,
        label delays (of the outcomes after the first ``delays_counted``), the scores'
        measures (the outcomes' classes are known)."""
        n = len(outcomes)
        _, _, y_trues, timelines, labels, t_instances, t_labels, _, scores, _ = zip(
            *outcomes, strict=True
        )
        lengths = _lengths(labels)
        codes = self._codes(y_trues, labels, scores, lengths)
        views = view_scores(scores) if any(scores) else None
        y_true, predicted = codes[:n], codes[n:]
        ends = np.cumsum(lengths)
        starts = ends - lengths
        initial, final = predicted[starts], predicted[ends - 1]
        times = np.fromiter(chain.from_iterable(timelines), dtype=np.int64, count=predicted.size)
        later = np.ones(predicted.size, dtype=bool)
        later[starts] = False  # every prediction after the first is a re-prediction
        t_instance = np.array(t_instances, dtype=np.int64)
        t_label = np.array(t_labels, dtype=np.int64)
        self._views["initial"].update_indices(y_true, initial)
        self._views["final"].update_indices(y_true, final)
        if self._transitions is not None:
            self._transitions.update(y_true, len(self._labels))
        self._delayed.update(
            DelayedBatch(
                y_true,
                initial,
                final,
                t_instance,
                t_label,
                np.repeat(np.arange(n), lengths - 1),
                times[later],
                predicted[later],
            )
        )
        if delays_counted < n:
            self._count_delays(
                y_true[delays_counted:], t_label[delays_counted:] - t_instance[delays_counted:]
            )
        if views is not None:
            self._scored.update(y_true, views, self._labels, self._positive_code())
            self._update_psi(y_true, scores, lengths, starts, times, t_instance, t_label)

    def measures(
        self, confidence: float = DEFAULT_CONFIDENCE, min_n: float = 0.0
    ) -> dict[str, Any]:
        """``{"n", "views": {view: {estimator: {measure: value}}}, "delayed": {...},
        "latency_ms": {...}}``; the final view also carries ``normalized_*`` values for the
        cumulative and window estimators when a positive label is configured. Interval bounds
        at ``confidence``; ``warming_up`` while an estimate's ``n_kish`` is below ``min_n``."""
        self.flush()
        views = {view: ev.measures(confidence, min_n) for view, ev in self._views.items()}
        positive_code = self._positive_code()
        for view, estimates in views.items():
            for name, values in self._scored.measures(view, positive_code).items():
                estimates[name].update(values)
        if self.positive_label is not None:
            final = self._views["final"]
            positive = self._labels.index(self.positive_label)
            for name, snapshot in final.snapshots().items():
                if not name.startswith("fading") and snapshot.n <= self.normalize_max_count:
                    views["final"][name].update(_normalized(snapshot, positive))
        if self.costs is not None:
            self._add_costs(views, normal_quantile(confidence))
        latency = self.label_delays(confidence)
        delayed = self._delayed.measures()
        for name, values in self._psi.measures().items():
            delayed[name].update(values)
        return {
            "n": self._n,
            "views": views,
            "delayed": delayed,
            "latency_ms": latency,
        }

    def label_delays(self, confidence: float = DEFAULT_CONFIDENCE) -> dict[str, Any]:
        """The ``latency_ms`` of :meth:`measures`: the mean and longest label delay, their
        quantiles overall and by true class, and whether the delay depends on the class
        (:class:`~streameval.core.label_delay.LabelDelays`, significant below
        1 − ``confidence``). Counts the gathered outcomes' delays, not the rest of their
        work: a model among a hundred gives a label-maturity record every ``every_ms`` of
        event time, and a flush each time would cost the estimators' work per call again."""
        gathered = self._gathered
        if self._delays_counted < len(gathered):
            _, _, y_trues, _, _, t_instances, t_labels, *_ = zip(
                *gathered[self._delays_counted :], strict=True
            )
            self._count_delays(
                self._labels.lookup(y_trues),  # known: update() encoded them
                np.array(t_labels, dtype=np.int64) - np.array(t_instances, dtype=np.int64),
            )
            self._delays_counted = len(gathered)
        count, total, longest = self._latency
        latency = {"mean": total / count if count else float("nan"), "max": longest}
        latency.update(self._delays.measures(self._labels.classes, alpha=1.0 - confidence))
        return latency

    def _count_delays(self, y_true: np.ndarray, latency: np.ndarray) -> None:
        """Count outcomes' label delays (true class codes, t_label − t_instance): integer
        sums and a histogram, the same for any split."""
        self._delays.update(y_true, latency)  # first: what raises here changes nothing
        self._latency[0] += latency.size
        self._latency[1] += int(latency.sum())
        self._latency[2] = max(self._latency[2], int(latency.max()))

    def _add_costs(self, views: dict[str, dict[str, dict[str, Any]]], z: float) -> None:
        """The cost measures (:mod:`streameval.core.cost`) of every view and estimator."""
        costs, moves = self.costs, self._transitions
        dense = costs.dense(self._labels.classes)
        for view, evaluator in self._views.items():
            for name, snapshot in evaluator.snapshots().items():
                views[view][name].update(
                    cost_measures(
                        snapshot, moves.counts(name), dense, costs.lowest, costs.highest, z
                    )
                )

    def settings(self) -> dict[str, Any]:
        """The constructor's settings (but ``model_id``), as :meth:`state` records them; those
        of the scores' measures once a prediction had scores (until then they shape nothing)."""
        self.flush()
        settings = {
            "estimators": list(self.estimators),
            "positive_label": self.positive_label,
            "max_classes": self.max_classes,
            "bins": self.bins,
            "alpha": self.alpha,
            "bin_rule": self.bin_rule,
            # every setting, so that a later change of the defaults cannot change what it says
            "detectors": [make_detector(d).spec() for d in self.detectors],
            "normalize_max_count": self.normalize_max_count,
        }
        if self._scored.state():
            settings["ece_bins"] = self.ece_bins
            settings["auc_max_values"] = self.auc_max_values
        if self.costs is not None:
            settings["costs"] = self.costs.table()
        return settings

    def _update_psi(
        self,
        y_true: np.ndarray,
        scores: Sequence[tuple[Scores | None, ...]],
        lengths: np.ndarray,
        starts: np.ndarray,
        times: np.ndarray,
        t_instance: np.ndarray,
        t_label: np.ndarray,
    ) -> None:
        """Ψ_α of the scores (:mod:`streameval.core.psi_scores`) of the outcomes every
        prediction of which has scores."""
        initial = self._scored.last.get("initial")
        if initial is not None and len(initial) == lengths.size and lengths.max() == 1:
            # every outcome predicted once, with scores: its one prediction's losses, already
            # computed for the views
            self._psi.add(initial.loss, initial.brier)
            return
        full = [i for i, entries in enumerate(scores) if entries and None not in entries]
        if not full:
            return
        if len(full) < len(scores):
            at = np.array(full, dtype=np.int64)
            lengths = lengths[at]
            times = times[np.repeat(starts[at], lengths) + within(lengths)]
            y_true, t_instance, t_label = y_true[at], t_instance[at], t_label[at]
            scores = [scores[i] for i in full]
        entries = list(chain.from_iterable(scores))
        flat = list(chain.from_iterable(entries))
        sizes = np.fromiter(map(len, entries), dtype=np.int64, count=len(entries)) // 2
        rows = np.repeat(np.arange(len(entries)), sizes)
        proba = np.zeros((len(entries), len(self._labels)))
        proba[rows, self._labels.lookup(flat[0::2])] = flat[1::2]
        self._psi.update(y_true, proba, lengths, times, t_instance, t_label)

    @property
    def classes(self) -> list[Label]:
        """The model's known classes (its positive label first, when it has one)."""
        return self._labels.classes

    @property
    def class_count(self) -> int:
        """How many classes :attr:`classes` holds (without copying them)."""
        return len(self._labels)

    def _positive_code(self) -> int | None:
        """The positive class's index (None: no positive label, or not seen yet)."""
        if self.positive_label is None or self.positive_label not in self._labels:
            return None
        return self._labels.index(self.positive_label)

    def state(self) -> dict[str, Any]:
        self.flush()
        return {
            "model_id": self.model_id,
            "config": self.settings(),
            "labels": self._labels.state(),
            "views": {view: ev.state() for view, ev in self._views.items()},
            "delayed": self._delayed.state(),
            **({"scored": scored} if (scored := self._scored.state()) else {}),
            **({"psi_scores": psi} if (psi := self._psi.state()) else {}),
            **({} if self._transitions is None else {"transitions": self._transitions.state()}),
            "detectors": [det.state() for det in self._detectors],
            **(
                {"detector_starts": list(self._detector_starts)}
                if any(self._detector_starts)
                else {}
            ),
            "n": self._n,
            "latency": list(self._latency),
            "delays": self._delays.state(),
        }

    @classmethod
    def from_state(
        cls,
        state: dict[str, Any],
        estimators: Sequence[str | EstimatorSpec] | None = None,
        detectors: Sequence[dict[str, Any]] | None = None,
        normalize_max_count: int | None = None,
        ece_bins: int | None = None,
        auc_max_values: int | None = None,
        costs: CostMatrix | dict[str, dict[str, float]] | None = None,
    ) -> ModelEvaluator:
        """Rebuild from :meth:`state`, or continue it under other settings (None: the
        state's). ``ece_bins`` and ``auc_max_values`` apply to a state that has had no scores
        yet (one that has keeps its own). ``estimators``: those of the state go on, the others
        start empty at the next outcome, as if configured from there (every estimator of the
        state must be among them: ValueError). ``detectors``: one with the settings of a
        detector of the state goes on, another starts at the next outcome (its alarms' indices
        still count the model's outcomes), and the state's others are dropped.
        ``normalize_max_count`` only decides what :meth:`measures` reads. ``costs`` too (``{}``:
        none): the label transitions go on while there are costs, start at the next outcome
        when costs are added (the no-change baseline's cost then covers the outcomes from
        there; the model's covers all) and are dropped with them. The other settings
        shape the state and stay its own (streameval.app.evolve refuses a configuration that
        changes them).

        >>> from streameval.core.outcome import Outcome
        >>> ev = ModelEvaluator("m", estimators=["cumulative"], detectors=[])
        >>> _ = ev.update([Outcome("m", "i1", 1, (0,), (1,), 0, 5)])
        >>> more = ModelEvaluator.from_state(ev.state(), estimators=["cumulative", "window:5"])
        >>> _ = more.update([Outcome("m", "i2", 1, (6,), (0,), 6, 9)])
        >>> final = more.measures()["views"]["final"]
        >>> final["cumulative"]["n"], final["window:5"]["n"], final["window:5"]["accuracy"]
        (2, 1, 0.0)
        """
        config = dict(state["config"])
        # the state's own detectors as it ran them (a setting added since was off)
        config["detectors"] = [saved_spec(d) for d in config["detectors"]]
        if estimators is not None:
            config["estimators"] = [spec.name for spec in parse_estimators(estimators)]
        if detectors is not None:
            config["detectors"] = [dict(d) for d in detectors]
        if normalize_max_count is not None:
            config["normalize_max_count"] = normalize_max_count
        if costs is not None:
            config["costs"] = costs or None
        for name, value in (("ece_bins", ece_bins), ("auc_max_values", auc_max_values)):
            if name not in config and value is not None:
                config[name] = value
        ev = cls(state["model_id"], **config)
        ev._labels = LabelEncoder.from_state(state["labels"])
        for view, s in state["views"].items():
            restored = Evaluator.from_state(s, ev.specs)
            restored._labels = ev._labels
            ev._views[view] = restored
        ev._delayed = DelayedEvaluator.from_state(state["delayed"], ev.specs)
        ev._scored = ScoredViews.from_state(
            state.get("scored", {}),
            ev.specs,
            ev.ece_bins,
            ev.auc_max_values,
            positive=ev.positive_label is not None,
        )
        ev._psi = PsiScores.from_state(
            state.get("psi_scores", {}), ev.specs, ev.bins, ev.alpha, ev.bin_rule
        )
        if ev.costs is not None and "transitions" in state:
            ev._transitions = Transitions.from_state(state["transitions"], ev.specs, ev.max_classes)
        ev._n = state["n"]
        saved = [detector_from_state(s) for s in state["detectors"]]
        starts = state.get("detector_starts", [0] * len(saved))
        by_spec = [
            (canonical_spec(det.spec()), det, start)
            for det, start in zip(saved, starts, strict=True)
        ]
        ev._detectors, ev._detector_starts = [], []
        for spec in ev.detectors:
            wanted = canonical_spec(spec)
            found = next((entry for entry in by_spec if entry[0] == wanted), None)
            if found is not None:
                by_spec.remove(found)
                ev._detectors.append(found[1])
                ev._detector_starts.append(found[2])
            else:  # new: from the next outcome on
                ev._detectors.append(make_detector(spec))
                ev._detector_starts.append(ev._n)
        ev._latency = list(state["latency"])
        # a state from before the histogram: the delays' quantiles count from here
        ev._delays = LabelDelays.from_state(state.get("delays", []))
        return ev


def _lengths(labels: Sequence[Sequence[Label]]) -> np.ndarray:
    """The number of predictions of each outcome."""
    return np.fromiter(map(len, labels), dtype=np.int64, count=len(labels))


class _Places(Sequence):
    """Each outcome of a batch as ``(instance_id, t_instance, t_label)``, made only for the
    few a detector asks for (the outcome of an alarm, of its change point)."""

    def __init__(self, ids: tuple, t_instances: tuple, t_labels: tuple) -> None:
        self._columns = ids, t_instances, t_labels

    def __len__(self) -> int:
        return len(self._columns[0])

    def __getitem__(self, i):  # type: ignore[override]
        ids, t_instances, t_labels = self._columns
        return ids[i], int(t_instances[i]), int(t_labels[i])


def _shifted(alarm: Alarm, start: int) -> Alarm:
    """An alarm of a detector added after ``start`` outcomes, its indices counting the model's."""
    change = alarm.change_index
    return replace(
        alarm, index=alarm.index + start, change_index=None if change is None else change + start
    )


def _normalized(snapshot: ConfusionSnapshot, positive: int) -> dict[str, float]:
    """N(M, P:N, x) of the one-vs-rest binary measures of the positive class ([BS] eq. (10))."""
    counts = np.asarray(snapshot.confusion)
    if positive < counts.shape[0]:
        tp = int(counts[positive, positive])
        fn = int(counts[positive].sum()) - tp
        fp = int(counts[:, positive].sum()) - tp
    else:
        tp = fn = fp = 0
    tn = int(counts.sum()) - tp - fn - fp
    binary = np.array([[tn, fp], [fn, tp]])
    values = compute_measures(
        ConfusionSnapshot(binary, 0, 0, snapshot.n, float(snapshot.n)), positive=1
    )
    positives, negatives = tp + fn, fp + tn
    if positives == 0 or negatives == 0:
        # the binary histogram of one class is degenerate, and the reported measures follow
        # the classes-present rule there: no comparable normalized value
        return {f"normalized_{measure}": float("nan") for measure in NORMALIZED_MEASURES}
    return {
        f"normalized_{measure}": normalize(measure, positives, negatives, values[key])
        for measure, key in NORMALIZED_MEASURES.items()
    }


def _discover(
    encoder: LabelEncoder,
    y_trues: Sequence[Label],
    labels: Sequence[Sequence[Label]],
    lengths: np.ndarray,
    extra: Sequence[Sequence[Label]] | None = None,
) -> np.ndarray:
    """Codes of ``[*y_trues, *predictions]``, new classes numbered in outcome order (each
    outcome's truth, then its predictions, then the classes its scores name, ``extra``), so
    that a class's index, and with it the order of every sum, does not depend on where batches
    are cut. All or nothing, like ``encode``."""
    if extra is None:
        rows = ((t, *p) for t, p in zip(y_trues, labels, strict=True))
        sizes = lengths + 1
    else:
        rows = ((t, *p, *x) for t, p, x in zip(y_trues, labels, extra, strict=True))
        sizes = lengths + 1 + np.fromiter(map(len, extra), dtype=np.int64, count=lengths.size)
    per_outcome = encoder.encode(list(chain.from_iterable(rows)))
    truth_at = np.cumsum(sizes) - sizes
    prediction = np.zeros(per_outcome.size, dtype=bool)
    prediction[np.repeat(truth_at + 1, lengths) + within(lengths)] = True
    return np.concatenate([per_outcome[truth_at], per_outcome[prediction]])
