"""Model comparison: E6, E7, every prefix against a slow loop, batch = one-by-one, state, errors."""

import itertools
import json
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streameval.core.compare import (
    COMPARISON_MEASURES,
    MCNEMAR_THRESHOLD,
    ModelComparison,
    leader,
    mcnemar,
    q_statistic,
)

SPECS = [
    "cumulative",
    "window:1",
    "window:3",
    "window:10",
    "fading:0.5",
    "fading:0.9",
    "fading:1.0",
]
NAN = math.nan
Z95 = 1.959963984540054  # the two-sided 95 % normal quantile, as tables print it

ZERO_ONE = st.integers(0, 1).map(float)
REAL = st.one_of(
    st.sampled_from([0.0, -0.0, 1.0]),
    # no subnormal losses: fading sums scale a loss by up to 1e20 and back inside a block,
    # which keeps full precision only for normal floats
    st.floats(0.0, 1e3, allow_subnormal=False),
    st.sampled_from([1e-250, 1e-200, 0.1, 1e100]),
)


@st.composite
def loss_streams(draw, real: bool | None = None):
    """Aligned losses of A and B and cut points splitting them into batches."""
    if real is None:
        real = draw(st.booleans())
    n = draw(st.integers(0, 30))
    element = REAL if real else ZERO_ONE
    loss_a = draw(st.lists(element, min_size=n, max_size=n))
    loss_b = draw(st.lists(element, min_size=n, max_size=n))
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=6)))
    return np.array(loss_a, dtype=float), np.array(loss_b, dtype=float), [0, *cuts, n]


def _log_ratio(x: Fraction, y: Fraction) -> float:
    """ln(x/y) of two positive fractions of any size (math.log takes big integers)."""
    return (
        math.log(x.numerator)
        - math.log(x.denominator)
        - math.log(y.numerator)
        + math.log(y.denominator)
    )


def reference(loss_a, loss_b, spec: str) -> dict[str, float]:
    """The measures after all of ``loss_a``/``loss_b``, straight from the definitions."""
    kind, _, arg = spec.partition(":")
    pairs = list(zip(loss_a.tolist(), loss_b.tolist(), strict=True))
    if kind == "fading":
        a = float(arg)
        sum_a = sum_b = n01 = n10 = 0.0
        for la, lb in pairs:
            sum_a, sum_b = la + a * sum_a, lb + a * sum_b
            n01 = a * n01 + (1.0 if la > 0 and lb == 0 else 0.0)
            n10 = a * n10 + (1.0 if lb > 0 and la == 0 else 0.0)
        q = NAN
        if sum_a > 0 and sum_b > 0:
            ratio = sum_a / sum_b
            q = math.log(ratio) if 0 < ratio < math.inf else math.log(sum_a) - math.log(sum_b)
        n = len(pairs)
        weights = np.array([a ** (n - 1 - j) for j in range(n)])
    else:
        if kind == "window":
            pairs = pairs[max(0, len(pairs) - int(arg)) :]
        weights = np.ones(len(pairs))
        exact_a = sum((Fraction(la) for la, _ in pairs), Fraction(0))
        exact_b = sum((Fraction(lb) for _, lb in pairs), Fraction(0))
        q = NAN
        if exact_a > 0 and exact_b > 0:
            ratio = exact_a / exact_b
            q = math.log(ratio) if 1e-300 < ratio < 1e300 else _log_ratio(exact_a, exact_b)
        n01 = sum(1 for la, lb in pairs if la > 0 and lb == 0)
        n10 = sum(1 for la, lb in pairs if lb > 0 and la == 0)
        n = len(pairs)
    d = n01 - n10
    m = 0.0 if n01 + n10 == 0 else math.copysign(d**2 / (n01 + n10), d)
    # the accuracy difference B − A: the weighted mean of the per-pair differences
    # 1[B right] − 1[A right], and its Wald interval from their weighted variance over Kish's
    # effective number of pairs — the paired-proportions interval (Agresti 2002, §10.1),
    # derived here another way
    gain = np.array([float(la > 0) - float(lb > 0) for la, lb in pairs])
    size = weights.sum() ** 2 / (weights**2).sum() if len(pairs) else 0.0
    if len(pairs):
        mean = float(np.average(gain, weights=weights))
        variance = float(np.average((gain - mean) ** 2, weights=weights))
        half = Z95 * math.sqrt(variance / size)
        low, high = max(-1.0, mean - half), min(1.0, mean + half)
    else:
        mean = low = high = NAN
    return {
        "n": n,
        "q_statistic": q,
        "mcnemar": m,
        "n01": float(n01),
        "n10": float(n10),
        "significant": float(abs(m) > 6.635),
        "n_kish": size,
        "accuracy_difference": mean,
        "accuracy_difference_lo": low,
        "accuracy_difference_hi": high,
    }


