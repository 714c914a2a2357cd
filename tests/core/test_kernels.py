"""The compiled loops (``pipeline/kernels``, Rust) give the numpy references' bits.

``make test`` builds and installs the extension, so these tests fail, rather than skip, when
it is missing: a build that silently fell back to numpy would otherwise pass unnoticed.
"""

from __future__ import annotations

import itertools
import json
import math
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streameval.core import kernels as loops
from streameval.core.drift import make_detector
from streameval.core.fading_mean import FadingMean
from streameval.core.page_hinkley import PageHinkley
from streameval.core.roc_auc import (
    CountedAUC,
    HeldAUC,
    Ordered,
    auc_horizon,
    held_mann_whitney,
    mann_whitney,
)


def twice(fn):
    """fn() with the compiled loops and with numpy."""
    assert loops.use(True), (
        "the compiled kernels are not installed: `make test` builds them from "
        "pipeline/kernels (it needs Rust's cargo; see the README)"
    )
    compiled = fn()
    loops.use(False)
    reference = fn()
    loops.use(True)
    return compiled, reference


def same_bits(a, b) -> bool:
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or a.hex() == b.hex()
    return all(same_bits(x, y) for x, y in zip(a, b, strict=True))


# scores as models send them: few distinct values (ties), or many
scores = st.one_of(
    st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0]),
    st.floats(0.0, 1.0, allow_nan=False),
)
# and what no validated score is, for the loops that order any float
wild = scores | st.sampled_from([-0.0, math.nan, -math.nan, math.inf, -math.inf, 5e-324])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(scores, st.floats(-50, 50), st.floats(-50, 50)), max_size=60))
def test_mann_whitney_gives_the_references_bits(rows):
    rows.sort(key=lambda r: r[0])  # weights may be negative: only the order of values counts
    values, pos, neg = (np.array([r[i] for r in rows], dtype=np.float64) for i in range(3))
    compiled, reference = twice(lambda: mann_whitney(values, pos, neg))
    assert same_bits(compiled, reference)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(wild, st.booleans()), min_size=0, max_size=80),
    st.sampled_from([None, 0.5, 0.9, 0.999]),
)
def test_held_mann_whitney_gives_the_references_bits(rows, factor):
    n = len(rows)
    order = np.argsort(np.array([r[0] for r in rows], dtype=np.float64), kind="stable")
    values = np.array([rows[i][0] for i in order], dtype=np.float64)
    codes = np.array([2 * i + rows[i][1] for i in order], dtype=np.int64)
    decay = None if factor is None else factor ** np.arange(max(n, 1))
    compiled, reference = twice(lambda: held_mann_whitney(values, codes, decay, n - 1))
    assert same_bits(compiled, reference)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(wild, max_size=40), min_size=1, max_size=8),
    st.integers(1, 60),
)
def test_a_held_order_moves_as_the_reference_moves_it(batches, size):
    def run():
        ordered, seen, states = Ordered(), 0, []
        for batch in batches:
            values = np.array(batch, dtype=np.float64)
            index = np.arange(seen, seen + values.size, dtype=np.int64)
            seen += values.size
            ordered.advance(max(0, seen - size), values, index, index % 3 == 0)
            states.append((ordered.values.tobytes(), ordered.codes.tobytes()))
        return states

    compiled, reference = twice(run)
    assert compiled == reference


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.sampled_from([0.0, -0.0, 0.3, 0.5, 1.0]) | scores, st.booleans())),
        min_size=1,
        max_size=6,
    ),
    st.integers(2, 12),
)
def test_counted_auc_counts_as_the_reference_counts(batches, max_values):
    def run():
        counted, out = CountedAUC(max_values), []
        counted.track([1])
        for batch in batches:
            y = np.array([int(positive) for _, positive in batch], dtype=np.int64)
            p1 = np.array([value for value, _ in batch], dtype=np.float64)
            counted.update(y, np.column_stack([1.0 - p1, p1]))
            out.append((counted.auc(1), json.dumps(counted.state())))
        return out

    compiled, reference = twice(run)
    assert [text for _, text in compiled] == [text for _, text in reference]
    assert same_bits([auc for auc, _ in compiled], [auc for auc, _ in reference])


@pytest.mark.parametrize("factor", [None, 0.99])
@pytest.mark.parametrize("decimals", [2, None])
def test_held_auc_reads_the_same_with_either_loop(factor, decimals):
    rng = np.random.default_rng(7)
    y = rng.integers(0, 3, 5_000)
    p = rng.dirichlet(np.ones(3), 5_000)
    if decimals is not None:
        p = np.round(p, decimals)

    def run():
        held = HeldAUC(300 if factor is None else auc_horizon(factor), factor)
        held.track([0, 2])
        out = []
        for lo in range(0, y.size, 137):
            held.update(y[lo : lo + 137], p[lo : lo + 137])
            out += [held.auc(0), held.auc(None)]
        return out

    compiled, reference = twice(run)
    assert same_bits(compiled, reference)


