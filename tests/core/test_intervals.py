"""The intervals against their definitions (docs/measures.md, "Intervals")."""

from statistics import NormalDist

import pytest
from streameval.core.intervals import normal_quantile, wilson

from tests.core.reference import wilson_roots


@pytest.mark.parametrize("p", [0.0, 0.03, 0.5, 0.93, 1.0])
@pytest.mark.parametrize("n", [1, 40, 1000, 40_000, 2.7])
@pytest.mark.parametrize("confidence", [0.8, 0.95, 0.99])
def test_wilson_bounds_are_the_roots_of_wilsons_quadratic(p, n, confidence):
    """Wilson (1927): the π with (p − π)² = z²·π(1 − π)/n; z from the normal quantile."""
    z = NormalDist().inv_cdf((1 + confidence) / 2)
    assert normal_quantile(confidence) == pytest.approx(z, rel=1e-15)
    low, high = wilson(p, n, normal_quantile(confidence))
    want = wilson_roots(p, n, z)
    assert low == pytest.approx(want[0], abs=1e-12) and high == pytest.approx(want[1], abs=1e-12)
    assert 0.0 <= low <= p <= high <= 1.0
