"""The slice tracker against a plain loop written from its definition (on every prefix), any
split into calls, state round trips through JSON, hysteresis, bounded memory, and the checks
of its arguments."""

from __future__ import annotations

import itertools
import json
import random
from fractions import Fraction

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from streameval.core.slices import OTHER, SliceTracker


class Loop:
    """The tracker as the module docstring defines it, one outcome at a time, with lists,
    min/max and exact fractions; changes are (outcome number, kind, slice)."""

    def __init__(self, top_k, window, hysteresis, capacity):
        self.top_k, self.window, self.capacity = top_k, window, capacity
        self.factor = 1 + Fraction(hysteresis)
        self.n = 0
        self.tracked = []  # [value, window count, entry number], in order of entry
        self.summary = []  # [value, count, error]
        self.changes = []

    def find(self, rows, value):
        for row in rows:
            if row[0] == value:
                return row
        return None

    def step(self, v):
        self.n += 1
        if v is None or v == OTHER:
            counted = OTHER
        elif self.find(self.tracked, v) is not None:
            self.find(self.tracked, v)[1] += 1
            counted = v
        elif len(self.tracked) < self.top_k:
            self.tracked.append([v, 1, self.n])
            self.summary = [row for row in self.summary if row[0] != v]
            self.changes.append((self.n, "enter", v))
            counted = v
        else:
            counted = OTHER
            row = self.find(self.summary, v)
            if row is not None:
                row[1] += 1
            elif len(self.summary) < self.capacity:
                self.summary.append([v, 1, 0])
            else:
                least = min(self.summary, key=lambda r: (r[1], r[0]))
                event("a summary value replaced")
                self.summary.remove(least)
                self.summary.append([v, least[1] + 1, least[1]])
        if self.n % self.window == 0:
            self.rerank()
        return counted

    def rerank(self):
        for row in list(self.tracked):
            if row[1] == 0:
                self.tracked.remove(row)
                self.changes.append((self.n, "leave", row[0]))
        while self.summary:
            best = sorted(self.summary, key=lambda r: (-(r[1] - r[2]), r[0]))[0]
            g = best[1] - best[2]
            if len(self.tracked) < self.top_k:
                assert g >= 1
                event("a candidate took a free seat")
            else:
                smallest = min(row[1] for row in self.tracked)
                if not g > self.factor * smallest:
                    break
                weakest = [row for row in self.tracked if row[1] == smallest][-1]
                event("a challenger beat the weakest")
                self.tracked.remove(weakest)
                self.changes.append((self.n, "leave", weakest[0]))
            self.summary.remove(best)
            self.tracked.append([best[0], g, self.n])
            self.changes.append((self.n, "enter", best[0]))
        for row in self.tracked:
            row[1] = 0
        self.summary = []


def loop_run(params, values):
    """Slices, changes as (index, kind, slice), and the loop's tracked slices and summary after
    each prefix of the values."""
    loop = Loop(**params)
    slices, states = [], [([], [])]
    for v in values:
        slices.append(loop.step(v))
        states.append(([list(row) for row in loop.tracked], sorted(map(list, loop.summary))))
    # entry at an outcome (rule 3) or after it (a re-rank): that outcome's index either way
    changes = [(n - 1, kind, v) for n, kind, v in loop.changes]
    return slices, changes, states


@st.composite
def streams(draw, max_size=150):
    """Parameters, values from a small alphabet with random frequencies (None and OTHER among
    them, sometimes), and cuts into calls."""
    top_k = draw(st.integers(1, 4))
    params = {
        "top_k": top_k,
        "window": draw(st.integers(1, 20)),
        "hysteresis": draw(st.one_of(st.sampled_from([0.0, 0.2, 0.5, 1.0]), st.floats(0, 3))),
        "capacity": draw(st.integers(top_k, top_k + 4)),
    }
    alphabet = [None, OTHER, *"abcdefgh"[: draw(st.integers(1, 8))]]
    weights = draw(st.lists(st.integers(0, 6), min_size=len(alphabet), max_size=len(alphabet)))
    pool = [v for v, w in zip(alphabet, weights, strict=True) for _ in range(w)] or ["a"]
    n = draw(st.integers(0, max_size))
    values = draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=5)))
    return params, values, [0, *cuts, n]


@settings(max_examples=300, deadline=None)
@given(streams())
def test_the_tracker_is_the_loop_on_every_prefix(stream):
    params, values, _ = stream
    want_slices, want_changes, want_states = loop_run(params, values)
    for t in range(len(values) + 1):
        tracker = SliceTracker(**params)
        out = tracker.route(values[:t])
        assert out.slices == want_slices[:t]
        assert out.changes == [c for c in want_changes if c[0] < t]
        state = tracker.state()
        assert (state["tracked"], state["summary"]) == want_states[t]
        assert state["n"] == t
        assert tracker.until_rerank() == params["window"] - t % params["window"]


