"""An alarm: a change a drift detector reports, where it estimates the change began, and
what the caller said of both outcomes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Alarm"]


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
        The detector's settings, as :func:`~streameval.core.drift.make_detector` accepts them.
    at, change_at
        What the caller said of the outcome at ``index`` and at ``change_index`` (the
        ``marks`` of :meth:`~streameval.core.drift.FadingErrorPageHinkley.update`), as tuples;
        None without marks.

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