def test_the_compiled_loops_refuse_what_they_cannot_read():
    import streameval_kernels as kernels

    values, codes = np.zeros(4), np.zeros(4, dtype=np.int64)
    with pytest.raises(ValueError, match="contiguous"):
        kernels.mann_whitney(np.zeros(8)[::2], values, values)
    with pytest.raises(ValueError, match="same length"):
        kernels.held_mann_whitney(values, codes[:3], None, 0)
    one, one_code = np.zeros(1), np.zeros(1, dtype=np.int64)
    with pytest.raises(ValueError, match="no room"):
        kernels.ordered_advance(values, codes, 4, 0, one, one_code, np.zeros(4), codes.copy())
    for counted in (True, False):  # NaN counts nowhere, on either path
        loops.use(counted)
        with pytest.raises(ValueError, match="NaN"):
            auc = CountedAUC(8)
            auc.track([1])
            auc.update(np.array([1]), np.array([[np.nan, np.nan]]))
    loops.use(True)
    for compiled in (True, False):  # an age the decay table does not hold, on either path
        loops.use(compiled)
        with pytest.raises(ValueError, match="decay table"):
            held_mann_whitney(values, codes + 20, np.ones(4), 3)
    loops.use(True)
    with pytest.raises(ValueError, match="must not be the input"):
        kernels.ordered_advance(values, codes, 3, 0, one, one_code, values, codes)


# -- the drift detectors: the Page-Hinkley scan and the fading mean it watches --------------

# a test's settings: small thresholds so that alarms and restarts fire within a few values
tests = st.fixed_dictionaries(
    {
        "delta": st.sampled_from([0.0, 0.005, 0.1]),
        "threshold": st.sampled_from([0.5, 2.0, 10.0]),
        "min_instances": st.sampled_from([1, 5, 30]),
        "restart_threshold": st.sampled_from([0.0, 0.3, 3.0]),
        "standardize": st.booleans(),
    }
)
signal = st.lists(
    st.one_of(st.sampled_from([0.0, 1.0]), st.floats(-3, 3, allow_nan=False)), max_size=400
)


def pieces(values, cuts):
    """``values`` cut at the sorted positions ``cuts``."""
    bounds = [0, *sorted(c % (len(values) + 1) for c in cuts), len(values)]
    return [values[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=300, deadline=None)
@given(tests, signal, st.lists(st.integers(0, 400), max_size=6), st.booleans())
def test_the_page_hinkley_scan_gives_the_references_bits(spec, values, cuts, restore):
    def run():
        test, out = PageHinkley(**spec), []
        for piece in pieces(values, cuts):
            if restore:  # through a checkpoint between batches
                test = PageHinkley.from_state(json.loads(json.dumps(test.state())))
            out.append([tuple(change) for change in test.detect(np.array(piece, dtype=float))])
            out.append(json.dumps(test.state()))
        return out

    compiled, reference = twice(run)
    assert compiled == reference  # the floats' reprs, in the state's text and the changes
    assert same_bits(
        [c[1] for batch in compiled[::2] for c in batch],
        [c[1] for batch in reference[::2] for c in batch],
    )


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([0.3, 0.9, 0.999]),  # blocks of 39, 393 and 1024 outcomes
    st.lists(st.sampled_from([0.0, 1.0]), max_size=2_500),
    st.lists(st.integers(0, 2_500), max_size=5),
)
def test_the_fading_mean_gives_the_references_bits(factor, losses, cuts):
    def run():
        mean, out = FadingMean(factor), []
        for piece in pieces(losses, cuts):
            out += mean.advance(np.array(piece, dtype=float)).tolist()
            out.append(json.dumps(mean.state()))
            mean = FadingMean.from_state(factor, json.loads(out[-1]))  # through a checkpoint
        return out

    compiled, reference = twice(run)
    assert compiled == reference


@pytest.mark.parametrize(
    "spec",
    [
        {"type": "page_hinkley", "threshold": 15.0, "standardize": False},
        {"type": "page_hinkley", "threshold": 5.0, "restart_threshold": 2.0, "standardize": True},
        {"type": "ratio_page_hinkley", "threshold": 5.0},
    ],
)
def test_a_detectors_alarms_are_the_same_with_either_loop(spec):
    rng = np.random.default_rng(11)
    # the error rate moves between 0.1 and 0.6 every 3 000 outcomes
    rate = np.repeat(rng.choice([0.1, 0.6], 10), 3_000)
    errors = (rng.random(rate.size) < rate).astype(float)

    def run():
        detector, alarms = make_detector(spec), []
        for lo in range(0, errors.size, 97):
            alarms += detector.update(errors[lo : lo + 97])
        return [repr(alarm) for alarm in alarms], json.dumps(detector.state())

    compiled, reference = twice(run)
    assert len(compiled[0]) >= 2  # the test drives the alarm's path, not only the scan's
    assert compiled == reference


def test_the_compiled_scan_refuses_what_it_cannot_read():
    import streameval_kernels as kernels

    state = (0, 0.0, 0.0, math.inf, 0, 0.0, 0.0, -math.inf)
    with pytest.raises(ValueError, match="contiguous"):
        kernels.page_hinkley_scan(np.zeros(8)[::2], state, 0.1, 1.0, 1, 0.0, False, 0.01)
    with pytest.raises(ValueError, match="block"):
        kernels.fading_mean_advance(np.zeros(2), np.ones(1), 0.5, 0, (0.0, 0.0), (0.0, 0.0))


def test_an_extension_from_an_older_checkout_is_not_used(monkeypatch):
    """One without a loop this version calls would fail on its first call: numpy runs, and
    the worker's warning at start says why."""
    import types

    old = types.ModuleType("streameval_kernels")
    old.mann_whitney = old.held_mann_whitney = lambda *args: 0.0
    monkeypatch.setitem(sys.modules, "streameval_kernels", old)
    extension, problem = loops._load()
    assert extension is None
    assert "older checkout" in problem and "page_hinkley_scan" in problem
    monkeypatch.setitem(sys.modules, "streameval_kernels", None)  # not installed
    assert loops._load() == (None, "not installed")
