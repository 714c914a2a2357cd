"""Build the Grafana dashboards of streameval as JSON (deploy/grafana/dashboards/*.json).

The JSON files are generated, not edited: change this file and run

    .venv/bin/python deploy/grafana/dashboards.py

They work provisioned (deploy/grafana/provisioning) and imported into any Grafana (10 or
later): every query goes to the datasource of the ``datasource`` variable, and ``__inputs``
makes the import dialog ask which Prometheus that is.

``tests/test_deploy.py`` fails when the committed JSON differs from what this file builds, and
``tests/integration/test_observability.py`` runs every query below against a real Prometheus
scraping a real worker.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "dashboards"
#: Every query goes to the datasource the ``datasource`` variable names (see DATASOURCE_VAR)
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: What the import dialog asks for; its answer replaces ``${DS_PROMETHEUS}`` in the JSON
INPUTS = [
    {
        "name": "DS_PROMETHEUS",
        "label": "Prometheus",
        "description": "",
        "type": "datasource",
        "pluginId": "prometheus",
        "pluginName": "Prometheus",
    }
]
#: The datasource variable: imported, it starts on the datasource chosen in the import dialog;
#: provisioned (Grafana ignores ``__inputs``, so ``${DS_PROMETHEUS}`` names no datasource), it
#: falls back to the first Prometheus datasource; and a viewer may switch to another.
DATASOURCE_VAR = {
    "name": "datasource",
    "label": "Prometheus",
    "type": "datasource",
    "query": "prometheus",
    "regex": "",
    "refresh": 1,
    "hide": 0,
    "current": {"selected": False, "text": "${DS_PROMETHEUS}", "value": "${DS_PROMETHEUS}"},
}
#: The Grafana the dashboards are written for (their schemaVersion)
GRAFANA_VERSION = "10.4.0"
MCNEMAR_99 = 6.635  # χ² (1 d.f.) at 0.99, as streameval.core.compare.MCNEMAR_THRESHOLD
WIDTH = 24
#: a bar gauge's bars upright, each the latest value of its series
VERTICAL_BARS = {
    "orientation": "vertical",
    "displayMode": "basic",
    "reduceOptions": {"calcs": ["lastNotNull"]},
}


def query_var(
    name: str, query: str, label: str | None = None, multi: bool = True, hide: bool = False
) -> dict[str, Any]:
    """A template variable filled from Prometheus label values, "All" selected."""
    return {
        "name": name,
        "label": label or name,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": query,
        "query": {"query": query, "refId": f"{name}-values"},
        "refresh": 2,  # on time range change
        "sort": 1,
        "multi": multi,
        "includeAll": True,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "hide": 2 if hide else 0,
    }


def target(
    expr: str, legend: str = "", instant: bool = False, table: bool = False
) -> dict[str, Any]:
    """A Prometheus query of a panel (its refId is set by :func:`panel`)."""
    out = {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend}
    if instant or table:
        out.update(instant=True, range=False, format="table" if table else "time_series")
    return out


class Layout:
    """Place panels left to right, top to bottom, on Grafana's 24-column grid."""

    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self.x = self.y = self.row_height = 0

    def add(self, panel: dict[str, Any], width: int = 12, height: int = 8) -> None:
        if self.x + width > WIDTH:
            self.x, self.y = 0, self.y + self.row_height
            self.row_height = 0
        panel["id"] = len(self.panels) + 1
        panel["gridPos"] = {"x": self.x, "y": self.y, "w": width, "h": height}
        self.panels.append(panel)
        self.x += width
        self.row_height = max(self.row_height, height)

    def row(self, title: str) -> None:
        if self.x:
            self.x, self.y = 0, self.y + self.row_height
        self.row_height = 0
        self.add({"type": "row", "title": title, "collapsed": False, "panels": []}, WIDTH, 1)


