"""The join rules of DESIGN.md "Join semantics", one table row per rule."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.join import INSTANCE, LABEL, PREDICTION, Join, Outcome

# events: ("i", id, ts, now) instance; ("p", id, model, ts, label, now); ("l", id, ts, label, now);
# ("a", now) advances the clock. Outcomes: (model, instance, y_true, labels, t_inst, t_label)
CASES = {
    "prediction then label, grace 0": dict(
        grace=0,
        events=[("p", "i1", "m", 10, "a", 10), ("l", "i1", 50, "a", 50)],
        outcomes=[("m", "i1", "a", ("a",), 10, 50)],
        counters={},
    ),
    "instance record sets t_instance even after predictions": dict(
        grace=0,
        events=[("p", "i1", "m", 10, "a", 10), ("i", "i1", 5, 11), ("l", "i1", 50, "b", 50)],
        outcomes=[("m", "i1", "b", ("a",), 5, 50)],
        counters={},
    ),
    "first prediction is t_instance without an instance record": dict(
        grace=0,
        events=[
            ("p", "i1", "m", 30, "a", 30),
            ("p", "i1", "n", 20, "a", 31),
            ("l", "i1", 50, "a", 50),
        ],
        outcomes=[("m", "i1", "a", ("a",), 20, 50), ("n", "i1", "a", ("a",), 20, 50)],
        counters={},
    ),
    "evolving predictions: initial first, final last before the label": dict(
        grace=0,
        events=[
            ("p", "i1", "m", 10, "a", 10),
            ("p", "i1", "m", 30, "c", 30),
            ("p", "i1", "m", 20, "b", 31),  # out of order arrival is sorted by ts
            ("l", "i1", 40, "c", 40),
        ],
        outcomes=[("m", "i1", "c", ("a", "b", "c"), 10, 40)],
        counters={},
    ),
    "leaky prediction arriving after the label": dict(
        grace=100,
        events=[
            ("p", "i1", "m", 10, "a", 10),
            ("l", "i1", 50, "a", 50),
            ("p", "i1", "m", 60, "b", 60),
            ("a", 200),
        ],
        outcomes=[("m", "i1", "a", ("a",), 10, 50)],
        counters={"leaky_prediction": 1},
    ),
    "leaky prediction arriving before the label (stamped after it)": dict(
        grace=0,
        events=[
            ("p", "i1", "m", 10, "a", 10),
            ("p", "i1", "m", 90, "b", 20),
            ("l", "i1", 50, "a", 50),
        ],
        outcomes=[("m", "i1", "a", ("a",), 10, 50)],
        counters={"leaky_prediction": 1},
    ),
    "a prediction stamped after its label is leaky whatever arrives first": dict(
        grace=100,
        events=[("p", "i1", "m", 60, "a", 60), ("l", "i1", 50, "a", 61), ("a", 500)],
        outcomes=[],
        counters={"leaky_prediction": 1, "orphan_label": 1},
    ),
    "label overtakes predictions, grace 0: orphan, then late": dict(
        grace=0,
        events=[("l", "i1", 50, "a", 50), ("p", "i1", "m", 40, "a", 51)],
        outcomes=[],
        counters={"orphan_label": 1, "late_prediction": 1},
    ),
    "label overtakes predictions, grace > 0: joined": dict(
        grace=100,
        events=[("l", "i1", 50, "a", 50), ("p", "i1", "m", 40, "a", 80), ("a", 149)],
        outcomes=[],
        counters={},
        then=[("a", 150)],
        then_outcomes=[("m", "i1", "a", ("a",), 40, 50)],
    ),
    "prediction after the grace is late": dict(
        grace=100,
        events=[
            ("p", "i1", "m", 40, "a", 40),
            ("l", "i1", 50, "a", 50),
            ("p", "i1", "n", 45, "a", 150),
        ],
        outcomes=[("m", "i1", "a", ("a",), 40, 50)],
        counters={"late_prediction": 1},
    ),
    "duplicate and conflicting labels": dict(
        grace=0,
        events=[
            ("p", "i1", "m", 10, "a", 10),
            ("l", "i1", 50, "a", 50),
            ("l", "i1", 60, "a", 60),
            ("l", "i1", 70, "b", 70),
        ],
        outcomes=[("m", "i1", "a", ("a",), 10, 50)],
        counters={"duplicate_label": 1, "conflicting_label": 1},
    ),
    "conflicting label during the grace period": dict(
        grace=100,
        events=[
            ("p", "i1", "m", 10, "a", 10),
            ("l", "i1", 50, "a", 50),
            ("l", "i1", 55, "b", 60),
            ("a", 500),
        ],
        outcomes=[("m", "i1", "a", ("a",), 10, 50)],
        counters={"conflicting_label": 1},
    ),
    "of two labels the earlier wins, whichever arrives first": dict(
        grace=100,
        events=[
            ("p", "i1", "m", 10, "a", 10),
            ("l", "i1", 55, "b", 60),
            ("l", "i1", 50, "a", 61),  # stamped earlier: it is the label
            ("a", 500),
        ],
        outcomes=[("m", "i1", "a", ("a",), 10, 50)],
        counters={"conflicting_label": 1},
    ),
    "two labels stamped alike: the label order decides": dict(
        grace=100,
        events=[
            ("p", "i1", "m", 10, "a", 10),
            ("l", "i1", 50, "b", 50),
            ("l", "i1", 50, "a", 50),
            ("l", "i1", 50, 7, 51),
            ("a", 500),
        ],
        outcomes=[("m", "i1", 7, ("a",), 10, 50)],  # integers before strings
        counters={"conflicting_label": 2},
    ),
    "the same label stamped earlier moves the label time": dict(
        grace=100,
        events=[
            ("p", "i1", "m", 10, "a", 10),
            ("l", "i1", 55, "a", 55),
            ("l", "i1", 50, "a", 56),
            ("a", 500),
        ],
        outcomes=[("m", "i1", "a", ("a",), 10, 50)],
        counters={"duplicate_label": 1},
    ),
    "of two instance records the earlier wins, whichever arrives first": dict(
        grace=0,
        events=[
            ("i", "i1", 8, 8),
            ("i", "i1", 5, 9),
            ("p", "i1", "m", 10, "a", 10),
            ("l", "i1", 50, "a", 50),
        ],
        outcomes=[("m", "i1", "a", ("a",), 5, 50)],
        counters={"duplicate_instance": 1},
    ),
    "re-predictions stamped alike are ordered by label, not arrival": dict(
        grace=0,
        events=[
            ("p", "i1", "m", 10, "b", 10),
            ("p", "i1", "m", 10, "a", 10),
            ("p", "i1", "m", 5, "c", 11),
            ("l", "i1", 50, "a", 50),
        ],
        outcomes=[("m", "i1", "a", ("c", "a", "b"), 5, 50)],
        counters={},
    ),
    "duplicate prediction and duplicate instance": dict(
        grace=0,
        events=[
            ("i", "i1", 5, 5),
            ("i", "i1", 6, 6),
            ("p", "i1", "m", 10, "a", 10),
            ("p", "i1", "m", 10, "a", 11),
            ("l", "i1", 50, "a", 50),
            ("i", "i1", 7, 51),
        ],
        outcomes=[("m", "i1", "a", ("a",), 5, 50)],
        counters={"duplicate_instance": 1, "duplicate_prediction": 1, "late_instance": 1},
    ),
    "label_ttl expiry counts unlabelled per model": dict(
        grace=0,
        ttl=1000,
        events=[("p", "i1", "m", 10, "a", 10), ("p", "i1", "n", 10, "a", 10), ("a", 1010)],
        outcomes=[],
        counters={},
        then=[("a", 1011), ("l", "i1", 1012, "a", 1012)],
        then_outcomes=[],
        then_counters={"expired_unlabelled": 2, "orphan_label": 1},
    ),
    "max_pending evicts the oldest instance": dict(
        grace=0,
        max_pending=2,
        events=[
            ("p", "i1", "m", 10, "a", 10),
            ("p", "i2", "m", 11, "a", 11),
            ("p", "i3", "m", 12, "a", 12),
            ("l", "i1", 20, "a", 20),
            ("l", "i3", 21, "b", 21),
        ],
        # i3 pushes i1 out; i1's label then needs a slot and pushes i2 out, and is an orphan
        outcomes=[("m", "i3", "b", ("a",), 12, 21)],
        counters={"evicted_max_pending": 2, "orphan_label": 1},
    ),
    "a stale grace entry never resolves a later incarnation of the same id": dict(
        # i4's label is resolved early (pushed out of the full buffer), forgotten after its TTL,
        # and i4 comes back as a new prediction: the old grace entry must leave it alone
        grace=50,
        ttl=30,
        max_pending=2,
        events=[
            ("l", "i4", 168, "b", 178),
            ("p", "i5", "m", 169, "b", 178),
            ("p", "i6", "n", 190, "a", 180),
            ("p", "i4", "n", 174, "a", 212),
            ("a", 300),
        ],
        outcomes=[],
        counters={"orphan_label": 1, "expired_unlabelled": 3},
    ),
    "label before the instance time is a data error": dict(
        grace=0,
        events=[("i", "i1", 100, 100), ("p", "i1", "m", 40, "a", 100), ("l", "i1", 50, "a", 101)],
        outcomes=[],
        counters={"label_before_instance": 1},
    ),
}


def _run(join, events):
    out = []
    for ev in events:
        kind, *args = ev
        if kind == "i":
            out += join.add_instance(args[0], ts=args[1], now=args[2])
        elif kind == "p":
            out += join.add_prediction(args[0], args[1], ts=args[2], label=args[3], now=args[4])
        elif kind == "l":
            out += join.add_label(args[0], ts=args[1], label=args[2], now=args[3])
        else:
            out += join.advance(args[0])
    return [(o.model_id, o.instance_id, o.y_true, o.labels, o.t_instance, o.t_label) for o in out]


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_join_rules(case):
    join = Join(
        label_grace=case["grace"],
        label_ttl=case.get("ttl", 10**9),
        max_pending=case.get("max_pending", 100),
    )
    assert _run(join, case["events"]) == case["outcomes"]
    assert dict(join.counters) == case["counters"]
    if "then" in case:
        # the state survives a JSON round trip at this point and goes on identically
        restored = Join.from_state(json.loads(json.dumps(join.state())))
        for j in (join, restored):
            assert _run(j, case["then"]) == case["then_outcomes"]
            assert dict(j.counters) == {**case["counters"], **case.get("then_counters", {})}


def test_reads_version_3_state():
    """Snapshot version 3 wrote resolved instances as [id, label, ts] triples: a join restored
    from one goes on exactly as one restored from today's layout."""
    join = Join(label_grace=5)
    before = [("p", "i1", "m", 10, "a", 10), ("l", "i1", 20, "a", 20),
              ("p", "i2", "m", 30, "b", 30), ("l", "i2", 40, "a", 40), ("a", 50)]  # fmt: skip
    assert len(_run(join, before)) == 2
    state = json.loads(json.dumps(join.state()))
    assert state["resolved_ids"] == ["i1", "i2"]
    old = {k: v for k, v in state.items() if k != "resolved_ids"}
    pairs = zip(state["resolved_ids"], state["resolved"], strict=True)
    old["resolved"] = [[k, y, t] for k, (y, t) in pairs]
    restored, from_old = Join.from_state(state), Join.from_state(old)
    assert from_old.state() == restored.state()
    then = [("p", "i1", "m", 60, "a", 60), ("l", "i2", 61, "b", 61), ("p", "i3", "m", 62, "b", 62),
            ("l", "i3", 63, "b", 63), ("a", 100)]  # fmt: skip
    for j in (join, restored, from_old):
        assert _run(j, then) == [("m", "i3", "b", ("b",), 62, 63)]
        assert j.counters["late_prediction"] == 1 and j.counters["conflicting_label"] == 1


