"""Drift detectors: the Page-Hinkley test on fading error estimates and on their ratio.

A detector consumes the loss of each outcome of one model (the 0-1 error indicator, 1 = the
model was wrong; any finite non-negative loss is accepted), keeps its own fading error
estimates and feeds them to a Page-Hinkley (PH) test for an increase of the mean. It returns an
:class:`Alarm` for every outcome at which the test fires; the PH state then resets and the rest
of the batch is processed from the reset state, exactly as if the outcomes had arrived one by
one. The fading estimates themselves never reset. The test is
:class:`~streameval.core.page_hinkley.PageHinkley`; the fading errors are
:class:`~streameval.core.forgetting.BlockFading` sums.

Batches are processed with numpy (cumulative sums and minima); the only Python loops run per
alarm and per block of up to 1024 outcomes, never per outcome. Every arithmetic operation
on an outcome is the same whatever the batch boundaries are, so a detector gives bit-identical
estimates, statistics and alarm indices however a stream is split into batches (one by one
included), and a detector restored from its :meth:`state` continues bit-identically.

Two detectors are on by default for each model (:data:`DEFAULT_DETECTORS`):

``page_hinkley``
    PH on the fading error M_a(t), a = 0.999 (:class:`FadingErrorPageHinkley`).
``ratio_page_hinkley``
    PH on the ratio R(t) = M_short(t)/M_long(t) of two fading errors, a_long = 0.9994,
    a_short = 0.997 (:class:`RatioPageHinkley`, Algorithm 4 of Gama et al.).

Both use δ = 0.1 and λ = 100 on errors in [0, 1], and may alarm only after 30 PH updates since
the last reset. Three settings outside Gama et al. are off (0) by default: ``restart_threshold``
(a mirrored PH test that restarts the test, silently, when the estimate has fallen
significantly), ``warmup`` (outcomes before the PH test starts) and, for the ratio,
``smoothing`` (ε in R = (M_short + ε)/(M_long + ε)); docs/measures.md ("How good the detectors
are") gives what each changes on the drift benchmark and why the defaults stay off.

References
----------
Gama, Sebastião, Rodrigues (2013), *On evaluating stream learning algorithms*, Machine
Learning 90(3): §5.1 the Page-Hinkley test, §5.2 PH on fading error estimates (Algorithm 3),
§5.3 PH on the ratio of two fading estimates (Algorithm 4). Worked examples E8 and E9 of
docs/measures.md.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from streameval.core.forgetting import BlockFading, block_size
from streameval.core.page_hinkley import (
    Change,
    PageHinkley,
    _as_values,
    _check_non_negative,
    _is_real,
)

__all__ = [
    "DEFAULT_DETECTORS",
    "Alarm",
    "Change",
    "Detector",
    "FadingErrorPageHinkley",
    "PageHinkley",
    "RatioPageHinkley",
    "canonical_spec",
    "detector_from_state",
    "make_detector",
    "saved_spec",
]

#: Detectors of every model unless configured otherwise.
DEFAULT_DETECTORS = (
    {
        "type": "page_hinkley",
        "fading_factor": 0.999,
        "delta": 0.1,
        "threshold": 100.0,
        "min_instances": 30,
        "restart_threshold": 0.0,
        "warmup": 0,
    },
    {
        "type": "ratio_page_hinkley",
        "long_factor": 0.9994,
        "short_factor": 0.997,
        "delta": 0.1,
        "threshold": 100.0,
        "min_instances": 30,
        "restart_threshold": 0.0,
        "smoothing": 0.0,
        "warmup": 0,
    },
)


@dataclass(frozen=True)
class Alarm:
    """A change detected by a detector.

    Attributes
    ----------
    detector
        Name of the detector (``page_hinkley``, ``ratio_page_hinkley``).
    statistic
        The PH statistic m_T − M_T at the alarm (it exceeds ``threshold``).
    threshold
        The detector's λ.
    index
        1-based index of the outcome at which the alarm fired, counted over the detector's
        whole life (never reset).
    estimate
        The monitored estimate at that outcome: the fading error for ``page_hinkley``, the
        ratio R of short- to long-term fading error for ``ratio_page_hinkley``.
    change_index
        Where the detector estimates the change began: the index (counted like ``index``) of
        the last outcome at which the PH cumulative sum was at its minimum since the last
        reset, m_t = M_T; the change begins with the outcome after it. None when the detector
        was restored from a state that did not keep it and m has not fallen to a new minimum
        since.
    estimate_before, estimate_after
        The mean of the monitored estimate over the PH updates from the last reset through
        ``change_index``, and over those after it through ``index`` (None with
        ``change_index``).
    settings
        The detector's settings, as :func:`make_detector` accepts them.
    at, change_at
        What the caller said of the outcome at ``index`` and at ``change_index`` (the
        ``marks`` of :meth:`FadingErrorPageHinkley.update`), as tuples; None without marks.

    Examples
    --------
    >>> Alarm("page_hinkley", 101.5, 100.0, 21042, 0.41).to_dict()["index"]
    21042
    """

    detector: str
    statistic: float
    threshold: float
    index: int
    estimate: float
    change_index: int | None = None
    estimate_before: float | None = None
    estimate_after: float | None = None
    settings: dict[str, Any] | None = field(default=None, hash=False)
    at: tuple[Any, ...] | None = None
    change_at: tuple[Any, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the fields (tuples as lists)."""
        return {
            "detector": self.detector,
            "statistic": self.statistic,
            "threshold": self.threshold,
            "index": self.index,
            "estimate": self.estimate,
            "change_index": self.change_index,
            "estimate_before": self.estimate_before,
            "estimate_after": self.estimate_after,
            "settings": None if self.settings is None else dict(self.settings),
            "at": None if self.at is None else list(self.at),
            "change_at": None if self.change_at is None else list(self.change_at),
        }


