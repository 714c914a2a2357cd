"""Which published numbers become Prometheus series, and the collector that makes them.

Every metrics record carries every measure of every estimator, per-class measures for every
class and a hundred bins of the latency period: some 500 numbers a model, which the Kafka topics
keep. Prometheus stores each as a series, and a series costs memory, disk and query time at
every scrape; ~500 a model is 50 000 for 100 models. A :class:`Selection` says which of them the
exporter turns into series — measures, estimators, classes, bins — and its defaults keep a model
to about 140 series (docs/operations.md, "Cardinality"). The worker builds it from its settings
(``export_*``, docs/worker.md); the dashboards and alert rules use only what the defaults export.

:class:`SnapshotCollector` reads the exporter's latest records at scrape time and yields the
selected series; the selection is resolved once, so a scrape looks up what it exports rather
than walking every number it does not. Its walk of one record (:meth:`SnapshotCollector.
record_series`) also feeds :class:`~streameval.exposition.SeriesText`, which renders each
record's series once as text for /metrics.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from streameval.core.cost import COST_MEASURES
from streameval.core.measures import SCALAR_MEASURES
from streameval.core.model import NORMALIZED_MEASURES
from streameval.core.probabilistic import PROBABILISTIC_MEASURES

__all__ = [
    "ALL",
    "CLASS_MEASURES",
    "COUNTS",
    "DEFAULT_BINS",
    "DEFAULT_CLASSES",
    "DEFAULT_INITIAL_MEASURES",
    "DEFAULT_MEASURES",
    "DEFAULT_SLICE_MEASURES",
    "DELAYED_MEASURES",
    "EXPORTABLE_MEASURES",
    "FAMILIES",
    "LATENCY_BUCKETS",
    "Selection",
    "Series",
    "SnapshotCollector",
    "bin_label",
    "estimator_label",
    "spread",
]

#: Label latency buckets in seconds: one second to four weeks.
LATENCY_BUCKETS = (
    1,
    5,
    15,
    60,
    300,
    900,
    3600,
    4 * 3600,
    86400,
    3 * 86400,
    7 * 86400,
    28 * 86400,
    math.inf,
)

#: The counts of an estimate: a family each, apart from the measures
COUNTS = ("n", "n_effective")
#: Per-class measures, ``recall[<class>]`` in a record, and their interval bounds
#: (``recall_lo[<class>]``)
CLASS_MEASURES = (
    "precision",
    "recall",
    "f1",
    "precision_lo",
    "precision_hi",
    "recall_lo",
    "recall_hi",
)
#: The measures of the delayed-label block (initial, Ψ and final performance)
DELAYED_MEASURES = ("accuracy", "kappa", "kappa_plus")
#: the scores' measures of the delayed-label block (Ψ_α only: streameval.core.psi_scores)
PSI_SCORES = ("log_loss", "brier")
#: Every name a selection may list (the per-class ones select ``streameval_class_measure``)
EXPORTABLE_MEASURES = (
    *SCALAR_MEASURES,
    "precision_positive",
    "recall_positive",
    "f1_positive",
    *(f"{name}_positive_{end}" for name in ("precision", "recall") for end in ("lo", "hi")),
    "warming_up",  # 1 while the estimate's n_kish is below min_n, else 0
    *(f"normalized_{name}" for name in NORMALIZED_MEASURES),
    *CLASS_MEASURES,
    *PROBABILISTIC_MEASURES,  # of a model whose predictions carry scores
    *COST_MEASURES,  # of a model with a cost matrix
    "reliability",  # the calibration bins: streameval_reliability
    "label_delay",  # the label delay's quantiles by class, and the test: two families
    # every cohort of a label-maturity record, by class (by default: the totals, the share of
    # the cohort in progress and of the one before, and that one's by class)
    "label_maturity",
)
#: What a selection lists to export every measure
ALL = "all"
#: The final view's defaults: what the dashboards and alerts show, and the counts
DEFAULT_MEASURES = (
    "accuracy",
    "balanced_accuracy",
    "kappa",
    "kappa_m",
    "kappa_temporal",
    "kappa_plus",
    "mcc",
    "g_mean",
    "f1_macro",
    "p_maj",
    "p_per",
    "p_ran",
    "precision",
    "recall",
    "n",
    "n_effective",
    # the bounds the alerts and the dashboards' bands use (docs/operations.md, "Cardinality")
    "accuracy_lo",
    "accuracy_hi",
    "kappa_temporal_lo",
    "kappa_temporal_hi",
    # a model whose predictions carry scores (docs/measures.md, "Scores")
    "log_loss",
    "brier",
    "ece",
    "roc_auc",
    # a model with a cost matrix (docs/measures.md, "Cost")
    "expected_cost",
    "cost_majority",
    "cost_no_change",
)
#: The initial view's default: its accuracy, beside the final view's
DEFAULT_INITIAL_MEASURES = ("accuracy",)
#: Per-class measures for this many classes of a model (every class of a binary model)
DEFAULT_CLASSES = 2
#: Bins of the latency period per delayed estimate, evenly spread, the first and last included
DEFAULT_BINS = 10
#: The final view's measures of each slice of a model (slices.by): top_k + 1 slices each
DEFAULT_SLICE_MEASURES = ("accuracy", "kappa_temporal", "n")


def estimator_label(name: str) -> str:
    """``window:1000`` → ``window_1000`` (a colon is awkward in PromQL label matchers)."""
    return name.replace(":", "_")


def bin_label(index: int, bins: int) -> str:
    """The ``bin`` label of bin ``index`` (0-based) of ``bins``: 1-based, zero-padded to three
    digits or as many as ``bins`` has, so that the labels sort in the bins' order.

    >>> bin_label(0, 100), bin_label(99, 100), bin_label(0, 1000), bin_label(999, 1000)
    ('001', '100', '0001', '1000')
    """
    return f"{index + 1:0{max(3, len(str(bins)))}d}"


def spread(bins: int, count: int) -> list[int]:
    """Indices of ``count`` of ``bins`` bins, evenly spread, the first and the last included.

    >>> spread(100, 10)
    [0, 11, 22, 33, 44, 55, 66, 77, 88, 99]
    >>> spread(5, 10), spread(100, 1), spread(100, 0)
    ([0, 1, 2, 3, 4], [0], [])
    """
    if count >= bins:
        return list(range(bins))
    if count <= 1:
        return [0] if count == 1 else []
    return sorted({round(i * (bins - 1) / (count - 1)) for i in range(count)})


@dataclass(frozen=True)
class Selection:
    """Which of the published numbers the exporter turns into series (the topics keep all).

    ``measures`` and ``initial_measures`` list names of :data:`EXPORTABLE_MEASURES` for the
    final and the initial view — ``n`` and ``n_effective`` select the count families,
    ``precision``, ``recall`` and ``f1`` the per-class family, and ``accuracy``, ``kappa`` and
    ``kappa_plus`` in ``measures`` also the delayed-label family; ``None`` exports every
    measure. ``estimators`` lists configured estimator names (``window:1000``), ``None`` all of
    them. ``classes`` is how many classes of a model get per-class series (the first it saw),
    ``bins`` how many bins of each delayed estimate (evenly spread); ``None`` is all.

    Examples
    --------
    >>> Selection.everything().wants_measure("final", "kappa_se")
    True
    >>> Selection().wants_measure("final", "kappa_se"), Selection().wants_measure("final", "mcc")
    (False, True)
    """

    measures: frozenset[str] | None = frozenset(DEFAULT_MEASURES)
    initial_measures: frozenset[str] | None = frozenset(DEFAULT_INITIAL_MEASURES)
    estimators: frozenset[str] | None = None
    classes: int | None = DEFAULT_CLASSES
    bins: int | None = DEFAULT_BINS
    #: the final view's scalar measures (and ``n``) of each slice of a model
    slice_measures: frozenset[str] | None = frozenset(DEFAULT_SLICE_MEASURES)

    @classmethod
    def everything(cls) -> Selection:
        """Every number of every record (what the exporter showed before it had a budget)."""
        return cls(None, None, None, None, None, None)

    @classmethod
    def of(
        cls,
        measures: Sequence[str],
        initial_measures: Sequence[str],
        estimators: Sequence[str] | None,
        classes: int,
        bins: int,
        slice_measures: Sequence[str] = DEFAULT_SLICE_MEASURES,
    ) -> Selection:
        """From the worker's settings, where ``["all"]`` lists every measure."""

        def names(listed: Sequence[str]) -> frozenset[str] | None:
            return None if ALL in listed else frozenset(listed)

        chosen = None if estimators is None else frozenset(estimators)
        return cls(
            names(measures), names(initial_measures), chosen, classes, bins, names(slice_measures)
        )

    def of_view(self, view: str) -> frozenset[str] | None:
        return self.measures if view == "final" else self.initial_measures

    def wants_measure(self, view: str, name: str) -> bool:
        names = self.of_view(view)
        return names is None or name in names

    def wants_estimator(self, name: str) -> bool:
        return self.estimators is None or name in self.estimators


