"""ModelEvaluator: normalization, alarms, state."""

import json
import math
from dataclasses import replace
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streameval.core.model import GATHER_MAX, NORMALIZED_MEASURES, ModelEvaluator
from streameval.core.normalize import normalize
from streameval.core.outcome import Outcome


def _outcomes(y_true, y_pred, model="m"):
    return [
        Outcome(model, f"i{i}", t, (i, i + 1), (p, p), i, i + 5)
        for i, (t, p) in enumerate(zip(y_true, y_pred, strict=True))
    ]


def test_normalized_values_are_those_of_the_positive_class_counts():
    rng = np.random.default_rng(4)
    y = rng.choice(["yes", "no"], 300, p=[0.2, 0.8]).tolist()
    p = [t if rng.random() < 0.8 else ("no" if t == "yes" else "yes") for t in y]
    model = ModelEvaluator("m", estimators=["cumulative", "window:100"], positive_label="yes")
    model.update(_outcomes(y, p))
    window = model.measures()["views"]["final"]["window:100"]
    positives = sum(1 for t in y[-100:] if t == "yes")
    assert window["normalized_precision"] == normalize(
        "precision", positives, 100 - positives, window["precision_positive"]
    )
    assert set(NORMALIZED_MEASURES) == {k.removeprefix("normalized_") for k in window
                                        if k.startswith("normalized_")}  # fmt: skip


def test_normalized_values_are_nan_without_both_classes():
    model = ModelEvaluator("m", estimators=["cumulative"], positive_label="yes")
    model.update(_outcomes(["no"] * 10, ["no"] * 9 + ["yes"]))
    cumulative = model.measures()["views"]["final"]["cumulative"]
    assert cumulative["accuracy"] == 0.9
    assert all(math.isnan(cumulative[f"normalized_{m}"]) for m in NORMALIZED_MEASURES)


def test_normalization_stops_past_its_count_limit():
    model = ModelEvaluator("m", estimators=["cumulative"], positive_label="a",
                           normalize_max_count=5)  # fmt: skip
    model.update(_outcomes(["a", "b"] * 3, ["a", "b"] * 3))
    assert "normalized_accuracy" not in model.measures()["views"]["final"]["cumulative"]


def test_alarm_and_state_round_trip():
    rng = np.random.default_rng(9)
    y = ["a"] * 6000
    p = ["a" if rng.random() < (0.9 if i < 3000 else 0.4) else "b" for i in range(6000)]
    whole = ModelEvaluator("m")
    alarms = whole.update(_outcomes(y, p))
    assert alarms and all(a.index > 3000 for a in alarms)
    part = ModelEvaluator("m")
    got = part.update(_outcomes(y[:2500], p[:2500]))
    part = ModelEvaluator.from_state(json.loads(json.dumps(part.state())))
    rest = _outcomes(y, p)[2500:]
    got += part.update(rest)
    assert got == alarms
    assert json.dumps(part.measures()) == json.dumps(whole.measures())


def test_alarms_place_the_change_however_the_batches_fall():
    """Each alarm names the outcome that fired and the one at the PH minimum, by instance id,
    instance time and label time — the same for any batches and across a checkpoint taken
    between the change point and the alarm."""
    outcomes = _drifting(6000, seed=8, drift_at=3000)
    both = [{"type": "page_hinkley"}, {"type": "ratio_page_hinkley"}]
    whole = ModelEvaluator("m", estimators=["cumulative"], detectors=both)
    alarms = whole.update(outcomes)
    assert {a.detector for a in alarms} == {"page_hinkley", "ratio_page_hinkley"}
    for alarm in alarms:
        fired, change = outcomes[alarm.index - 1], outcomes[alarm.change_index - 1]
        assert alarm.at == (fired.instance_id, fired.t_instance, fired.t_label)
        assert alarm.change_at == (change.instance_id, change.t_instance, change.t_label)
        assert alarm.change_index < alarm.index
    first = alarms[0]
    cut = (first.change_index + first.index) // 2  # a checkpoint between the two
    for bounds in ([0, cut, 6000], [0, 7, cut, cut + 1, 4000, 6000]):
        part, got = ModelEvaluator("m", estimators=["cumulative"], detectors=both), []
        for lo, hi in pairwise(bounds):
            got += part.update(outcomes[lo:hi])
            part = ModelEvaluator.from_state(json.loads(json.dumps(part.state())))
        assert got == alarms


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from("ABCD"), st.lists(st.sampled_from("ABCD"), min_size=1,
                                                     max_size=3)),
        min_size=1, max_size=40,
    ),
    st.lists(st.integers(0, 40), max_size=4),
)  # fmt: skip
def test_classes_are_discovered_in_outcome_order_however_the_batches_fall(rows, cuts):
    """A class's index (and so every sum's order, to the last bit) must not depend on where
    the batches are cut: truth then predictions, outcome by outcome."""
    outcomes = [
        Outcome("m", f"i{i}", truth, tuple(range(i, i + len(labels))), tuple(labels), i, i + 9)
        for i, (truth, labels) in enumerate(rows)
    ]
    whole, split = ModelEvaluator("m"), ModelEvaluator("m")
    whole.update(outcomes)
    bounds = [0, *sorted(c for c in cuts if c < len(outcomes)), len(outcomes)]
    for start, end in pairwise(bounds):
        split.update(outcomes[start:end])
        split.flush()  # the estimators take each piece as it comes, not gathered
    first_seen = list(dict.fromkeys(x for truth, labels in rows for x in (truth, *labels)))
    assert whole.labels.classes == split.labels.classes == first_seen
    assert json.dumps(split.measures()) == json.dumps(whole.measures())


