"""How sure an estimate is: confidence levels, Wilson score intervals, effective sample sizes.

:func:`~streameval.core.measures.compute_measures` and the model comparison bound their
proportions with these (docs/measures.md, "Intervals").

References
----------
Wilson (1927), *Probable inference, the law of succession, and statistical inference*, JASA
22: the score interval; Agresti & Coull (1998), *Approximate is better than "exact" for
interval estimation of binomial proportions*, The American Statistician 52(2), eq. (2). Kish
(1965), *Survey Sampling*, §11.7: the effective sample size of a weighted mean.
"""

from __future__ import annotations

import functools
import math
from statistics import NormalDist

__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_MIN_N",
    "check_confidence",
    "kish",
    "normal_quantile",
    "wilson",
]

NAN = math.nan

#: Confidence of the intervals unless configured otherwise
DEFAULT_CONFIDENCE = 0.95
#: Effective sample size below which a published estimate is marked ``warming_up`` unless
#: configured otherwise: at n = 100 the 95 % Wilson half-width of an accuracy near 0.9 is 0.06
DEFAULT_MIN_N = 100.0


def check_confidence(confidence: float) -> float:
    """The confidence level of the intervals, validated: a number in (0, 1).

    >>> check_confidence(0.9)
    0.9
    >>> check_confidence(95)
    Traceback (most recent call last):
    ...
    ValueError: confidence=95 is not allowed; use a number in (0, 1), e.g. 0.95 for 95 %
    """
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, int | float)
        or not 0.0 < confidence < 1.0
    ):
        raise ValueError(
            f"confidence={confidence!r} is not allowed; use a number in (0, 1), e.g. 0.95 for 95 %"
        )
    return float(confidence)


@functools.lru_cache(maxsize=16)
def normal_quantile(confidence: float) -> float:
    """The two-sided normal quantile z_(1−α/2) of a confidence level 1 − α.

    >>> round(normal_quantile(0.95), 6)
    1.959964
    """
    return NormalDist().inv_cdf(0.5 + check_confidence(confidence) / 2)


def kish(weights: float, squares: float) -> float:
    """Kish's effective sample size (Σw)²/Σw² of a weighted proportion; 0 without weight.

    >>> kish(4.0, 4.0), kish(1.75, 1.3125), kish(0.0, 0.0)
    (4.0, 2.3333333333333335, 0.0)
    """
    return weights * weights / squares if squares > 0 else 0.0


def wilson(p: float, n: float, z: float) -> tuple[float, float]:
    """Wilson's score interval of a proportion p observed on (an effective) n trials.

    (p + z²/2n ± z·sqrt(p(1 − p)/n + z²/4n²)) / (1 + z²/n) (Wilson 1927; Agresti & Coull
    1998, eq. (2)). NaN bounds when p is undefined or n = 0.

    >>> [round(x, 6) for x in wilson(0.93, 40, 1.959963984540054)]
    [0.80792, 0.976725]
    >>> [round(x, 6) for x in wilson(0.93, 40_000, 1.959963984540054)]
    [0.927458, 0.932459]
    """
    if p != p or not n > 0:
        return NAN, NAN
    p = min(1.0, max(0.0, p))  # a ratio of faded counts may round past 1
    z2n = z * z / n
    centre = p + z2n / 2
    half = z * math.sqrt(p * (1 - p) / n + z2n / (4 * n))
    scale = 1 + z2n
    # exactly 0 below p = 0 and 1 above p = 1 (the formula gives them up to rounding)
    low = 0.0 if p == 0.0 else max(0.0, (centre - half) / scale)
    high = 1.0 if p == 1.0 else min(1.0, (centre + half) / scale)
    return low, high