def _value(value: Any) -> float:
    return math.nan if value is None else float(value)


_ABSENT = object()  # a measure an estimate does not have (normalized_*, *_positive, a class)


def _first_classes(values: Iterable[dict[str, Any]], count: int | None) -> list[str]:
    """The first ``count`` classes with per-class measures in a record's estimates, in the
    order the model numbered them (each estimate lists its classes in that order)."""
    found: dict[str, None] = {}
    for measures in values:
        for name in measures:
            if name[-1] != "]":
                continue
            cls = name[name.index("[") + 1 : -1]
            if cls not in found:
                if count is not None and len(found) == count:
                    break
                found[cls] = None
        if count is not None and len(found) == count:
            break
    return list(found)


#: One series: the key of its family in :data:`FAMILIES`, its label values, its value
Series = tuple[str, tuple[str, ...], float]

#: The families of the records' series, in the order a scrape gives them: key, then name, help
#: and label names
FAMILIES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "measure": (
        "streameval_measure",
        "Latest value of a measure of a model (NaN: undefined).",
        ("model", "view", "estimator", "measure"),
    ),
    "n": (
        "streameval_estimate_outcomes",
        "Outcomes an estimate covers (n): every outcome for cumulative and fading, at most W "
        "for window_W.",
        ("model", "view", "estimator"),
    ),
    "n_effective": (
        "streameval_estimate_effective_outcomes",
        "Sum of the weights of the outcomes an estimate covers (n_effective: N_a under fading, "
        "n otherwise).",
        ("model", "view", "estimator"),
    ),
    "per_class": (
        "streameval_class_measure",
        "Latest per-class precision, recall or F1 of a model.",
        ("model", "view", "estimator", "measure", "class"),
    ),
    "reliability": (
        "streameval_reliability",
        "Calibration of a model's scores per confidence bin (bins are zero-padded, 001 the "
        "least confident): the mean confidence, the accuracy and the share of the weight.",
        ("model", "view", "estimator", "bin", "quantity"),
    ),
    "delayed": (
        "streameval_delayed_measure",
        "Delayed-label measures: initial, final and prioritised (psi) performance.",
        ("model", "estimator", "measure", "stage"),
    ),
    "binned": (
        "streameval_binned_accuracy",
        "Accuracy of the predictions in force in each bin of the latency period (bins are "
        "zero-padded, 001 first, so that they sort in order).",
        ("model", "estimator", "bin"),
    ),
    "outcomes": (
        "streameval_model_outcomes",
        "Outcomes evaluated for a model.",
        ("model",),
    ),
    "latency": (
        "streameval_label_latency_mean_seconds",
        "Mean time from instance to label of the evaluated outcomes.",
        ("model",),
    ),
    "label_delay": (
        "streameval_label_delay_seconds",
        "Quantiles (p50, p90, p99) of the time from instance to label of a model's outcomes, "
        'by true class (class="": every class), within 4.4 %.',
        ("model", "class", "quantile"),
    ),
    "label_delay_test": (
        "streameval_label_delay_class_p_value",
        "p-value of the Kruskal-Wallis test that the labels of every class come as late "
        "(small: the delay depends on the class).",
        ("model",),
    ),
    "slice_measure": (
        "streameval_slice_measure",
        "Latest value of a measure of a model's outcomes in one of its slices (slices.by; "
        '"(other)": the rest), in the final view (NaN: undefined; n: outcomes covered).',
        ("model", "slice", "estimator", "measure"),
    ),
    "comparison": (
        "streameval_comparison",
        "Q statistic, signed McNemar and significance (0 or 1) of model_a vs model_b.",
        ("pair", "model_a", "model_b", "estimator", "statistic"),
    ),
    "disagreements": (
        "streameval_comparison_disagreements",
        "Paired instances only one model got wrong (only_wrong=model_a: n01, model_b: n10), "
        "weighted as the estimator weighs them.",
        ("pair", "model_a", "model_b", "estimator", "only_wrong"),
    ),
}


