"""Label maturity: how much of each prediction-time cohort of a model has its label yet.

While labels are late, an estimate over recent outcomes holds only the instances whose labels
came first. How much of yesterday's traffic is labelled already, and whether the frauds among
it come as fast as the rest, decides how far the window measures can be trusted.
:class:`LabelMaturity` answers it for one model: the instances the model predicted, in
*cohorts* by the time of its first prediction (``cohort_ms`` wide, aligned on the epoch), and
for each cohort how many of them have their label so far, by class of the label.

The counts come from two streams that the join and the evaluation already order by event
time:

* *predicted*: the join counts, as it applies them, the instances a model predicts for the
  first time (:func:`streameval.core.outcome.notice`: one row per model, second of the first
  prediction and second of event time in which the join applied it);
* *labelled*: the model's outcomes, each in the cohort of its first prediction
  (``times[0]``), by its true class.

A snapshot at a boundary ``B`` (a multiple of ``every_ms``, itself a multiple of a second)
counts exactly the predictions the join applied before ``B`` and the outcomes due before
``B`` — a function of the events alone, the same in the worker and in replay. The object
holds the counts of notices not yet below a boundary apart (``upcoming``), so that the order
in which notices and outcomes reach it between two boundaries does not matter.

Choices where the literature is silent (docs/measures.md, "Label maturity"): the cohort of an
instance is its first prediction's, not its instance record's (what a model is accountable
for starts when it predicts); an instance that expires or is evicted unlabelled stays in its
cohort's predicted count for good — its share never reaches 1, which is what a team needs to
see; the ``cohorts`` latest cohorts are kept (older ones only in the totals); a model whose
history began before maturity was counted counts from the cohort after its first event here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from streameval.core.outcome import Label, Outcome

__all__ = ["SECOND", "LabelMaturity"]

#: the granularity of the join's counts of predicted instances (ms): cohorts and boundaries
#: are whole multiples of it
SECOND = 1000

_first = itemgetter(0)
#: :meth:`LabelMaturity.labelled` counts what it took once this many have come
COUNT_AT = 2048


class LabelMaturity:
    """The instances one model predicted, by cohort of their first prediction, and how many
    of each cohort are labelled so far, by class of the label.

    Parameters
    ----------
    cohort_ms
        Width of a cohort (ms of event time, a multiple of 1000): by the first prediction's
        time, aligned on the epoch.
    cohorts
        How many of the latest cohorts a snapshot lists (and the state keeps).
    since
        Only cohorts starting at or after it are counted (None: all). A model whose history
        began before its maturity was counted starts at a cohort boundary after it.

    Examples
    --------
    Two instances predicted in the hour starting at 0 and one in the next; the label of the
    first comes at 30 min, the third's at 61 min (class ``fraud``):

    >>> from streameval.core.outcome import Outcome, notice
    >>> m = LabelMaturity(cohort_ms=3_600_000, cohorts=3)
    >>> m.predicted([notice("m", 0, 2, 999), notice("m", 3_600_000, 1, 3_600_999)])
    >>> m.labelled([Outcome("m", "i1", "ok", (0,), ("ok",), 0, 1_800_000, 1_800_000)])
    >>> m.labelled([Outcome("m", "i3", "fraud", (3_600_000,), ("ok",), 3_600_000, 3_660_000,
    ...                     3_660_000)])
    >>> snap = m.snapshot(3_720_000)
    >>> [(c["start"], c["predicted"], c["labelled"], c["share"]) for c in snap["cohorts"]]
    [(0, 2, 1, 0.5), (3600000, 1, 1, 1.0)]
    >>> snap["cohorts"][1]["by_class"]
    {'fraud': {'labelled': 1, 'share': 1.0}}
    >>> snap["predicted"], snap["labelled"]
    (3, 2)

    References
    ----------
    Grzenda, Gomes, Bifet (2020), *Delayed labelling evaluation for data streams*, Data Mining
    and Knowledge Discovery 34: the latency period [t_instance, t_label] during which an
    instance waits for its label, which this counts per cohort.
    """

    def __init__(self, cohort_ms: int = 3_600_000, cohorts: int = 24, since: int | None = None):
        if isinstance(cohort_ms, bool) or not isinstance(cohort_ms, int) or cohort_ms < SECOND:
            raise ValueError(
                f"cohort_ms={cohort_ms!r} is not allowed: a whole number of ms >= 1000"
            )
        if cohort_ms % SECOND:
            raise ValueError(f"cohort_ms={cohort_ms!r} is not allowed: a multiple of 1000 ms")
        if isinstance(cohorts, bool) or not isinstance(cohorts, int) or cohorts < 1:
            raise ValueError(f"cohorts={cohorts!r} is not allowed: an integer >= 1")
        self.cohort_ms = cohort_ms
        self.cohorts = cohorts
        self.since = since
        #: notices not yet below a boundary: due -> {second of the first prediction: count}
        self._upcoming: dict[int, Counter[int]] = {}
        #: cohort start -> [predicted, {true class: labelled}]
        self._cohorts: dict[int, list[Any]] = {}
        #: totals of every cohort counted (kept or not): predicted, labelled, by class
        self._predicted = 0
        self._labelled: Counter[Label] = Counter()
        #: outcomes :meth:`labelled` took and has not counted yet (counted before any read)
        self._waiting: list[Outcome] = []

    # -- input ------------------------------------------------------------------------------
    def predicted(self, notices: Sequence[Outcome]) -> None:
        """Take the join's counts of newly predicted instances (rows of
        :func:`~streameval.core.outcome.notice`), in any order: each counts once a boundary
        passes its ``due``."""
        upcoming = self._upcoming
        for row in notices:
            counts = upcoming.get(row.due)
            if counts is None:
                counts = upcoming[row.due] = Counter()
            counts[row.t_instance] += row.y_true

    def labelled(self, outcomes: Sequence[Outcome]) -> None:
        """Count a batch of the model's outcomes, each in the cohort of its first prediction,
        by true class (any order, any split).

        They are counted when :data:`COUNT_AT` have come or before the counts are read
        (:meth:`fold`, :meth:`snapshot`, :meth:`state`): the counts are integers, the same
        for any split, and a model among a hundred brings a few dozen a call.
        """
        self._waiting += outcomes
        if len(self._waiting) >= COUNT_AT:
            self._count()

    def _count(self) -> None:
        """Count the outcomes :meth:`labelled` took."""
        outcomes = self._waiting
        if not outcomes:
            return
        self._waiting = []
        _, _, y_true, times, *_ = zip(*outcomes, strict=True)
        width = self.cohort_ms
        firsts = list(map(_first, times))
        lowest = min(firsts)
        if lowest // width == max(firsts) // width:  # one cohort, as a batch's usually is
            start = lowest // width * width
            cells = Counter({(start, label): count for label, count in Counter(y_true).items()})
        else:
            first = np.array(firsts, dtype=np.int64)
            starts = (first // width * width).tolist()
            cells = Counter(zip(starts, y_true, strict=True))
        since = self.since
        cohorts, totals = self._cohorts, self._labelled
        for (start, label), count in cells.items():
            if since is not None and start < since:
                continue
            totals[label] += count
            entry = cohorts.get(start)
            if entry is None:
                entry = cohorts[start] = [0, Counter()]
            entry[1][label] += count

    def fold(self, boundary: int) -> None:
        """Count the notices due before ``boundary``; keep the latest ``cohorts`` cohorts
        that start before it."""
        self._count()  # first: an outcome of a cohort about to go counts in the totals
        upcoming = self._upcoming
        width, since, cohorts = self.cohort_ms, self.since, self._cohorts
        for due in [d for d in upcoming if d < boundary]:
            for second, count in upcoming.pop(due).items():
                start = second // width * width
                if since is not None and start < since:
                    continue
                self._predicted += count
                entry = cohorts.get(start)
                if entry is None:
                    entry = cohorts[start] = [0, Counter()]
                entry[0] += count
        oldest = (boundary - 1) // width * width - (self.cohorts - 1) * width
        for start in [s for s in cohorts if s < oldest]:
            del cohorts[start]

    # -- output -----------------------------------------------------------------------------
    def snapshot(self, boundary: int) -> dict[str, Any]:
        """The counts as of ``boundary`` (after :meth:`fold` of it): the totals, and each kept
        cohort that starts before it, oldest first, with its share labelled overall and by
        class (None while nothing of it was predicted)."""
        self.fold(boundary)
        cohorts = []
        for start in sorted(s for s in self._cohorts if s < boundary):
            predicted, by_class = self._cohorts[start]
            labelled = sum(by_class.values())
            cohorts.append(
                {
                    "start": start,
                    "predicted": predicted,
                    "labelled": labelled,
                    "share": _share(labelled, predicted),
                    "by_class": {
                        str(label): {"labelled": count, "share": _share(count, predicted)}
                        for label, count in sorted(by_class.items(), key=_by_name)
                    },
                }
            )
        return {
            "cohort_ms": self.cohort_ms,
            "predicted": self._predicted,
            "labelled": sum(self._labelled.values()),
            "labelled_by_class": {
                str(label): count for label, count in sorted(self._labelled.items(), key=_by_name)
            },
            "cohorts": cohorts,
        }

    # -- state ------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """Plain values (labels keep their type: pairs, not keys)."""
        self._count()
        return {
            "cohort_ms": self.cohort_ms,
            "cohorts": self.cohorts,
            "since": self.since,
            "upcoming": [
                [due, sorted(counts.items())] for due, counts in sorted(self._upcoming.items())
            ],
            "kept": [
                [start, predicted, _pairs(by_class)]
                for start, (predicted, by_class) in sorted(self._cohorts.items())
            ],
            "predicted": self._predicted,
            "labelled": _pairs(self._labelled),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any], cohorts: int | None = None) -> LabelMaturity:
        """The object of :meth:`state`; with another number of ``cohorts``, the next fold
        keeps that many."""
        maturity = cls(
            state["cohort_ms"], state["cohorts"] if cohorts is None else cohorts, state["since"]
        )
        maturity._upcoming = {due: Counter(dict(counts)) for due, counts in state["upcoming"]}
        maturity._cohorts = {
            start: [predicted, Counter(dict(map(tuple, by_class)))]
            for start, predicted, by_class in state["kept"]
        }
        maturity._predicted = state["predicted"]
        maturity._labelled = Counter(dict(map(tuple, state["labelled"])))
        return maturity


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole > 0 else None


def _by_name(item: tuple[Label, int]) -> tuple[int, Label]:
    label = item[0]
    return (1, label) if isinstance(label, str) else (0, label)


def _pairs(counts: Counter[Label]) -> list[list[Any]]:
    return [[label, count] for label, count in sorted(counts.items(), key=_by_name)]
