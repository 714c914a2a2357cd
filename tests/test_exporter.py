"""The Prometheus exporter shows exactly the numbers of the records it was given."""

import functools
import io
import math
import urllib.request
from pathlib import Path

import msgspec
from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.parser import text_string_to_metric_families
from streameval.config import load_config
from streameval.core.cost import COST_MEASURES
from streameval.core.drift import DEFAULT_DETECTORS
from streameval.core.probabilistic import PROBABILISTIC_MEASURES
from streameval.core.psi_scores import PSI_SCORE_MEASURES
from streameval.exporter import Exporter, Selection, estimator_label
from streameval.records import DriftAlarmRecord, check_record
from streameval.replay import replay
from streameval.series import DEFAULT_MEASURES

ROOT = Path(__file__).resolve().parents[1]
#: the counts of an estimate and the family each is exported in
COUNTS = {
    "n": "streameval_estimate_outcomes",
    "n_effective": "streameval_estimate_effective_outcomes",
}

DEFAULT_TYPES = [spec["type"] for spec in DEFAULT_DETECTORS]


@functools.cache
def _replay():
    records = []
    config = load_config(ROOT / "docs/examples/replay.toml")
    replay(
        ROOT / "docs/examples/sample-events.jsonl", config, io.BytesIO(), on_records=records.extend
    )
    return tuple(records)  # records are frozen: the tests may share them


def _replayed():
    return list(_replay())


def _alarm(model, n=7, change_n=4, detector="page_hinkley"):
    change = (change_n, 2000, "i4", 1000, 0.25, 0.5) if change_n else (None,) * 6
    return DriftAlarmRecord(
        "drift_alarm",
        model,
        3000 + n,
        "final",
        detector,
        101.0,
        100.0,
        n,
        0.5,
        f"i{n}",
        2000 + n,
        *change,
        {"type": detector},
    )


