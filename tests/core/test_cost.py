"""The cost of errors: a plain loop from the definitions on every prefix, any batch split bit for
bit, state round trips, costs added, changed and removed at a restart, classes the matrix does
not name, and the configuration's errors."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streameval.config import ConfigError, load_config
from streameval.core.cost import COST_MEASURES, CostMatrix
from streameval.core.model import VIEWS, ModelEvaluator
from streameval.core.outcome import Outcome

from tests.core.reference import Z95, covered, kish_loop

SPECS = ["cumulative", "window:1", "window:4", "fading:0.5", "fading:0.9", "fading:1.0"]
CLASSES = "abc"
COSTS = [0, 0.5, 1, 2, 5, 100, -1]


@st.composite
def cost_tables(draw, classes: str):
    """A complete matrix over ``classes``; the diagonal given or left to its default 0."""
    table: dict[str, dict[str, float]] = {}
    for i in classes:
        for j in classes:
            if i != j or draw(st.booleans()):
                table.setdefault(i, {})[j] = draw(st.sampled_from(COSTS))
    return {i: row for i, row in table.items()} or {classes[0]: {classes[0]: 0}}


@st.composite
def streams(draw, longest: int = 40):
    """(outcomes, cost table, cuts): k ≤ 3 classes, one or two predictions per outcome."""
    n = draw(st.integers(1, longest))
    k = draw(st.integers(1, 3))
    names = CLASSES[:k]
    outcomes = []
    for i in range(n):
        y = draw(st.sampled_from(names))
        preds = tuple(draw(st.lists(st.sampled_from(names), min_size=1, max_size=2)))
        outcomes.append(Outcome("m", f"i{i}", y, tuple(range(i, i + len(preds))), preds, i, i + 3))
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=4)))
    return outcomes, draw(cost_tables(names)), [0, *cuts, n]


def cost_of(table, i, j) -> float:
    """The cost of a cell by the definition: given, or 0 on the diagonal, else unknown (NaN)."""
    row = table.get(i, {})
    if j in row:
        return float(row[j])
    named = set(table) | {c for r in table.values() for c in r}
    return 0.0 if i == j and i in named else math.nan


def reference(outcomes, table, estimator: str, view: str, z: float = Z95) -> dict[str, float]:
    """Every cost measure from its definition (docs/measures.md, "Cost"), in plain loops."""
    idx, w = covered(len(outcomes), estimator)
    y = [outcomes[t].y_true for t in idx]
    pick = 0 if view == "initial" else -1
    pred = [outcomes[t].labels[pick] for t in idx]
    out = dict.fromkeys(COST_MEASURES, math.nan)
    total = sum(w)
    if not total > 0:
        return out
    named = set(table) | {c for r in table.values() for c in r}
    cells = [cost_of(table, i, j) for i in named for j in named]
    lowest, highest = min(cells), max(cells)
    costs = [cost_of(table, yi, pi) for yi, pi in zip(y, pred, strict=True)]
    if not any(math.isnan(c) for c in costs):
        mean = sum(wi * c for wi, c in zip(w, costs, strict=True)) / total
        out["expected_cost"] = mean
        size = kish_loop(w)
        if size > 1:
            spread = sum(wi * (c - mean) ** 2 for wi, c in zip(w, costs, strict=True)) / total
            half = z * math.sqrt(spread / (size - 1))
            out["expected_cost_lo"] = max(mean - half, lowest)
            out["expected_cost_hi"] = min(mean + half, highest)
    by_class: dict[str, float] = {}
    for yi, wi in zip(y, w, strict=True):
        by_class[yi] = by_class.get(yi, 0.0) + wi
    if all(cls in named for cls in by_class):
        top = max(by_class.values())
        tied = [m for m, s in by_class.items() if math.isclose(s, top, rel_tol=1e-12)]
        out["cost_majority"] = min(
            sum(s * cost_of(table, cls, m) for cls, s in by_class.items()) / total for m in tied
        )
    pairs = [(wi, t) for wi, t in zip(w, idx, strict=True) if t > 0]  # the first: no previous
    scored = sum(wi for wi, _ in pairs)
    moves = [cost_of(table, outcomes[t].y_true, outcomes[t - 1].y_true) for _, t in pairs]
    if scored > 0 and not any(math.isnan(c) for c in moves):
        out["cost_no_change"] = (
            sum(wi * c for (wi, _), c in zip(pairs, moves, strict=True)) / scored
        )
    return out


def assert_costs(got: dict, want: dict, context: str) -> None:
    for name in COST_MEASURES:
        g, e = got[name], want[name]
        if math.isnan(e):
            assert math.isnan(g), f"{context} {name}: {g} where undefined"
        else:
            assert g == pytest.approx(e, rel=1e-9, abs=1e-9), f"{context} {name}: {g} != {e}"


def _model(table, **kwargs) -> ModelEvaluator:
    return ModelEvaluator("m", estimators=SPECS, costs=table, detectors=[], **kwargs)


def _costs_of(model: ModelEvaluator) -> dict:
    views = model.measures()["views"]
    return {(v, e): {k: views[v][e][k] for k in COST_MEASURES} for v in VIEWS for e in SPECS}


@settings(max_examples=150, deadline=None)
@given(streams())
def test_every_prefix_matches_the_definitions(stream):
    outcomes, table, _ = stream
    model = _model(table)
    for t, outcome in enumerate(outcomes, start=1):
        model.update([outcome])
        views = model.measures()["views"]
        for view in VIEWS:
            for spec in SPECS:
                want = reference(outcomes[:t], table, spec, view)
                assert_costs(views[view][spec], want, f"after {t} {view} {spec}")


@settings(max_examples=100, deadline=None)
@given(streams())
def test_any_split_and_a_restart_at_a_cut_give_the_same_bits(stream):
    outcomes, table, cuts = stream
    whole = _model(table)
    whole.update(outcomes)
    split = _model(table)
    restarted = _model(table)
    for start, end in itertools.pairwise(cuts):
        split.update(outcomes[start:end])
        split.flush()  # the estimators take each piece as it comes, not gathered
        restarted.update(outcomes[start:end])
        restarted = ModelEvaluator.from_state(json.loads(json.dumps(restarted.state())))
    want = repr(_costs_of(whole))
    assert repr(_costs_of(split)) == want
    assert repr(_costs_of(restarted)) == want


@settings(max_examples=60, deadline=None)
@given(streams(), st.data())
def test_costs_changed_at_a_restart_apply_to_the_whole_history(stream, data):
    outcomes, table, cuts = stream
    other = data.draw(cost_tables("".join(sorted(set(table) | {c for r in table.values()
                                                                for c in r}))))  # fmt: skip
    first = _model(table)
    first.update(outcomes[: cuts[1]])
    then = ModelEvaluator.from_state(first.state(), costs=other)
    then.update(outcomes[cuts[1] :])
    always = _model(other)
    always.update(outcomes)
    assert repr(_costs_of(then)) == repr(_costs_of(always))


def test_costs_added_at_a_restart_count_the_no_change_baseline_from_there():
    y = list("aabbbaabab")
    outcomes = [Outcome("m", f"i{i}", t, (i,), ("a",), i, i + 1) for i, t in enumerate(y)]
    table = {"a": {"b": 1}, "b": {"a": 3}}
    model = ModelEvaluator("m", estimators=["cumulative"], detectors=[])
    model.update(outcomes[:4])
    assert "expected_cost" not in model.measures()["views"]["final"]["cumulative"]
    model = ModelEvaluator.from_state(model.state(), costs=table)
    model.update(outcomes[4:])
    got = model.measures()["views"]["final"]["cumulative"]
    # the model's own cost covers all ten outcomes: five b predicted a, at 3 each
    assert got["expected_cost"] == pytest.approx(15 / 10)
    # the transitions from the restart on; the first after it has no previous label there
    tail = y[4:]
    moves = [cost_of(table, t, p) for p, t in itertools.pairwise(tail)]
    assert got["cost_no_change"] == pytest.approx(sum(moves) / len(moves))
    # and removed again: no cost measures, nothing kept
    model = ModelEvaluator.from_state(model.state(), costs={})
    assert "transitions" not in model.state() and "costs" not in model.settings()
    assert "expected_cost" not in model.measures()["views"]["final"]["cumulative"]


def test_a_class_the_matrix_does_not_name_makes_the_estimates_holding_it_undefined():
    table = {"a": {"b": 1}, "b": {"a": 2}}
    model = ModelEvaluator("m", estimators=["cumulative", "window:2"], costs=table, detectors=[])
    model.update([Outcome("m", "i0", "a", (0,), ("z",), 0, 1)])  # z: no cost
    model.update([Outcome("m", f"i{i}", "b", (i,), ("a",), i, i + 1) for i in (1, 2)])
    final = model.measures()["views"]["final"]
    assert math.isnan(final["cumulative"]["expected_cost"])
    assert not math.isnan(final["cumulative"]["cost_majority"])  # every true class is named
    assert final["window:2"]["expected_cost"] == 2.0  # z has left the window
    assert final["window:2"]["cost_no_change"] == 1.0  # a then b, b then b
    model.update([Outcome("m", "i3", "z", (3,), ("a",), 3, 4)])
    final = model.measures()["views"]["final"]
    assert all(math.isnan(final["window:2"][k]) for k in COST_MEASURES)


def test_integer_labels_are_named_by_their_text():
    model = ModelEvaluator("m", estimators=["cumulative"], detectors=[],
                           costs={"1": {"0": 50}, "0": {"1": 1}})  # fmt: skip
    model.update([Outcome("m", f"i{i}", t, (i,), (p,), i, i + 1)
                  for i, (t, p) in enumerate([(1, 0), (0, 0), (0, 1), (1, 1)])])  # fmt: skip
    assert model.measures()["views"]["final"]["cumulative"]["expected_cost"] == 51 / 4


def test_a_tie_of_majority_classes_takes_the_cheaper_constant_prediction():
    model = ModelEvaluator("m", estimators=["cumulative"], detectors=[],
                           costs={"a": {"b": 10}, "b": {"a": 1}})  # fmt: skip
    model.update([Outcome("m", f"i{i}", t, (i,), (t,), i, i + 1) for i, t in enumerate("ab")])
    # always "a" costs 1 on the b; always "b" costs 10 on the a
    assert model.measures()["views"]["final"]["cumulative"]["cost_majority"] == 0.5


@pytest.mark.parametrize(
    ("toml", "says"),
    [
        ("fraud = { ok = 100 }", "lacks costs.ok.fraud"),
        ('fraud = { ok = "100" }', "costs.fraud.ok"),
        ("fraud = { ok = nan }\nok = { fraud = 1 }", "costs.fraud.ok = nan is not allowed"),
        ("fraud = { ok = true }\nok = { fraud = 1 }", "costs.fraud.ok"),
        ("fraud = 100", "models.m.costs.fraud = 100: a table belongs here"),
        ('fraud = { ok = "100" }\nok = { fraud = 1 }', "a string where a number belongs"),
    ],
)
def test_a_bad_cost_matrix_is_refused_naming_the_cell(tmp_path, toml, says):
    path = tmp_path / "c.toml"
    path.write_text("[models.m.costs]\n" + toml + "\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert says in str(err.value)
    assert "models.m.costs" in str(err.value)


def test_the_configured_matrix_reaches_the_model():
    config = load_config(models={"m": {"costs": {"fraud": {"ok": 100}, "ok": {"fraud": 1}}}})
    matrix = config.model("m").cost_matrix
    assert matrix == CostMatrix({"fraud": {"ok": 100, "fraud": 0}, "ok": {"fraud": 1}})
    assert config.model("other").cost_matrix is None
    dense = matrix.dense(["ok", "spam", "fraud"])
    assert dense[0, 2] == 1 and dense[2, 0] == 100 and np.isnan(dense[1]).all()
