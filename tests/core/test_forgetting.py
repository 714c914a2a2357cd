"""The forgetting module: estimator specs, the ring window and split-invariant fading sums."""

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from streameval.core.drift import detector_from_state
from streameval.core.forgetting import (
    BlockFading,
    EstimatorSpec,
    Ring,
    block_size,
    parse_estimators,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cumulative", EstimatorSpec("cumulative")),
        ("window:7", EstimatorSpec("window", window=7)),
        (" fading:0.5 ", EstimatorSpec("fading", factor=0.5)),
        ("fading:1", EstimatorSpec("fading", factor=1.0)),
    ],
)
def test_a_spec_is_parsed_once_into_a_value_whose_name_parses_back(text, expected):
    spec = EstimatorSpec.parse(text)
    assert spec == expected
    assert EstimatorSpec.parse(spec.name) == spec
    assert EstimatorSpec.parse(spec) is spec


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        (["window:-3"], "window_size=-3"),
        (["fading:0"], "fading_factor=0.0"),
        (["fading:nan"], "'fading:nan' is not allowed"),
        (["cumulative:5"], "'cumulative:5' is not known"),
        ([3], "3 is not a string"),
        (["fading:0.5", "fading:0.50"], "'fading:0.50' is configured twice"),
        ([], "is empty"),
        ("cumulative", "a single string"),
    ],
)
def test_bad_specs_are_named(specs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse_estimators(specs)


def _splits(rng, n):
    cuts = sorted(rng.choice(np.arange(1, n), size=rng.integers(0, 12), replace=False).tolist())
    return list(itertools.pairwise([0, *cuts, n]))


@pytest.mark.parametrize("size", [1, 5, 64])
def test_a_ring_moves_sums_by_exactly_what_entered_and_left(size):
    rng = np.random.default_rng(size)
    values = rng.integers(0, 100, 300)
    for _ in range(20):
        ring, total = Ring(size, x=np.int64, pair=(np.int64, (2,))), 0
        for lo, hi in _splits(rng, values.size):
            batch = values[lo:hi]
            entered, left = ring.push(x=batch, pair=np.column_stack([batch, -batch]))
            total += int(entered["x"].sum()) - int(left["x"].sum())
            held = ring.held()
            assert held["x"].tolist() == values[max(0, hi - size) : hi].tolist()
            assert (held["pair"][:, 1] == -held["x"]).all()
            assert total == int(held["x"].sum())
        copy = Ring(size, x=np.int64, pair=(np.int64, (2,)))
        copy.restore(ring.seen, **{name: column.tolist() for name, column in held.items()})
        assert copy.n == ring.n and copy.held()["x"].tolist() == held["x"].tolist()
        assert copy.push(x=np.array([7]), pair=np.array([[7, -7]]))[1]["x"].tolist() == (
            ring.push(x=np.array([7]), pair=np.array([[7, -7]]))[1]["x"].tolist()
        )


def test_a_ring_refuses_columns_of_different_lengths():
    ring = Ring(5, x=np.int64, y=np.float64)
    with pytest.raises(ValueError, match="same number of rows"):
        ring.push(x=np.arange(2), y=np.arange(3.0))
    assert ring.seen == 0


@pytest.mark.parametrize("factor", [0.5, 0.9, 0.999, 1.0])
def test_running_sums_are_the_same_bits_for_any_split_and_agree_with_update(factor):
    rng = np.random.default_rng(int(factor * 1000))
    values = np.column_stack([rng.random(3000) * (rng.random(3000) < 0.3), np.ones(3000)])
    whole = BlockFading(factor, 2).running(values)
    for _ in range(5):
        fading, parts = BlockFading(factor, 2), []
        for lo, hi in _splits(rng, values.shape[0]):
            parts.append(fading.running(values[lo:hi]))
        assert np.concatenate(parts).tobytes() == whole.tobytes()
    summed = BlockFading(factor, 2)
    summed.update(3000, lambda rows, w: (np.r_[np.zeros(w.size, int), np.ones(w.size, int)],
                                         np.r_[w * values[rows, 0], w]))  # fmt: skip
    assert summed.value().tobytes() == fading.value().tobytes()
    position = 3000 % block_size(factor)
    scale = factor**position
    np.testing.assert_allclose(whole[-1] * scale, fading.value(), rtol=1e-12)
    mean = whole[:, 0] / whole[:, 1]
    plain, s, n = [], 0.0, 0.0
    for e in values[:, 0]:
        s, n = e + factor * s, 1.0 + factor * n
        plain.append(s / n)
    np.testing.assert_allclose(mean, plain, rtol=1e-12)


def test_drift_states_of_the_first_checkpoint_version_continue_with_the_same_alarms():
    """States written before the forgetting module (kept apart, a block closed lazily, a
    block of up to a^k >= 1e-40) restore to the numbers the old code went on to compute."""
    cases = json.loads((Path(__file__).parent / "data" / "drift_states_v1.json").read_text())
    for case in cases:
        detector = detector_from_state(case["state"])
        alarms = [alarm.to_dict() for alarm in detector.update(np.array(case["errors"], float))]
        # the fields of the first version are the same (later ones came with the change point)
        assert [{key: a[key] for key in case["alarms"][0]} for a in alarms] == case["alarms"]
        assert detector.n == case["final"]["n"]
        test = detector.state()["test"]
        assert {key: test[key] for key in case["final"]["test"]} == case["final"]["test"]
        restored = detector_from_state(json.loads(json.dumps(detector.state())))
        assert restored.state() == detector.state()


@pytest.mark.parametrize("cut", [1024, 2048, 1500])
def test_a_fading_error_reads_the_same_bits_however_it_was_fed_or_restored(cut):
    """The error a detector shows is the estimate its last outcome got, at a block's end too."""
    from streameval.core.drift import FadingErrorPageHinkley

    losses = (np.random.default_rng(cut).random(3000) < 0.3).astype(float)
    whole = FadingErrorPageHinkley(fading_factor=0.999)
    whole.update(losses[:cut])
    split = FadingErrorPageHinkley(fading_factor=0.999)
    for lo, hi in itertools.pairwise([0, 7, 1000, cut]):
        split.update(losses[lo:hi])
    restored = detector_from_state(json.loads(json.dumps(split.state())))
    monitored = FadingErrorPageHinkley(fading_factor=0.999)._monitored(losses[:cut])[1]
    assert whole.error.hex() == split.error.hex() == restored.error.hex() == monitored[-1].hex()
    assert math.isnan(detector_from_state(FadingErrorPageHinkley().state()).error)  # no outcome