# ---------------------------------------------------------------------------------------------
# validation


#: The value of each setting added after the first checkpoints that turns it off: a state
#: written before the setting existed restores with it (and behaves as before).
_OFF = {"restart_threshold": 0.0, "smoothing": 0.0, "warmup": 0}


def _check_warmup(value: Any) -> int:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 0:
        return int(value)
    raise ValueError(
        f"warmup={value!r} is not allowed; use an integer >= 0 (outcomes over the detector's "
        "life before its PH test starts, e.g. 1000; 0: from the first)"
    )


def _check_smoothing(value: Any) -> float:
    return _check_non_negative(
        "smoothing",
        value,
        "use a finite number >= 0 (ε added to both fading errors of the ratio, e.g. 0.01; 0: "
        "the plain ratio)",
    )


def _check_factor(name: str, value: Any, below: float | None = None) -> float:
    """A fading factor in (0, 1] (or in (0, ``below``) when given)."""
    if below is None:
        if _is_real(value) and 0.0 < value <= 1.0:
            return float(value)
        allowed = "use a number in (0, 1] (e.g. 0.999; 1 keeps all history)"
    else:
        if _is_real(value) and 0.0 < value < below:
            return float(value)
        allowed = f"use a number in (0, long_factor={below!r}): the short memory forgets faster"
    raise ValueError(f"{name}={value!r} is not allowed; {allowed}")


# ---------------------------------------------------------------------------------------------
# the fading mean of Gama et al., Algorithm 3, computed identically for any batch split


