"""How many outcomes an estimate needs: Hoeffding, window size, fading horizon.

References
----------
Gama, Sebastião, Rodrigues (2013), *On evaluating stream learning algorithms*, Machine
Learning 90(3), §3.2 and §3.4; worked example E10 of docs/measures.md.
"""

from __future__ import annotations

import math

__all__ = ["fading_horizon", "hoeffding_sample_size", "window_for_precision"]


def _check(name: str, value: float, low: float, high: float, closed_high: bool = False) -> None:
    ok = low < value < high or (closed_high and value == high)
    if isinstance(value, bool) or not isinstance(value, int | float) or not ok:
        bracket = "]" if closed_high else ")"
        raise ValueError(
            f"{name}={value!r} is not allowed; use a number in ({low}, {high}{bracket}"
        )


def hoeffding_sample_size(epsilon: float, delta: float, value_range: float = 1.0) -> float:
    """n such that the mean of n values in [0, R] is within ε of its expectation with
    probability ≥ 1 − δ: n = R²·ln(2/δ)/(2ε²) (not rounded; the paper quotes 18444).

    >>> round(hoeffding_sample_size(epsilon=0.01, delta=0.05), 2)
    18444.4
    """
    _check("epsilon", epsilon, 0, math.inf)
    _check("delta", delta, 0, 1)
    _check("value_range", value_range, 0, math.inf)
    return value_range**2 * math.log(2 / delta) / (2 * epsilon**2)


def window_for_precision(epsilon: float) -> int:
    """Window size whose 95 % interval of an error rate has half-width ε in the worst case
    (variance 0.25/n, half-width 2·sqrt(0.25/n) = 1/sqrt(n)): n = ceil(1/ε²).

    >>> window_for_precision(0.01), round(1 / math.sqrt(1000), 4)
    (10000, 0.0316)
    """
    _check("epsilon", epsilon, 0, 1, closed_high=True)
    return math.ceil(1 / epsilon**2 - 1e-9)


def fading_horizon(fading_factor: float, epsilon: float = 1e-3) -> float:
    """Number of outcomes whose weight a^k is still ≥ ε: log(ε)/log(a).

    >>> round(fading_horizon(0.999, 1e-3), 1), round(fading_horizon(0.995, 1e-4), 1)
    (6904.3, 1837.5)
    """
    _check("fading_factor", fading_factor, 0, 1)
    _check("epsilon", epsilon, 0, 1)
    return math.log(epsilon) / math.log(fading_factor)
