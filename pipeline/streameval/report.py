"""What a person looks at after a replay: a summary table and a plot."""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from streameval.records import Record
from streameval.replay import ReplayResult

__all__ = ["MeasureHistory", "describe_alarm", "plot_history", "print_summary"]

#: alarms the summary lists one by one (the records have them all)
LISTED_ALARMS = 10


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def describe_alarm(alarm: Any) -> str:
    """A drift alarm record in one line, the alarm and the change on the same axes: outcome
    index, instance and event time.

    >>> from streameval.records import DriftAlarmRecord
    >>> print(describe_alarm(DriftAlarmRecord("drift_alarm", "champion", 1767225983104, "final",
    ...     "ratio_page_hinkley", 100.13, 100.0, 1520, 1.59, "inst-01525", 1767225981250, 1211,
    ...     1767225907540, "inst-01223", 1767225905750, 0.984, 1.449, {})))
    ... # doctest: +NORMALIZE_WHITESPACE
    champion: ratio_page_hinkley alarm at outcome 1520 (instance inst-01525 of
    2026-01-01 00:06:21.250); change estimated to begin after outcome 1211 (instance
    inst-01223 of 2026-01-01 00:05:05.750), 309 outcomes before the alarm; monitored estimate
    0.984 → 1.449 (statistic 100.1 > 100)
    """
    head = (
        f"{alarm.model_id}: {alarm.detector} alarm at outcome {alarm.n} (instance "
        f"{alarm.instance_id} of {_when(alarm.instance_ts)})"
    )
    if alarm.change_n is None:
        change = "change start not known (restored from a checkpoint that did not keep it)"
    else:
        change = (
            f"change estimated to begin after outcome {alarm.change_n} (instance "
            f"{alarm.change_instance_id} of {_when(alarm.change_instance_ts)}), "
            f"{alarm.n - alarm.change_n} outcomes before the alarm; monitored estimate "
            f"{_fmt(alarm.estimate_before)} → {_fmt(alarm.estimate_after)}"
        )
    return f"{head}; {change} (statistic {alarm.statistic:.1f} > {alarm.threshold:g})"


