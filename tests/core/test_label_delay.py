"""Label delay by class: the histogram's quantiles against a plain loop and the exact quantiles,
Kruskal–Wallis and its χ² p-value against SciPy, any batch split, state round trips."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import stats
from streameval.core.label_delay import (
    QUANTILES,
    SUBBUCKETS,
    LabelDelays,
    chi2_survival,
    kruskal_wallis,
)
from streameval.core.model import ModelEvaluator
from streameval.core.outcome import Outcome

#: delays from 0 to weeks, many alike
DELAYS = st.one_of(
    st.sampled_from([0, 1, 2, 3, 1000, 1001, 60_000, 86_400_000]),
    st.integers(0, 14 * 86_400_000),
)


def bucket_loop(delay: int) -> int:
    """The bucket by its definition: 0 below 1 ms, else j + 1 with 2^(j/8) ≤ d < 2^((j+1)/8)."""
    if delay < 1:
        return 0
    j = 0
    while 2 ** ((j + 1) / SUBBUCKETS) <= delay:
        j += 1
    return j + 1


def middle(bucket: int) -> float:
    return 0.0 if bucket == 0 else 2 ** ((bucket - 1 + 0.5) / SUBBUCKETS)


def quantiles_loop(delays: list[int]) -> dict[str, float]:
    """Nearest-rank quantiles of the bucketed delays, each its bucket's geometric midpoint."""
    if not delays:
        return {f"p{q}": math.nan for q in QUANTILES}
    buckets = sorted(bucket_loop(d) for d in delays)
    out = {}
    for q in QUANTILES:
        rank = max(1, math.ceil(q * len(buckets) / 100))
        out[f"p{q}"] = middle(buckets[rank - 1])
    return out


@st.composite
def delay_streams(draw):
    n = draw(st.integers(1, 60))
    k = draw(st.integers(1, 3))
    y = [draw(st.integers(0, k - 1)) for _ in range(n)]
    d = [draw(DELAYS) for _ in range(n)]
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=4)))
    return y, d, [0, *cuts, n]


@settings(max_examples=150, deadline=None)
@given(delay_streams())
def test_quantiles_match_the_loop_on_every_prefix_and_the_exact_ones_within_the_bucket(stream):
    y, d, _ = stream
    delays = LabelDelays()
    for t in range(len(y)):
        delays.update(np.array(y[t : t + 1]), np.array(d[t : t + 1]))
        got = delays.measures(["a", "b", "c"], alpha=0.05)
        assert {k: got[k] for k in ("p50", "p90", "p99")} == quantiles_loop(d[: t + 1])
        for i, name in enumerate("abc"):
            mine = [x for x, c in zip(d[: t + 1], y[: t + 1], strict=True) if c == i]
            if not mine:
                assert name not in got["by_class"]
                continue
            values = got["by_class"][name]
            assert values["n"] == len(mine)
            assert {k: values[k] for k in ("p50", "p90", "p99")} == quantiles_loop(mine)
            exact = sorted(mine)
            for q in QUANTILES:
                true = exact[max(1, math.ceil(q * len(exact) / 100)) - 1]
                if true >= 1:  # a bucket spans a factor 2^(1/8): its midpoint is within 4.4 %
                    assert abs(values[f"p{q}"] / true - 1) <= 2 ** (1 / 16) - 1 + 1e-12


# found by hypothesis: two classes whose mean ranks are equal (H = 0)
# fmt: off
EQUAL_MEAN_RANKS = (
    [0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 1,
     1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 0, 1, 0, 0, 1, 1],
    [3, 1218, 2, 1000, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 1000, 1000, 1117, 0, 2, 2,
     2, 1, 3, 3, 1117, 0, 2, 3, 1024, 1, 1000, 2, 1, 2, 3, 2, 3, 1000, 1000, 1944],
    [0, 40],
)
# fmt: on