def panel(
    kind: str,
    title: str,
    targets: list[dict[str, Any]],
    unit: str = "short",
    description: str = "",
    minimum: float | None = None,
    maximum: float | None = None,
    thresholds: list[dict[str, Any]] | None = None,
    options: dict[str, Any] | None = None,
    overrides: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": unit}
    if minimum is not None:
        defaults["min"] = minimum
    if maximum is not None:
        defaults["max"] = maximum
    if thresholds:
        defaults["thresholds"] = {"mode": "absolute", "steps": thresholds}
        defaults["custom"] = {"thresholdsStyle": {"mode": "line"}}
    for i, t in enumerate(targets):
        t["refId"] = chr(ord("A") + i)
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": options
        or {
            "legend": {"displayMode": "list", "placement": "bottom"},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
    }


def dashboard(
    uid: str,
    title: str,
    description: str,
    variables: list[dict[str, Any]],
    layout: Layout,
    annotations: list[dict[str, Any]] = (),
) -> dict[str, Any]:
    builtin = {
        "builtIn": 1,
        "datasource": {"type": "grafana", "uid": "-- Grafana --"},
        "enable": True,
        "hide": True,
        "iconColor": "rgba(0, 211, 255, 1)",
        "name": "Annotations & Alerts",
        "type": "dashboard",
    }
    panel_types = sorted({p["type"] for p in layout.panels if p["type"] != "row"})
    requires = [
        {"type": "grafana", "id": "grafana", "name": "Grafana", "version": GRAFANA_VERSION},
        {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
        *({"type": "panel", "id": kind, "name": kind, "version": ""} for kind in panel_types),
    ]
    return {
        "__inputs": INPUTS,
        "__requires": requires,
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["streameval"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [DATASOURCE_VAR, *variables]},
        "annotations": {"list": [builtin, *annotations]},
        "links": [
            {
                "type": "dashboards",
                "tags": ["streameval"],
                "asDropdown": True,
                "title": "streameval",
                "includeVars": True,
                "keepTime": True,
            }
        ],
        "panels": layout.panels,
    }


MODEL = query_var("model", "label_values(streameval_model_outcomes, model)")
ESTIMATOR = query_var("estimator", "label_values(streameval_measure, estimator)")
SEL = 'model=~"$model", estimator=~"$estimator"'
DRIFT_ANNOTATION = {
    "name": "Drift alarms",
    "datasource": DATASOURCE,
    "enable": True,
    "iconColor": "red",
    "expr": 'increase(streameval_drift_alarms_total{model=~"$model"}[1m]) > 0',
    "step": "30s",
    "titleFormat": "drift alarm",
    "textFormat": "{{model}}: {{detector}}",
    "tagKeys": "model,detector",
}
#: Where the latest alarm of each detector estimates its change began: the event time of the
#: outcome at the Page-Hinkley minimum, placed by the series' value (ms), not its sample time
DRIFT_CHANGE_ANNOTATION = {
    "name": "Drift began (estimated)",
    "datasource": DATASOURCE,
    "enable": True,
    "iconColor": "orange",
    "expr": 'streameval_drift_alarm_timestamp_seconds{model=~"$model", point="change"} * 1000 > 0',
    "step": "30s",
    "useValueForTime": True,
    "titleFormat": "drift began (estimate of the latest alarm)",
    "textFormat": "{{model}}: {{detector}} — the change is estimated to begin after this outcome",
    "tagKeys": "model,detector",
}


def latest_alarms_table() -> dict[str, Any]:
    """One row per model and detector: when its latest alarm fired, where it estimates the
    change began, and the monitored estimate before and after."""

    def latest(family: str, selector: str, scale: str = "") -> dict[str, Any]:
        series = f'streameval_drift_alarm_{family}{{model=~"$model", {selector}}}'
        expr = f"max by (model, detector) ({series}){scale}"
        return target(expr, table=True)

    columns = {
        "Value #A": "alarm (event time)",
        "Value #B": "alarm (outcome)",
        "Value #C": "change began after (event time)",
        "Value #D": "change began after (outcome)",
        "Value #E": "estimate before",
        "Value #F": "estimate after",
    }
    table = panel(
        "table",
        "Latest drift alarm per detector: where the change began, estimate before → after",
        [
            latest("timestamp_seconds", 'point="alarm"', " * 1000"),
            latest("outcome", 'point="alarm"'),
            latest("timestamp_seconds", 'point="change"', " * 1000"),
            latest("outcome", 'point="change"'),
            latest("estimate", 'span="before"'),
            latest("estimate", 'span="after"'),
        ],
        description="The change is estimated to begin after the outcome at which the "
        'Page-Hinkley cumulative sum was at its minimum (docs/measures.md, "Drift alarms"). '
        "Estimates are the detector's monitored value — the fading error (page_hinkley) or the "
        "ratio of short- to long-term fading error (ratio_page_hinkley) — averaged from its "
        "last reset to the change and from the change to the alarm. Empty until a detector "
        "fires; a change not known (a detector restored from an older checkpoint) is empty.",
        options={"showHeader": True, "cellHeight": "sm"},
    )
    table["transformations"] = [
        {"id": "merge", "options": {}},
        {"id": "organize", "options": {"excludeByName": {"Time": True},
                                       "renameByName": columns}},
    ]  # fmt: skip
    table["fieldConfig"]["overrides"] = [
        {"matcher": {"id": "byName", "options": name},
         "properties": [{"id": "unit", "value": "dateTimeAsIso"}]}
        for name in (columns["Value #A"], columns["Value #C"])
    ]  # fmt: skip
    return table


def overview() -> dict[str, Any]:
    lay = Layout()

    def measure(names: str) -> str:
        return f'streameval_measure{{{SEL}, view="final", measure=~"{names}"}}'

    legend = "{{model}} {{measure}} ({{estimator}})"
    lay.row("Accuracy and its baselines")
    lay.add(
        panel(
            "stat",
            "Accuracy now",
            [target(measure("accuracy"), "{{model}} ({{estimator}})", instant=True)],
            unit="percentunit",
            options={
                "reduceOptions": {"calcs": ["lastNotNull"]},
                "textMode": "value_and_name",
                "colorMode": "value",
            },
        ),
        WIDTH,
        5,
    )
    lay.add(
        panel(
            "timeseries",
            "Accuracy next to the baselines",
            [target(measure("accuracy|p_maj|p_per|p_ran"), legend)],
            unit="percentunit",
            description="p_maj: majority class; p_per: persistent (no-change) classifier; p_ran: "
            "chance agreement.",
            minimum=0,
            maximum=1,
        )
    )
    lay.add(
        panel(
            "timeseries",
            "Accuracy above the baselines",
            [
                target(
                    f"{measure('accuracy')} - ignoring (measure) {measure(baseline)}",
                    f"{{{{model}}}} − {baseline} ({{{{estimator}}}})",
                )
                for baseline in ("p_per", "p_maj")
            ],
            unit="percentunit",
            description="Below 0 the model is worse than the baseline.",
        )
    )
    # the bounds as thin dashed lines beside their value: a filled band (Grafana's fillBelowTo)
    # names one series, and a panel here shows every model and estimator selected
    bounds = [
        {
            "matcher": {"id": "byRegexp", "options": ".*_(lo|hi) .*"},
            "properties": [
                {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [6, 4]}},
                {"id": "custom.lineWidth", "value": 1},
            ],
        }
    ]
    lay.add(
        panel(
            "timeseries",
            "Accuracy with its interval",
            [target(measure("accuracy|accuracy_lo|accuracy_hi"), legend)],
            unit="percentunit",
            description="Dashed: the Wilson interval (95 % by default, the evaluation setting "
            "confidence) on the estimate's effective sample size; wide while few labels back it.",
            minimum=0,
            maximum=1,
            overrides=bounds,
        )
    )
    lay.add(
        panel(
            "timeseries",
            "κ_per with its interval",
            [target(measure("kappa_temporal|kappa_temporal_lo|kappa_temporal_hi"), legend)],
            description="Dashed: κ_per ± z·se. An upper bound below 0 means worse than the "
            "persistent classifier beyond sampling noise (the StreamevalWorseThanPersistent "
            "alert).",
            maximum=1,
            overrides=bounds,
        )
    )
    lay.row("Kappa statistics")
    lay.add(
        panel(
            "timeseries",
            "κ, κ_M, κ_per and κ⁺",
            [target(measure("kappa|kappa_m|kappa_temporal|kappa_plus"), legend)],
            description="kappa: against chance; kappa_m: against the majority class; "
            "kappa_temporal (κ_per): against the persistent classifier; kappa_plus (κ⁺): "
            "the geometric combination of κ and κ_per.",
            maximum=1,
        ),
        WIDTH,
    )
    lay.row("Class-balanced and per-class measures")
    lay.add(
        panel(
            "timeseries",
            "Balanced accuracy, macro F1, MCC, G-mean",
            [target(measure("balanced_accuracy|f1_macro|mcc|g_mean"), legend)],
        )
    )
    lay.add(
        panel(
            "timeseries",
            "Precision per class",
            [
                target(
                    f'streameval_class_measure{{{SEL}, view="final", measure="precision"}}',
                    "{{model}} class {{class}} ({{estimator}})",
                )
            ],
            unit="percentunit",
            description="The first classes of each model (export_classes, 2 by default: both "
            "classes of a binary model).",
        )
    )
    lay.add(
        panel(
            "timeseries",
            "Recall per class",
            [
                target(
                    f'streameval_class_measure{{{SEL}, view="final", measure="recall"}}',
                    "{{model}} class {{class}} ({{estimator}})",
                )
            ],
            unit="percentunit",
        )
    )
    lay.add(
        panel(
            "timeseries",
            "First prediction vs last prediction (accuracy)",
            [
                target(
                    f'streameval_measure{{{SEL}, measure="accuracy"}}',
                    "{{model}} {{view}} ({{estimator}})",
                )
            ],
            unit="percentunit",
            description="initial: the first prediction made for each instance; final: the last one "
            "before its label arrived.",
        )
    )
    lay.row("Scores: ranking and calibration (models whose predictions carry scores)")
    lay.add(
        panel(
            "timeseries",
            "ROC AUC",
            [target(measure("roc_auc"), legend)],
            description="How well the scores rank: the chance that an instance of the positive "
            "class (or of each class against the rest, averaged) scores higher than one that "
            "is not. 0.5 is a coin. Empty for models whose predictions have no scores.",
            minimum=0,
            maximum=1,
        )
    )
    lay.add(
        panel(
            "timeseries",
            "Log-loss and Brier score",
            [target(measure("log_loss|brier"), legend)],
            description="How much probability the scores gave the class that came true (lower "
            "is better). log_loss: mean −ln p of the true class; brier: mean "
            "Σ_c (p_c − 1[y = c])², in [0, 2] (docs/measures.md, Scores).",
            minimum=0,
        )
    )
    lay.add(
        panel(
            "timeseries",
            "Expected calibration error",
            [target(measure("ece"), legend)],
            unit="percentunit",
            description="The weighted mean gap between the top class's probability and how "
            "often it is right, over confidence bins (scores.ece_bins). 0: the probabilities "
            "mean what they say. Each bin's confidence and accuracy (a reliability diagram) are "
            "in the metrics records, and are series when export_measures lists reliability.",
            minimum=0,
        )
    )
    lay.row("Cost of the mistakes (models with a cost matrix)")
    lay.add(
        panel(
            "timeseries",
            "Cost per decision and its baselines",
            [target(measure("expected_cost|cost_majority|cost_no_change"), legend)],
            description="expected_cost: the mean cost of the model's decisions under the cost "
            "matrix of models.<id>.costs; cost_majority and cost_no_change: what always "
            "predicting the majority class, or the previous label, would have cost on the same "
            "outcomes. A model is worth its keep while its cost is below both "
            "(docs/measures.md, Cost). Empty for models without a cost matrix.",
        ),
        WIDTH,
    )
    lay.row("Activity")
    lay.add(
        panel(
            "timeseries",
            "Outcomes per second",
            [target('model:streameval_outcomes:rate1m{model=~"$model"}', "{{model}}")],
            unit="ops",
        )
    )
    lay.add(
        panel(
            "timeseries",
            "Drift alarms in the last 10 minutes",
            [
                target(
                    'model_detector:streameval_drift_alarms:increase10m{model=~"$model"}',
                    "{{model}} {{detector}}",
                )
            ],
        )
    )
    lay.add(latest_alarms_table(), WIDTH, 6)
    return dashboard(
        "streameval-overview",
        "streameval · models",
        "Every measure of every model, by estimator, with its baselines; drift "
        "alarms as annotations, where their change began too.",
        [MODEL, ESTIMATOR],
        lay,
        [DRIFT_ANNOTATION, DRIFT_CHANGE_ANNOTATION],
    )


def delayed() -> dict[str, Any]:
    lay = Layout()
    stages = "{{model}} {{stage}} ({{estimator}})"
    lay.row("Initial, intermediate and final performance (Grzenda et al.)")
    for name, title in (("accuracy", "Accuracy"), ("kappa", "κ"), ("kappa_plus", "κ⁺")):
        lay.add(
            panel(
                "timeseries",
                f"{title}: initial, Ψ, final",
                [target(f'streameval_delayed_measure{{{SEL}, measure="{name}"}}', stages)],
                description="initial: the prediction made on arrival; psi: the weighted mean over "
                "the latency period (intermediate predictions); final: the last "
                "prediction before the label.",
                maximum=1,
            ),
            8,
        )
    lay.add(
        panel(
            "timeseries",
            "Scores while labels are late: Ψ of log-loss and Brier",
            [
                target(
                    f'streameval_delayed_measure{{{SEL}, measure=~"log_loss|brier", stage="psi"}}',
                    "{{model}} {{measure}} ({{estimator}})",
                )
            ],
            description="Ψ_α of the log-loss and the Brier score over the latency period, early "
            "probabilities weighing more (lower is better); only for models whose every "
            "prediction carries scores.",
        ),
        WIDTH,
    )
    binned = panel(
        "bargauge",
        "Accuracy across the latency period now: $model",
        [target(f"streameval_binned_accuracy{{{SEL}}}", "{{estimator}} {{bin}}", instant=True)],
        unit="percentunit",
        minimum=0,
        maximum=1,
        description="Bin 001 is the prediction at arrival, the last bin the one just before the "
        "label; one panel per model.",
        options=VERTICAL_BARS,
    )
    binned.update(repeat="model", repeatDirection="v")
    lay.add(binned, WIDTH)
    lay.row("Labels")
    lay.add(
        panel(
            "timeseries",
            "Label latency quantiles",
            [
                target(
                    'model_quantile:streameval_label_latency_seconds:quantile5m{model=~"$model"}',
                    "{{model}} p{{quantile}}",
                )
            ],
            unit="s",
        ),
        8,
    )
    lay.add(
        panel(
            "timeseries",
            "Mean label latency",
            [target('streameval_label_latency_mean_seconds{model=~"$model"}', "{{model}}")],
            unit="s",
        ),
        8,
    )
    lay.add(
        panel(
            "timeseries",
            "Label coverage (15 min)",
            [target('model:streameval_label_coverage:ratio_rate15m{model=~"$model"}', "{{model}}")],
            unit="percentunit",
            minimum=0,
            maximum=1,
            description="Outcomes over outcomes plus predictions that expired or were evicted "
            "without a label.",
        ),
        8,
    )
    lay.add(
        panel(
            "timeseries",
            "Instances waiting for a label",
            [target("job:streameval_pending_instances:sum", "pending")],
        ),
        WIDTH,
    )
    lay.row("Label maturity: how much of each cohort is labelled so far")
    maturity = panel(
        "bargauge",
        "Share labelled by cohort age: $model",
        [
            target(
                'max without (instance, job) (streameval_label_maturity{model=~"$model", '
                'class=""})',
                "{{age}}",
                instant=True,
            )
        ],
        unit="percentunit",
        minimum=0,
        maximum=1,
        description="Of the instances the model first predicted in each cohort "
        "(maturity.cohort_ms of event time; 0 is the cohort in progress, k the k-th before "
        "it), the share whose label has come. A young cohort is immature; an old one that "
        "stays low lost its labels (expired or never sent). One panel per model.",
        options=VERTICAL_BARS,
    )
    maturity.update(repeat="model", repeatDirection="h")
    lay.add(maturity, 12)
    lay.add(
        panel(
            "timeseries",
            "Share labelled by class of the label, cohort before the one in progress",
            [
                target(
                    'max without (instance, job) (streameval_label_maturity{model=~"$model", '
                    'age="1"})',
                    "{{model}} {{class}}",
                )
            ],
            unit="percentunit",
            minimum=0,
            maximum=1,
            description="The last complete cohort's share labelled, overall (empty class) and "
            "by class of the label: a class whose share grows later than the others' has later "
            "labels, and window measures lean toward the faster classes until it catches up.",
        ),
        12,
    )
    return dashboard(
        "streameval-delayed",
        "streameval · delayed labels",
        "How good the predictions were while the label was pending.",
        [MODEL, ESTIMATOR],
        lay,
        [DRIFT_ANNOTATION, DRIFT_CHANGE_ANNOTATION],
    )


def comparison() -> dict[str, Any]:
    lay = Layout()
    pair = query_var("pair", "label_values(streameval_comparison, pair)")
    estimator = query_var("estimator", "label_values(streameval_comparison, estimator)")
    model_a = query_var(
        "model_a", 'label_values(streameval_comparison{pair=~"$pair"}, model_a)', hide=True
    )
    model_b = query_var(
        "model_b", 'label_values(streameval_comparison{pair=~"$pair"}, model_b)', hide=True
    )
    sel = 'pair=~"$pair", estimator=~"$estimator"'
    legend = "{{model_a}} vs {{model_b}} ({{estimator}})"
    lay.row("Champion (model_a) and challenger (model_b)")
    lay.add(
        panel(
            "timeseries",
            "Signed McNemar statistic",
            [target(f'streameval_comparison{{{sel}, statistic="mcnemar"}}', legend)],
            description=f"Above +{MCNEMAR_99} model_b is significantly better, below −{MCNEMAR_99} "
            "model_a (99 %); the lines mark the significance level.",
            thresholds=[
                {"color": "green", "value": None},
                {"color": "red", "value": -MCNEMAR_99},
                {"color": "green", "value": MCNEMAR_99},
            ],
        )
    )
    lay.add(
        panel(
            "timeseries",
            "Q statistic",
            [target(f'streameval_comparison{{{sel}, statistic="q_statistic"}}', legend)],
            description="Q = ln(S_a/S_b), the log ratio of the two models' loss sums (Gama et "
            "al. 2013): below 0 model_a has the smaller loss, above 0 model_b; the line marks 0.",
            thresholds=[{"color": "green", "value": None}, {"color": "text", "value": 0}],
        )
    )
    lay.add(
        panel(
            "timeseries",
            "Errors only one model makes",
            [
                target(
                    f"streameval_comparison_disagreements{{{sel}}}",
                    "only {{only_wrong}} wrong ({{estimator}})",
                )
            ],
            description="only model_a wrong (n01: model_b right); only model_b wrong (n10).",
        )
    )
    lay.add(
        panel(
            "state-timeline",
            "Significant difference",
            [target(f'streameval_comparison{{{sel}, statistic="significant"}}', legend)],
            options={"showValue": "auto", "mergeValues": True},
        )
    )
    lay.add(
        panel(
            "timeseries",
            "Accuracy of both models",
            [
                target(
                    'streameval_measure{model=~"$model_a|$model_b", estimator=~"$estimator", '
                    'view="final", measure="accuracy"}',
                    "{{model}} ({{estimator}})",
                )
            ],
            unit="percentunit",
        ),
        WIDTH,
    )
    return dashboard(
        "streameval-comparison",
        "streameval · champion/challenger",
        "McNemar and Q statistics of the configured model pairs over time.",
        [pair, estimator, model_a, model_b],
        lay,
    )


def health() -> dict[str, Any]:
    lay = Layout()
    instance = query_var("instance", 'label_values(up{job="streameval"}, instance)', label="worker")
    worker = 'job="streameval", instance=~"$instance"'
    lay.row("Throughput")
    lay.add(panel("stat", "Workers up", [target("job:up:sum", "workers")]), 4)
    lay.add(
        panel(
            "timeseries",
            "Input messages per second",
            [
                target("job:streameval_input_messages:rate1m", "all workers"),
                target(
                    f"rate(streameval_input_messages_total{{{worker}}}[$__rate_interval])",
                    "{{instance}}",
                ),
            ],
            unit="ops",
        ),
        10,
    )
    lay.add(
        panel(
            "timeseries",
            "Outcomes per second",
            [target("model:streameval_outcomes:rate1m", "{{model}}")],
            unit="ops",
        ),
        10,
    )
    lay.row("Backlog")
    lay.add(
        panel(
            "timeseries",
            "Backlog in time",
            [target("job:streameval_consumer_lag_per_input_messages:ratio_rate1m", "all input")],
            unit="s",
            description="Consumer lag over the input rate: how long the group would take to "
            "catch up. Offsets are committed at each checkpoint, so a busy group shows about "
            "snapshot_interval_s.",
        ),
        8,
    )
    lay.add(
        panel(
            "timeseries",
            "Consumer lag by topic",
            [target("topic:streameval_consumer_lag:sum", "{{topic}}")],
        ),
        8,
    )
    lay.add(
        panel(
            "timeseries",
            "Consumer lag by partition",
            [
                target(
                    f"streameval_consumer_lag{{{worker}}}", "{{topic}}[{{partition}}] {{instance}}"
                )
            ],
        ),
        8,
    )
    lay.add(
        panel(
            "timeseries",
            "Instances waiting for a label",
            [target(f"streameval_pending_instances{{{worker}}}", "{{instance}}")],
        ),
        8,
    )
    lay.add(
        panel(
            "timeseries",
            "Waiting between the stages",
            [
                target(f"streameval_join_waiting_events{{{worker}}}", "join, events {{instance}}"),
                target(
                    f"streameval_evaluation_waiting_outcomes{{{worker}}}",
                    "evaluation, outcomes {{instance}}",
                ),
            ],
            description="Read, and held back for event time: events until every input "
            "partition's clock passes them, outcomes until every join partition reaches them. "
            "Growing: one partition runs behind the others in event time and holds them back.",
        ),
        8,
    )
    lay.add(
        panel(
            "timeseries",
            "Internal batches not yet read",
            [
                target(
                    f"streameval_internal_lag{{{worker}}}",
                    "{{stage}}[{{partition}}] {{instance}}",
                )
            ],
            description="Batches of events (join) and of outcomes (evaluation) in the internal "
            "topics that the stage has not read yet. Growing: that stage does not keep up with "
            "the input.",
        ),
        8,
    )
    lay.row("Bad and odd input")
    lay.add(
        panel(
            "timeseries",
            "Dead letters per second",
            [target("reason:streameval_dead_letters:rate5m", "{{reason}}")],
            unit="ops",
        )
    )
    lay.add(
        panel(
            "timeseries",
            "Dropped or odd records per second",
            [target("reason:streameval_dropped_records:rate5m", "{{reason}}")],
            unit="ops",
        )
    )
    lay.row("Workers")
    lay.add(
        panel(
            "timeseries",
            "CPU per worker",
            [
                target(
                    f"rate(process_cpu_seconds_total{{{worker}}}[$__rate_interval])", "{{instance}}"
                )
            ],
            unit="percentunit",
        ),
        8,
    )
    lay.add(
        panel(
            "timeseries",
            "Resident memory per worker",
            [target(f"process_resident_memory_bytes{{{worker}}}", "{{instance}}")],
            unit="bytes",
        ),
        8,
    )
    lay.add(
        panel(
            "table",
            "Firing alerts",
            [target('ALERTS{alertname=~"Streameval.*", alertstate="firing"}', table=True)],
            options={"showHeader": True},
        ),
        8,
    )
    lay.add(
        panel(
            "table",
            "What each worker runs",
            [target(f"streameval_build_info{{{worker}}}", table=True)],
            description="Version, Python, librdkafka, application, the fingerprint of the "
            "evaluation configuration and the internal formats: the workers of one application "
            "must agree on all but Python and librdkafka (alert StreamevalWorkersDisagree).",
            options={"showHeader": True},
        ),
        WIDTH,
        6,
    )
    return dashboard(
        "streameval-health",
        "streameval · health",
        "Throughput, lag, pending labels and bad input of the worker group.",
        [instance],
        lay,
    )


DASHBOARDS = {
    "overview": overview,
    "delayed-labels": delayed,
    "comparison": comparison,
    "health": health,
}


def render() -> dict[str, str]:
    """File name → JSON text of every dashboard."""
    return {
        f"{name}.json": json.dumps(build(), indent=2, ensure_ascii=False) + "\n"
        for name, build in DASHBOARDS.items()
    }


def main() -> int:
    OUT.mkdir(exist_ok=True)
    for name, text in render().items():
        (OUT / name).write_text(text)
        print(f"wrote {OUT / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