def test_a_faded_out_class_in_the_delayed_block_is_no_crash():
    """The delayed block's κ under fading, with the same faded-away class (see
    test_evaluator.py): NaN, not a ZeroDivisionError."""
    model = ModelEvaluator("m", estimators=["fading:0.999"])
    model.update(_outcomes(["a", "b"], ["a", "b"]))
    model.update(_outcomes(["a"] * 100_000, ["a"] * 100_000))
    delayed = model.measures()["delayed"]["fading:0.999"]
    assert math.isnan(delayed["kappa_final"])


# -- continuing a state under another configuration (streameval.app.evolve decides which) --
def _drifting(n: int, seed: int, drift_at: int, model: str = "m") -> list[Outcome]:
    """Binary outcomes with re-predictions (varied delayed-label bins) and a drift; the first
    outcome, and every 500th, has truth "a" and a wrong first prediction "b", so that a model
    started at any of them numbers the classes as one started at the beginning."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        truth = "a" if i % 500 == 0 or rng.random() < 0.6 else "b"
        other = "b" if truth == "a" else "a"
        final = other if rng.random() < (0.15 if i < drift_at else 0.6) else truth
        first = other if i % 500 == 0 or rng.random() < 0.3 else final
        out.append(Outcome(model, f"i{i}", truth, (10 * i, 10 * i + 4), (first, final),
                           10 * i, 10 * i + 9, 10 * i + 9))  # fmt: skip
    return out


def _same(a, b) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_an_estimator_added_to_a_history_starts_empty_and_the_others_go_on():
    """Continued under more estimators: the old ones are exactly those of a model never
    interrupted; the new ones exactly those of a model started at the restart (its
    persistent baseline scores nothing before its second outcome, as a new model's)."""
    outcomes, n0 = _drifting(4000, seed=3, drift_at=2600), 1500
    before, after = ["cumulative", "fading:0.99"], ["window:300", "cumulative", "fading:0.99",
                                                    "fading:0.95"]  # fmt: skip
    added = ["window:300", "fading:0.95"]
    whole = ModelEvaluator("m", estimators=before, positive_label="a")
    alarms = whole.update(outcomes[:n0]) + whole.update(outcomes[n0:])
    first = ModelEvaluator("m", estimators=before, positive_label="a")
    first.update(outcomes[:n0])
    continued = ModelEvaluator.from_state(json.loads(json.dumps(first.state())), after)
    got = continued.update(outcomes[n0:2300]) + continued.update(outcomes[2300:])
    fresh = ModelEvaluator("m", estimators=added, positive_label="a")
    fresh.update(outcomes[n0:])
    ours, theirs, new = continued.measures(), whole.measures(), fresh.measures()
    for view in ("initial", "final"):
        assert list(ours["views"][view]) == after  # in the configured order
        for name in before:
            assert _same(ours["views"][view][name], theirs["views"][view][name])
        for name in added:
            assert _same(ours["views"][view][name], new["views"][view][name])
    for name in before:
        assert _same(ours["delayed"][name], theirs["delayed"][name])
    for name in added:
        assert _same(ours["delayed"][name], new["delayed"][name])
    assert ours["views"]["final"]["window:300"]["n"] == 300
    assert got == [a for a in alarms if a.index > n0] and got  # the detectors went on
    again = ModelEvaluator.from_state(json.loads(json.dumps(continued.state())))
    assert _same(again.measures(), ours)  # and the continued state round-trips


def test_an_estimator_a_history_has_is_never_dropped_silently():
    model = ModelEvaluator("m", estimators=["cumulative", "window:10"])
    model.update(_drifting(20, seed=1, drift_at=10))
    with pytest.raises(ValueError, match=r"\['window:10'\].*history would go"):
        ModelEvaluator.from_state(model.state(), ["cumulative", "window:20"])


def test_detectors_under_new_settings_go_on_start_or_go():
    """A detector whose settings are unchanged (however written) goes on; one with new
    settings starts at the next outcome, its alarms' indices counting the model's outcomes;
    one no longer configured is dropped."""
    from streameval.core.drift import DEFAULT_DETECTORS, make_detector

    outcomes, n0 = _drifting(6000, seed=5, drift_at=3000), 1000
    page_hinkley, ratio = dict(DEFAULT_DETECTORS[0]), {"type": "ratio_page_hinkley"}
    same = {"type": "page_hinkley", "threshold": 60, "standardize": True}  # the default
    sharper = {"type": "page_hinkley", "threshold": 20.0, "standardize": True}
    whole = ModelEvaluator("m", estimators=["cumulative"], detectors=[page_hinkley])
    expected = [a for a in whole.update(outcomes) if a.index > n0]
    first = ModelEvaluator("m", estimators=["cumulative"], detectors=[page_hinkley, ratio])
    first.update(outcomes[:n0])
    continued = ModelEvaluator.from_state(json.loads(json.dumps(first.state())),
                                          detectors=[sharper, same])  # fmt: skip
    state = json.loads(json.dumps(continued.state()))
    assert [d["type"] for d in state["detectors"]] == ["page_hinkley", "page_hinkley"]
    continued = ModelEvaluator.from_state(state)  # a restart in between changes nothing
    got = continued.update(outcomes[n0:])
    errors = np.array([o.final != o.y_true for o in outcomes[n0:]], dtype=np.float64)
    marks = [(o.instance_id, o.t_instance, o.t_label) for o in outcomes[n0:]]
    fresh = [replace(a, index=a.index + n0, change_index=a.change_index + n0)
             for a in make_detector(sharper).update(errors, marks)]  # fmt: skip
    assert fresh and expected
    assert sorted(got, key=lambda a: (a.index, a.threshold)) == sorted(
        expected + fresh, key=lambda a: (a.index, a.threshold)
    )


def test_an_old_checkpoint_keeps_its_detectors_when_a_new_setting_is_on_by_default(
    monkeypatch,
):
    """A checkpoint written before ``restart_threshold`` and ``warmup`` existed ran its
    detectors without them. Were their defaults on, it would still restore its own detector
    (with them off) and go on exactly as before, not replace it by a fresh one; and
    streameval.app.evolve reads its settings the same way."""
    from streameval.app.evolve import model_shape_of
    from streameval.core.drift import FadingErrorPageHinkley

    outcomes, n0 = _drifting(4000, seed=8, drift_at=2000), 1500
    spec = {"type": "page_hinkley", "fading_factor": 0.99, "delta": 0.01, "threshold": 10.0,
            "min_instances": 30}  # fmt: skip
    added = {"restart_threshold": 0.0, "warmup": 0, "standardize": False}  # off, as then
    whole = ModelEvaluator("m", estimators=["cumulative"], detectors=[spec | added])
    expected = [a for a in whole.update(outcomes) if a.index > n0]
    first = ModelEvaluator("m", estimators=["cumulative"], detectors=[spec | added])
    first.update(outcomes[:n0])
    old = json.loads(json.dumps(first.state()))
    for detector in (*old["config"]["detectors"], *old["detectors"]):
        for key in added:
            detector.pop(key, None)
    assert old["config"]["detectors"] == [spec]
    defaults = FadingErrorPageHinkley.__init__.__defaults__
    monkeypatch.setattr(
        FadingErrorPageHinkley.__init__, "__defaults__", (*defaults[:4], 5.0, 0, True)
    )
    assert FadingErrorPageHinkley().restart_threshold == 5.0  # as if the default were on
    restored = ModelEvaluator.from_state(old)
    assert restored.update(outcomes[n0:]) == expected and expected
    assert model_shape_of(old["config"])["detectors"][0]["restart_threshold"] == 0.0


# -- gathering: the detectors see each batch at once, the estimators take gathered outcomes --
def _scored_drifting(n: int, seed: int) -> list[Outcome]:
    """:func:`_drifting` with scores on every other final prediction and a third class,
    "c", first named at outcome 2 500 (a class discovered while outcomes are gathered)."""
    rng = np.random.default_rng(seed)
    rows = []
    for o in _drifting(n, seed, drift_at=n // 2):
        p = float(rng.uniform(0.05, 0.95))
        final = ("a", p, "b", 1.0 - p) if o.labels[-1] == "a" else ("a", 1.0 - p, "b", p)
        truth = "c" if o.t_instance // 10 in (2500, 2501, 4000) else o.y_true
        scores = (None, final) if int(o.instance_id[1:]) % 2 else ()
        rows.append(o._replace(y_true=truth, scores=scores))
    return rows


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 6000), max_size=12), st.integers(0, 3))
def test_gathered_outcomes_give_the_numbers_of_each_batch_taken_at_once(cuts, seed):
    """A model gathers its outcomes for its estimators across calls (GATHER_MAX at most), and
    its detectors see each call: the alarms come from the call that holds the outcome which
    fired them, and every number and the state are those of one batch, or of each batch
    given to the estimators at once; label delays read between calls count each outcome
    once."""
    outcomes = _scored_drifting(6000, seed)
    bounds = [0, *sorted(set(cuts)), 6000]
    whole = ModelEvaluator("m", positive_label="a", costs={"a": {"b": 2}, "b": {"a": 1}})
    want_alarms = whole.update(outcomes)
    assert want_alarms  # the drift is caught
    gathering = ModelEvaluator("m", positive_label="a", costs={"a": {"b": 2}, "b": {"a": 1}})
    eager = ModelEvaluator("m", positive_label="a", costs={"a": {"b": 2}, "b": {"a": 1}})
    got, pending = [], 0
    for lo, hi in pairwise(bounds):
        alarms = gathering.update(outcomes[lo:hi])
        assert all(lo < alarm.index <= hi for alarm in alarms)
        got += alarms
        assert gathering.n == hi  # counted at once
        pending += hi - lo  # what it holds: all since the last time GATHER_MAX was reached
        pending = 0 if pending >= GATHER_MAX else pending
        assert len(gathering._gathered) == pending
        eager.update(outcomes[lo:hi])
        eager.flush()
        if lo % 2:  # label delays read in between (a label-maturity record), counted once
            assert json.dumps(gathering.label_delays()) == json.dumps(eager.label_delays())
            assert len(gathering._gathered) == pending  # read without the estimators' work
    assert got == want_alarms
    assert _same(gathering.state(), whole.state())  # a checkpoint takes the gathered ones
    want = json.dumps(whole.measures())
    assert json.dumps(gathering.measures()) == want == json.dumps(eager.measures())


def test_a_refused_batch_leaves_the_gathered_outcomes_as_they_were():
    model = ModelEvaluator("m", max_classes=2, detectors=[])
    model.update(_outcomes(["a", "b", "a"], ["a", "a", "b"]))
    with pytest.raises(ValueError, match="max_classes"):
        model.update(_outcomes(["a", "c"], ["a", "a"]))
    assert model.n == 3
    assert [o.y_true for o in model._gathered] == ["a", "b", "a"]
    assert model.measures()["views"]["final"]["cumulative"]["accuracy"] == 1 / 3


def test_a_label_before_its_instance_is_refused_at_once_and_changes_nothing():
    model = ModelEvaluator("m", detectors=[])
    model.update(_outcomes(["a", "b"], ["a", "a"]))
    before = json.dumps(model.state())
    bad = Outcome("m", "late", "a", (7,), ("a",), 10, 9)
    with pytest.raises(ValueError, match="t_label=9 before t_instance=10"):
        model.update([bad])
    assert model.n == 2
    assert json.dumps(model.state()) == before