@settings(max_examples=200, deadline=None)
@given(streams())
def test_any_split_and_restart_gives_the_same_slices_changes_and_state(stream):
    params, values, cuts = stream
    whole = SliceTracker(**params)
    want = whole.route(values)
    split = SliceTracker(**params)
    restarted = SliceTracker(**params)
    slices, changes, again_slices, again_changes = [], [], [], []
    for start, end in itertools.pairwise(cuts):
        out = split.route(values[start:end])
        slices += out.slices
        changes += [(i + start, kind, v) for i, kind, v in out.changes]
        out = restarted.route(tuple(values[start:end]))
        again_slices += out.slices
        again_changes += [(i + start, kind, v) for i, kind, v in out.changes]
        restarted = SliceTracker.from_state(json.loads(json.dumps(restarted.state())))
    assert (slices, changes) == (again_slices, again_changes) == (want.slices, want.changes)
    assert split.state() == restarted.state() == whole.state()
    assert json.loads(json.dumps(whole.state())) == whole.state()
    # one outcome a call, each a re-rank boundary or not
    single = SliceTracker(**params)
    for i, v in enumerate(values):
        out = single.route([v])
        assert out.slices == want.slices[i : i + 1]
        assert out.changes == [(0, kind, s) for j, kind, s in want.changes if j == i]
    assert single.state() == whole.state()


def test_a_restored_tracker_continues_as_an_uninterrupted_one():
    rng = random.Random(7)
    names = [f"s{i}" for i in range(40)]
    weights = [1 / (i + 1) for i in range(40)]
    values = [rng.choices(names, weights)[0] if rng.random() > 0.05 else None for _ in range(5000)]
    whole = SliceTracker(top_k=5, window=300, hysteresis=0.1, capacity=8)
    want = whole.route(values)
    first = SliceTracker(top_k=5, window=300, hysteresis=0.1, capacity=8)
    head = first.route(values[:2222])
    text = json.dumps(first.state())
    restored = SliceTracker.from_state(json.loads(text))
    assert restored.state() == first.state() and restored.tracked == first.tracked
    tail = restored.route(values[2222:])
    assert head.slices + tail.slices == want.slices
    assert head.changes + [(i + 2222, k, v) for i, k, v in tail.changes] == want.changes
    assert restored.state() == whole.state()
    assert len(want.changes) > 5  # the stream did move slices in and out


def alternating(windows):
    """Windows of 200: ``big`` 100 of each, ``x`` and ``y`` 48/52 and 52/48 in turn; the first
    window starts with big and x, which take the two seats."""
    rng = random.Random(3)
    values = []
    for w in range(windows):
        x, y = (52, 48) if w % 2 else (48, 52)
        block = ["big"] * 100 + ["x"] * x + ["y"] * y
        rng.shuffle(block)
        if w == 0:
            block.remove("big")
            block.remove("x")
            block = ["big", "x", *block]
        values += block
    return values


def test_hysteresis_keeps_two_nearly_equal_slices_from_flapping():
    values = alternating(20)
    steady = SliceTracker(top_k=2, window=200, hysteresis=0.2).route(values)
    assert steady.changes == [(0, "enter", "big"), (1, "enter", "x")]
    flapping = SliceTracker(top_k=2, window=200, hysteresis=0.0).route(values)
    # the larger of x and y takes the seat from the other at the end of every window
    swaps = []
    for w in range(20):
        out, into = ("x", "y") if w % 2 == 0 else ("y", "x")
        swaps += [(200 * w + 199, "leave", out), (200 * w + 199, "enter", into)]
    assert flapping.changes == [(0, "enter", "big"), (1, "enter", "x"), *swaps]


def test_hysteresis_lets_a_clearly_larger_slice_in():
    """x holds its seat with 40 a window; y, 47 then 48 (not more than 20 % more) then 49."""

    def window(x, y):
        return ["big"] * (200 - x - y) + ["x"] * x + ["y"] * y

    values = window(40, 0) + window(40, 47) + window(40, 48) + window(40, 49) + window(40, 0)
    out = SliceTracker(top_k=2, window=200, hysteresis=0.2).route(values)
    assert out.changes == [
        (0, "enter", "big"),
        (160, "enter", "x"),
        (799, "leave", "x"),
        (799, "enter", "y"),
        (999, "leave", "y"),
        (999, "enter", "x"),
    ]


def test_a_slice_without_outcomes_for_a_window_leaves_and_the_seat_is_taken_at_once():
    tracker = SliceTracker(top_k=2, window=4, hysteresis=0.5)
    assert tracker.route(["a", "b", "a", "b"]).changes == [(0, "enter", "a"), (1, "enter", "b")]
    out = tracker.route(["a", "a", "c", "a"])  # b gone: it leaves; c, guaranteed 1, takes it
    assert out.changes == [(3, "leave", "b"), (3, "enter", "c")]
    out = tracker.route(["a", None, OTHER, "a"])  # c gone, nothing waiting: the seat stays free
    assert (out.slices, out.changes) == (["a", OTHER, OTHER, "a"], [(3, "leave", "c")])
    out = tracker.route(["d", "d"])  # rule 3: d enters at its first outcome
    assert (out.slices, out.changes, tracker.tracked) == (
        ["d", "d"],
        [(0, "enter", "d")],
        ["a", "d"],
    )


