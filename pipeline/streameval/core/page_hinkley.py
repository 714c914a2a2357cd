"""The Page-Hinkley test for an increase of the mean, by batch, and the checks of its settings.

References
----------
Page (1954), *Continuous inspection schemes*, Biometrika 41; as used for drift detection by
Gama, Sebastião, Rodrigues (2013), *On evaluating stream learning algorithms*, Machine
Learning 90(3), §5.1. Worked example E8 of docs/measures.md.
"""

from __future__ import annotations

import math
import numbers
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np

from streameval.core import kernels

__all__ = ["Change", "PageHinkley"]


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check_non_negative(name: str, value: Any, allowed: str) -> float:
    """A finite real number >= 0, else ``ValueError`` naming the setting, the value and
    ``allowed``."""
    if _is_real(value) and math.isfinite(value) and value >= 0:
        return float(value)
    raise ValueError(f"{name}={value!r} is not allowed; {allowed}")


def _check_delta(value: Any) -> float:
    return _check_non_negative(
        "delta", value, "use a finite number >= 0 (the tolerated increase, e.g. 0.1)"
    )


def _check_threshold(value: Any) -> float:
    if _is_real(value) and math.isfinite(value) and value > 0:
        return float(value)
    raise ValueError(f"threshold={value!r} is not allowed; use a finite number > 0 (e.g. 100)")


def _check_restart_threshold(value: Any) -> float:
    return _check_non_negative(
        "restart_threshold", value, "use a finite number > 0 (e.g. 50), or 0 for no restart"
    )


def _check_standardize(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError(
        f"standardize={value!r} is not allowed; use true (δ and λ in standard deviations of "
        "one outcome's error, sqrt(p(1 − p)) at the running mean p) or false (in error units)"
    )


#: p(1 − p) at p = 0.01: the smallest variance by which ``standardize`` divides, so that one
#: error of a nearly error-free model (running mean near 0) is not read as many deviations
VARIANCE_FLOOR = 0.01 * (1 - 0.01)


def _check_min_instances(value: Any) -> int:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1:
        return int(value)
    raise ValueError(f"min_instances={value!r} is not allowed; use an integer >= 1 (e.g. 30)")


def _as_values(values: Any, name: str, non_negative: bool) -> np.ndarray:
    """Check a batch of real values and return it as a ``float64`` array.

    Raises ``ValueError`` naming the argument, the value and what is allowed.
    """
    what = "losses (1 = wrong, 0 = right)" if non_negative else "real values"
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} has shape {array.shape}; a 1-D array of {what} is needed")
    if array.size and array.dtype.kind not in "biuf":
        raise ValueError(f"{name} has dtype {array.dtype}; a 1-D array of {what} is needed")
    array = array.astype(np.float64)
    finite = np.isfinite(array)
    if not finite.all():
        bad = array[~finite][0]
        raise ValueError(f"{name} contains {bad}; {what} must be finite")
    if non_negative and array.size and array.min() < 0:
        raise ValueError(f"{name} contains {array.min()}; losses must be >= 0")
    return array


_FIRST_CHUNK = 256  # outcomes examined at once after a reset; doubles while no alarm fires


#: the running state of a test, in the order the compiled scan takes and returns it
_RUNNING = (
    "_observations",
    "_sum",
    "_cumulative",
    "_minimum",
    "_minimum_at",
    "_minimum_sum",
    "_rise",
    "_maximum",
)
_running = attrgetter(*_RUNNING)


class Change(NamedTuple):
    """An alarm of :meth:`PageHinkley.detect`, with the test's estimate of where the change began.

    ``position`` is the 0-based position in the batch of the value at which PH_T > λ, and
    ``statistic`` is PH_T. ``start`` is the position in the same batch of the value t* at which
    the cumulative sum was at its minimum, m_t* = M_T (the last such value if several tie): the
    change is estimated to begin with the value after it. ``start`` is negative when t* lay in
    an earlier batch (−1 is the last value of the batch before), and None when the test was
    restored from a state that did not keep t* and m has not reached a new minimum since.
    ``mean_before`` is the mean of the values from the last reset through t*, ``mean_after``
    that of the values after t* through T (None with ``start``).
    """

    position: int
    statistic: float
    start: int | None
    mean_before: float | None
    mean_after: float | None


