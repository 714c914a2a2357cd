"""Exact sums of floats: every finite float64 is a dyadic number m·2**e, and so is any sum of them.

The comparison's cumulative and window loss sums are kept this way, so that any split of a
stream into batches gives the very same sums, and a window's sum never drifts as large losses
leave it. Sums are computed with numpy (mantissas per binary exponent, in float64 bins whose
sums stay exact) and combined in Python integers.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["ZERO", "Dyadic", "add", "canonical", "exact_sum", "float_log_ratio", "log_ratio"]

NAN = math.nan
_LN2 = math.log(2.0)

# A dyadic number (m, e) is m·2**e with integers m >= 0 and e <= 0, canonical: (0, 0) for zero,
# otherwise e == 0 or m odd. Integer sums are (S, 0); every finite float64 is a dyadic number.
Dyadic = tuple[int, int]
ZERO: Dyadic = (0, 0)
_MANTISSA_BITS = 52
_HALF_BITS = 26  # a 53-bit mantissa split in two halves whose float64 sums stay exact
_CHUNK = 1 << 24  # at most 2**24 halves (< 2**27 each) per float64 bin sum: exact


def canonical(mantissa: int, exponent: int) -> Dyadic:
    if mantissa == 0:
        return ZERO
    if exponent > 0:
        return mantissa << exponent, 0
    if exponent < 0:
        trailing = (mantissa & -mantissa).bit_length() - 1
        shift = min(trailing, -exponent)
        return mantissa >> shift, exponent + shift
    return mantissa, 0


def exact_sum(values: np.ndarray) -> Dyadic:
    """The exact sum of non-negative finite float64 values, as a canonical dyadic number.

    Each value is split into its integer mantissa k and binary exponent s (value = k·2**(s−1074));
    mantissas are summed per exponent with numpy (exactly: halves of 26 and 27 bits in float64
    bins) and the few distinct exponents are combined in Python integers.
    """
    if not values.size:
        return ZERO
    largest = float(values.max())
    if largest * values.size < 2.0**53 and not np.any(values % 1.0):
        # integer losses (0-1 loss): every partial float sum is an exact integer
        return canonical(int(values.sum()), 0)
    bits = np.ascontiguousarray(values, dtype=np.float64).view(np.uint64)
    bits = bits & np.uint64((1 << 63) - 1)  # drop the sign bit of any −0.0
    biased = (bits >> np.uint64(_MANTISSA_BITS)).astype(np.int64)
    fraction = (bits & np.uint64((1 << _MANTISSA_BITS) - 1)).astype(np.int64)
    normal = biased > 0
    mantissa = np.where(normal, fraction | (1 << _MANTISSA_BITS), fraction)
    shift = np.where(normal, biased - 1, 0)
    total = 0
    for start in range(0, mantissa.size, _CHUNK):
        part, where = mantissa[start : start + _CHUNK], shift[start : start + _CHUNK]
        high = np.bincount(where, weights=part >> _HALF_BITS)
        low = np.bincount(where, weights=part & ((1 << _HALF_BITS) - 1))
        for s in np.flatnonzero((high > 0) | (low > 0)).tolist():
            total += ((int(high[s]) << _HALF_BITS) + int(low[s])) << s
    return canonical(total, -1074)


def add(x: Dyadic, y: Dyadic, sign: int = 1) -> Dyadic:
    """x + y (or x − y with ``sign=-1``), exactly."""
    exponent = min(x[1], y[1])
    return canonical((x[0] << (x[1] - exponent)) + sign * (y[0] << (y[1] - exponent)), exponent)


def log_ratio(x: Dyadic, y: Dyadic) -> float:
    """ln(x/y) of two dyadic numbers, NaN when either is zero; no overflow for any size."""
    (mx, ex), (my, ey) = x, y
    if mx == 0 or my == 0:
        return NAN
    shift = mx.bit_length() - my.bit_length()
    # correctly rounded mantissa ratio in (1/2, 2), times 2**exponent
    ratio = mx / (my << shift) if shift >= 0 else (mx << -shift) / my
    exponent = ex - ey + shift
    if abs(exponent) < 1000:
        return math.log(math.ldexp(ratio, exponent))
    return math.log(ratio) + exponent * _LN2


def float_log_ratio(x: float, y: float) -> float:
    if not (x > 0.0 and y > 0.0):  # zero (or NaN): undefined
        return NAN
    ratio = x / y
    if 0.0 < ratio < math.inf:
        return math.log(ratio)
    return math.log(x) - math.log(y)