#: computed another way than the module does: equal to rounding, never bit for bit
_DERIVED = {"n_kish", "accuracy_difference", "accuracy_difference_lo", "accuracy_difference_hi"}


def _assert_close(got: dict, want: dict, exact: bool, context: str = "") -> None:
    assert list(got) == list(COMPARISON_MEASURES), context
    for key in COMPARISON_MEASURES:
        x, y = got[key], want[key]
        if isinstance(y, float) and math.isnan(y):
            assert math.isnan(x), f"{key} {context}"
        elif exact and key not in _DERIVED:
            assert x == y, f"{key} {context}: {x!r} != {y!r}"
        else:
            tol = 1e-9 if key in _DERIVED else 1e-12
            assert math.isclose(x, y, rel_tol=tol, abs_tol=tol), f"{key} {context}: {x} {y}"


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=40)
@given(stream=loss_streams(real=False))
def test_zero_one_losses_match_a_slow_loop_on_every_prefix(spec, stream):
    loss_a, loss_b, _ = stream
    comparison = ModelComparison(estimators=[spec])
    exact = not spec.startswith("fading")
    for i in range(loss_a.size):
        comparison.update(loss_a[i : i + 1], loss_b[i : i + 1])
        want = reference(loss_a[: i + 1], loss_b[: i + 1], spec)
        _assert_close(comparison.measures()[spec], want, exact, f"{spec} after {i + 1}")


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=30)
@given(stream=loss_streams(real=True))
def test_real_losses_match_a_slow_loop_on_every_prefix(spec, stream):
    loss_a, loss_b, _ = stream
    comparison = ModelComparison(estimators=[spec])
    for i in range(loss_a.size):
        comparison.update(loss_a[i : i + 1], loss_b[i : i + 1])
        want = reference(loss_a[: i + 1], loss_b[: i + 1], spec)
        _assert_close(comparison.measures()[spec], want, False, f"{spec} after {i + 1}")


