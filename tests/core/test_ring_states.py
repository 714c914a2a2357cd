"""Rings written as they lie (``Ring.dump``): exact round trips, a push changes only the bytes
of its slots, and states written before — each window's outcomes oldest first — still load
to the numbers the code that wrote them went on to compute."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streameval.core import forgetting
from streameval.core.model import ModelEvaluator
from streameval.core.outcome import Outcome
from streameval.core.pair import PairEvaluator
from streameval.core.roc_auc import HeldAUC

ESTIMATORS = ["cumulative", "window:50", "fading:0.8"]


def outcomes(model: str, lo: int, hi: int, seed: int) -> list[Outcome]:
    """Binary outcomes with scores on most predictions and some re-predicted: every window
    of the model (labels, Ψ bins, scores, the window AUC and the fading one) fills."""
    rng = np.random.default_rng(seed)
    result = []
    for i in range(hi):
        y, p, again, scored = rng.integers(0, 2), rng.random(), rng.random(), rng.random()
        if i < lo:
            continue
        label = str(int(p > 0.5) if again > 0.2 else 1 - int(p > 0.5))
        score = ("0", round(1 - p, 3), "1", round(p, 3)) if scored > 0.1 else None
        if again < 0.3:  # predicted twice
            times, labels, scores = (i, i + 2), (str(1 - int(label)), label), (None, score)
        else:
            times, labels, scores = (i,), (label,), (score,)
        if not any(scores):
            scores = ()
        result.append(Outcome(model, f"i{i}", str(y), times, labels, i, i + 4, i + 4, scores))
    return result


def test_a_ring_dump_is_its_buffer_and_loads_exactly():
    ring = forgetting.Ring(5, n=np.int64, x=np.float64, ok=bool, p=(np.float64, (2,)))
    for m in (3, 4, 9):  # filling, full, more than it holds
        rng = np.random.default_rng(m)
        ring.push(
            n=rng.integers(-300, 300, m),
            x=np.append(rng.random(m - 1), np.nan),
            ok=rng.random(m) < 0.5,
            p=rng.random((m, 2)),
        )
        again = forgetting.Ring(5, n=np.int64, x=np.float64, ok=bool, p=(np.float64, (2,)))
        again.load(json.loads(json.dumps(ring.dump())))
        for name, column in ring.held().items():
            np.testing.assert_array_equal(again.held()[name], column)
        assert again.dump() == ring.dump() and again.seen == ring.seen


@settings(max_examples=40)
@given(
    values=st.lists(
        st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=True)), min_size=1
    )
)
def test_a_packed_column_holds_every_value_bit_for_bit(values):
    integers = all(isinstance(v, int) for v in values)
    column = np.array(values, dtype=np.int64 if integers else np.float64)
    back = forgetting.unpack_column(forgetting.pack_column(column))
    assert back.dtype == column.dtype
    assert back.tobytes() == column.tobytes()


@pytest.mark.parametrize("size", [1000, 1001, 1002])
def test_a_push_changes_only_the_characters_over_its_slots(size):
    ring = forgetting.Ring(size, x=np.float64)
    rng = np.random.default_rng(size)
    ring.push(x=rng.random(size + 123))
    before = ring.dump()["x"]
    start = ring.seen % size
    ring.push(x=rng.random(10))
    after = ring.dump()["x"]
    assert len(before) == len(after)
    differ = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    prefix = len("f8:")
    # 10 slots of 8 bytes from `start`: base64 turns byte b into character ~4b/3
    assert prefix + (start * 8) // 3 * 4 <= differ[0]
    assert differ[-1] < prefix + ((start + 10) * 8 + 2) // 3 * 4


def _written_before() -> dict:
    return json.loads((Path(__file__).parent / "data" / "ring_states_v1.json").read_text())


def _same(a, b) -> None:
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _as_printed(a, b, path: str = "") -> None:
    """``a`` is what the fixture's code printed on another machine: the same but for floats,
    which may differ in their last bits (numpy's reductions take paths of their own on each
    CPU); the numbers of one machine are compared bit for bit (:func:`_same`)."""
    if isinstance(b, float) and isinstance(a, float):
        assert a == b or (a != a and b != b) or abs(a - b) <= 1e-12 * max(abs(a), abs(b)), path
    elif isinstance(b, dict):
        assert isinstance(a, dict) and a.keys() == b.keys(), path
        for key in b:
            _as_printed(a[key], b[key], f"{path}/{key}")
    elif isinstance(b, list):
        assert isinstance(a, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _as_printed(x, y, f"{path}/{i}")
    else:
        assert a == b, path


def _keys(value, found: set) -> set:
    if isinstance(value, dict):
        found.update(value)
        for item in value.values():
            _keys(item, found)
    elif isinstance(value, list):
        for item in value[:3]:
            _keys(item, found)
    return found


def test_a_model_written_oldest_first_loads_to_the_numbers_its_code_went_on_to():
    """The fixture was written by the code before rings were dumped (commit 97858d7): the
    state of a model after 300 outcomes, its measures then and after 200 more. Three fading
    AUCs in its measures differ from what 97858d7 printed in the last bit (at most 3.4e-16):
    the AUC's sums run left to right since the compiled loops (numpy's ``sum`` added
    pairwise). On some CPUs a Ψ measure differs in its last bit too: the fixture's numbers are
    compared to 1e-12, the restored model's with a never-restored one's bit for bit."""
    case = _written_before()["model"]
    # the old layout of each window: the labels', the scores', the AUC's and the Ψ bins'
    assert {"true", "held", "y", "ring"} <= _keys(case["state"], set())
    model = ModelEvaluator.from_state(case["state"])
    _as_printed(model.measures(), case["measures"])
    fresh = ModelEvaluator("m", estimators=ESTIMATORS, positive_label="1")
    fresh.update(outcomes("m", 0, 300, seed=1))
    _same(model.measures(), fresh.measures())
    _same(model.state(), fresh.state())  # every ring as a never-restored model's lies
    model.update(outcomes("m", 300, 500, seed=1))
    _as_printed(model.measures(), case["measures_after"])
    fresh = ModelEvaluator("m", estimators=ESTIMATORS, positive_label="1")
    fresh.update(outcomes("m", 0, 500, seed=1))
    _same(model.measures(), fresh.measures())
    _same(model.state(), fresh.state())  # in the new layout, as if never restored
    again = ModelEvaluator.from_state(json.loads(json.dumps(model.state())))
    _same(again.measures(), model.measures())


def test_a_pair_written_oldest_first_loads_to_the_numbers_its_code_went_on_to():
    case = _written_before()["pair"]
    assert {"losses_a", "held"} <= _keys(case["state"], set())  # tallies', mean's windows
    pair = PairEvaluator.from_state(case["state"])
    _as_printed(pair.measures(), case["measures"])
    fresh = PairEvaluator("a", "b", estimators=ESTIMATORS)
    fresh.update(outcomes("a", 0, 300, seed=2) + outcomes("b", 0, 300, seed=3))
    _same(pair.measures(), fresh.measures())
    _same(pair.state(), fresh.state())
    pair.update(outcomes("a", 300, 500, seed=2) + outcomes("b", 300, 500, seed=3))
    _as_printed(pair.measures(), case["measures_after"])
    fresh = PairEvaluator("a", "b", estimators=ESTIMATORS)
    fresh.update(outcomes("a", 0, 500, seed=2) + outcomes("b", 0, 500, seed=3))
    _same(pair.measures(), fresh.measures())
    _same(pair.state(), fresh.state())


def test_an_integer_column_keeps_its_width_whatever_the_split():
    """A column is packed as wide as the widest value ever pushed, also one a long batch
    pushed past the ring: its length does not follow what it holds, and any split (and a
    restore) gives the same dump."""
    values = np.array([300, *range(11)])  # 300 never enters a ring of 5 pushed at once
    whole = forgetting.Ring(5, label=np.int64)
    whole.push(label=values)
    pieces = forgetting.Ring(5, label=np.int64)
    for lo, hi in ((0, 1), (1, 7), (7, 12)):
        again = forgetting.Ring(5, label=np.int64)
        again.load(json.loads(json.dumps(pieces.dump())))
        pieces = again
        pieces.push(label=values[lo:hi])
    assert whole.dump() == pieces.dump()
    assert whole.dump()["label"].startswith("i2:")  # 300 was pushed: two bytes for good
    before = whole.dump()["label"]
    whole.push(label=np.array([1, 2, 3]))
    assert len(whole.dump()["label"]) == len(before)


def test_a_class_tracked_later_keeps_the_widths_of_what_left():
    """The AUC's ring is rebuilt when a class is first tracked; the class codes that already
    left it still set the width of its column, as in a run that tracked the class from the
    start, so both write the same bytes."""
    late, early = HeldAUC(5, None), HeldAUC(5, None)
    late.track([0])
    early.track([0, 1])
    proba = np.zeros((10, 201))
    proba[:, 0] = 0.25
    y = np.array([200, *([0] * 9)])  # class 200 enters, then leaves the window of 5
    for auc in (late, early):
        auc.update(y[:6], proba[:6])
    late.track([1])
    for auc in (late, early):
        auc.update(y[6:], proba[6:])
    assert late.state() == early.state()
    assert late.state()["ring"]["y"].startswith("i2:")
