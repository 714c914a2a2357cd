"""What both drift detectors share: a Page-Hinkley test on an estimate of a model's errors,
the alarms it fires with where each change began, the marks of those outcomes, and the state."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from streameval.core.alarm import Alarm
from streameval.core.page_hinkley import PageHinkley, _as_values

__all__ = ["OFF_IF_ABSENT", "ErrorDetector"]

#: The value of each setting added after the first checkpoints that turns it off: a state
#: written before the setting existed restores with it (and behaves as before).
OFF_IF_ABSENT = {"restart_threshold": 0.0, "smoothing": 0.0, "warmup": 0, "standardize": False}


def _check_warmup(value: Any) -> int:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 0:
        return int(value)
    raise ValueError(
        f"warmup={value!r} is not allowed; use an integer >= 0 (outcomes over the detector's "
        "life before its PH test starts, e.g. 1000; 0: from the first)"
    )


def _mark(marks: Sequence[Sequence[Any]] | None, position: Any) -> tuple[Any, ...] | None:
    """The mark of the outcome at ``position`` of the batch, as a tuple (None without marks)."""
    return None if marks is None else tuple(marks[int(position)])


class ErrorDetector:
    """The base of the detectors on error streams (not used directly): the PH test on the
    estimates a subclass monitors, the alarms, the change point and the running state."""

    name: ClassVar[str]
    settings: ClassVar[tuple[str, ...]]

    def __init__(
        self,
        delta: float,
        threshold: float,
        min_instances: int,
        restart_threshold: float,
        warmup: int,
        standardize: bool = False,
    ) -> None:
        self.warmup = _check_warmup(warmup)
        self._test = PageHinkley(delta, threshold, min_instances, restart_threshold, standardize)
        self.standardize = self._test.standardize
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
        """The settings, as accepted by :func:`~streameval.core.drift.make_detector`."""
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
        return self.update_checked(losses, marks)

    def update_checked(
        self, losses: np.ndarray, marks: Sequence[Sequence[Any]] | None = None
    ) -> list[Alarm]:
        """:meth:`update` of losses its caller vouches for: a 1-D ``float64`` array of finite
        values >= 0 and, if given, one mark per loss (a model's own errors, 0 or 1, which
        need no second check on every call)."""
        if not losses.size:
            return []
        first = self._n + 1
        positions, monitored = self._monitored(losses)
        if self._n < self.warmup:  # outcome first + p enters the test once it is > warmup
            keep = positions >= self.warmup - self._n
            positions, monitored = positions[keep], monitored[keep]
        self._n += losses.size
        settings = None
        alarms = []
        for change in self._test._scan(monitored):
            if change.start is None:
                change_index, change_mark = None, None
            elif change.start >= 0:
                change_index = first + int(positions[change.start])
                change_mark = _mark(marks, positions[change.start])
            else:  # before this batch: the minimum the detector kept
                change_index, change_mark = self._change_index, self._change_mark
            if settings is None:
                settings = self.spec()
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
        return {
            key: state[key] if key in state or key not in OFF_IF_ABSENT else OFF_IF_ABSENT[key]
            for key in cls.settings
        }

    @classmethod
    def _check_state_type(cls, state: dict[str, Any]) -> None:
        if state.get("type") != cls.name:
            raise ValueError(
                f"detector state has type={state.get('type')!r}; expected {cls.name!r}"
            )