def test_per_model_counters():
    join = Join(label_grace=0)
    _run(
        join,
        [("p", "i1", "m", 10, "a", 10), ("l", "i1", 50, "a", 50), ("p", "i1", "n", 20, "a", 60)],
    )
    assert join.model_counters["late_prediction", "n"] == 1
    assert join.model_counters["late_prediction", "m"] == 0


def test_conflicts_are_kept_for_logging():
    join = Join(label_grace=0)
    _run(join, [("p", "i1", "m", 10, "a", 10), ("l", "i1", 50, "a", 50), ("l", "i1", 51, "b", 51)])
    assert list(join.conflicts) == [("i1", "a", "b")]
    join = Join(label_grace=10)  # the later arrival wins: the earlier one is the conflict
    _run(join, [("p", "i1", "m", 10, "a", 10), ("l", "i1", 51, "b", 51), ("l", "i1", 50, "a", 52)])
    assert list(join.conflicts) == [("i1", "a", "b")]


def test_memory_is_bounded_by_max_pending():
    join = Join(label_grace=0, max_pending=50)
    for i in range(1000):
        join.add_prediction(f"i{i}", "m", ts=i, label="a", now=i)
        if i % 2:
            join.add_label(f"i{i}", ts=i, label="a", now=i)
    assert join.pending <= 50
    assert len(join.state()["resolved"]) <= 50
    assert len(join.state()["resolved_ids"]) <= 50
    assert len(join._expiry) <= 2 * 50 + 1025


