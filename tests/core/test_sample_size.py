"""E10 (docs/measures.md): sample sizes, window half-widths and fading horizons."""

import math

import pytest
from streameval.reference.sample_size import (
    fading_horizon,
    hoeffding_sample_size,
    window_for_precision,
)


def test_e10():
    assert hoeffding_sample_size(0.01, 0.05) == pytest.approx(18444.40, abs=0.005)
    assert math.floor(hoeffding_sample_size(0.01, 0.05)) == 18444  # the paper's number
    assert 2 * math.sqrt(0.25 / 1000) == pytest.approx(0.0316, abs=5e-5)  # half-width
    assert window_for_precision(0.01) == 10000
    assert 0.995**3000 == pytest.approx(2.95e-7, rel=5e-3)
    assert fading_horizon(0.999, 1e-3) == pytest.approx(6904.3, abs=0.05)
    assert fading_horizon(0.995, 1e-4) == pytest.approx(1837.5, abs=0.05)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: hoeffding_sample_size(0, 0.05), "epsilon=0"),
        (lambda: hoeffding_sample_size(0.01, 1.5), "delta=1.5"),
        (lambda: window_for_precision(-1), "epsilon=-1"),
        (lambda: fading_horizon(1.0), "fading_factor=1.0"),
    ],
)
def test_bad_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()
