"""Label maturity: the engine's records against a plain loop over the events, at every
boundary, for any cut of the stream into calls; the join's notices; state round trips."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streameval.codec import InstanceEvent, LabelEvent, PredictionEvent
from streameval.config import load_config
from streameval.core.join import Join
from streameval.core.maturity import COUNT_AT, LabelMaturity
from streameval.core.outcome import Outcome, is_notice, notice
from streameval.engine import Engine

from tests.streaming import run_engine

T0 = 1_767_225_600_000  # 2026-01-01, a whole hour
MODELS = ("a", "b")


@st.composite
def streams(draw):
    """Instances each predicted by some models (first prediction, maybe a re-prediction),
    most labelled later; every event in time order (ties allowed), so each prediction and
    label applies when it comes."""
    n = draw(st.integers(1, 40))
    events = []
    for i in range(n):
        start = T0 + draw(st.integers(0, 20_000))
        iid = f"i{i}"
        events.append((start, 0, iid, "", ""))
        first = {}
        for m in MODELS:
            if draw(st.booleans()):
                t = start + draw(st.integers(0, 3_000))
                first[m] = t
                events.append((t, 1, iid, m, draw(st.sampled_from(["x", "y"]))))
                if draw(st.integers(0, 3)) == 0:  # a re-prediction
                    t2 = t + draw(st.integers(0, 2_000))
                    events.append((t2, 1, iid, m, draw(st.sampled_from(["x", "y"]))))
        if draw(st.integers(0, 4)):  # most get a label, after every prediction
            latest = max([e[0] for e in events if e[2] == iid])
            label = latest + draw(st.integers(0, 15_000))
            events.append((label, 2, iid, "", draw(st.sampled_from(["x", "y", "z"]))))
    events.sort(key=lambda e: (e[0], e[1], e[2], e[3], e[4]))
    return events


def as_events(rows):
    out = []
    for ts, kind, iid, model, label in rows:
        if kind == 0:
            out.append(InstanceEvent(iid, ts))
        elif kind == 1:
            out.append(PredictionEvent(iid, model, ts, label))
        else:
            out.append(LabelEvent(iid, ts, label))
    return out


def reference(rows, cohort_ms: int, every_ms: int, keep: int) -> dict[str, list[dict]]:
    """The label-maturity records by their definition (docs/measures.md): per model, a record
    at each boundary B = k·every_ms its stream of outcomes (due: the label's time) and newly
    predicted instances (due: the end of the second of the first prediction) enters, but the
    first, counting the instances first predicted before B and the outcomes due before B."""
    first: dict[tuple[str, str], int] = {}
    labels: dict[str, tuple[int, str]] = {}
    for ts, kind, iid, model, label in rows:
        if kind == 1:
            first.setdefault((iid, model), ts)
        elif kind == 2:
            labels.setdefault(iid, (ts, label))
    out: dict[str, list[dict]] = {}
    for m in MODELS:
        predicted = {iid: t for (iid, model), t in first.items() if model == m}
        outcomes = [
            (labels[iid][0], predicted[iid], labels[iid][1])
            for iid in predicted
            if iid in labels and predicted[iid] <= labels[iid][0]
        ]
        dues = [d for d, _, _ in outcomes] + [t // 1000 * 1000 + 999 for t in predicted.values()]
        if not dues:
            continue
        ticks = sorted({d // every_ms for d in dues})
        records = []
        for tick in ticks[1:]:
            b = tick * every_ms
            oldest = (b - 1) // cohort_ms * cohort_ms - (keep - 1) * cohort_ms
            cohorts: dict[int, list] = {}
            for t in predicted.values():
                if t < b:
                    cohorts.setdefault(t // cohort_ms * cohort_ms, [0, Counter()])[0] += 1
            by_class: Counter = Counter()
            for due, t, label in outcomes:
                if due < b:
                    by_class[label] += 1
                    cohorts.setdefault(t // cohort_ms * cohort_ms, [0, Counter()])[1][label] += 1
            listed = []
            for start in sorted(s for s in cohorts if s >= oldest):
                p, c = cohorts[start]
                listed.append(
                    {
                        "start": start,
                        "predicted": p,
                        "labelled": sum(c.values()),
                        "by_class": {k: c[k] for k in sorted(c)},
                    }
                )
            records.append(
                {
                    "ts": b,
                    "n": sum(1 for due, _, _ in outcomes if due < b),
                    "predicted": sum(1 for t in predicted.values() if t < b),
                    "labelled": sum(by_class.values()),
                    "labelled_by_class": {k: by_class[k] for k in sorted(by_class)},
                    "cohorts": listed,
                }
            )
        if records:
            out[m] = records
    return out


def summary(records) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in records:
        if r.kind != "label_maturity":
            continue
        out.setdefault(r.model_id, []).append(
            {
                "ts": r.ts,
                "n": r.n,
                "predicted": r.predicted,
                "labelled": r.labelled,
                "labelled_by_class": r.labelled_by_class,
                "cohorts": [
                    {
                        "start": c.start,
                        "predicted": c.predicted,
                        "labelled": c.labelled,
                        "by_class": {k: v.labelled for k, v in c.by_class.items()},
                    }
                    for c in r.cohorts
                ],
            }
        )
    return out


def run(rows, config, cuts: int = 1, seed: int = 0, restore_at: int | None = None):
    """The engine's records and the engine (tests.streaming.run_engine) on the rows."""
    return run_engine(config, as_events(rows), cuts, seed, restore_at)


@settings(max_examples=150, deadline=None)
@given(
    rows=streams(),
    cohort_s=st.sampled_from([1, 2, 5, 3600]),
    every_s=st.sampled_from([1, 3, 60]),
    keep=st.integers(1, 4),
    cuts=st.integers(1, 8),
    seed=st.integers(0, 100),
)
def test_records_are_the_definition_for_any_cut_of_the_stream(
    rows, cohort_s, every_s, keep, cuts, seed
):
    config = load_config(
        join={"label_grace_ms": 0},
        maturity={"cohort_ms": cohort_s * 1000, "every_ms": every_s * 1000, "cohorts": keep},
    )
    records, _ = run(rows, config, cuts, seed)
    assert summary(records) == reference(rows, cohort_s * 1000, every_s * 1000, keep)
    restored, _ = run(rows, config, cuts, seed, restore_at=len(rows) // 2)
    assert _by_model(restored) == _by_model(records)


def _by_model(records):
    """The label-maturity records, each model's in their order (models' records interleave
    by where their rows were in each call: any order across models is right)."""
    return sorted(
        (r for r in records if r.kind == "label_maturity"), key=lambda r: (r.model_id, r.ts)
    )


def test_a_record_shares_and_the_delay_by_class():
    rows = [
        (T0, 1, "i1", "a", "x"),
        (T0 + 10, 1, "i2", "a", "x"),
        (T0 + 20, 1, "i3", "a", "x"),
        (T0 + 500, 2, "i1", "", "x"),
        (T0 + 61_000, 2, "i2", "", "y"),
        (T0 + 125_000, 1, "i4", "a", "x"),
    ]
    records, _ = run(rows, load_config(join={"label_grace_ms": 0}))
    maturity = [r for r in records if r.kind == "label_maturity"]
    assert [r.ts for r in maturity] == [T0 + 60_000, T0 + 120_000]
    (cohort,) = maturity[-1].cohorts
    assert (cohort.start, cohort.predicted, cohort.labelled) == (T0, 3, 2)
    assert cohort.share == pytest.approx(2 / 3)
    assert {k: (v.labelled, v.share) for k, v in cohort.by_class.items()} == {
        "x": (1, pytest.approx(1 / 3)),
        "y": (1, pytest.approx(1 / 3)),
    }
    latency = maturity[-1].latency_ms
    assert latency.by_class["x"].n == 1 and latency.by_class["y"].n == 1
    assert latency.classes_differ.df == 1


def test_the_join_notices_each_model_first_prediction_once_and_moves_a_late_earlier_one():
    join = Join(label_grace=0, notices=True)
    out = join.add_prediction("i1", "a", ts=T0 + 1_100, label="x", now=T0 + 1_200)
    out += join.add_prediction("i1", "a", ts=T0 + 1_150, label="y", now=T0 + 1_300)  # again
    out += join.add_prediction("i1", "b", ts=T0 + 1_160, label="y", now=T0 + 1_300)
    assert sorted((o.model_id, o.t_instance, o.y_true) for o in out if is_notice(o)) == [
        ("a", T0 + 1_000, 1),
        ("b", T0 + 1_000, 1),
    ]
    # a late prediction (stamped before the clock) earlier than a's first, in another second:
    # the instance moves to that second, applied when it came
    out = join.add_prediction("i1", "a", ts=T0 + 200, label="x", now=T0 + 1_400)
    assert sorted((o.t_instance, o.y_true, o.due) for o in out) == [
        (T0, 1, T0 + 1_999),
        (T0 + 1_000, -1, T0 + 1_999),
    ]
    out = join.add_label("i1", ts=T0 + 1_500, label="x", now=T0 + 1_600)
    assert [(o.model_id, o.times[0]) for o in out] == [("a", T0 + 200), ("b", T0 + 1_160)]
    assert not Join(label_grace=0).add_prediction("i", "a", T0, "x", now=T0 + 5)


def test_counts_between_two_boundaries_come_in_any_order():
    """Notices and outcomes of one tick, in either order, give the same snapshot."""
    rows = [
        notice("m", T0, 2, T0 + 999),
        Outcome("m", "i1", "x", (T0,), ("x",), T0, T0 + 500, T0 + 500),
        notice("m", T0 + 1000, 1, T0 + 1_999),
    ]
    snaps = []
    for order in (rows, rows[::-1]):
        m = LabelMaturity(cohort_ms=1000, cohorts=5)
        for row in order:
            (m.predicted if is_notice(row) else m.labelled)([row])
        snaps.append(m.snapshot(T0 + 2_000))
    assert snaps[0] == snaps[1]
    assert [(c["predicted"], c["labelled"]) for c in snaps[0]["cohorts"]] == [(2, 1), (1, 0)]
    # a boundary counts only the notices due before it
    m = LabelMaturity(cohort_ms=1000, cohorts=5)
    m.predicted(rows[::2])
    assert m.snapshot(T0 + 1_000)["predicted"] == 2


def test_outcomes_are_counted_alike_however_they_come_and_whenever_they_are_read():
    """labelled() counts when COUNT_AT have come or before a read: one outcome at a time and
    pieces, with a read between them, give the same snapshots and state, and the read the
    snapshot of what came so far in one batch; an outcome of a cohort a fold has let go
    counts in the totals all the same."""
    n = COUNT_AT * 2 + 500
    rows = [  # first predictions over 9 s of 1 s cohorts, 3 kept
        Outcome("m", f"i{i}", "xy"[i % 3 == 0], (T0 + 2 * i,), ("x",), T0 + 2 * i, 0, 0)
        for i in range(n)
    ]
    rows.insert(3000, Outcome("m", "old", "y", (T0,), ("x",), T0, 0, 0))  # after the fold
    pieces = LabelMaturity(cohort_ms=1000, cohorts=3)
    single = LabelMaturity(cohort_ms=1000, cohorts=3)
    for lo in range(0, len(rows), 700):
        pieces.labelled(rows[lo : lo + 700])
        assert len(pieces._waiting) < COUNT_AT  # what waits is bounded
        for row in rows[lo : lo + 700]:
            single.labelled([row])
        if lo // 700 == 3:  # a read between pieces
            so_far = LabelMaturity(cohort_ms=1000, cohorts=3)
            so_far.labelled(rows[: lo + 700])
            want = so_far.snapshot(T0 + 5_000)
            assert pieces.snapshot(T0 + 5_000) == single.snapshot(T0 + 5_000) == want
    assert pieces.state() == single.state()
    assert [c["start"] for c in pieces.snapshot(T0 + 10_000)["cohorts"]] == [
        T0 + 7_000,
        T0 + 8_000,
        T0 + 9_000,
    ]
    assert pieces.state()["labelled"] == [["x", n - n // 3], ["y", n // 3 + 1]]


def test_a_model_evaluated_before_maturity_was_counted_starts_at_the_next_cohort():
    rows = [(T0 + 1000 * i, 1, f"i{i}", "a", "x") for i in range(10)]
    rows += [(T0 + 3_700_000 + 1000 * i, 2, f"i{i}", "", "x") for i in range(10)]
    rows += [(T0 + 3_800_000, 1, "h", "a", "x"), (T0 + 3_900_000, 2, "h", "", "x")]
    rows += [(T0 + 7_250_000, 1, "j", "a", "x"), (T0 + 7_260_000, 2, "j", "", "y")]
    rows += [(T0 + 7_270_000, 1, "k", "a", "x"), (T0 + 7_400_000, 1, "l", "a", "x")]
    off = load_config(join={"label_grace_ms": 0}, maturity={"enabled": False})
    on = load_config(join={"label_grace_ms": 0})
    events = as_events(rows)
    engine = Engine(off)
    records = engine.process(events[:15])  # five labels in, the other five pending
    assert not [r for r in records if r.kind == "label_maturity"]
    join = Join.restore(engine.join.changes().items())
    engine = Engine.from_state(on, json.loads(json.dumps(engine.state())), join)
    records = engine.process(events[15:]) + engine.finish()
    last = [r for r in records if r.kind == "label_maturity"][-1]
    # it counts from the first cohort that begins after its first row here (i5's label, in
    # the second hour, which may have had predictions before the restart): the third hour's
    assert last.ts == T0 + 7_380_000
    assert [(c.start, c.predicted, c.labelled) for c in last.cohorts] == [(T0 + 7_200_000, 2, 1)]
    assert (last.predicted, last.labelled, last.labelled_by_class) == (2, 1, {"y": 1})
    assert last.n == 12  # the model's outcomes, all of them


@settings(max_examples=100, deadline=None)
@given(rows=streams(), at=st.floats(0, 1))
def test_state_round_trips_through_json(rows, at):
    config = load_config(join={"label_grace_ms": 0}, maturity={"cohort_ms": 2000, "every_ms": 1000})
    _, engine = run(rows, config)
    for maturity in engine.maturity.values():
        again = LabelMaturity.from_state(json.loads(json.dumps(maturity.state())))
        assert again.state() == maturity.state()
        b = T0 + int(at * 40_000) // 1000 * 1000
        assert again.snapshot(b) == maturity.snapshot(b)


def test_settings_are_checked():
    with pytest.raises(ValueError, match="cohort_ms=1500 is not allowed"):
        LabelMaturity(cohort_ms=1500)
    with pytest.raises(ValueError, match="cohorts=0"):
        LabelMaturity(cohorts=0)
    from streameval.config import ConfigError

    with pytest.raises(ConfigError, match=r"maturity.every_ms = 1500: every_ms=1500 is not"):
        load_config(maturity={"every_ms": 1500})