class PageHinkley:
    """Page-Hinkley test for an increase of the mean of a real signal.

    After each value x_t (t counted since the last reset): x̄_t = (1/t)·Σ_{j≤t} x_j (the
    running mean), m_t = Σ_{j≤t} (x_j − x̄_j − δ), M_t = min_{j≤t} m_j and PH_t = m_t − M_t
    (so PH_1 = 0). An alarm fires when PH_t > λ and t >= ``min_instances``; the whole state
    (t, x̄, m, M) then resets and the next value starts a new test.

    With a ``restart_threshold`` λ_down > 0 the test also runs the mirrored PH test for a decrease,
    m'_t = Σ_{j≤t} (x_j − x̄_j + δ), M'_t = max_{j≤t} m'_j: when M'_t − m'_t > λ_down (and
    t >= ``min_instances``) the mean has fallen significantly since the last reset, and the
    whole state resets *without an alarm* (a restart). Without it a fall leaves x̄_t above the
    new level for a long time, which hides a later increase back to the old level (a miss);
    and when the signal itself is what fell (the ratio of a short- to a long-term error while
    a model learns) its return to the usual level reads as an increase over the depressed x̄_t
    (a false alarm). An alarm comes first when both fire at the same value.

    The test also keeps t*, the last t at which m_t = M_t (the last time PH_t was 0), and
    Σ_{j≤t*} x_j: at an alarm at T, t* estimates where the change began — the last value before
    it, as the argument of the minimum of the cumulative sum estimates the change point in Page
    (1954) and Hinkley (1971) — and the means of the values through t* and after it are the
    levels before and after (:meth:`detect`). Both are found from the same cumulative sums and
    minima, by batch.

    The running mean is kept as the running sum over t (the same x̄_t as the recursion
    x̄ += (x − x̄)/t, rounded once instead of t times).

    Parameters
    ----------
    delta
        δ >= 0, the tolerated increase of the mean (same unit as the signal).
    threshold
        λ > 0, the alarm threshold: larger means fewer false alarms and longer delays.
    min_instances
        Values since the last reset before an alarm (or a restart) is allowed (integer >= 1).
    restart_threshold
        λ_down of the mirrored test for a decrease that restarts the test; 0 (the default, and
        the test of Gama et al.): no restart.
    standardize
        For a signal that estimates an error rate (values in [0, 1]): measure each deviation
        in standard deviations of one outcome's error at the running mean, m_t = Σ_{j≤t}
        ((x_j − x̄_j)/s_j − δ) with s_j = sqrt(max(x̄_j(1 − x̄_j), ``VARIANCE_FLOOR``)), and
        the mirrored test likewise; δ and λ are then in those units, so that one setting
        means the same evidence for a model at 2 % error and one at 35 % (Page's CUSUM
        scaled by the standard deviation). False (the default, and Gama et al.): δ and λ in
        the signal's own units.

    Examples
    --------
    E8 (docs/measures.md): 20 zeros then 20 ones, δ = 0.1, λ = 5.

    >>> import numpy as np
    >>> ph = PageHinkley(delta=0.1, threshold=5.0, min_instances=1)
    >>> x = np.r_[np.zeros(20), np.ones(20)]
    >>> [(position + 1, round(statistic, 4)) for position, statistic in ph.update(x)[:1]]
    [(27, 5.1743)]

    The change is estimated to begin after value 20 (m_20 = −2 = M_27), from 0 to 1:

    >>> ph = PageHinkley(delta=0.1, threshold=5.0, min_instances=1)
    >>> change = ph.detect(x)[0]
    >>> change.start + 1, change.mean_before, change.mean_after
    (20, 0.0, 1.0)

    References
    ----------
    Gama, Sebastião, Rodrigues (2013), Machine Learning 90(3), §5.1 (with the running mean
    x̄_t; the printed x̄_T makes m_T = −T·δ and the test never fires). Page (1954). Hinkley
    (1971), *Inference about the change-point from cumulative sum tests*, Biometrika 58 (the
    minimum of the cumulative sum as the change point). Worked example E8 of docs/measures.md.
    """

    def __init__(
        self,
        delta: float = 0.1,
        threshold: float = 100.0,
        min_instances: int = 30,
        restart_threshold: float = 0.0,
        standardize: bool = False,
    ) -> None:
        self.delta = _check_delta(delta)
        self.threshold = _check_threshold(threshold)
        self.min_instances = _check_min_instances(min_instances)
        self.restart_threshold = _check_restart_threshold(restart_threshold)
        self.standardize = _check_standardize(standardize)
        self._reset()

    def _reset(self) -> None:
        self._observations = 0  # t
        self._sum = 0.0  # Σ x_j, so x̄_t = sum/t
        self._cumulative = 0.0  # m_t
        self._minimum = math.inf  # M_t (no value yet)
        self._minimum_at = 0  # t*, the last t with m_t = M_t (0: no value yet, or not known)
        self._minimum_sum = 0.0  # Σ_{j≤t*} x_j
        self._rise = 0.0  # m'_t of the mirrored test (with a restart_threshold)
        self._maximum = -math.inf  # M'_t

    def reset(self) -> None:
        """Start a new test, as after an alarm."""
        self._reset()

    @property
    def observations(self) -> int:
        """Values t since the last reset."""
        return self._observations

    @property
    def statistic(self) -> float:
        """PH_t = m_t − M_t after the latest value (0 right after a reset)."""
        return self._cumulative - self._minimum if self._observations else 0.0

    @property
    def minimum_at(self) -> int:
        """t*, the last value since the reset at which m_t = M_t (0 before the first value,
        or when restored from a state that did not keep it and m has not fallen since)."""
        return self._minimum_at

    def update(self, x: Any) -> list[tuple[int, float]]:
        """Test a batch of values, oldest first.

        Returns ``(position, statistic)`` of every alarm: the 0-based position of the value
        in ``x`` at which PH_t > λ (the test reset right after it) and PH_t. A batch with a
        NaN or infinite value raises ``ValueError`` and changes nothing.
        """
        return [(change.position, change.statistic) for change in self.detect(x)]

    def detect(self, x: Any) -> list[Change]:
        """:meth:`update`, each alarm with where the change began and the means before and
        after it (:class:`Change`)."""
        return self._scan(_as_values(x, "x", non_negative=False))

    def _scan(self, x: np.ndarray) -> list[Change]:
        """:meth:`detect` for a checked ``float64`` array (compiled when
        :mod:`~streameval.core.kernels` are in use; the numpy below is their reference)."""
        if (compiled := kernels.active) is not None and x.size:
            changes, state = compiled.page_hinkley_scan(
                x if x.flags.c_contiguous else np.ascontiguousarray(x),
                _running(self),
                self.delta,
                self.threshold,
                self.min_instances,
                self.restart_threshold,
                self.standardize,
                VARIANCE_FLOOR,
            )
            for name, value in zip(_RUNNING, state, strict=True):
                setattr(self, name, value)
            return [Change(*change) for change in changes]
        alarms: list[Change] = []
        start, chunk = 0, _FIRST_CHUNK
        while start < x.size:
            values = x[start : start + chunk]
            # (ufuncs called directly, not through np.cumsum and np.flatnonzero: the same
            # numbers, and with a hundred models a call tests a few dozen values, where the
            # wrappers' cost is a good part of the whole)
            t = np.arange(self._observations + 1, self._observations + 1 + values.size)
            sums = np.add.accumulate(np.concatenate(([self._sum], values)))[1:]
            mean = sums / t
            deviations = values - mean
            if self.standardize:
                deviations /= np.sqrt(np.maximum(mean * (1.0 - mean), VARIANCE_FLOOR))
            steps = deviations - self.delta
            cumulative = np.add.accumulate(np.concatenate(([self._cumulative], steps)))[1:]
            minimum = np.minimum.accumulate(np.concatenate(([self._minimum], cumulative)))[1:]
            statistic = cumulative - minimum
            over = statistic > self.threshold
            if t[0] < self.min_instances:  # some values before the test may fire
                over &= t >= self.min_instances
            hits = over.nonzero()[0]
            end = int(hits[0]) if hits.size else values.size - 1
            if self.restart_threshold:
                rise = np.add.accumulate(np.concatenate(([self._rise], deviations + self.delta)))
                rise = rise[1:]
                maximum = np.maximum.accumulate(np.concatenate(([self._maximum], rise)))[1:]
                fell = maximum - rise > self.restart_threshold
                if t[0] < self.min_instances:
                    fell &= t >= self.min_instances
                falls = fell.nonzero()[0]
                if falls.size and falls[0] < end + (not hits.size):
                    self._reset()  # the mean fell: start a new test, no alarm
                    start += int(falls[0]) + 1
                    chunk = _FIRST_CHUNK
                    continue
            at = self._last_minimum(t, cumulative, minimum, end)
            at_sum = float(sums[at - t[0]]) if at >= t[0] else self._minimum_sum
            if hits.size:
                if at:
                    after = (float(sums[end]) - at_sum) / (int(t[end]) - at)
                    change = (start + end - (int(t[end]) - at), at_sum / at, after)
                else:  # restored without t*, and no new minimum since
                    change = (None, None, None)
                alarms.append(Change(start + end, float(statistic[end]), *change))
                self._reset()
                start += end + 1
                chunk = _FIRST_CHUNK
            else:
                self._observations = int(t[-1])
                self._sum = float(sums[-1])
                self._cumulative = float(cumulative[-1])
                self._minimum = float(minimum[-1])
                self._minimum_at, self._minimum_sum = at, at_sum
                if self.restart_threshold:
                    self._rise, self._maximum = float(rise[-1]), float(maximum[-1])
                start += values.size
                chunk *= 2
        return alarms

    def _last_minimum(
        self, t: np.ndarray, cumulative: np.ndarray, minimum: np.ndarray, end: int
    ) -> int:
        """t* after the value at ``end`` of a chunk: the last t with m_t = M_t there.

        M is non-increasing, so the values that may equal M_end lie from the first position
        where M reached it; the last of them that does is t* (a tie moves t* to the later
        value), and if none does, M_end was reached before the chunk and t* is the one kept.
        """
        lowest = minimum[end]
        first = int(np.searchsorted(-minimum[: end + 1], -lowest, side="left"))
        ties = (cumulative[first : end + 1] == lowest).nonzero()[0]
        return int(t[first + ties[-1]]) if ties.size else self._minimum_at

    def _running_state(self) -> dict[str, Any]:
        state = {
            "observations": self._observations,
            "sum": self._sum,
            "cumulative": self._cumulative,
            "minimum": self._minimum if self._observations else None,
            "minimum_at": self._minimum_at,
            "minimum_sum": self._minimum_sum,
        }
        if self.restart_threshold:  # the mirrored test: kept only when it runs
            state["rise"] = self._rise
            state["maximum"] = self._maximum if self._observations else None
        return state

    def _restore(self, state: dict[str, Any]) -> None:
        self._observations = state["observations"]
        self._sum = state["sum"]
        self._cumulative = state["cumulative"]
        minimum = state["minimum"]
        self._minimum = math.inf if minimum is None else minimum
        # states written before t* was kept lack it: 0, not known until m falls to a new minimum
        self._minimum_at = state.get("minimum_at", 0)
        self._minimum_sum = state.get("minimum_sum", 0.0)
        if self.restart_threshold:
            self._rise = state["rise"]
            self._maximum = -math.inf if state["maximum"] is None else state["maximum"]

    def state(self) -> dict[str, Any]:
        """A JSON-ready snapshot of the settings and the running state."""
        return {
            "delta": self.delta,
            "threshold": self.threshold,
            "min_instances": self.min_instances,
            "restart_threshold": self.restart_threshold,
            "standardize": self.standardize,
            **self._running_state(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> PageHinkley:
        """Rebuild a test from :meth:`state`; it continues bit-identically."""
        test = cls(
            state["delta"],
            state["threshold"],
            state["min_instances"],
            state.get("restart_threshold", 0.0),  # absent (written before it): no restart
            state.get("standardize", False),  # likewise: error units
        )
        test._restore(state)
        return test