def describe_maturity(record: Any, cohorts: int = 3) -> str:
    """The latest cohorts of a label-maturity record in a line: how much of each is labelled,
    and with which classes."""

    def when(ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")

    parts = []
    for c in record.cohorts[-cohorts:]:
        classes = ", ".join(
            f"{name} {_percent(v.share)}" for name, v in c.by_class.items() if v.share
        )
        parts.append(
            f"{when(c.start)[11:]} {_percent(c.share)} of {c.predicted}"
            + (f" ({classes})" if classes else "")
        )
    return f"labelled so far, by cohort (as of {when(record.ts)}): " + "; ".join(parts)


def describe_slices(result: ReplayResult, model_id: str, record: Any, estimator: str) -> str:
    """The model's slices with the lowest and the highest accuracy under ``estimator``, beside
    the model's (those it tracks now; "" without slices)."""
    if not record.slices:
        return ""
    scored = []
    for name in record.slices:
        own = result.final_slices.get((model_id, name, "final"))
        if own is not None:
            accuracy = own.estimators.get(estimator, {}).get("accuracy")
            if accuracy is not None:
                scored.append((accuracy, name, own.n))
    if len(scored) < 2:  # (all in the rest: the problems below say why)
        return ""
    scored.sort()
    (low, worst, n_worst), (high, best, n_best) = scored[0], scored[-1]
    whole = record.estimators.get(estimator, {}).get("accuracy")
    return (
        f"accuracy ({estimator}) by slice: worst {worst} {_fmt(low)} (n={n_worst}), best "
        f"{best} {_fmt(high)} (n={n_best}), the model {_fmt(whole)}; {len(record.slices)} slices"
    )


def _percent(share: float | None) -> str:
    return "–" if share is None else f"{100 * share:.0f} %"


def print_summary(result: ReplayResult, console: Console, estimator: str) -> None:
    """Per model the key measures of the final view, then alarms, comparisons and skips."""
    table = Table(
        title=f"final view, {estimator} (acc₀: initial prediction, Ψ₂: while labels pending)",
        box=box.SIMPLE_HEAD,
    )
    table.add_column("model", no_wrap=True)
    finals = [
        (model_id, record)
        for (model_id, view), record in sorted(result.final_metrics.items())
        if view == "final"
    ]
    # the scores' columns when a model sent them (blank for a model that did not)
    scored = any("log_loss" in r.estimators.get(estimator, {}) for _, r in finals)
    columns = ["n", "acc", "acc₀", "Ψ₂", "κ", "κ_per", "κ⁺", "p_per"]
    for column in [*columns, *(["AUC", "log-loss"] if scored else []), "alarms"]:
        table.add_column(column, justify="right", no_wrap=True)
    alarms = defaultdict(int)
    for alarm in result.alarms:
        alarms[alarm.model_id] += 1
    for model_id, record in finals:
        m = record.estimators.get(estimator, {})
        d = record.delayed.get(estimator, {})
        cells = [
            Text(model_id),  # as it is: a model id is no markup
            str(record.n),
            _fmt(m.get("accuracy")),
            _fmt(d.get("accuracy_initial")),
            _fmt(d.get("psi_accuracy")),
            _fmt(m.get("kappa")),
            _fmt(m.get("kappa_temporal")),
            _fmt(m.get("kappa_plus")),
            _fmt(m.get("p_per")),
        ]
        if scored:
            cells += [_fmt(m.get("roc_auc")), _fmt(m.get("log_loss"))]
        table.add_row(*cells, str(alarms[model_id]))
    console.print(table)
    for model_id, record in finals:  # a model with a cost matrix: its cost and its baselines'
        m = record.estimators.get(estimator, {})
        if "expected_cost" in m:
            console.print(
                f"{model_id}: cost per decision {_fmt(m['expected_cost'])} "
                f"[{_fmt(m['expected_cost_lo'])}, {_fmt(m['expected_cost_hi'])}]; "
                f"always the majority class {_fmt(m['cost_majority'])}, "
                f"no-change {_fmt(m['cost_no_change'])}",
                highlight=False,
                markup=False,
            )
    # models that share their labels say the same of them: once, naming them all
    delays: dict[str, list[str]] = defaultdict(list)
    for model_id, record in finals:
        test, by_class = record.latency_ms.classes_differ, record.latency_ms.by_class
        if test is not None and test.significant and by_class:
            said = "; ".join(
                f"class {name} p50 {d.p50 / 1000:.1f} s, p90 {d.p90 / 1000:.1f} s"
                for name, d in by_class.items()
            )
            delays[f"(Kruskal-Wallis p = {test.p_value:.2g}): {said}"].append(model_id)
    for said, models in delays.items():
        console.print(f"{', '.join(models)}: label delay depends on the class {said}", markup=False)
    for model_id, record in finals:  # sliced: the worst and the best slice beside the model
        said = describe_slices(result, model_id, record, estimator)
        if said:
            console.print(f"{model_id}: {said}", highlight=False, markup=False)
    maturity: dict[str, list[str]] = defaultdict(list)
    for model_id, record in sorted(result.final_maturity.items()):
        maturity[describe_maturity(record)].append(model_id)
    for said, models in maturity.items():
        console.print(f"{', '.join(models)}: {said}", highlight=False, markup=False)
    for alarm in result.alarms[:LISTED_ALARMS]:
        console.print(describe_alarm(alarm), highlight=False, markup=False)
    if len(result.alarms) > LISTED_ALARMS:
        console.print(f"… and {len(result.alarms) - LISTED_ALARMS} more alarms (in the records)")
    for key, record in sorted(result.final_comparisons.items()):
        c = record.estimators.get(estimator)
        if c is None:
            continue
        console.print(
            f"comparison {key}: n={record.n} Q={_fmt(c.q_statistic)} "
            f"McNemar={_fmt(c.mcnemar)} "
            f"accuracy difference={_fmt(c.accuracy_difference)} "
            f"[{_fmt(c.accuracy_difference_lo)}, {_fmt(c.accuracy_difference_hi)}] "
            f"({'significant' if c.significant else 'not significant'} at 99 %), "
            f"leader: {c.leader or 'none'}"
            + (
                f"; log-loss difference={_fmt(c.log_loss_difference)} "
                f"[{_fmt(c.log_loss_difference_lo)}, {_fmt(c.log_loss_difference_hi)}] "
                f"on {c.n_scored} scored pairs"
                if c.n_scored
                else ""
            ),
            markup=False,
        )
    odd = {k: v for k, v in result.join_counters.items() if v}
    if odd:
        console.print("join: " + ", ".join(f"{k}={v}" for k, v in sorted(odd.items())))
    if result.pending:
        console.print(f"{result.pending} instances still wait for a label (not evaluated)")
    for (model_id, reason), count in sorted(result.rejected.items()):
        console.print(
            f"model {model_id}: {count} outcomes refused ({reason})", style="bold red", markup=False
        )
    for problem in result.problems[:3]:  # (the data's words: no markup in them)
        console.print(f"  {problem}", markup=False)
    total_skipped = sum(result.skipped.values())
    console.print(
        f"{result.events} events from {result.lines} lines in {result.seconds:.2f} s; "
        f"{result.records['metrics']} metrics, {result.records['drift_alarm']} alarms, "
        f"{result.records['comparison']} comparison, {result.records['label_maturity']} "
        f"label-maturity records; {total_skipped} lines skipped"
    )
    for reason, count in result.skipped.most_common():
        console.print(f"  skipped {count}: {reason}", markup=False)
    for number, message in result.skipped_examples:
        console.print(f"  line {number}: {message}", markup=False)


class MeasureHistory:
    """Collects, per model, the final view's main measures at every metrics record."""

    MEASURES = ("accuracy", "kappa", "kappa_temporal", "kappa_plus")

    def __init__(self, estimator: str) -> None:
        self.estimator = estimator
        self.points: dict[str, list[tuple[int, dict[str, float]]]] = defaultdict(list)
        self.psi: dict[str, list[tuple[int, float]]] = defaultdict(list)
        #: per model: (outcome of the alarm, of the estimated change start or None, detector)
        self.alarms: dict[str, list[tuple[int, int | None, str]]] = defaultdict(list)

    def __call__(self, records: list[Record]) -> None:
        for r in records:
            if r.kind == "metrics" and r.view == "final":
                m = r.estimators.get(self.estimator, {})
                values = {k: _nan(m.get(k)) for k in self.MEASURES}
                for k in self.MEASURES:  # the interval's bounds (docs/measures.md, "Intervals")
                    for bound in (k + "_lo", k + "_hi"):
                        values[bound] = _nan(m.get(bound))
                self.points[r.model_id].append((r.n, values))
                d = r.delayed.get(self.estimator, {})
                self.psi[r.model_id].append((r.n, _nan(d.get("psi_accuracy"))))
            elif r.kind == "drift_alarm":
                self.alarms[r.model_id].append((r.n, r.change_n, r.detector))


def _nan(value: Any) -> float:
    return float("nan") if value is None else float(value)


def plot_history(history: MeasureHistory, path: Path) -> None:
    """One panel per measure, one line per model, drift alarms as marks on each line and the
    span from where each alarm estimates its change began to the alarm shaded, all over the
    model's outcomes (an instance's outcome comes when its label does: under label delay the
    n-th outcome is not the n-th instance)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    titles = {
        "accuracy": "accuracy (final prediction)",
        "kappa": "Cohen's κ",
        "kappa_temporal": "κ_per (vs. no-change; < 0 = worse)",
        "kappa_plus": "κ⁺ = √(κ·κ_per)",
        "psi": "Ψ₂: accuracy while labels were pending",
    }
    fig, axes = plt.subplots(len(titles), 1, figsize=(11, 2.6 * len(titles)), sharex=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, model_id in enumerate(sorted(history.points)):
        color = colors[i % len(colors)]
        xs = [n for n, _ in history.points[model_id]]
        for ax, measure in zip(axes, titles, strict=True):
            if measure == "psi":
                ys = [v for _, v in history.psi[model_id]]
            else:
                ys = [values[measure] for _, values in history.points[model_id]]
            ax.plot(xs, ys, color=color, label=model_id, linewidth=1.4)
            if measure != "psi":  # its interval, where the estimate has one
                lows = [values[measure + "_lo"] for _, values in history.points[model_id]]
                highs = [values[measure + "_hi"] for _, values in history.points[model_id]]
                ax.fill_between(xs, lows, highs, color=color, alpha=0.15, linewidth=0)
            for n, change_n, detector in history.alarms[model_id]:
                ax.axvline(
                    n,
                    color=color,
                    linestyle="--" if detector == "page_hinkley" else ":",
                    alpha=0.7,
                    linewidth=1,
                )
                if change_n is not None:
                    ax.axvspan(change_n, n, color=color, alpha=0.08, linewidth=0)
    for ax, title in zip(axes, titles.values(), strict=True):
        ax.set_title(title, loc="left", fontsize=10)
        ax.grid(alpha=0.3)
    axes[2].axhline(0, color="black", linewidth=0.8)
    axes[-1].set_xlabel(
        f"outcomes per model, in label order ({history.estimator})\ndashed/dotted: drift alarms "
        "of page_hinkley/ratio_page_hinkley; shaded: from where each estimates its change began;"
        " bands: each estimate's interval"
    )
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncols=max(1, len(labels)), frameon=False)
    fig.savefig(path, dpi=110)
    plt.close(fig)