class _FadingMean:
    """Bias-free fading mean M_a(t) = S_a(t)/N_a(t) of a stream (Gama et al. 2013, Alg. 3).

    S ← e + a·S and N ← 1 + a·N are two bins of a
    :class:`~streameval.core.forgetting.BlockFading`; M_a after every outcome is the ratio of
    its running sums, in which the block's scale cancels.
    """

    def __init__(self, fading_factor: float) -> None:
        self._sums = BlockFading(fading_factor, 2)
        self._last = math.nan  # M_a after the latest outcome, as advance() returned it

    @property
    def n(self) -> int:
        return self._sums.n

    @property
    def value(self) -> float:
        """M_a after the latest outcome (NaN before the first)."""
        return self._last

    def advance(self, losses: np.ndarray) -> np.ndarray:
        """Add a batch of losses; return M_a after each of them."""
        sums = self._sums.running(np.column_stack([losses, np.ones(losses.size)]))
        means = sums[:, 0] / sums[:, 1]
        if means.size:
            self._last = float(means[-1])
        return means

    def state(self) -> dict[str, Any]:
        return {**self._sums.state(), "last": None if self._sums.n == 0 else self._last}

    @classmethod
    def from_state(cls, fading_factor: float, state: dict[str, Any]) -> _FadingMean:
        mean = cls(fading_factor)
        if "base_sum" in state:  # written before the forgetting module: same sums, kept apart
            state = _upgraded(fading_factor, state)
        mean._sums.load(state)
        mean._last = math.nan if state["last"] is None else state["last"]
        return mean


def _upgraded(fading_factor: float, old: dict[str, Any]) -> dict[str, Any]:
    """A fading mean's state of checkpoint version 1 as a BlockFading state (the same numbers).

    Version 1 kept S and N apart, with the norm's in-block part read from a table of
    Σ a^(−i), and closed a full block only at the next outcome.
    """
    block, n = old["block"], old["n"]
    decay = np.cumprod(np.concatenate(([1.0], np.full(block, fading_factor))))
    norms = np.cumsum(1.0 / decay[1:])  # Σ a^(−i), i = 1..k, added in order
    norm_partial = float(norms[n % block - 1]) if n % block else 0.0
    base = np.array([old["base_sum"], old["base_norm"]])
    partial = np.array([old["partial"], norm_partial])
    last = None
    if n:  # M_a as version 1 computed it
        k = n % block or block
        last = (old["base_sum"] + old["partial"]) / (old["base_norm"] + float(norms[k - 1]))
    if n and n % block == 0:  # a full block, not yet closed
        base = decay[block] * (base + np.array([old["partial"], float(norms[-1])]))
        partial = np.zeros(2)
    state = {"n": n, "base": base.tolist(), "partial": partial.tolist(), "last": last}
    if block != block_size(fading_factor):
        state["block"] = block
    return state


# ---------------------------------------------------------------------------------------------
# detectors on error streams


def _mark(marks: Sequence[Sequence[Any]] | None, position: Any) -> tuple[Any, ...] | None:
    """The mark of the outcome at ``position`` of the batch, as a tuple (None without marks)."""
    return None if marks is None else tuple(marks[int(position)])


