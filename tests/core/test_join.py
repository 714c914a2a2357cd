"""The join rules (docs/replay.md, "How events become outcomes"), one rule per test."""

from unittest import mock

import pytest
import streameval.core.waiting as waiting_module
from hypothesis import given, settings
from hypothesis import strategies as st
from streameval.core.join import Join
from streameval.core.outcome import INSTANCE, LABEL, PREDICTION
from streameval.core.state import (
    EVENT,
    WAITING,
    decode_value,
    encode_value,
    event_key,
)

# events: ("i", id, ts, now) instance; ("p", id, model, ts, label, now); ("l", id, ts, label, now);
# ("a", now) advances the clock. Each event arrives when the clock is at ``now``: stamped after
# it, it waits until the clock passes its ts; stamped at or before it, it is late and applied at
# once. Outcomes: (model, instance, y_true, labels, t_inst, t_label)
CASES = {
    "prediction then label, grace 0": dict(
        grace=0,
        events=[("p", "i1", "m", 10, "a", 10), ("l", "i1", 50, "a", 50)],
        outcomes=[("m", "i1", "a", ("a",), 10, 50)],
        counters={},
    ),
    "a label waits for the clock to pass it, and its grace": dict(
        grace=100,
        events=[("p", "i1", "m", 10, "a", 0), ("l", "i1", 50, "a", 0), ("a", 149)],
        outcomes=[],
        counters={},
        then=[("a", 150)],
        then_outcomes=[("m", "i1", "a", ("a",), 10, 50)],
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
            ("p", "i1", "m", 20, "b", 31),  # late, but sorted by ts into the timeline
            ("l", "i1", 40, "c", 40),
        ],
        outcomes=[("m", "i1", "c", ("a", "b", "c"), 10, 40)],
        counters={},
    ),
    "a prediction stamped after its label is late, whenever it arrives": dict(
        grace=100,
        events=[
            ("p", "i1", "m", 10, "a", 10),
            ("p", "i1", "m", 60, "b", 20),  # arrives before the label
            ("l", "i1", 50, "a", 50),
            ("a", 200),
        ],
        outcomes=[("m", "i1", "a", ("a",), 10, 50)],
        counters={"late_prediction": 1},
    ),
    "a prediction stamped after its label comes after it, whatever arrives first": dict(
        grace=0,
        events=[
            ("p", "i1", "m", 10, "a", 10),
            ("p", "i1", "m", 90, "b", 20),  # arrives first, applied at 90
            ("l", "i1", 50, "a", 50),
            ("a", 100),
        ],
        outcomes=[("m", "i1", "a", ("a",), 10, 50)],
        counters={"late_prediction": 1},
    ),
    "a label that came late, before a prediction stamped after it: leaky": dict(
        grace=0,
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
            ("a", 150),
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
            ("l", "i1", 55, "b", 20),
            ("l", "i1", 50, "a", 30),  # arrives second, stamped first: it is the label
            ("a", 500),
        ],
        outcomes=[("m", "i1", "a", ("a",), 10, 50)],
        counters={"conflicting_label": 1},
    ),
    "two labels stamped alike: the label order decides": dict(
        grace=100,
        events=[
            ("p", "i1", "m", 10, "a", 10),
            ("l", "i1", 50, "b", 20),
            ("l", "i1", 50, "a", 20),
            ("l", "i1", 50, 7, 21),
            ("a", 500),
        ],
        outcomes=[("m", "i1", 7, ("a",), 10, 50)],  # integers before strings
        counters={"conflicting_label": 2},
    ),
    "the same label stamped earlier sets the label time": dict(
        grace=100,
        events=[
            ("p", "i1", "m", 10, "a", 10),
            ("l", "i1", 55, "a", 20),
            ("l", "i1", 50, "a", 21),
            ("a", 500),
        ],
        outcomes=[("m", "i1", "a", ("a",), 10, 50)],
        counters={"duplicate_label": 1},
    ),
    "of two instance records the earlier wins, whichever arrives first": dict(
        grace=0,
        events=[
            ("i", "i1", 8, 0),
            ("i", "i1", 5, 0),
            ("p", "i1", "m", 10, "a", 0),
            ("l", "i1", 50, "a", 0),
            ("a", 100),
        ],
        outcomes=[("m", "i1", "a", ("a",), 5, 50)],
        counters={"duplicate_instance": 1},
    ),
    "re-predictions stamped alike are ordered by label, not arrival": dict(
        grace=0,
        events=[
            ("p", "i1", "m", 10, "b", 0),
            ("p", "i1", "m", 10, "a", 0),
            ("p", "i1", "m", 5, "c", 0),
            ("l", "i1", 50, "a", 0),
            ("a", 100),
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
        events=[("p", "i1", "m", 10, "a", 10), ("p", "i1", "n", 10, "a", 10), ("a", 1009)],
        outcomes=[],
        counters={},
        then=[("a", 1010), ("l", "i1", 1012, "a", 1012)],  # 1010: no event can save it now
        then_outcomes=[],
        then_counters={"expired_unlabelled": 2, "orphan_label": 1},
    ),
    "a label in time saves an instance from expiry": dict(
        grace=100,
        ttl=1000,
        events=[("p", "i1", "m", 10, "a", 0), ("l", "i1", 1010, "a", 0), ("a", 2000)],
        outcomes=[("m", "i1", "a", ("a",), 10, 1010)],
        counters={},
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
        # i3 pushes i1 out; i1's label then finds nobody that predicted it: an orphan
        outcomes=[("m", "i3", "b", ("a",), 12, 21)],
        counters={"evicted_max_pending": 1, "orphan_label": 1},
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
        # restored from its checkpoint at this point, the join goes on identically
        restored = Join.restore(join.changes().items())
        for j in (join, restored):
            assert _run(j, case["then"]) == case["then_outcomes"]
            assert dict(j.counters) == {**case["counters"], **case.get("then_counters", {})}


def _merge(log, changes):
    """A compacted changelog: the latest value per key, deleted keys gone."""
    for key, value in changes.items():
        if value is None:
            log.pop(key, None)
        else:
            log[key] = value


_events = st.lists(
    st.tuples(
        st.sampled_from("ipl"),
        st.sampled_from(["i1", "i2", "i3", "i4", "i5"]),
        st.sampled_from(["m", "n"]),
        st.integers(0, 60),  # ts
        st.sampled_from(["a", "b", 3]),
        st.integers(-5, 30),  # the clock when it arrives, relative to its ts
        st.booleans(),  # a checkpoint after it
    ),
    max_size=40,
)


def _as_rows(events, pile_up=False):
    """Event rows and the clock each arrives at (with ``pile_up``, the clock moves only with
    the events whose last field is true: waiting events pile up, and one move passes many)."""
    kinds = {"i": INSTANCE, "p": PREDICTION, "l": LABEL}
    rows, clocks, clock = [], [], 0
    for n, (kind, iid, model, ts, label, ahead, moves) in enumerate(events):
        if moves or not pile_up:
            clock = max(clock, ts - ahead)
        scores = _scores(label, n) if kind == "p" else None
        rows.append((kinds[kind], iid, model if kind == "p" else "", ts, label, 0, n, scores))
        clocks.append(clock)
    return rows, clocks


def _scores(label, n):
    """Scores for a prediction, or none: repeats of one prediction may differ in them."""
    if n % 3 == 0:
        return None
    p = (n % 7) / 8
    return ("a", p, "b", 1 - p) if isinstance(label, str) else (3, 1.0)


def _at_once(rows, clocks, grace, ttl, max_pending):
    """A join that never stops and applies what is due at once, and its outcomes."""
    whole = Join(grace, ttl, max_pending)
    want = [
        o for row, now in zip(rows, clocks, strict=True) for o in whole.add_events([row], now)[0]
    ]
    want += whole.advance(10**6)
    return whole, want


@settings(max_examples=300, deadline=None)
@given(events=_events, grace=st.integers(0, 10), ttl=st.integers(1, 60),
       max_pending=st.integers(1, 4), crash_at=st.integers(0, 40))  # fmt: skip
def test_incremental_checkpoints_restore_exactly(events, grace, ttl, max_pending, crash_at):
    """A join restored from its checkpoints — each one only what changed since the last —
    goes on exactly as the one that never stopped: the same outcomes and counters."""
    rows, clocks = _as_rows(events)
    whole, want = _at_once(rows, clocks, grace, ttl, max_pending)

    join = Join(grace, ttl, max_pending)
    log, saved, got, n = {}, None, [], 0
    crashed = False
    while n < len(rows):
        got += join.add_events([rows[n]], clocks[n])[0]
        if events[n][6]:  # a checkpoint after this event
            _merge(log, join.changes())
            join.commit()
            saved = (dict(log), len(got), n)
        if n == crash_at and saved is not None and not crashed:  # back to the last checkpoint
            crashed = True
            items, produced, n = saved
            join = Join.restore(items.items())
            del got[produced:]
        n += 1
    got += join.advance(10**6)
    assert got == want
    assert join.counters == whole.counters and join.model_counters == whole.model_counters


@settings(max_examples=400, deadline=None)
@given(events=_events, grace=st.integers(0, 10), ttl=st.integers(1, 60),
       max_pending=st.integers(1, 4), budget=st.integers(1, 4), crash_at=st.integers(1, 20),
       cut_every=st.integers(1, 4))  # fmt: skip
def test_waiting_events_applied_in_slices(events, grace, ttl, max_pending, budget, crash_at,
                                          cut_every):  # fmt: skip
    """A clock that passes many waiting events may apply them a few at a time (``budget``),
    with checkpoints and a crash between the slices: the outcomes, their order, the counters
    and the checkpoints' meaning are those of the join that applies them all at once."""
    _slices_with_a_crash(events, grace, ttl, max_pending, budget, crash_at, cut_every)


@settings(max_examples=300, deadline=None)
@given(events=_events, grace=st.integers(0, 10), ttl=st.integers(1, 60),
       max_pending=st.integers(1, 4), budget=st.integers(1, 4), crash_at=st.integers(1, 20),
       cut_every=st.integers(1, 4), chunk=st.integers(1, 3))  # fmt: skip
def test_waiting_events_in_small_chunks(events, grace, ttl, max_pending, budget, crash_at,
                                        cut_every, chunk):  # fmt: skip
    """The same with checkpoints writing the waiting events ``chunk`` to a record: chunks
    written, cut short by the events applied since and written again, or emptied and
    deleted, restore exactly the events still waiting."""
    with mock.patch.object(waiting_module, "CHUNK_EVENTS", chunk):
        _slices_with_a_crash(events, grace, ttl, max_pending, budget, crash_at, cut_every)


def _slices_with_a_crash(events, grace, ttl, max_pending, budget, crash_at, cut_every):
    rows, clocks = _as_rows(events, pile_up=True)
    whole, want = _at_once(rows, clocks, grace, ttl, max_pending)

    join = Join(grace, ttl, max_pending)
    log, saved, got, n, step = {}, None, [], 0, 0
    crashed = False
    while n < len(rows):
        got += join.add_events([rows[n]], clocks[n], budget=budget)[0]
        while True:
            if step % cut_every == 0:  # a checkpoint, between two slices or two events
                _merge(log, join.changes())
                join.commit()
                saved = (dict(log), len(got), n, join.behind, join.waiting)
            step += 1
            if step == crash_at and saved is not None and not crashed:
                crashed = True
                items, produced, n, behind, waiting = saved
                join = Join.restore(items.items())
                assert (join.behind, join.waiting) == (behind, waiting)
                del got[produced:]
            if not join.behind:
                break
            got += join.advance(clocks[n], budget=budget)
        n += 1
    while True:
        got += join.advance(10**6, budget=budget)
        if not join.behind:
            break
    assert got == want
    assert join.counters == whole.counters and join.model_counters == whole.model_counters
    assert join.clock == whole.clock and join.waiting == whole.waiting == 0
    _merge(log, join.changes())  # nothing waits: the changelog holds no waiting key
    assert not [k for k in log if k[:1] in (EVENT, WAITING)]


def _held_back(n, grace=1000):
    """A join holding ``n`` predictions back for the clock, and its rows (ts 10, 11, ...)."""
    rows = [(PREDICTION, f"i{i}", "m", 10 + i, "a", 0, i, None) for i in range(n)]
    join = Join(label_grace=grace)
    join.add_events(rows, 0)
    return join, rows


def test_a_checkpoint_writes_waiting_events_a_chunk_to_a_record():
    """2 500 events waiting make three records, not 2 500; applying some writes their chunk
    again with the rest, and applying all of a chunk deletes it."""
    join, _ = _held_back(2500)
    changes = join.changes()
    chunks = {k: decode_value(v) for k, v in changes.items() if k[:1] == WAITING}
    assert [len(v) for v in chunks.values()] == [1000, 1000, 500]
    join.commit()
    join.advance(1010 + 1499)  # events ts 10 .. 1509 applied: chunk 0 and half of chunk 1
    changes = {k: v for k, v in join.changes().items() if k[:1] == WAITING}
    first, second, third = sorted(chunks)
    assert changes[first] is None and third not in changes
    assert [row[0] for row in decode_value(changes[second])] == list(range(1510, 2010))
    join.commit()
    assert join.waiting == 1000


def test_events_applied_between_changes_and_commit_go_in_the_next_checkpoint():
    """What changes after :meth:`Join.changes` is not in that checkpoint: a chunk that loses
    events, or an event taken in, then is written by the next one."""
    join, _ = _held_back(10)
    log = {}
    _merge(log, join.changes())
    join.commit()
    _merge(log, join.changes())  # nothing waiting has changed ...
    join.advance(1012)  # ... and now three events are applied, before the commit
    join.add_events([(PREDICTION, "j", "m", 100, "a", 0, 99, None)], 0)
    join.commit()
    _merge(log, join.changes())
    join.commit()
    assert join.waiting == 8 and Join.restore(log.items()).waiting == 8
    join.advance(5000)
    _merge(log, join.changes())
    assert not [k for k in log if k[:1] == WAITING]


def test_a_chunk_holds_about_chunk_bytes_at_most():
    """Events with scores over many classes are kilobytes each: a chunk over
    ``CHUNK_BYTES`` is halved, down to a single event."""
    classes = tuple(x for c in range(300) for x in (f"class {c}", 1 / 300))
    rows = [(PREDICTION, f"i{i}", "m", 10 + i, "class 0", 0, i, classes) for i in range(40)]
    join = Join(label_grace=1000)
    join.add_events(rows, 0)
    with mock.patch.object(waiting_module, "CHUNK_BYTES", 20_000):
        changes = join.changes()
    sizes = [(len(v), len(decode_value(v))) for k, v in changes.items() if k[:1] == WAITING]
    assert sum(n for _, n in sizes) == 40 and len(sizes) > 1
    assert all(size <= 20_000 or n == 1 for size, n in sizes)
    join.commit()
    restored = Join.restore(changes.items())
    assert restored.waiting == 40
    label = [(LABEL, "i3", "", 20, "class 0", 0, 50, None)]
    restored.add_events(label, 0)
    join.add_events(label, 0)
    assert restored.advance(2000) == join.advance(2000) and restored.waiting == 0


def test_waiting_events_of_a_checkpoint_before_chunks_restore_and_go():
    """A checkpoint that wrote each waiting event under a key of its own (before chunks)
    restores them; applied, their keys are deleted, and new ones come in chunks."""
    join, _ = _held_back(5)
    log = {}
    for key, value in join.changes().items():  # as an older worker wrote them
        if key[:1] == WAITING:
            for entry in decode_value(value):
                log[event_key(entry[0], entry[6])] = encode_value(entry)
        else:
            log[key] = value
    join.commit()
    restored = Join.restore(log.items())
    assert restored.waiting == 5
    later = [(LABEL, "i0", "", 12, "b", 0, 8, None), (PREDICTION, "j", "m", 100, "a", 0, 9, None)]
    join.add_events(later, 0)
    restored.add_events(later, 0)
    want = join.advance(1012)
    assert restored.advance(1012) == want and len(want) == 1
    _merge(log, restored.changes())
    restored.commit()
    waiting = sorted(k for k in log if k[:1] in (EVENT, WAITING))
    assert [k[:1] for k in waiting] == [EVENT, EVENT, WAITING]  # ts 13 and 14 wait still
    assert Join.restore(log.items()).waiting == 3


def test_a_join_restored_between_slices_is_still_behind():
    rows = []
    for i in range(10):
        rows += [
            (PREDICTION, f"i{i}", "m", 10 + i, "a", 0, 2 * i, None),
            (LABEL, f"i{i}", "", 20 + i, "a" if i % 2 else "b", 0, 2 * i + 1, None),
        ]
    whole = Join(label_grace=0)
    whole.add_events(rows, 0)
    want = whole.advance(100)

    join = Join(label_grace=0)
    join.add_events(rows, 0)
    got = join.advance(100, budget=7)  # 20 events due: 7 of them now
    assert join.behind and join.waiting == 13 and join.clock < 100
    restored = Join.restore(join.changes().items())
    assert restored.behind and restored.waiting == 13 and restored.clock == join.clock
    while restored.behind:
        got += restored.advance(100, budget=7)  # the same clock: the rest, 7 at a time
    assert got == want and restored.clock == whole.clock == 100
    assert restored.counters == whole.counters and restored.pending == whole.pending == 0


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
    join = Join(label_grace=10)  # the later arrival is the label: the earlier one conflicts
    _run(join, [("p", "i1", "m", 10, "a", 10), ("l", "i1", 51, "b", 20), ("l", "i1", 50, "a", 20),
                ("a", 100)])  # fmt: skip
    assert list(join.conflicts) == [("i1", "a", "b")]


def test_memory_is_bounded_by_max_pending():
    join = Join(label_grace=0, max_pending=50)
    for i in range(1000):
        join.add_prediction(f"i{i}", "m", ts=i, label="a", now=i)
        if i % 2:
            join.add_label(f"i{i}", ts=i, label="a", now=i)
    assert join.pending <= 50
    assert len(join.state.memory) <= 50
    assert all(len(heap) <= 2 * 100 + 4096 for heap in join.state.queues.values())


def test_clock_never_goes_backwards():
    join = Join(label_grace=100)
    join.add_prediction("i1", "m", ts=10, label="a", now=10)
    join.add_label("i1", ts=500, label="a", now=20)
    assert join.advance(550) == []
    assert join.advance(50) == []  # an older "now" does not rewind the clock
    assert len(join.advance(600)) == 1


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
def test_a_batch_of_events_is_its_events_taken_one_by_one(batches, grace, ttl, max_pending):
    """The streaming join's batch path (``add_events``) gives the outcomes, counters and
    state of its events taken one at a time at the same clock, with repeats by source offset
    skipped."""
    one, batch = Join(grace, ttl, max_pending), Join(grace, ttl, max_pending)
    seen, offsets = [-1, -1], [0, 0]
    last = [-1, -1]
    got, want, repeats = [], [], 0
    for rows, now in batches:
        events = []
        for kind, iid, model, ts, label, source, step in rows:
            offsets[source] += step
            scores = _scores(label, offsets[source]) if kind == PREDICTION else None
            model = model if kind == PREDICTION else ""
            events.append((kind, iid, model, ts, label, source, offsets[source], scores))
        out, skipped = batch.add_events(events, now, seen)
        got += out
        repeats += skipped
        clock = one._clock  # every event of the batch arrives at the clock before it
        for event in events:
            source, offset = event[5], event[6]
            if offset <= last[source]:
                repeats -= 1
                continue
            last[source] = offset
            want += one.add_events([event], clock)[0]
        want += one.advance(now)
    assert got == want
    assert repeats == 0 and seen == last
    assert batch.changes() == one.changes()