class _View:
    """A view's selection, resolved: the names a scrape looks up in each estimate."""

    def __init__(self, names: frozenset[str] | None) -> None:
        self.all = names is None
        self.scalars = tuple(
            n
            for n in EXPORTABLE_MEASURES
            if n not in COUNTS
            and n not in CLASS_MEASURES
            and n not in ("reliability", "label_delay")
            and (names is None or n in names)
        )
        self.reliability = names is None or "reliability" in names
        self.counts = tuple(n for n in COUNTS if names is None or n in names)
        self.per_class = tuple(n for n in CLASS_MEASURES if names is None or n in names)


class SnapshotCollector(Collector):
    """The selected series of the latest records, made at scrape time.

    ``snapshots`` returns the latest metrics records by (model, view) and comparison records
    by pair; ``latencies`` the label-latency bucket counts and sum of seconds by model.
    """

    def __init__(
        self,
        snapshots: Callable[[], tuple[dict[tuple[str, str], Any], dict[str, Any]]],
        latencies: Callable[[], dict[str, tuple[np.ndarray, float]]],
        selection: Selection,
    ) -> None:
        self._snapshots = snapshots
        self._latencies = latencies
        self.selection = selection
        self._views = {view: _View(selection.of_view(view)) for view in ("initial", "final")}
        final = selection.measures
        self._delayed = tuple(m for m in DELAYED_MEASURES if final is None or m in final)
        self._psi_scores = tuple(m for m in PSI_SCORES if final is None or m in final)
        self._bins = "accuracy" in self._delayed and selection.bins != 0
        self._label_delay = final is None or "label_delay" in final
        listed = selection.slice_measures
        self._slice_measures = tuple(
            n
            for n in EXPORTABLE_MEASURES
            if n not in CLASS_MEASURES
            and n not in ("reliability", "label_delay", "label_maturity")
            and (listed is None or n in listed)
        )
        self._spread: dict[int, list[tuple[int, str]]] = {}
        self._skip = threading.local()

    def describe(self) -> Iterable[Any]:
        return []  # unchecked collector: its series come and go with the models

    def _bin_labels(self, bins: int) -> list[tuple[int, str]]:
        """The exported bins of a block of ``bins``: index and label (001 is the first)."""
        labels = self._spread.get(bins)
        if labels is None:
            count = bins if self.selection.bins is None else self.selection.bins
            labels = [(i, bin_label(i, bins)) for i in spread(bins, count)]
            self._spread[bins] = labels
        return labels

    def latest(self) -> tuple[dict[tuple[str, ...], Any], dict[str, Any]]:
        """The latest metrics records by (model, view), a slice's by (model, view, slice), and
        comparison records by pair."""
        return self._snapshots()

    @contextlib.contextmanager
    def skipping_records(self) -> Iterator[None]:
        """While inside this (in this thread), :meth:`collect` yields only the label-latency
        histogram: for :class:`~streameval.exposition.SeriesText`, which renders the records'
        series itself."""
        self._skip.on = True
        try:
            yield
        finally:
            self._skip.on = False

    def collect(self) -> Iterator[Any]:
        if not getattr(self._skip, "on", False):
            metrics, comparisons = self._snapshots()
            families = {
                key: GaugeMetricFamily(name, help_text, labels=list(labels))
                for key, (name, help_text, labels) in FAMILIES.items()
            }
            for (model, view, *_), record in metrics.items():
                for key, labels, value in self.record_series(model, view, record):
                    families[key].add_metric(labels, value)
            for pair, record in comparisons.items():
                for key, labels, value in self.comparison_series(pair, record):
                    families[key].add_metric(labels, value)
            yield from families.values()
        histogram = HistogramMetricFamily(
            "streameval_label_latency_seconds", "Time from instance to label.", labels=["model"]
        )
        for model, (bucket_counts, total) in self._latencies().items():
            cumulative = np.cumsum(bucket_counts)
            buckets = [
                (floatToGoString(b), float(c))
                for b, c in zip(LATENCY_BUCKETS, cumulative, strict=True)
            ]
            histogram.add_metric([model], buckets, total)
        yield histogram

    def record_series(self, model: str, view: str, record: Any) -> Iterator[Series]:
        """The selected series of one metrics record: (family key of :data:`FAMILIES`, label
        values, value)."""
        if record.slice is not None:  # a slice's: a few measures of its final view
            if view == "final":
                yield from self._slice_series(model, record)
            return
        selection = self.selection
        chosen = self._views[view]
        estimates = [
            (estimator_label(name), values)
            for name, values in record.estimators.items()
            if selection.wants_estimator(name)
        ]
        classes: list[str] = []
        if chosen.per_class and selection.classes != 0:
            classes = _first_classes((v for _, v in estimates), selection.classes)
        for est, values in estimates:
            get = values.get
            for name in chosen.scalars:
                value = get(name, _ABSENT)
                if value is not _ABSENT:
                    yield "measure", (model, view, est, name), _value(value)
            for name in chosen.counts:
                yield name, (model, view, est), _value(get(name))
            bins = get("reliability") if chosen.reliability else None
            if bins is not None:
                for quantity, values_of_bins in bins.items():
                    size = len(values_of_bins)
                    for i, value in enumerate(values_of_bins):
                        labels = (model, view, est, bin_label(i, size), quantity)
                        yield "reliability", labels, _value(value)
            for cls in classes:
                for name in chosen.per_class:
                    value = get(f"{name}[{cls}]", _ABSENT)
                    if value is not _ABSENT:
                        yield "per_class", (model, view, est, name, cls), _value(value)
        if view != "final":
            return
        yield "outcomes", (model,), float(record.n)
        yield "latency", (model,), _value(record.latency_ms.mean) / 1000.0
        if self._label_delay:
            yield from self._label_delay_series(model, record.latency_ms)
        for estimator, block in record.delayed.items():
            if not selection.wants_estimator(estimator):
                continue
            est = estimator_label(estimator)
            for name in self._delayed:
                for stage in ("initial", "final"):
                    yield "delayed", (model, est, name, stage), _value(block[f"{name}_{stage}"])
                yield "delayed", (model, est, name, "psi"), _value(block[f"psi_{name}"])
            for name in self._psi_scores:  # when every prediction of an outcome had scores
                value = block.get(f"psi_{name}", _ABSENT)
                if value is not _ABSENT:
                    yield "delayed", (model, est, name, "psi"), _value(value)
            if self._bins:
                accuracy = block["binned_accuracy"]
                for i, label in self._bin_labels(len(accuracy)):
                    yield "binned", (model, est, label), _value(accuracy[i])

    def _slice_series(self, model: str, record: Any) -> Iterator[Series]:
        """The selected measures of a slice's final-view record."""
        for name, values in record.estimators.items():
            if not self.selection.wants_estimator(name):
                continue
            est = estimator_label(name)
            get = values.get
            for measure in self._slice_measures:
                value = get(measure, _ABSENT)
                if value is not _ABSENT:
                    yield "slice_measure", (model, record.slice, est, measure), _value(value)

    def _label_delay_series(self, model: str, latency: Any) -> Iterator[Series]:
        """The label delay's quantiles, overall and for the first ``classes`` classes, and the
        p-value of the test whether it depends on the class."""
        if latency.by_class is None:  # a record from before they were published
            return
        count = self.selection.classes
        classes = list(latency.by_class.items())[
            : len(latency.by_class) if count is None else count
        ]
        for name, values in (("", latency), *classes):
            for quantile in ("p50", "p90", "p99"):
                seconds = _value(getattr(values, quantile)) / 1000.0
                yield "label_delay", (model, name, quantile), seconds
        if latency.classes_differ is not None:
            yield "label_delay_test", (model,), _value(latency.classes_differ.p_value)

    def comparison_series(self, pair: str, record: Any) -> Iterator[Series]:
        """The selected series of one comparison record, as :meth:`record_series`."""
        for estimator, values in record.estimators.items():
            if not self.selection.wants_estimator(estimator):
                continue
            labels = (pair, record.model_a, record.model_b, estimator_label(estimator))
            for name in ("q_statistic", "mcnemar", "significant"):
                yield "comparison", (*labels, name), _value(getattr(values, name))
            yield "disagreements", (*labels, "model_a"), _value(values.n01)
            yield "disagreements", (*labels, "model_b"), _value(values.n10)