class _ErrorDetector:
    """Common machinery of the detectors on error streams (not used directly)."""

    name: ClassVar[str]
    settings: ClassVar[tuple[str, ...]]

    def __init__(
        self,
        delta: float,
        threshold: float,
        min_instances: int,
        restart_threshold: float,
        warmup: int,
    ) -> None:
        self.warmup = _check_warmup(warmup)
        self._test = PageHinkley(delta, threshold, min_instances, restart_threshold)
        self.delta = self._test.delta
        self.threshold = self._test.threshold
        self.min_instances = self._test.min_instances
        self.restart_threshold = self._test.restart_threshold
        self._n = 0
        # the outcome of the PH minimum t* since the last reset (index over the detector's
        # life, and its mark); None while there is none, or when a state did not keep it
        self._change_index: int | None = None
        self._change_mark: tuple[Any, ...] | None = None

    @property
    def n(self) -> int:
        """Outcomes seen over the detector's life."""
        return self._n

    @property
    def statistic(self) -> float:
        """The PH statistic after the latest outcome (0 right after a reset)."""
        return self._test.statistic

    @property
    def change_index(self) -> int | None:
        """The index of the outcome at the PH minimum since the last reset: where a change
        would be estimated to begin if the test fired now (None: no value since the reset, or
        not known)."""
        return self._change_index

    def spec(self) -> dict[str, Any]:
        """The settings, as accepted by :func:`make_detector`."""
        return {"type": self.name, **{key: getattr(self, key) for key in self.settings}}

    def update(self, errors: Any, marks: Sequence[Sequence[Any]] | None = None) -> list[Alarm]:
        """Add a batch of losses (1 = the model was wrong), oldest first; return the alarms.

        ``marks``, if given, says what each outcome is (one tuple of JSON values per loss, e.g.
        its instance id and times): an alarm carries the mark of the outcome at which it fired
        and of the one where the change began, which may lie in an earlier batch — the
        detector keeps that one mark. A batch with a NaN, infinite or negative loss, or with
        a number of marks other than of losses, raises ``ValueError`` and changes nothing.
        """
        losses = _as_values(errors, "errors", non_negative=True)
        if marks is not None and len(marks) != losses.size:
            raise ValueError(
                f"marks has {len(marks)} entries for {losses.size} errors; give one per error"
            )
        if not losses.size:
            return []
        first = self._n + 1
        positions, monitored = self._monitored(losses)
        if self._n < self.warmup:  # outcome first + p enters the test once it is > warmup
            keep = positions >= self.warmup - self._n
            positions, monitored = positions[keep], monitored[keep]
        self._n += losses.size
        settings = self.spec()
        alarms = []
        for change in self._test._scan(monitored):
            if change.start is None:
                change_index, change_mark = None, None
            elif change.start >= 0:
                change_index = first + int(positions[change.start])
                change_mark = _mark(marks, positions[change.start])
            else:  # before this batch: the minimum the detector kept
                change_index, change_mark = self._change_index, self._change_mark
            alarms.append(
                Alarm(
                    detector=self.name,
                    statistic=change.statistic,
                    threshold=self.threshold,
                    index=first + int(positions[change.position]),
                    estimate=float(monitored[change.position]),
                    change_index=change_index,
                    estimate_before=change.mean_before,
                    estimate_after=change.mean_after,
                    settings=settings,
                    at=_mark(marks, positions[change.position]),
                    change_at=change_mark,
                )
            )
        # where the PH minimum is now: in this batch, before it, or nowhere (reset, unknown)
        test = self._test
        if test.observations == 0 or test.minimum_at == 0:
            self._change_index, self._change_mark = None, None
        else:
            here = monitored.size - 1 - (test.observations - test.minimum_at)
            if here >= 0:
                self._change_index = first + int(positions[here])
                self._change_mark = _mark(marks, positions[here])
        return alarms

    def _monitored(self, losses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
        """Positions in the batch whose estimate enters the PH test, and those estimates."""
        raise NotImplementedError

    def _running_state(self) -> dict[str, Any]:
        return {
            "n": self._n,
            "change_index": self._change_index,
            "change_mark": None if self._change_mark is None else list(self._change_mark),
        }

    def _restore(self, state: dict[str, Any]) -> None:
        self._n = state["n"]
        self._test._restore(state["test"])
        # states written before the change point was kept have neither (then not known)
        self._change_index = state.get("change_index")
        mark = state.get("change_mark")
        self._change_mark = None if mark is None else tuple(mark)

    @classmethod
    def _settings_of(cls, state: dict[str, Any]) -> dict[str, Any]:
        """The settings kept in a state; one added later is off when the state lacks it."""
        return {key: state[key] if key in state or key not in _OFF else _OFF[key]
                for key in cls.settings}  # fmt: skip

    @classmethod
    def _check_state_type(cls, state: dict[str, Any]) -> None:
        if state.get("type") != cls.name:
            raise ValueError(
                f"detector state has type={state.get('type')!r}; expected {cls.name!r}"
            )


class FadingErrorPageHinkley(_ErrorDetector):
    """Page-Hinkley test on the fading error of a model (Gama et al. 2013, §5.2).

    After every outcome the bias-free fading error M_a(t) = S_a(t)/N_a(t), with
    S ← e + a·S and N ← 1 + a·N, is fed to a :class:`PageHinkley` test for an increase. After
    an alarm the PH test resets; the fading error does not.

    Parameters
    ----------
    fading_factor
        Gama's a in (0, 1], the weight kept by the old sum at each outcome (memory about
        1/(1 − a) outcomes).
    delta, threshold, min_instances, restart_threshold
        Of the PH test: δ >= 0, λ > 0, PH updates since the last reset before an alarm may
        fire (integer >= 1), and λ_down >= 0 of the mirrored test that restarts the PH test
        without an alarm when the fading error has fallen significantly (0: never;
        :class:`PageHinkley`).

    Examples
    --------
    >>> import numpy as np
    >>> detector = FadingErrorPageHinkley(fading_factor=0.99, threshold=10.0)
    >>> errors = np.r_[np.zeros(500), np.ones(500)]  # the model breaks at outcome 501
    >>> alarm = detector.update(errors)[0]
    >>> alarm.detector, alarm.index, round(alarm.estimate, 3)
    ('page_hinkley', 563, 0.471)
    >>> round(detector.error, 3), detector.n
    (0.993, 1000)

    References
    ----------
    Gama, Sebastião, Rodrigues (2013), Machine Learning 90(3), Algorithm 3 and §3 (fading
    error, eq. 1), §5.1–5.2 (PH on error estimates; δ = 0.1, λ = 100).
    """

    name = "page_hinkley"
    settings = (
        "fading_factor",
        "delta",
        "threshold",
        "min_instances",
        "restart_threshold",
        "warmup",
    )

    def __init__(
        self,
        fading_factor: float = 0.999,
        delta: float = 0.1,
        threshold: float = 100.0,
        min_instances: int = 30,
        restart_threshold: float = 0.0,
        warmup: int = 0,
    ) -> None:
        self.fading_factor = _check_factor("fading_factor", fading_factor)
        super().__init__(delta, threshold, min_instances, restart_threshold, warmup)
        self._error = _FadingMean(self.fading_factor)

    @property
    def error(self) -> float:
        """The fading error M_a after the latest outcome (NaN before the first)."""
        return self._error.value

    def _monitored(self, losses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        estimates = self._error.advance(losses)
        return np.arange(losses.size), estimates

    def state(self) -> dict[str, Any]:
        """A JSON-ready snapshot of the settings and the whole running state."""
        return {
            **self.spec(),
            **self._running_state(),
            "error": self._error.state(),
            "test": self._test._running_state(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> FadingErrorPageHinkley:
        """Rebuild a detector from :meth:`state`; it continues bit-identically."""
        cls._check_state_type(state)
        detector = cls(**cls._settings_of(state))
        detector._restore(state)
        detector._error = _FadingMean.from_state(detector.fading_factor, state["error"])
        return detector


class RatioPageHinkley(_ErrorDetector):
    """Page-Hinkley test on the ratio of a short- to a long-term fading error (Algorithm 4).

    Two fading errors of the same stream, M_long with ``long_factor`` and M_short with the
    smaller ``short_factor``, give R(t) = M_short(t)/M_long(t), fed to a :class:`PageHinkley`
    test for an increase: the alarm says the recent error is well above the longer-term one.
    While M_long = 0 (no error yet) R is undefined and the PH test skips the outcome (its
    ``min_instances`` counts PH updates, the outcome index still advances). After an alarm the
    PH test resets; the fading errors do not.

    With ``smoothing`` ε > 0 the ratio is R(t) = (M_short(t) + ε)/(M_long(t) + ε), defined from
    the first outcome: for a nearly error-free model (M_long ≈ 0.001) one error would otherwise
    lift R to several units and fire the test; with ε the same error moves R by about
    (1 − a_short)/(M_long + ε), while for error rates well above ε R is nearly the plain ratio.
    The paper is silent on M_long ≈ 0; docs/measures.md says why the default ε was chosen.

    Parameters
    ----------
    long_factor
        a_long in (0, 1], the fading factor of the long-term error (1 keeps all history).
    short_factor
        a_short in (0, long_factor), the fading factor of the short-term error.
    delta, threshold, min_instances, restart_threshold
        Of the PH test: δ >= 0, λ > 0, PH updates since the last reset before an alarm may
        fire (integer >= 1), and λ_down >= 0 of the mirrored test that restarts the PH test
        without an alarm when R has fallen significantly, as it does while a model learns
        (0: never; :class:`PageHinkley`).
    smoothing
        ε >= 0 added to both fading errors (0: the plain ratio of Algorithm 4).

    Examples
    --------
    E9 (docs/measures.md): error rate 0.2 for 200 outcomes, then 0.8; a_long = 0.99, a_short = 0.9,
    δ = 0.1, λ = 10.

    >>> import numpy as np
    >>> i = np.arange(1, 401)
    >>> errors = np.where(i <= 200, i % 5 == 0, i % 5 != 0)
    >>> detector = RatioPageHinkley(long_factor=0.99, short_factor=0.9, threshold=10.0,
    ...                             restart_threshold=0.0, smoothing=0.0)
    >>> [(a.index, round(a.estimate, 4), round(a.statistic, 4)) for a in detector.update(errors)]
    [(212, 2.3081, 11.1034)]

    References
    ----------
    Gama, Sebastião, Rodrigues (2013), Machine Learning 90(3), §5.3 and Algorithm 4 (drift
    detector based on the ratio of two fading factors), Algorithm 3 for each estimate. Worked
    example E9 of docs/measures.md.
    """

    name = "ratio_page_hinkley"
    settings = (
        "long_factor",
        "short_factor",
        "delta",
        "threshold",
        "min_instances",
        "restart_threshold",
        "smoothing",
        "warmup",
    )

    def __init__(
        self,
        long_factor: float = 0.9994,
        short_factor: float = 0.997,
        delta: float = 0.1,
        threshold: float = 100.0,
        min_instances: int = 30,
        restart_threshold: float = 0.0,
        smoothing: float = 0.0,
        warmup: int = 0,
    ) -> None:
        self.long_factor = _check_factor("long_factor", long_factor)
        self.short_factor = _check_factor("short_factor", short_factor, below=self.long_factor)
        self.smoothing = _check_smoothing(smoothing)
        super().__init__(delta, threshold, min_instances, restart_threshold, warmup)
        self._long = _FadingMean(self.long_factor)
        self._short = _FadingMean(self.short_factor)

    @property
    def long_error(self) -> float:
        """M_long after the latest outcome (NaN before the first)."""
        return self._long.value

    @property
    def short_error(self) -> float:
        """M_short after the latest outcome (NaN before the first)."""
        return self._short.value

    @property
    def ratio(self) -> float:
        """R = (M_short + ε)/(M_long + ε) after the latest outcome (NaN while undefined)."""
        long_term = self._long.value
        if self.smoothing:
            return (self._short.value + self.smoothing) / (long_term + self.smoothing)
        if not long_term > 0:  # NaN before the first outcome, 0 before the first error
            return math.nan
        return self._short.value / long_term

    def _monitored(self, losses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        long_term = self._long.advance(losses)
        short_term = self._short.advance(losses)
        if self.smoothing:
            ratio = (short_term + self.smoothing) / (long_term + self.smoothing)
            return np.arange(losses.size), ratio
        defined = np.flatnonzero(long_term > 0)
        return defined, short_term[defined] / long_term[defined]

    def state(self) -> dict[str, Any]:
        """A JSON-ready snapshot of the settings and the whole running state."""
        return {
            **self.spec(),
            **self._running_state(),
            "long_error": self._long.state(),
            "short_error": self._short.state(),
            "test": self._test._running_state(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> RatioPageHinkley:
        """Rebuild a detector from :meth:`state`; it continues bit-identically."""
        cls._check_state_type(state)
        detector = cls(**cls._settings_of(state))
        detector._restore(state)
        detector._long = _FadingMean.from_state(detector.long_factor, state["long_error"])
        detector._short = _FadingMean.from_state(detector.short_factor, state["short_error"])
        return detector


Detector = FadingErrorPageHinkley | RatioPageHinkley

_DETECTORS: dict[str, type[FadingErrorPageHinkley] | type[RatioPageHinkley]] = {
    FadingErrorPageHinkley.name: FadingErrorPageHinkley,
    RatioPageHinkley.name: RatioPageHinkley,
}


def _detector_class(kind: Any, what: str) -> type[FadingErrorPageHinkley] | type[RatioPageHinkley]:
    if isinstance(kind, str) and kind in _DETECTORS:
        return _DETECTORS[kind]
    raise ValueError(
        f"{what} type={kind!r} is not known; use 'page_hinkley' or 'ratio_page_hinkley'"
    )


def make_detector(spec: Mapping[str, Any]) -> Detector:
    """Build a detector from its configuration: ``{"type": ..., setting: value, ...}``.

    Settings left out take their defaults (:data:`DEFAULT_DETECTORS`); ``spec`` is not
    modified.

    Examples
    --------
    >>> detector = make_detector({"type": "page_hinkley", "fading_factor": 0.995, "threshold": 50})
    >>> detector.fading_factor, detector.delta, detector.threshold, detector.min_instances
    (0.995, 0.1, 50.0, 30)
    >>> [make_detector(spec).name for spec in DEFAULT_DETECTORS]
    ['page_hinkley', 'ratio_page_hinkley']
    >>> make_detector({"type": "page_hinkley", "lambda": 50})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: detector 'page_hinkley' has no setting 'lambda'; allowed: fading_factor, ...
    """
    if not isinstance(spec, Mapping):
        raise ValueError(
            f"detector {spec!r} is not a mapping; use e.g. {{'type': 'page_hinkley', "
            "'fading_factor': 0.999}"
        )
    cls = _detector_class(spec.get("type"), "detector")
    settings = {key: value for key, value in spec.items() if key != "type"}
    unknown = [key for key in settings if key not in cls.settings]
    if unknown:
        raise ValueError(
            f"detector {cls.name!r} has no setting {unknown[0]!r}; allowed: "
            f"{', '.join(cls.settings)}"
        )
    return cls(**settings)


def canonical_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A detector's settings with every default filled in and numbers as floats: two
    configurations describe the same detector exactly when these are equal.

    >>> canonical_spec({"type": "page_hinkley", "threshold": 100}) == canonical_spec(
    ...     DEFAULT_DETECTORS[0])
    True
    """
    return {key: float(value) if isinstance(value, int | float) and not isinstance(value, bool)
            else value for key, value in make_detector(spec).spec().items()}  # fmt: skip


def saved_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A detector's configuration as a checkpoint recorded it: a setting added after the
    checkpoint was written is absent there and was off (its value in ``_OFF``), whatever its
    default is now. A configuration from a user takes the defaults instead
    (:func:`make_detector`).

    >>> saved_spec({"type": "page_hinkley", "delta": 0.1})
    {'restart_threshold': 0.0, 'warmup': 0, 'type': 'page_hinkley', 'delta': 0.1}
    """
    cls = _detector_class(spec.get("type"), "detector")
    return {**{key: off for key, off in _OFF.items() if key in cls.settings}, **spec}


def detector_from_state(state: Mapping[str, Any]) -> Detector:
    """Rebuild any detector from its ``state()`` (dispatching on ``state["type"]``)."""
    return _detector_class(state.get("type"), "detector state").from_state(dict(state))
