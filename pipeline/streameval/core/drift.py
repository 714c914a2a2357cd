"""Drift detectors: the Page-Hinkley test on fading error estimates and on their ratio.

A detector consumes the loss of each outcome of one model (the 0-1 error indicator, 1 = the
model was wrong; any finite non-negative loss is accepted), keeps its own fading error
estimates and feeds them to a Page-Hinkley (PH) test for an increase of the mean. It returns an
:class:`~streameval.core.alarm.Alarm` for every outcome at which the test fires; the PH state
then resets and the rest of the batch is processed from the reset state, exactly as if the
outcomes had arrived one by one. The fading estimates themselves never reset. The test is
:class:`~streameval.core.page_hinkley.PageHinkley`, run by what both detectors share
(:class:`~streameval.core.error_detector.ErrorDetector`); the fading errors are
:class:`~streameval.core.fading_mean.FadingMean` over
:class:`~streameval.core.forgetting.BlockFading` sums.

Batches are processed with numpy (cumulative sums and minima); the only Python loops run per
alarm and per block of up to 1024 outcomes, never per outcome. Every arithmetic operation
on an outcome is the same whatever the batch boundaries are, so a detector gives bit-identical
estimates, statistics and alarm indices however a stream is split into batches (one by one
included), and a detector restored from its :meth:`state` continues bit-identically.

Two detectors, each on the final view's 0/1 errors:

``page_hinkley``
    PH on the fading error M_a(t) (:class:`FadingErrorPageHinkley`; Algorithm 3 of Gama et al.).
``ratio_page_hinkley``
    PH on the ratio R(t) = M_short(t)/M_long(t) of two fading errors (:class:`RatioPageHinkley`,
    Algorithm 4 of Gama et al.).

The classes' own defaults are Gama et al.'s: δ = 0.1 and λ = 100 on errors in [0, 1], a = 0.999
for the fading error, a_long = 0.9994 and a_short = 0.997 for the ratio, an alarm only after 30
PH updates since the last reset, and the four settings outside the paper off:
``restart_threshold`` (a mirrored PH test that restarts the test, silently, when the estimate
has fallen significantly), ``warmup`` (outcomes before the PH test starts), ``standardize``
(δ and λ in standard deviations of one outcome's error rather than in error units; the fading
error only) and ``smoothing`` (ε in R = (M_short + ε)/(M_long + ε); the ratio only).

The service's default (:data:`DEFAULT_DETECTORS`, and the settings a configured detector of
that type leaves out, :func:`make_detector`) is one ``page_hinkley``, chosen on the drift
benchmark (docs/measures.md, "How good the detectors are"): a = 0.995, δ = 0.05 and λ = 60
standardized, restarting after a fall of 10. It is as good as River's best detector there
(DDM) on missed changes and false alarms, and within 20 % of it on delay; the ratio detector,
whose settings that miss about as few changes fire at least 3.8 times as often without one,
is not on by default.

References
----------
Gama, Sebastião, Rodrigues (2013), *On evaluating stream learning algorithms*, Machine
Learning 90(3): §5.1 the Page-Hinkley test, §5.2 PH on fading error estimates (Algorithm 3),
§5.3 PH on the ratio of two fading estimates (Algorithm 4). Worked examples E8 and E9 of
docs/measures.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from streameval.core.error_detector import OFF_IF_ABSENT, ErrorDetector
from streameval.core.fading_mean import FadingMean
from streameval.core.page_hinkley import _check_non_negative, _is_real

__all__ = [
    "DEFAULT_DETECTORS",
    "Detector",
    "FadingErrorPageHinkley",
    "RatioPageHinkley",
    "canonical_spec",
    "detector_from_state",
    "make_detector",
    "saved_spec",
]

#: Detectors of every model unless configured otherwise; a configured detector of one of these
#: types takes the settings it leaves out from here (:func:`make_detector`).
DEFAULT_DETECTORS = (
    {
        "type": "page_hinkley",
        "fading_factor": 0.995,
        "delta": 0.05,
        "threshold": 60.0,
        "min_instances": 30,
        "restart_threshold": 10.0,
        "warmup": 0,
        "standardize": True,
    },
)
_DEFAULTS_BY_TYPE = {spec["type"]: spec for spec in DEFAULT_DETECTORS}
#: settings whose unit ``standardize`` decides: a configuration that sets one must say which
_IN_UNITS = ("delta", "threshold", "restart_threshold")


# ---------------------------------------------------------------------------------------------
# validation


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
# detectors on error streams


class FadingErrorPageHinkley(ErrorDetector):
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
    warmup
        Outcomes over the detector's life before its PH test starts (0: from the first).
    standardize
        True: δ, λ and λ_down in standard deviations of one outcome's error at the running mean
        of the fading error (:class:`PageHinkley`); False (Gama et al.): in error units.

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
        "standardize",
    )

    def __init__(
        self,
        fading_factor: float = 0.999,
        delta: float = 0.1,
        threshold: float = 100.0,
        min_instances: int = 30,
        restart_threshold: float = 0.0,
        warmup: int = 0,
        standardize: bool = False,
    ) -> None:
        self.fading_factor = _check_factor("fading_factor", fading_factor)
        super().__init__(delta, threshold, min_instances, restart_threshold, warmup, standardize)
        self._error = FadingMean(self.fading_factor)

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
        detector._error = FadingMean.from_state(detector.fading_factor, state["error"])
        return detector


class RatioPageHinkley(ErrorDetector):
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
        self._long = FadingMean(self.long_factor)
        self._short = FadingMean(self.short_factor)

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
        detector._long = FadingMean.from_state(detector.long_factor, state["long_error"])
        detector._short = FadingMean.from_state(detector.short_factor, state["short_error"])
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

    Settings left out take the service's default of that type (:data:`DEFAULT_DETECTORS`),
    else the class's own (Gama et al.'s); ``spec`` is not modified.

    Examples
    --------
    >>> detector = make_detector({"type": "page_hinkley", "threshold": 50, "standardize": True})
    >>> detector.fading_factor, detector.delta, detector.threshold, detector.restart_threshold
    (0.995, 0.05, 50.0, 10.0)

    δ, λ and λ_down of ``page_hinkley`` are in standard deviations with ``standardize``, in
    error units without: a configuration that sets one says which.

    >>> make_detector({"type": "page_hinkley", "threshold": 100})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: detector 'page_hinkley' sets threshold but not standardize: say which unit ...
    >>> ratio = make_detector({"type": "ratio_page_hinkley"})
    >>> ratio.long_factor, ratio.short_factor, ratio.delta, ratio.threshold
    (0.9994, 0.997, 0.1, 100.0)
    >>> [make_detector(spec).name for spec in DEFAULT_DETECTORS]
    ['page_hinkley']
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
    defaults = {k: v for k, v in _DEFAULTS_BY_TYPE.get(cls.name, {}).items() if k != "type"}
    detector = cls(**{**defaults, **settings})
    in_units = [key for key in _IN_UNITS if key in settings]
    if "standardize" in defaults and in_units and "standardize" not in settings:
        raise ValueError(
            f"detector {cls.name!r} sets {', '.join(in_units)} but not standardize: say which "
            "unit they are in — standardize = true (standard deviations of one outcome's error, "
            "as the default detector) or standardize = false (error units, as Gama et al. and "
            "the defaults before 2026-11-24)"
        )
    return detector


def canonical_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A detector's settings with every default filled in and numbers as floats: two
    configurations describe the same detector exactly when these are equal.

    >>> canonical_spec({"type": "page_hinkley", "fading_factor": 0.995}) == canonical_spec(
    ...     DEFAULT_DETECTORS[0])
    True
    """
    return {
        key: float(value)
        if isinstance(value, int | float) and not isinstance(value, bool)
        else value
        for key, value in make_detector(spec).spec().items()
    }


def saved_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A detector's configuration as a checkpoint recorded it, with every setting: a setting
    added after the checkpoint was written is absent there and was off (its value in
    ``OFF_IF_ABSENT``), and one left out of an older configuration took the class's own default
    (Gama et al.'s), whatever the service's defaults are now. Checkpoints written now record
    every setting. A configuration from a user takes the service's defaults instead
    (:func:`make_detector`).

    >>> saved_spec({"type": "page_hinkley", "delta": 0.2})  # doctest: +NORMALIZE_WHITESPACE
    {'type': 'page_hinkley', 'fading_factor': 0.999, 'delta': 0.2, 'threshold': 100.0,
     'min_instances': 30, 'restart_threshold': 0.0, 'warmup': 0, 'standardize': False}
    """
    cls = _detector_class(spec.get("type"), "detector")
    added = {key: off for key, off in OFF_IF_ABSENT.items() if key in cls.settings}
    return {**cls().spec(), **added, **spec}


def detector_from_state(state: Mapping[str, Any]) -> Detector:
    """Rebuild any detector from its ``state()`` (dispatching on ``state["type"]``)."""
    return _detector_class(state.get("type"), "detector state").from_state(dict(state))