def _same(a: dict, b: dict, exact: bool) -> None:
    for key in a:
        x, y = a[key], b[key]
        if math.isnan(x):
            assert math.isnan(y), key
        elif exact:
            assert x == y, key
        else:
            assert math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-300), key


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=50)
@given(stream=loss_streams())
def test_any_batch_split_equals_one_by_one(spec, stream):
    loss_a, loss_b, cuts = stream
    batched, single = ModelComparison([spec]), ModelComparison([spec])
    for lo, hi in itertools.pairwise(cuts):
        batched.update(loss_a[lo:hi], loss_b[lo:hi])
    for i in range(loss_a.size):
        single.update(loss_a[i : i + 1], loss_b[i : i + 1])
    exact = not spec.startswith("fading")
    if exact:  # real-valued losses too: the sums are exact binary fractions
        assert batched.state() == single.state()
    _same(batched.measures()[spec], single.measures()[spec], exact)


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=30)
@given(stream=loss_streams())
def test_state_round_trips_exactly_through_json(spec, stream):
    loss_a, loss_b, cuts = stream
    comparison = ModelComparison([spec, "window:2"] if spec != "window:2" else [spec])
    half = cuts[len(cuts) // 2]
    comparison.update(loss_a[:half], loss_b[:half])
    restored = ModelComparison.from_state(json.loads(json.dumps(comparison.state())))
    assert restored.state() == comparison.state()
    assert restored.names == comparison.names
    for name in comparison.names:
        _same(restored.measures()[name], comparison.measures()[name], exact=True)
    # and it continues exactly like the original
    comparison.update(loss_a[half:], loss_b[half:])
    restored.update(loss_a[half:], loss_b[half:])
    assert restored.state() == comparison.state()
    for name in comparison.names:
        _same(restored.measures()[name], comparison.measures()[name], exact=True)


def test_e6_q_statistic_on_every_prefix():
    """E6 (docs/measures.md): L(A) = [1,0,1,1,0], L(B) = [0,0,1,0,0]."""
    expected = {
        "cumulative": [NAN, NAN, math.log(2), math.log(3), math.log(3)],
        "fading:0.5": [NAN, NAN, 0.223144, 1.178655, math.log(0.8125 / 0.25)],
    }
    comparison = ModelComparison(estimators=list(expected))
    for i, (a, b) in enumerate(zip([1, 0, 1, 1, 0], [0, 0, 1, 0, 0], strict=True)):
        comparison.update([a], [b])
        for name, values in expected.items():
            got = comparison.measures()[name]["q_statistic"]
            if math.isnan(values[i]):
                assert math.isnan(got), (name, i)
            else:
                assert got == pytest.approx(values[i], abs=5e-7), (name, i)
    assert comparison.measures()["cumulative"]["q_statistic"] == math.log(3)


def test_e7_signed_mcnemar():
    """E7 (docs/measures.md): error indicators A = [1,1,0,1,0,1,1,0], B = [0,1,0,0,0,0,1,1]."""
    comparison = ModelComparison(estimators=["cumulative", "window:4", "fading:0.9"])
    comparison.update(np.array([1, 1, 0, 1, 0, 1, 1, 0]), np.array([0, 1, 0, 0, 0, 0, 1, 1]))
    m = comparison.measures()
    assert (m["cumulative"]["n01"], m["cumulative"]["n10"]) == (3.0, 1.0)
    assert m["cumulative"]["mcnemar"] == 1.0
    assert m["cumulative"]["significant"] == 0.0
    assert (m["window:4"]["n01"], m["window:4"]["n10"], m["window:4"]["mcnemar"]) == (1, 1, 0)
    assert m["window:4"]["n"] == 4
    assert m["fading:0.9"]["n01"] == pytest.approx(0.9**7 + 0.9**4 + 0.9**2)
    assert m["fading:0.9"]["n01"] == pytest.approx(1.944397, abs=5e-7)
    assert m["fading:0.9"]["n10"] == pytest.approx(1.0)
    assert m["fading:0.9"]["mcnemar"] == pytest.approx(0.302909, abs=5e-7)
    assert mcnemar(0, 5) == -5.0
    assert leader(m["cumulative"], "A", "B") == "B"
    assert leader(m["window:4"], "A", "B") is None


def test_significance_threshold_and_leader():
    comparison = ModelComparison(estimators=["cumulative"])
    comparison.update(np.zeros(7), np.ones(7))  # B wrong 7 times where A is right: M = −7
    m = comparison.measures()["cumulative"]
    assert m["mcnemar"] == -7.0 and m["significant"] == 1.0
    assert m["q_statistic"] != m["q_statistic"]  # S_A = 0: Q undefined
    assert leader(m, "A", "B") == "A"
    assert leader(m, "A", "B", significant_only=True) == "A"
    assert mcnemar(6.635, 0) == MCNEMAR_THRESHOLD  # exactly at the threshold: not significant
    assert leader({"mcnemar": MCNEMAR_THRESHOLD}, significant_only=True) is None
    assert leader({"mcnemar": NAN}) is None
    assert leader({"mcnemar": 0.5}) == "B"


def test_swapping_the_models_negates_q_and_m():
    rng = np.random.default_rng(3)
    loss_a, loss_b = rng.integers(0, 2, 500), rng.integers(0, 2, 500)
    forward, backward = ModelComparison(), ModelComparison()
    forward.update(loss_a, loss_b)
    backward.update(loss_b, loss_a)
    for name in forward.names:
        f, b = forward.measures()[name], backward.measures()[name]
        assert f["q_statistic"] == pytest.approx(-b["q_statistic"])
        assert f["mcnemar"] == -b["mcnemar"]
        assert (f["n01"], f["n10"]) == (b["n10"], b["n01"])


def test_windowed_sums_do_not_drift_when_a_huge_loss_leaves():
    comparison = ModelComparison(estimators=["window:2", "cumulative"])
    comparison.update([1e20, 0.1], [0.3, 0.1])
    comparison.update([0.2], [0.1])
    comparison.update([0.1], [0.2])  # the window holds [0.2, 0.1] and [0.1, 0.2]
    assert comparison.measures()["window:2"]["q_statistic"] == 0.0
    assert q_statistic(0.2 + 0.1, 0.1 + 0.2) == 0.0  # (float sums would agree here too)


def test_q_statistic_and_mcnemar_helpers():
    assert q_statistic(3, 1) == math.log(3)
    assert q_statistic(1, 3) == -math.log(3)
    assert math.isnan(q_statistic(0, 0)) and math.isnan(q_statistic(0.0, 2.0))
    assert q_statistic(10**400, 1) == pytest.approx(400 * math.log(10))
    assert q_statistic(1e308, 1e-308) == pytest.approx(616 * math.log(10))
    assert mcnemar(3, 1) == 1.0 and mcnemar(1, 3) == -1.0 and mcnemar(0, 0) == 0.0


def test_defaults_and_names():
    comparison = ModelComparison()
    assert comparison.estimators == ("cumulative", "window:1000", "fading:0.999")
    assert comparison.names == ["cumulative", "window:1000", "fading:0.999"]
    m = comparison.measures()
    assert m["cumulative"]["n"] == 0 and math.isnan(m["cumulative"]["q_statistic"])
    assert m["fading:0.999"]["mcnemar"] == 0.0
    comparison.update([], [])  # an empty batch changes nothing
    assert comparison.measures()["window:1000"]["n"] == 0


def test_accepts_booleans_integers_and_lists():
    comparison = ModelComparison(["cumulative"])
    comparison.update(np.array([True, False]), [0, 1])
    comparison.update(np.array([2, 0], dtype=np.uint8), np.array([0.5, 0.0]))
    comparison.update(np.array([-0.0, 0.25]), np.array([0.0, 0.0]))  # −0.0 is a right answer
    m = comparison.measures()["cumulative"]
    assert (m["n"], m["n01"], m["n10"]) == (6, 2.0, 1.0)  # both wrong on the third pair
    assert m["q_statistic"] == math.log(3.25 / 1.5)
    assert comparison.state()["state"]["cumulative"]["loss_sums"] == [[13, -2], [3, -1]]


BAD_UPDATES = [
    ([0, 1], [0], "same instances"),
    ([0, -1], [0, 0], "errors_a contains -1.0; losses must be >= 0"),
    ([0, 1], [0, np.nan], "errors_b contains nan; losses must be finite"),
    ([0, np.inf], [0, 1], "errors_a contains inf"),
    (["a", "b"], [0, 1], "errors_a has dtype <U1; losses must be numbers"),
    ([[0, 1]], [[0, 1]], "errors_a has shape \\(1, 2\\); a 1-D array"),
    ([0, 1], 1, "errors_b has shape \\(\\); a 1-D array"),
]


@pytest.mark.parametrize(("errors_a", "errors_b", "message"), BAD_UPDATES)
def test_bad_batches_raise_and_change_nothing(errors_a, errors_b, message):
    comparison = ModelComparison(estimators=["cumulative", "window:3", "fading:0.9"])
    comparison.update([1, 0, 1], [0, 0, 1])
    before = comparison.state()
    with pytest.raises(ValueError, match=message):
        comparison.update(errors_a, errors_b)
    assert comparison.state() == before


@pytest.mark.parametrize(
    ("estimators", "message"),
    [
        ("cumulative", "estimators='cumulative' is a single string"),
        ((), "estimators=\\(\\) is empty"),
        (["window:5", "window:5"], "'window:5' is configured twice"),
        (["fading:0.9", "fading:0.90"], "'fading:0.90' is configured twice"),
        (["sliding:100"], "'sliding:100' is not known"),
        (["window:0"], "window_size=0"),
        (["fading:1.5"], "fading_factor=1.5"),
    ],
)
def test_bad_settings_name_the_value_and_what_is_allowed(estimators, message):
    with pytest.raises(ValueError, match=message):
        ModelComparison(estimators=estimators)


def test_from_state_rejects_a_mismatched_state():
    state = ModelComparison(["cumulative", "window:3"]).state()
    state["state"]["window:3"]["kind"] = "sliding"
    with pytest.raises(ValueError, match="kind='sliding'"):
        ModelComparison.from_state(state)
    state = ModelComparison(["cumulative"]).state()
    state["estimators"] = ["window:3"]
    with pytest.raises(ValueError, match="must be the same"):
        ModelComparison.from_state(state)


def test_large_batches_are_fast_and_match_the_window_definition():
    rng = np.random.default_rng(11)
    loss_a, loss_b = rng.integers(0, 2, 200_000), rng.random(200_000) < 0.3
    comparison = ModelComparison()
    for lo in range(0, 200_000, 25_000):
        comparison.update(loss_a[lo : lo + 25_000], loss_b[lo : lo + 25_000])
    window = comparison.measures()["window:1000"]
    tail_a, tail_b = loss_a[-1000:] > 0, loss_b[-1000:]
    assert window["n01"] == np.count_nonzero(tail_a & ~tail_b)
    assert window["n10"] == np.count_nonzero(tail_b & ~tail_a)
    assert window["q_statistic"] == math.log(tail_a.sum() / tail_b.sum())