def test_a_real_value_named_like_the_overflow_is_counted_in_it():
    tracker = SliceTracker(top_k=3, window=2, hysteresis=0.0)
    out = tracker.route([OTHER, OTHER, OTHER, "a"])
    assert out == ([OTHER, OTHER, OTHER, "a"], [(3, "enter", "a")])
    assert tracker.tracked == ["a"]


def zipf(count, distinct, seed):
    rng = random.Random(seed)
    names = [f"v{i}" for i in range(distinct)]
    weights = [1 / (i + 1) for i in range(distinct)]
    return rng.choices(names, weights, k=count)


@pytest.mark.parametrize(
    "values",
    [[f"v{i}" for i in range(100_000)], zipf(100_000, 100_000, seed=1)],
    ids=["distinct", "zipf"],
)
@pytest.mark.parametrize(("top_k", "capacity"), [(20, None), (3, 5), (50, 400)])
def test_memory_stays_bounded_whatever_the_number_of_values(values, top_k, capacity):
    tracker = SliceTracker(top_k=top_k, window=5000, hysteresis=0.2, capacity=capacity)
    live = set()
    biggest = 0
    for start in range(0, len(values), 1733):
        out = tracker.route(values[start : start + 1733])
        for _, kind, v in out.changes:
            if kind == "enter":
                assert v not in live
                live.add(v)
            else:
                live.remove(v)
            assert len(live) <= top_k
        assert live == set(tracker.tracked)
        biggest = max(biggest, len(json.dumps(tracker.state())))
        assert len(tracker._heap) <= 2 * tracker.capacity + 64  # its stale entries are dropped
    state = tracker.state()
    assert len(state["tracked"]) <= top_k and len(state["summary"]) <= tracker.capacity
    # every entry is at most ["v99999", 4999, 100000] and a comma: 26 characters
    assert biggest <= 120 + 30 * (top_k + tracker.capacity)


def test_the_top_slices_of_a_zipf_stream_are_tracked():
    tracker = SliceTracker(top_k=5, window=10_000, hysteresis=0.2)
    tracker.route(zipf(50_000, 100_000, seed=2))
    assert set(tracker.tracked) == {"v0", "v1", "v2", "v3", "v4"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"top_k": 0}, "top_k=0 is not allowed; use an integer >= 1"),
        ({"top_k": 2.0}, "top_k=2.0 is not allowed; use an integer >= 1"),
        ({"top_k": True}, "top_k=True is not allowed; use an integer >= 1"),
        ({"window": 0}, "window=0 is not allowed; use an integer >= 1"),
        ({"window": "10"}, "window='10' is not allowed; use an integer >= 1"),
        ({"hysteresis": -0.1}, "hysteresis=-0.1 is not allowed; use a finite number >= 0"),
        ({"hysteresis": float("nan")}, "hysteresis=nan is not allowed; use a finite number >= 0"),
        ({"hysteresis": float("inf")}, "hysteresis=inf is not allowed; use a finite number >= 0"),
        ({"hysteresis": "0.2"}, "hysteresis='0.2' is not allowed; use a finite number >= 0"),
        ({"capacity": 2}, "capacity=2 is not allowed; use an integer >= top_k (3)"),
        ({"capacity": 3.5}, "capacity=3.5 is not allowed; use an integer >= top_k (3)"),
    ],
)
def test_arguments_are_checked_with_a_plain_message(kwargs, message):
    args = {"top_k": 3, "window": 10, "hysteresis": 0.2, **kwargs}
    with pytest.raises(ValueError) as error:
        SliceTracker(**args)
    assert str(error.value).startswith(message)


def test_the_defaults_and_attributes():
    tracker = SliceTracker(top_k=3, window=10, hysteresis=0)
    assert (tracker.top_k, tracker.window, tracker.hysteresis, tracker.capacity) == (3, 10, 0.0, 64)
    assert SliceTracker(top_k=30, window=10, hysteresis=1).capacity == 120
    assert SliceTracker(top_k=3, window=10, hysteresis=0, capacity=3).capacity == 3
    assert (tracker.n, tracker.tracked, tracker.until_rerank()) == (0, [], 10)
    assert tracker.route([]) == ([], [])
    with pytest.raises(ValueError, match="does not fit top_k=1"):
        SliceTracker.from_state(
            {**tracker.state(), "top_k": 1, "tracked": [["a", 1, 1], ["b", 1, 2]]}
        )