def _series(registry):
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            out[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return out


def _same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_series_equal_the_latest_records():
    records = _replayed()
    registry = CollectorRegistry()
    exporter = Exporter(registry, selection=Selection.everything())
    exporter.observe(records)
    series = _series(registry)
    final = {(r.model_id, r.view): r for r in records if r.kind == "metrics"}
    assert len(final) == 6
    for (model, view), record in final.items():
        for estimator, values in record.estimators.items():
            for name, value in values.items():
                if name == "reliability":  # one series per bin and quantity
                    for quantity, per_bin in value.items():
                        for i, bin_value in enumerate(per_bin):
                            labels = {
                                "model": model,
                                "view": view,
                                "estimator": estimator_label(estimator),
                                "bin": f"{i + 1:03d}",
                                "quantity": quantity,
                            }
                            key = ("streameval_reliability", tuple(sorted(labels.items())))
                            want = math.nan if bin_value is None else bin_value
                            assert _same(series[key], want), (key, series[key], want)
                    continue
                if "[" in name:
                    measure, cls = name[:-1].split("[")
                    key = (
                        "streameval_class_measure",
                        tuple(
                            sorted(
                                {
                                    "model": model,
                                    "view": view,
                                    "estimator": estimator_label(estimator),
                                    "measure": measure,
                                    "class": cls,
                                }.items()
                            )
                        ),
                    )
                elif name in COUNTS:
                    key = (
                        COUNTS[name],
                        tuple(
                            sorted(
                                {
                                    "model": model,
                                    "view": view,
                                    "estimator": estimator_label(estimator),
                                }.items()
                            )
                        ),
                    )
                else:
                    key = (
                        "streameval_measure",
                        tuple(
                            sorted(
                                {
                                    "model": model,
                                    "view": view,
                                    "estimator": estimator_label(estimator),
                                    "measure": name,
                                }.items()
                            )
                        ),
                    )
                want = math.nan if value is None else value
                assert _same(series[key], want), (key, series[key], want)
    labels = (
        ("estimator", "cumulative"),
        ("measure", "accuracy"),
        ("model", "champion"),
        ("stage", "psi"),
    )
    psi = series["streameval_delayed_measure", labels]
    assert psi == final["champion", "final"].delayed["cumulative"]["psi_accuracy"]
    assert (
        series[
            "streameval_drift_alarms_total",
            (("detector", "page_hinkley"), ("model", "champion")),
        ]
        == 1.0
    )
    mcnemar = [
        v
        for (name, labels), v in series.items()
        if name == "streameval_comparison"
        and ("statistic", "mcnemar") in labels
        and ("estimator", "window_1000") in labels
    ]
    last = [r for r in records if r.kind == "comparison"][-1]
    assert mcnemar == [last.estimators["window:1000"].mcnemar]
    disagreements = {
        dict(labels)["only_wrong"]: v
        for (name, labels), v in series.items()
        if name == "streameval_comparison_disagreements" and ("estimator", "window_1000") in labels
    }
    window = last.estimators["window:1000"]
    assert disagreements == {"model_a": window.n01, "model_b": window.n10}


def test_counts_have_families_of_their_own():
    """A family holds one kind of number: sum() or avg() over a measure family must not mix
    accuracies with outcome counts, nor statistics with tallies of disagreements."""
    registry = CollectorRegistry()
    Exporter(registry, selection=Selection.everything()).observe(_replayed())
    text = generate_latest(registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("streameval_measure", "streameval_class_measure"):
        measures = {s.labels["measure"] for s in families[name].samples}
        assert measures and not measures & set(COUNTS), (name, measures & set(COUNTS))
    statistics = {s.labels["statistic"] for s in families["streameval_comparison"].samples}
    assert statistics == {"q_statistic", "mcnemar", "significant"}
    for name in (*COUNTS.values(), "streameval_comparison_disagreements"):
        assert families[name].type == "gauge" and families[name].samples, name
        assert all(s.value >= 0 for s in families[name].samples), name


def _maturity(model="champion", ages=3, ts=1_767_236_400_000):
    """A label-maturity record of ``ages`` hourly cohorts, the oldest fully labelled."""
    from streameval.records import Cohort, CohortClass, LabelMaturityRecord

    width = 3_600_000
    current = (ts - 1) // width * width
    cohorts = []
    for age in reversed(range(ages)):
        labelled = 100 - 40 * age if age else 10
        cohorts.append(
            Cohort(
                current - age * width,
                100,
                labelled,
                labelled / 100,
                {
                    "no": CohortClass(labelled - 5, (labelled - 5) / 100),
                    "yes": CohortClass(5, 0.05),
                },
            )
        )
    return LabelMaturityRecord(
        "label_maturity", model, ts, 7, width, 100 * ages, sum(c.labelled for c in cohorts),
        {"no": 1, "yes": 2}, cohorts, None,
    )  # fmt: skip


def _latest(model="champion"):
    """The model's latest initial and final metrics records of the replayed sample."""
    latest = {(r.model_id, r.view): r for r in _replayed() if r.kind == "metrics"}
    return latest[model, "initial"], latest[model, "final"]


def _with_classes(record, classes):
    """The record as if its model had seen ``classes`` more classes (c1, c2 ...)."""
    estimators = {
        name: {
            **values,
            **{
                f"{m}[c{i}]": 0.5
                for i in range(1, classes + 1)
                for m in ("precision", "recall", "f1")
            },
        }
        for name, values in record.estimators.items()
    }
    return msgspec.structs.replace(record, estimators=estimators)


def _keys(registry, model):
    return {(name, labels) for name, labels in _series(registry) if ("model", model) in labels}


def test_the_default_selection_exports_what_the_dashboards_and_alerts_use():
    initial, final = (_with_classes(r, 8) for r in _latest())
    registry = CollectorRegistry()
    Exporter(registry).observe([initial, final])
    series = _series(registry)
    estimators = [estimator_label(e) for e in final.estimators]
    measures = {
        (dict(k)["view"], dict(k)["estimator"], dict(k)["measure"]): v
        for (name, k), v in series.items()
        if name == "streameval_measure"
    }
    # the sample's champion sends scores: its log_loss, brier, ece and roc_auc are exported
    scalars = set(DEFAULT_MEASURES) - {"n", "n_effective", "precision", "recall"}
    scored = {m for (_, _, m) in measures} & set(PROBABILISTIC_MEASURES)
    assert scored == {"log_loss", "brier", "ece", "roc_auc"}
    assert measures.keys() == {("final", e, m) for e in estimators for m in scalars} | {
        ("initial", e, "accuracy") for e in estimators
    }
    assert (
        measures["final", "window_1000", "kappa_plus"]
        == (final.estimators["window:1000"]["kappa_plus"])
    )
    counts = {
        name: {dict(k)["estimator"] for (n, k) in series if n == name and ("view", "final") in k}
        for name in COUNTS.values()
    }
    assert counts == {name: set(estimators) for name in COUNTS.values()}
    assert not any(n in COUNTS.values() and ("view", "initial") in k for n, k in series)
    # per-class precision and recall of the model's first two classes (its 10 are on the topic)
    classes = {
        (dict(k)["class"], dict(k)["measure"])
        for (n, k) in series
        if n == "streameval_class_measure"
    }
    assert classes == {(c, m) for c in ("yes", "no") for m in ("precision", "recall")}
    # ten bins of a hundred, the first and the last among them
    bins = sorted({dict(k)["bin"] for (n, k) in series if n == "streameval_binned_accuracy"})
    assert bins == ["001", "012", "023", "034", "045", "056", "067", "078", "089", "100"]
    block = final.delayed["cumulative"]["binned_accuracy"]
    key = (("bin", "100"), ("estimator", "cumulative"), ("model", "champion"))
    assert series["streameval_binned_accuracy", key] == block[99]
    stages = {
        (dict(k)["measure"], dict(k)["stage"])
        for (n, k) in series
        if n == "streameval_delayed_measure"
    }
    every = {
        (m, s) for m in ("accuracy", "kappa", "kappa_plus") for s in ("initial", "psi", "final")
    }
    # the champion scores every prediction: Ψ_α of its log-loss and Brier too
    assert stages == every | {("log_loss", "psi"), ("brier", "psi")}
    key = (
        ("estimator", "cumulative"),
        ("measure", "brier"),
        ("model", "champion"),
        ("stage", "psi"),
    )
    assert series["streameval_delayed_measure", key] == final.delayed["cumulative"]["psi_brier"]


def test_a_selection_narrows_each_dimension():
    initial, final = _latest()
    registry = CollectorRegistry()
    selection = Selection(
        frozenset({"kappa", "n", "recall"}),
        frozenset(),
        frozenset({"window:1000"}),
        classes=1,
        bins=3,
    )
    Exporter(registry, selection=selection).observe([initial, final])
    labels = dict(model="champion", estimator="window_1000", view="final")
    assert _keys(registry, "champion") == {
        ("streameval_measure", tuple(sorted({**labels, "measure": "kappa"}.items()))),
        ("streameval_estimate_outcomes", tuple(sorted(labels.items()))),
        (
            "streameval_class_measure",
            tuple(sorted({**labels, "measure": "recall", "class": "yes"}.items())),
        ),
        *(
            (
                "streameval_delayed_measure",
                (
                    ("estimator", "window_1000"),
                    ("measure", "kappa"),
                    ("model", "champion"),
                    ("stage", stage),
                ),
            )
            for stage in ("initial", "psi", "final")
        ),
        ("streameval_model_outcomes", (("model", "champion"),)),
        ("streameval_label_latency_mean_seconds", (("model", "champion"),)),
    }


def _without_scores(record, scores=False, costs=False):
    """The record as if its model had sent no scores and had no cost matrix (but with
    ``scores``, ``costs``)."""
    dropped = {
        *(() if scores else (*PROBABILISTIC_MEASURES, "reliability")),
        *(() if costs else COST_MEASURES),
    }
    estimators = {
        name: {k: v for k, v in values.items() if k not in dropped}
        for name, values in record.estimators.items()
    }
    if not hasattr(record, "delayed"):  # the initial view's record
        return msgspec.structs.replace(record, estimators=estimators)
    delayed = {
        name: {k: v for k, v in values.items() if scores or k not in PSI_SCORE_MEASURES}
        for name, values in record.delayed.items()
    }
    return msgspec.structs.replace(record, estimators=estimators, delayed=delayed)


def _hundred_models(selection, classes=0, scored=False, costs=False):
    """An exporter with 100 models' latest records (the sample's champion's, ``scored`` or as
    if it had sent no scores), outcomes and alarm counters, as a worker that evaluates them
    has; and how long a scrape of it takes."""
    import time

    initial, final = (_with_classes(r, classes) for r in _latest())
    initial, final = (_without_scores(r, scored, costs) for r in (initial, final))
    registry = CollectorRegistry()
    exporter = Exporter(registry, detectors_of=lambda _: DEFAULT_TYPES, selection=selection)
    alone = len(_series(registry))
    for i in range(100):
        model = f"model-{i:03d}"
        exporter.observe([msgspec.structs.replace(r, model_id=model) for r in (initial, final)])
        exporter.observe([_maturity(model, ages=24)])  # the default maturity.cohorts
        exporter.observe_outcomes(model, [1500.0, 90_000.0])
    started = time.perf_counter()
    body = generate_latest(registry)
    seconds = time.perf_counter() - started
    samples = sum(len(f.samples) for f in text_string_to_metric_families(body.decode()))
    return samples - alone, seconds


def test_the_default_budget_keeps_a_model_under_155_series():
    """docs/operations.md, "Cardinality": 100 binary models (3 estimators, the default
    detector, label maturity) are 15 300 series with the defaults, 82 000 with everything; a
    model with more classes costs no more by default, one with scores 18 more, one with costs
    9. The numbers are in the docs: change both together."""
    default, _ = _hundred_models(Selection())
    everything, _ = _hundred_models(Selection.everything())
    assert default <= 155 * 100, default
    # everything: 736, and since the label delay by class 10 more (3 quantiles × every class
    # and both classes, and the test's p-value); label maturity: by default its two totals,
    # the shares of the cohort in progress and the one before, and that one's by class (6),
    # everything: 24 cohorts × (overall and 2 classes) and the totals (74)
    assert (default, everything) == (153 * 100, 820 * 100)
    many_classes, _ = _hundred_models(Selection(), classes=20)
    assert many_classes == default
    # scores add log-loss, Brier, ECE and ROC AUC under each of the three estimators, and
    # Ψ_α of log-loss and Brier
    scored, _ = _hundred_models(Selection(), scored=True)
    assert scored == (153 + 12 + 6) * 100
    # a cost matrix adds the expected cost and its two baselines' under each estimator
    costs, _ = _hundred_models(Selection(), costs=True)
    assert costs == (153 + 9) * 100


def test_label_maturity_series_by_cohort_age():
    """The latest label-maturity record of a model: its totals, the share of the cohort in
    progress (age 0) and of the one before (age 1), and that one's by class; every cohort by
    class when the selection lists label_maturity; what the record no longer lists goes."""
    registry = CollectorRegistry()
    exporter = Exporter(registry)
    exporter.observe([_maturity("m", ages=3)])
    series = _series(registry)
    values = {
        (dict(labels)["age"], dict(labels)["class"]): value
        for (name, labels), value in series.items()
        if name == "streameval_label_maturity"
    }
    assert values == {("0", ""): 0.1, ("1", ""): 0.6, ("1", "no"): 0.55, ("1", "yes"): 0.05}
    totals = {dict(labels)["state"]: value for (name, labels), value in series.items()
              if name == "streameval_label_maturity_instances"}  # fmt: skip
    assert totals == {"predicted": 300.0, "labelled": 90.0}
    everything = CollectorRegistry()
    exporter = Exporter(everything, selection=Selection.everything())
    exporter.observe([_maturity("m", ages=3)])
    exporter.observe([_maturity("m", ages=2)])  # a record with fewer cohorts: age 2 goes
    ages = {(dict(labels)["age"], dict(labels)["class"]) for (name, labels) in _series(everything)
            if name == "streameval_label_maturity"}  # fmt: skip
    assert ages == {(a, c) for a in ("0", "1") for c in ("", "no", "yes")}
    exporter.forget_models(["m"])
    assert not [k for k in _series(everything) if dict(k[1]).get("model") == "m"]


def test_forgotten_models_lose_their_series():
    registry = CollectorRegistry()
    exporter = Exporter(registry)
    exporter.observe(_replayed())
    exporter.observe_outcomes("champion", [1000.0, 2500.0])
    exporter.count_dropped("late_prediction", "champion")
    exporter.count_dropped("orphan_label")
    exporter.forget_models(["champion"])
    text = generate_latest(registry).decode()
    assert 'model="champion"' not in text and 'model_a="champion"' not in text
    assert 'model="challenger"' in text
    assert 'streameval_dropped_records_total{model="",reason="orphan_label"} 1.0' in text


def test_alarm_counters_start_at_zero_when_a_model_is_first_seen():
    """A counter born at 1 shows Prometheus no increase; the drift alert needs the 0 first."""
    registry = CollectorRegistry()
    exporter = Exporter(registry, detectors_of=lambda model: ["page_hinkley", f"{model}_own"])
    metrics = [r for r in _replayed() if r.kind == "metrics"]
    exporter.observe(metrics[:1])
    model = metrics[0].model_id
    series = _series(registry)
    for detector in ("page_hinkley", f"{model}_own"):
        key = (("detector", detector), ("model", model))
        assert series["streameval_drift_alarms_total", key] == 0.0
    exporter.observe([_alarm(model)])
    key = (("detector", "page_hinkley"), ("model", model))
    assert _series(registry)["streameval_drift_alarms_total", key] == 1.0
    exporter.forget_models([model])
    assert "streameval_drift_alarms_total{" not in generate_latest(registry).decode()


def test_the_latest_alarm_says_where_its_change_began_without_new_series_per_alarm():
    """Gauges per model, detector and a fixed point/span: a second alarm moves them, adds
    none; a change point not known is NaN; a model that leaves takes them along."""
    registry = CollectorRegistry()
    exporter = Exporter(registry, detectors_of=lambda _: ["page_hinkley", "ratio_page_hinkley"])
    exporter.observe([_alarm("m")])
    before = _series(registry)
    key = (("detector", "page_hinkley"), ("model", "m"))
    assert before["streameval_drift_alarm_outcome", (*key, ("point", "change"))] == 4
    assert before["streameval_drift_alarm_outcome", (*key, ("point", "alarm"))] == 7
    assert before["streameval_drift_alarm_timestamp_seconds", (*key, ("point", "change"))] == 2.0
    assert before["streameval_drift_alarm_timestamp_seconds", (*key, ("point", "alarm"))] == 3.007
    assert before["streameval_drift_alarm_estimate", (*key, ("span", "before"))] == 0.25
    assert before["streameval_drift_alarm_estimate", (*key, ("span", "after"))] == 0.5
    assert not any(
        name.startswith("streameval_drift_alarm_") and ("detector", "ratio_page_hinkley") in labels
        for name, labels in before
    )
    exporter.observe([_alarm("m", n=900, change_n=None)])  # restored without its change point
    after = _series(registry)
    assert after.keys() == before.keys()
    assert after["streameval_drift_alarm_outcome", (*key, ("point", "alarm"))] == 900
    assert math.isnan(after["streameval_drift_alarm_outcome", (*key, ("point", "change"))])
    assert math.isnan(after["streameval_drift_alarm_estimate", (*key, ("span", "before"))])
    exporter.forget_models(["m"])
    assert not any(name.startswith("streameval_drift_alarm") for name, _ in _series(registry))


def test_latency_histogram_and_outcome_counter():
    registry = CollectorRegistry()
    exporter = Exporter(registry)
    exporter.observe_outcomes("m", [500.0, 3000.0, 7_200_000.0])
    series = _series(registry)
    assert series["streameval_outcomes_total", (("model", "m"),)] == 3
    assert series["streameval_label_latency_seconds_bucket", (("le", "1.0"), ("model", "m"))] == 1
    assert series["streameval_label_latency_seconds_bucket", (("le", "5.0"), ("model", "m"))] == 2
    assert series["streameval_label_latency_seconds_count", (("model", "m"),)] == 3


def test_metrics_are_served_over_http():
    registry = CollectorRegistry()
    Exporter(registry).observe(_replayed())
    server, _thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        port = server.server_address[1]
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
    finally:
        server.shutdown()
    assert b'streameval_measure{estimator="window_1000",measure="kappa_plus"' in body


def test_an_alarm_before_its_models_first_metrics_still_creates_the_zeros():
    registry = CollectorRegistry()
    exporter = Exporter(registry, detectors_of=lambda model: ["page_hinkley", "ratio_page_hinkley"])
    exporter.observe([_alarm("m")])
    series = _series(registry)
    assert (
        series["streameval_drift_alarms_total", (("detector", "page_hinkley"), ("model", "m"))] == 1
    )
    key = (("detector", "ratio_page_hinkley"), ("model", "m"))
    assert series["streameval_drift_alarms_total", key] == 0


def _dropped_counts(registry) -> dict[tuple[str, str], float]:
    return {
        (dict(k[1])["reason"], dict(k[1])["model"]): v
        for k, v in _series(registry).items()
        if k[0] == "streameval_dropped_records_total"
    }


def test_refused_outcomes_are_counted_per_evaluation_partition_and_never_twice():
    """The engines' refusals reach ``streameval_dropped_records_total`` as what passed the
    most counted of each evaluation partition. Two partitions may hold counts of one model (a
    model every outcome of which was refused has no evaluator to move with): each adds its
    own. A partition restored below what was counted (a rewind to its checkpoint) counts
    only past it — never a negative increment, which prometheus_client raises in the
    worker's loop."""
    from collections import Counter
    from types import SimpleNamespace

    from streameval.app.telemetry import Telemetry

    registry = CollectorRegistry()
    telemetry = Telemetry(Exporter(registry), ["instances"])
    first = SimpleNamespace(rejected=Counter({("m", "class_limit"): 3, ("n", "class_limit"): 1}))
    second = SimpleNamespace(rejected=Counter({("m", "class_limit"): 5}))
    telemetry.refused(0, first)
    telemetry.refused(0, first)  # nothing new
    telemetry.refused(1, second)
    assert _dropped_counts(registry) == {("class_limit", "m"): 8, ("class_limit", "n"): 1}
    first.rejected["m", "class_limit"] = 2  # rewound to its checkpoint ...
    telemetry.refused(0, first)
    first.rejected["m", "class_limit"] = 4  # ... and past where it was
    telemetry.refused(0, first)
    assert _dropped_counts(registry) == {("class_limit", "m"): 9, ("class_limit", "n"): 1}


def test_a_restored_partition_counts_only_what_it_drops_from_then_on():
    """Every rebalance revokes every partition, and one that stays is restored from its
    checkpoint: its totals (drops of no model, of models evaluated elsewhere: series the
    revocation leaves) were counted whole again, and orphan labels and expired instances
    doubled at each rebalance — in a worker with two processes, also when a partition went
    from one to the other. A restored partition's totals are taken as counted, by whichever
    process counted them; a rewind's re-read counts only past what was counted."""
    from collections import Counter
    from types import SimpleNamespace

    from streameval.app.telemetry import Telemetry

    registry = CollectorRegistry()
    exporter = Exporter(registry)
    one, two = Telemetry(exporter, ["instances"]), Telemetry(exporter, ["instances"])
    join = SimpleNamespace(
        counters=Counter({"orphan_label": 4, "expired_unlabelled": 5}),
        model_counters=Counter({("expired_unlabelled", "here"): 2, ("expired_unlabelled", "x"): 3}),
    )
    engine = SimpleNamespace(rejected=Counter({("here", "class_limit"): 6}), latest_records=list)

    def restored(telemetry):
        copy = SimpleNamespace(counters=Counter(join.counters),
                               model_counters=Counter(join.model_counters))  # fmt: skip
        telemetry.restored_join(0, copy)
        telemetry.restored(
            0, SimpleNamespace(rejected=Counter(engine.rejected), latest_records=list)
        )
        return copy

    one.joined(0, join)
    one.refused(0, engine)
    want = {("orphan_label", ""): 4, ("expired_unlabelled", "here"): 2,
            ("expired_unlabelled", "x"): 3, ("class_limit", "here"): 6}  # fmt: skip
    assert _dropped_counts(registry) == want
    one.dropped({"here"})  # a rebalance: the worker evaluated "here"; back to the same process
    again = restored(one)
    one.joined(0, again)
    one.refused(0, engine)
    assert _dropped_counts(registry) == {k: v for k, v in want.items() if k[1] != "here"}
    again.counters["orphan_label"] += 1
    one.joined(0, again)
    assert _dropped_counts(registry)["orphan_label", ""] == 5
    one.refused(0, SimpleNamespace(rejected=Counter({("here", "class_limit"): 7})))
    assert _dropped_counts(registry)["class_limit", "here"] == 1  # a new series, from 0
    # the other process takes it, restored from the same checkpoint (4: the first process
    # saw a fifth drop after it, which this one sees again, and counts)
    moved = restored(two)
    two.refused(0, engine)
    assert _dropped_counts(registry)["class_limit", "here"] == 1
    moved.counters["orphan_label"] += 2
    two.joined(0, moved)
    assert _dropped_counts(registry)["orphan_label", ""] == 7
    rewound = restored(one)  # back in the first, from its checkpoint (4), then read again
    rewound.counters["orphan_label"] += 2
    one.joined(0, rewound)
    assert _dropped_counts(registry)["orphan_label", ""] == 8
    join.counters["orphan_label"] = 9  # back again, from a later checkpoint: 9 are counted
    later = restored(one)  # elsewhere, and the mark rises to it
    one.joined(0, later)
    assert _dropped_counts(registry)["orphan_label", ""] == 8
    later.counters["orphan_label"] += 1
    one.joined(0, later)
    assert _dropped_counts(registry)["orphan_label", ""] == 9


def test_consumer_lag_shows_only_the_partitions_being_fetched():
    """librdkafka keeps the last lag of partitions a rebalance moved away; those must go."""
    from streameval.app.telemetry import Telemetry

    registry = CollectorRegistry()
    topic = "instances"
    telemetry = Telemetry(Exporter(registry), [topic])

    def stats(states):
        partitions = {
            str(p): {"consumer_lag": 100 * (p + 1), "fetch_state": state}
            for p, state in enumerate(states)
        }
        partitions["-1"] = {"consumer_lag": -1, "fetch_state": "none"}
        return {"topics": {topic: {"partitions": partitions}}}

    telemetry.on_stats(stats(["active", "active", "offset-query"]))
    lag = {k[1]: v for k, v in _series(registry).items() if k[0] == "streameval_consumer_lag"}
    assert lag == {
        (("partition", "0"), ("topic", topic)): 100.0,
        (("partition", "1"), ("topic", topic)): 200.0,
    }
    telemetry.on_stats(stats(["none", "active", "active"]))  # partition 0 moved away
    lag = {k[1]: v for k, v in _series(registry).items() if k[0] == "streameval_consumer_lag"}
    assert lag == {
        (("partition", "1"), ("topic", topic)): 200.0,
        (("partition", "2"), ("topic", topic)): 300.0,
    }


def test_internal_lag_shows_the_batches_each_stage_has_not_read():
    """The events and outcomes topics' lag, by stage, of the partitions this worker fetches:
    from the last batch the stage was handed, or before it has one, from the committed
    offset (under exactly-once the one its last transaction committed)."""
    from streameval.app.telemetry import Telemetry

    registry = CollectorRegistry()
    topics = {"app-events": "join", "app-outcomes": "evaluate"}
    telemetry = Telemetry(Exporter(registry), ["instances"], topics)

    def stats(states, topic="app-events", app_offset=-1001):
        partitions = {
            str(p): {
                "consumer_lag": 10 * (p + 1),
                "ls_offset": 50,
                "app_offset": app_offset,
                "fetch_state": state,
            }
            for p, state in enumerate(states)
        }
        return {"topics": {topic: {"partitions": partitions}}}

    def lags(name):
        return {dict(k[1])["partition"]: v for k, v in _series(registry).items() if k[0] == name}

    telemetry.on_stats(stats(["active", "active", "none"]))
    assert lags("streameval_internal_lag") == {"0": 10.0, "1": 20.0}
    assert lags("streameval_consumer_lag") == {}  # the input topics' gauge shows none of it
    telemetry.committed = {("app-outcomes", 0): 45}  # exactly-once: the committed offsets
    telemetry.on_stats(stats(["active"], "app-outcomes"))
    internal = {
        tuple(sorted(dict(k[1]).items())): v
        for k, v in _series(registry).items()
        if k[0] == "streameval_internal_lag"
    }
    assert internal == {(("partition", "0"), ("stage", "evaluate")): 5.0}  # the join's went
    telemetry.on_stats(stats(["active"], "app-outcomes", app_offset=48))  # read up to 47
    assert lags("streameval_internal_lag") == {"0": 2.0}


def test_a_child_process_series_reach_the_parent_exporter_in_order():
    """worker.processes > 1: a child's exporter calls travel over a pipe and give the series
    the parent's own calls would; pending instances are summed over the processes."""
    import multiprocessing
    import threading

    import numpy as np
    from streameval.app.processes import Children, ExporterProxy

    records = _replayed()
    direct, relayed = CollectorRegistry(), CollectorRegistry()
    ours, theirs = multiprocessing.Pipe()
    parent = Exporter(relayed)
    proxy = ExporterProxy(theirs, source=1)
    children = Children(1, None, None, {}, parent)
    children._connections[ours] = 1
    for exporter in (Exporter(direct), proxy):
        exporter.observe(records)
        exporter.observe_outcomes("champion", np.array([500.0, 2500.0]))
        exporter.count_input(7)
        exporter.count_dropped("late_prediction", "champion", 2)
        exporter.count_dead_letters("not_json")
        exporter.set_lag("in", "0", 12)
        exporter.set_internal_lag("join", "1", 3)
        exporter.set_internal_lag("evaluate", "2", 4)
        exporter.remove_internal_lag("evaluate", "2")
        exporter.set_pending(30, source=1)
        exporter.set_waiting(5, 700, source=1)
        exporter.observe_transaction(0.12)
    parent.set_pending(12, source=0)  # the parent's own pipeline
    parent.set_waiting(2, 40, source=0)
    sender = threading.Thread(target=proxy.flush)  # a pipe holds less than the records
    sender.start()
    children._receive(timeout=5)
    sender.join(5)
    assert not sender.is_alive()
    direct_series = _series(direct)
    relayed_series = _series(relayed)
    sums = {
        "streameval_pending_instances": 42.0,  # 12 here + 30 in the child
        "streameval_join_waiting_events": 7.0,
        "streameval_evaluation_waiting_outcomes": 740.0,
    }
    for name, total in sums.items():
        assert relayed_series.pop((name, ())) == total
        direct_series.pop((name, ()))
    assert direct_series.keys() == relayed_series.keys()
    assert relayed_series["streameval_internal_lag", (("partition", "1"), ("stage", "join"))] == 3
    assert all(
        _same(direct_series[k], relayed_series[k])
        for k in direct_series
        if not k[0].endswith("_created")
    )
    # a forgotten model's series go at once (not at the next flush): no rebalance race
    proxy.forget_models(["champion"])
    children._receive(timeout=5)
    assert not any(dict(labels).get("model") == "champion" for _, labels in _series(relayed))


def test_build_info_says_what_each_worker_runs():
    """One series of value 1 whose labels tell workers of one application apart when they
    should not differ: version, internal formats, the evaluation configuration's fingerprint."""
    import platform

    import confluent_kafka
    from streameval import __version__
    from streameval.app.changelog_format import CHECKPOINT_VERSION
    from streameval.app.evolve import config_fingerprint
    from streameval.app.faust_app import create_app
    from streameval.app.settings import load_settings
    from streameval.app.wire import WIRE_VERSION

    settings, config = load_settings(
        ROOT / "deploy/streameval.toml", bootstrap="127.0.0.1:1", metrics_port=0, app_id="fraud"
    )
    app = create_app(settings, config)
    (info,) = [s for name, s in _samples(app.registry) if name == "streameval_build_info"]
    assert info.value == 1.0
    assert info.labels == {
        "version": __version__,
        "python": platform.python_version(),
        "librdkafka": confluent_kafka.libversion()[0],
        "app_id": "fraud",
        "config_fingerprint": config_fingerprint(config),
        "wire": str(WIRE_VERSION),
        "checkpoint": str(CHECKPOINT_VERSION),
    }
    _, other = load_settings(None, bootstrap="127.0.0.1:1", metrics_port=0)
    assert config_fingerprint(other) != info.labels["config_fingerprint"]


def test_the_host_app_names_the_broker_without_its_security_protocol():
    """Faust's own clients are off, but it keeps a broker URL: ``kafka://HOST:PORT`` of the
    first bootstrap server, which librdkafka's ``SASL_SSL://`` before it must not garble."""
    from streameval.app.faust_app import create_app
    from streameval.app.settings import load_settings

    settings, config = load_settings(
        None, bootstrap="SASL_SSL://127.0.0.1:1,127.0.0.1:2", metrics_port=0, app_id="fraud"
    )
    app = create_app(settings, config)
    assert [str(url) for url in app.conf.broker] == ["kafka://127.0.0.1:1"]


def _samples(registry):
    text = generate_latest(registry).decode()
    return [(s.name, s) for f in text_string_to_metric_families(text) for s in f.samples]


def _with_scores(record):
    """The record as if its model's predictions had carried scores (two confidence bins)."""
    scored = {
        "n_scored": 40,
        "log_loss": 0.4,
        "brier": 0.25,
        "ece": 0.05,
        "roc_auc": 0.81,
        "roc_auc_grid": 0.0,
        "reliability": {
            "confidence": [0.6, 0.9],
            "accuracy": [0.55, 0.93],
            "weight": [0.25, 0.75],
        },
    }
    estimators = {name: {**values, **scored} for name, values in record.estimators.items()}
    return msgspec.structs.replace(record, estimators=estimators)


def test_a_model_with_scores_exports_their_measures_and_on_demand_its_calibration():
    initial, final = (_with_scores(r) for r in _latest())
    check_record(msgspec.to_builtins(final))  # the record's schema has them
    registry = CollectorRegistry()
    Exporter(registry).observe([initial, final])
    series = _series(registry)
    estimators = {estimator_label(e) for e in final.estimators}
    scored = {
        (dict(k)["estimator"], dict(k)["measure"])
        for (name, k), _ in series.items()
        if name == "streameval_measure" and dict(k)["measure"] in PROBABILISTIC_MEASURES
    }
    assert scored == {(e, m) for e in estimators for m in ("log_loss", "brier", "ece", "roc_auc")}
    assert not any(name == "streameval_reliability" for name, _ in series)
    registry = CollectorRegistry()
    chosen = Selection(measures=frozenset({"reliability"}), initial_measures=frozenset())
    Exporter(registry, selection=chosen).observe([initial, final])
    bins = {
        (dict(k)["estimator"], dict(k)["bin"], dict(k)["quantity"]): v
        for (name, k), v in _series(registry).items()
        if name == "streameval_reliability"
    }
    assert bins["window_1000", "002", "accuracy"] == 0.93
    assert len(bins) == len(estimators) * 2 * 3


# -- /metrics: the records' series rendered once (streameval.exposition) -------------------------


def _families(text: str) -> dict[str, str]:
    """Each family's block of a scrape's text (HELP, TYPE and samples), by name."""
    blocks = {}
    for block in text.split("# HELP ")[1:]:
        blocks[block.split(" ", 1)[0]] = block
    return blocks


def _exporter_of_every_kind(selection):
    """An exporter holding records of every kind: metrics with scores, per-class values and a
    class name that needs escaping, comparisons, alarms, counters, latencies."""
    registry = CollectorRegistry()
    exporter = Exporter(registry, detectors_of=lambda _: DEFAULT_TYPES, selection=selection)
    exporter.observe(_replayed())
    odd = 'say "no" \\ or\nnot'
    for i, record in enumerate(_latest("challenger")):
        record = _with_classes(_with_scores(record), 2)
        estimators = {
            name: {**values, f"recall[{odd}]": 0.25 * i}
            for name, values in record.estimators.items()
        }
        exporter.observe([msgspec.structs.replace(record, model_id="m-odd", estimators=estimators)])
    exporter.observe([_alarm("champion")])
    exporter.observe_outcomes("champion", [1500.0, 90_000.0])
    exporter.count_dead_letters("not_json")
    return registry, exporter


def test_a_scrape_gives_exactly_the_text_of_the_prometheus_client():
    """Family by family, byte for byte, what generate_latest writes from the collector."""
    one_class = Selection(estimators=frozenset({"window:1000"}), classes=1, bins=3)
    for selection in (Selection(), Selection.everything(), one_class):
        registry, exporter = _exporter_of_every_kind(selection)
        expected = _families(generate_latest(registry).decode())
        scraped = exporter.scrape().decode()
        assert _families(scraped) == expected
        assert scraped.count("# HELP ") == len(expected)  # no family twice
        if selection.classes is None:  # every class: the odd one too, escaped as the format wants
            assert 'class="say \\"no\\" \\\\ or\\nnot"' in scraped


def test_a_scrape_renders_only_the_records_that_changed():
    registry, exporter = _exporter_of_every_kind(Selection())
    first = exporter.scrape()
    text = exporter._text
    rendered = dict(text._rendered)
    assert exporter.scrape() == first and text._rendered == rendered
    # a new record of one model: only its lines are rendered again
    final = _latest("champion")[1]
    newer = msgspec.structs.replace(final, n=final.n + 1)
    exporter.observe([newer])
    second = exporter.scrape().decode()
    assert f'streameval_model_outcomes{{model="champion"}} {float(final.n + 1)}' in second
    changed = [key for key in text._rendered if text._rendered[key] is not rendered.get(key)]
    assert changed == [("metrics", "champion", "final")]
    assert _families(second) == _families(generate_latest(registry).decode())
    # a model this worker no longer owns: its series and its cached lines go
    exporter.forget_models(["m-odd"])
    third = exporter.scrape().decode()
    assert 'model="m-odd"' not in third
    assert not [key for key in text._rendered if "m-odd" in key]
    assert _families(third) == _families(generate_latest(registry).decode())


def test_a_record_of_another_shape_or_a_new_comparison_renders_as_the_client_library_does():
    """The label text of a model's previous record is reused only where a series is the same:
    an estimator gone and classes added shift every series after them."""
    registry, exporter = _exporter_of_every_kind(Selection.everything())
    exporter.scrape()
    initial, final = _latest("champion")
    estimators = dict(final.estimators)
    estimators.pop(next(iter(estimators)))  # the first estimator's series go
    exporter.observe([msgspec.structs.replace(final, estimators=estimators)])
    exporter.observe([_with_classes(initial, 3)])
    comparison = next(r for r in _replayed() if r.kind == "comparison")
    exporter.observe([msgspec.structs.replace(comparison, n=comparison.n + 1)])
    assert _families(exporter.scrape().decode()) == _families(generate_latest(registry).decode())


def test_two_writers_at_once_lose_no_record():
    """The worker's processes each hand their records to the exporter from their own thread
    (processes > 1): each observe copies the latest records, changes the copy and swaps it in,
    so two at once must not swap in a copy that lacks the other's records."""
    import sys
    import threading

    initial, final = _latest()
    registry = CollectorRegistry()
    exporter = Exporter(registry)
    start = threading.Barrier(2)

    def write(prefix: str) -> None:
        start.wait()
        for i in range(300):
            model = f"{prefix}-{i:03d}"
            exporter.observe([msgspec.structs.replace(r, model_id=model) for r in (initial, final)])
            exporter.forget_models([f"{prefix}-gone"])  # the other writer of the worker

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        threads = [threading.Thread(target=write, args=(p,)) for p in ("a", "b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    text = exporter.scrape().decode()
    for prefix in ("a", "b"):
        for i in range(300):
            assert f'model="{prefix}-{i:03d}",view="final"' in text, (prefix, i)


def test_slices_have_series_of_their_own_and_lose_them_when_they_leave():
    """A slice's final record: its selected measures in streameval_slice_measure (the
    defaults: accuracy, kappa_temporal and n of every estimator); its initial record nothing;
    a model's record that no longer names a slice removes the slice's series."""
    initial, final = _latest()
    registry = CollectorRegistry()
    exporter = Exporter(registry)
    exporter.observe([
        initial,
        msgspec.structs.replace(final, slices=["fr", "de", "(other)"]),
        *(msgspec.structs.replace(r, slice=s) for r in (initial, final)
          for s in ("fr", "de", "(other)")),
    ])  # fmt: skip

    def slices():
        return {
            (labels["slice"], labels["estimator"], labels["measure"])
            for name, labels in ((k[0], dict(k[1])) for k in _series(registry))
            if name == "streameval_slice_measure"
        }

    expected = {
        (s, e, m)
        for s in ("fr", "de", "(other)")
        for e in ("cumulative", "window_1000", "fading_0.999")
        for m in ("accuracy", "kappa_temporal", "n")
    }
    assert slices() == expected
    value = _series(registry)[
        "streameval_slice_measure",
        (("estimator", "window_1000"), ("measure", "accuracy"), ("model", "champion"),
         ("slice", "fr")),
    ]  # fmt: skip
    assert value == final.estimators["window:1000"]["accuracy"]
    # the whole model's series are the same as without slices
    plain = CollectorRegistry()
    Exporter(plain).observe([initial, final])
    ours = {k: v for k, v in _series(registry).items() if k[0] != "streameval_slice_measure"}
    assert ours.keys() == _series(plain).keys()
    exporter.observe([msgspec.structs.replace(final, slices=["de", "(other)"])])  # fr left
    assert {s for s, _, _ in slices()} == {"de", "(other)"}
    # /metrics serves what the client library would render, in another order of families
    assert sorted(exporter.scrape().splitlines()) == sorted(generate_latest(registry).splitlines())