@settings(max_examples=150, deadline=None)
@given(delay_streams())
@example(EQUAL_MEAN_RANKS)
def test_kruskal_wallis_is_scipys_on_the_bucketed_delays(stream):
    y, d, _ = stream
    delays = LabelDelays()
    delays.update(np.array(y), np.array(d))
    test = delays.measures(["a", "b", "c"], alpha=0.05)["classes_differ"]
    groups = [
        [middle(bucket_loop(x)) for x, c in zip(d, y, strict=True) if c == i] for i in range(3)
    ]
    groups = [g for g in groups if g]
    values = {v for g in groups for v in g}
    if len(groups) < 2 or len(values) < 2:  # SciPy refuses: nothing to rank
        assert (test["h"], test["p_value"], test["significant"]) == (0.0, 1.0, False)
        return
    want = stats.kruskal(*groups)
    assert test["df"] == len(groups) - 1
    assert test["h"] == pytest.approx(want.statistic, rel=1e-9, abs=1e-12)
    if want.statistic < 1e-9:
        # equal mean ranks: H is 0 but for either side's rounding, and near 0 the χ² survival
        # moves as √H (the example: H = 1.5e-14 from SciPy, 0 here; p 0.99999990 and 1.0)
        assert test["p_value"] == pytest.approx(want.pvalue, abs=1e-6)
    else:
        assert test["p_value"] == pytest.approx(want.pvalue, rel=1e-9, abs=1e-15)
    assert test["significant"] == (test["p_value"] < 0.05)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 60), min_size=40, max_size=40), min_size=2, max_size=4),
    st.randoms(use_true_random=False),
)
def test_kruskal_wallis_gives_the_same_bits_for_any_order_of_the_classes(rows, random):
    """A model numbers its classes in the order its outcomes name them, its
    ``positive_label`` first: a model given one at a restart numbers them otherwise than a
    replay of the same outcomes without it. Label maturity, which no such setting changes,
    must not move by a bit (tests/integration/test_state.py once saw H differ from replay's
    in its last digits)."""
    counts = np.array(rows, dtype=np.int64)
    order = list(range(len(rows)))
    random.shuffle(order)
    assert kruskal_wallis(counts[order]) == kruskal_wallis(counts)


@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 10, 31, 100])
def test_the_chi2_survival_is_scipys(df):
    for x in [0.001, 0.5, 1.0, df * 0.5, float(df), df + 3 * math.sqrt(2 * df), 4.0 * df + 20]:
        assert chi2_survival(x, df) == pytest.approx(stats.chi2.sf(x, df), rel=1e-9, abs=1e-300)


def test_classes_with_very_different_delays_are_flagged():
    rng = np.random.default_rng(3)
    fast = rng.exponential(3_600_000, 400)  # an hour
    slow = rng.exponential(3 * 86_400_000, 100)  # three days
    delays = LabelDelays()
    delays.update(np.r_[np.zeros(400, int), np.ones(100, int)], np.r_[fast, slow].astype(int))
    out = delays.measures(["ok", "fraud"], alpha=0.05)
    assert out["classes_differ"]["significant"] and out["classes_differ"]["p_value"] < 1e-20
    assert out["by_class"]["fraud"]["p50"] > 20 * out["by_class"]["ok"]["p50"]
    same = LabelDelays()
    same.update(rng.integers(0, 2, 500), rng.exponential(3_600_000, 500).astype(int))
    assert same.measures(["ok", "fraud"], alpha=0.05)["classes_differ"]["p_value"] > 0.001


@settings(max_examples=60, deadline=None)
@given(delay_streams())
def test_the_model_gives_the_same_bits_for_any_split_and_restart(stream):
    y, d, cuts = stream
    outcomes = [
        Outcome("m", f"i{i}", "abc"[c], (i,), ("a",), i, i + delay)
        for i, (c, delay) in enumerate(zip(y, d, strict=True))
    ]
    whole = ModelEvaluator("m", estimators=["cumulative"], detectors=[])
    whole.update(outcomes)
    restarted = ModelEvaluator("m", estimators=["cumulative"], detectors=[])
    for start, end in itertools.pairwise(cuts):
        restarted.update(outcomes[start:end])
        restarted = ModelEvaluator.from_state(json.loads(json.dumps(restarted.state())))
    assert repr(restarted.measures()["latency_ms"]) == repr(whole.measures()["latency_ms"])


def test_a_state_from_before_the_histogram_counts_the_delays_from_its_restore():
    model = ModelEvaluator("m", estimators=["cumulative"], detectors=[])
    model.update([Outcome("m", "i0", "a", (0,), ("a",), 0, 5000)])
    state = model.state()
    del state["delays"]
    model = ModelEvaluator.from_state(state)
    assert model.measures()["latency_ms"]["n"] == 0
    model.update([Outcome("m", "i1", "a", (1,), ("a",), 1, 2001)])
    latency = model.measures()["latency_ms"]
    assert (latency["n"], latency["max"], latency["mean"]) == (1, 5000, 3500.0)
    assert abs(latency["p50"] / 2000 - 1) < 0.045


def test_quantiles_not_counted_yet_are_null_in_the_record():
    """A model restored from a state without the histogram publishes before its next outcome
    (replay's final records): its quantiles are undefined, null as on the wire."""
    import msgspec
    from streameval.engine import _latency
    from streameval.records import Latency

    model = ModelEvaluator("m", estimators=["cumulative"], detectors=[])
    model.update([Outcome("m", "i0", "a", (0,), ("a",), 0, 5000)])
    state = model.state()
    del state["delays"]
    latency = _latency(ModelEvaluator.from_state(state).measures()["latency_ms"])
    assert (latency.n, latency.p50, latency.by_class, latency.mean) == (0, None, {}, 5000.0)
    assert msgspec.convert(msgspec.to_builtins(latency), Latency) == latency