def test_clock_never_goes_backwards():
    join = Join(label_grace=100)
    join.add_prediction("i1", "m", ts=10, label="a", now=10)
    join.add_label("i1", ts=20, label="a", now=1000)
    assert join.advance(50) == []  # an older "now" does not rewind the clock
    assert len(join.advance(1100)) == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"label_grace": -1}, "label_grace=-1"),
        ({"label_ttl": 0}, "label_ttl=0"),
        ({"max_pending": 0}, "max_pending=0"),
        ({"label_grace": 1.5}, "label_grace=1.5"),
    ],
)
def test_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Join(**kwargs)


_rows = st.lists(
    st.tuples(
        st.sampled_from([INSTANCE, PREDICTION, LABEL]),
        st.sampled_from(["i1", "i2", "i3", "i4", "i5"]),
        st.sampled_from(["m", "n"]),
        st.integers(0, 60),  # ts
        st.sampled_from(["a", "b"]),
        st.integers(0, 1),  # source
        st.integers(0, 3),  # offset step: 0 makes a repeat
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(batches=st.lists(st.tuples(_rows, st.integers(0, 80)), max_size=6),
       grace=st.integers(0, 10), ttl=st.integers(1, 60), max_pending=st.integers(1, 4))  # fmt: skip
def test_a_batch_of_events_is_the_events_one_by_one(batches, grace, ttl, max_pending):
    """The streaming join's batch path (``add_events``) gives the outcomes, counters and
    state of the ``add_*`` calls it stands for, with repeats by source offset skipped."""
    one, batch = Join(grace, ttl, max_pending), Join(grace, ttl, max_pending)
    seen, offsets = [-1, -1], [0, 0]
    last = [-1, -1]
    got, want, repeats = [], [], 0
    for rows, now in batches:
        events = []
        for kind, iid, model, ts, label, source, step in rows:
            offsets[source] += step
            events.append((kind, iid, model if kind == PREDICTION else "", ts, label, source,
                           offsets[source]))  # fmt: skip
        out, skipped = batch.add_events(events, now, seen)
        got += out
        repeats += skipped
        want += one.advance(now)
        for kind, iid, model, ts, label, source, offset in events:
            if offset <= last[source]:
                repeats -= 1
                continue
            last[source] = offset
            if kind == PREDICTION:
                want += one.add_prediction(iid, model, ts, label, now)
            elif kind == LABEL:
                want += one.add_label(iid, ts, label, now)
            else:
                want += one.add_instance(iid, ts, now)
    assert got == want
    assert repeats == 0 and seen == last
    assert batch.state() == one.state()


@settings(max_examples=300, deadline=None)
@given(
    predictions=st.lists(
        st.tuples(st.sampled_from(["m", "n", "o"]), st.integers(0, 20), st.sampled_from("ab")),
        max_size=6,
    ),
    has_record=st.booleans(),
    t_instance=st.integers(0, 20),
    label_ts=st.integers(0, 20),
)
def test_the_common_case_resolves_as_the_general_rule(predictions, has_record, t_instance,
                                                      label_ts):  # fmt: skip
    """One prediction per model, all in time, takes a shortcut in ``_resolve``: it gives the
    outcomes and counters of the general rule (``_resolve_timelines``)."""
    if not has_record:
        t_instance = min((t for _, t, _ in predictions), default=None)
    record = [t_instance, has_record, "a", label_ts, label_ts]
    for prediction in predictions:
        record += prediction
    fast, general = Join(label_grace=0), Join(label_grace=0)
    fast._pending["i"] = list(record)
    out_fast, out_general = [], []
    fast._resolve("i", out_fast)
    general._resolve_timelines("i", list(record), label_ts, out_general)
    assert out_fast == out_general
    assert [type(o) for o in out_fast] == [Outcome] * len(out_fast)
    assert fast.counters == general.counters
    assert fast.model_counters == general.model_counters
