"""One model evaluated per slice: an evaluator for each of its top-K slices and one for the rest.

:class:`~streameval.core.slices.SliceTracker` decides which slice each outcome is counted in;
here each tracked slice, and the overflow :data:`~streameval.core.slices.OTHER`, gets its own
:class:`~streameval.core.model.ModelEvaluator` — every measure under every estimator, both
views and the delayed-label block, as the whole model has (no drift detector: a slice is
watched through its numbers, not alarms). A slice that enters starts empty; one that leaves
publishes its last numbers and takes its evaluator with it; its outcomes from then on go to
the rest.

A model evaluator costs about as much per call as per few hundred outcomes (numpy calls on
small arrays), and a model's outcomes spread over K + 1 slices come a few dozen per slice per
call. So each slice's outcomes are *gathered* and given to its evaluator only when a record of
the slice is due — at every ``publish_every``-th outcome of the slice, exactly, as the whole
model's — when it has gathered :data:`GATHER_MAX`, or when its numbers are read
(:meth:`SlicedModel.flush`). Every estimate is the same
for any split of its outcomes, so this changes no number, only when it is computed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from streameval.core.model import GATHER_MAX, ModelEvaluator
from streameval.core.outcome import Outcome, outcome_of
from streameval.core.slices import OTHER, SliceTracker

__all__ = ["GATHER_MAX", "OTHER", "SlicedModel", "slice_key"]

#: (the outcome at which it is due, slice, the slice's evaluator, the label time of the
#: slice's latest outcome) of a record that is due
Due = tuple[Outcome, str, ModelEvaluator, int]


class SlicedModel:
    """One model's slices: the tracker, an evaluator per tracked slice and one for the rest,
    and the outcomes each has gathered since it was last updated (:data:`GATHER_MAX`, the
    model's, at most per slice: (top_k + 1) times it in all).

    Parameters
    ----------
    tracker
        Which slices are tracked (its state goes on with this object's).
    make
        A new evaluator for a slice: the model's settings, without detectors.
    every
        ``publish_every``: a slice's record is due at every multiple of it of its outcomes.

    Examples
    --------
    >>> from streameval.core.forgetting import parse_estimators
    >>> def make():
    ...     return ModelEvaluator("m", estimators=parse_estimators(["cumulative"]), detectors=[])
    >>> model = SlicedModel(SliceTracker(top_k=1, window=100, hysteresis=0.2), make, every=2)
    >>> rows = [Outcome("m", f"i{i}", "a", (i,), ("a" if i % 3 else "b",), i, i + 1, i + 1,
    ...                 (), "fr" if i % 2 else "de") for i in range(6)]
    >>> [(slice_, ev.n) for _, slice_, ev, _ in model.add(rows)]
    [('de', 2), ('(other)', 2)]
    >>> model.flush()  # they had gathered some
    True
    >>> {name: ev.n for name, ev in model.evaluators.items()}
    {'de': 3, '(other)': 3}

    References
    ----------
    Metwally, Agrawal, El Abbadi (2005), *Efficient computation of frequent and top-k elements
    in data streams*, ICDT 2005 (the tracker's summary).
    """

    def __init__(
        self,
        tracker: SliceTracker,
        make: Callable[[], ModelEvaluator],
        every: int,
        on_leave: Callable[[str], None] | None = None,
    ) -> None:
        self.tracker = tracker
        self.make = make
        self.every = every
        #: told the name of every slice that leaves, as it leaves
        self.on_leave = on_leave
        #: every slice's evaluator, the tracked ones in order of entry, then OTHER
        self.evaluators: dict[str, ModelEvaluator] = {}
        #: the outcomes each slice has gathered since its evaluator was last updated
        self.buffers: dict[str, list[Outcome]] = {}
        #: the label time of each slice's latest outcome (its records' ``ts``)
        self.latest: dict[str, int] = {}
        #: slices whose evaluator changed (updated, or new) since :meth:`taken`
        self.updated: set[str] = set()
        #: slices that left since :meth:`taken` (their parts go from a checkpoint)
        self.left: set[str] = set()
        # the gathered outcomes in checkpoints: each slice's pieces, each numbered by the
        # position of its first outcome among the slice's (its evaluator's n when it was
        # written, plus the outcomes written before it), how many of the buffer they hold,
        # and the pieces to delete
        self._pieces: dict[str, list[int]] = {}
        self._in_pieces: dict[str, int] = {}
        self._gone: list[tuple[str, int]] = []

    def add(self, outcomes: Sequence[Outcome]) -> list[Due]:
        """Route a batch of the model's outcomes (in resolution order) to their slices; return
        the records due, in the order of the outcomes that made them due."""
        routing = self.tracker.route([o.slice for o in outcomes])
        slices = routing.slices
        due: list[tuple[int, Due]] = []
        start = 0
        for index, kind, name in routing.changes:
            if kind == "enter":  # (after a leave at the same index, which gave that outcome)
                self._give(outcomes, slices, start, index, due)
                start = max(start, index)
                self._open(name)
            else:  # it leaves after the outcome at index, which may still be its own
                self._give(outcomes, slices, start, index + 1, due)
                start = index + 1
                evaluator = self.evaluators[name]
                if self.buffers[name]:  # its last numbers: a record of it as it leaves
                    self._update(name)
                    latest = self.latest[name]
                    due.append((index, (outcomes[index], name, evaluator, latest)))
                self._close(name)
        self._give(outcomes, slices, start, len(outcomes), due)
        due.sort(key=lambda item: item[0])
        return [item for _, item in due]

    def flush(self) -> bool:
        """Give every slice's evaluator the outcomes it gathered (before its numbers are read):
        no record is due by it. Whether any had gathered some."""
        moved = False
        for name, gathered in self.buffers.items():
            if gathered:
                self._update(name)
                moved = True
        return moved

    def pieces(self) -> tuple[dict[tuple[str, int], list[Outcome]], list[tuple[str, int]]]:
        """What a checkpoint writes of the gathered outcomes: the pieces not written yet,
        ``(slice, number): outcomes`` (each outcome goes into one piece, the first checkpoint's
        after it came; a piece's number is the position of its first outcome among the
        slice's, so a restore takes, after the evaluator's n outcomes, the pieces that follow
        on without a gap), and the ``(slice, number)`` of the written pieces to delete (their
        outcomes given to the evaluator since, or their slice gone). Give the first to
        :meth:`pieces_written` once the checkpoint is cut."""
        new: dict[tuple[str, int], list[Outcome]] = {}
        for name, gathered in self.buffers.items():
            held = self._in_pieces.get(name, 0)
            if len(gathered) > held:
                new[name, self.evaluators[name].n + held] = gathered[held:]
        return new, list(self._gone)

    def pieces_written(self, new: dict[tuple[str, int], list[Outcome]]) -> None:
        """The pieces :meth:`pieces` gave, and its deletions, are in a checkpoint."""
        for (name, number), rows in new.items():
            self._pieces.setdefault(name, []).append(number)
            self._in_pieces[name] = self._in_pieces.get(name, 0) + len(rows)
        self._gone.clear()

    def written_pieces(self) -> dict[str, list[int]]:
        """The numbers of the pieces in a checkpoint that hold each slice's gathered outcomes."""
        return {name: list(numbers) for name, numbers in self._pieces.items()}

    def taken(self) -> None:
        """The evaluators' changes so far are in a checkpoint."""
        self.updated.clear()
        self.left.clear()

    def records_due(self) -> Iterator[tuple[str, ModelEvaluator]]:
        """Every slice with outcomes, for records of its latest numbers (after :meth:`flush`)."""
        for name, evaluator in self.evaluators.items():
            if evaluator.n:
                yield name, evaluator

    # -- internals ---------------------------------------------------------------------------
    def _open(self, name: str) -> None:
        if name not in self.evaluators:
            self.evaluators[name] = self.make()
            self.buffers[name] = []
            self.updated.add(name)
            self.left.discard(name)

    def _close(self, name: str) -> None:
        del self.evaluators[name], self.buffers[name]
        self.latest.pop(name, None)
        self._forget_pieces(name)
        self.updated.discard(name)
        self.left.add(name)
        if self.on_leave is not None:
            self.on_leave(name)

    def _update(self, name: str) -> None:
        """Give a slice's evaluator the outcomes it gathered."""
        gathered, evaluator = self.buffers[name], self.evaluators[name]
        evaluator.update(gathered)
        evaluator.flush()  # gathered here already: its estimators take them now
        gathered.clear()
        self.updated.add(name)
        self._forget_pieces(name)

    def _forget_pieces(self, name: str) -> None:
        self._gone += [(name, number) for number in self._pieces.pop(name, ())]
        self._in_pieces.pop(name, None)

    def _give(
        self,
        outcomes: Sequence[Outcome],
        slices: list[str],
        start: int,
        stop: int,
        due: list[tuple[int, Due]],
    ) -> None:
        """Gather ``outcomes[start:stop]`` in their slices; update a slice's evaluator where a
        record of it is due (its n reaching a multiple of ``every``)."""
        if start >= stop:
            return
        every = self.every
        by_slice: dict[str, list[int]] = {}
        for i in range(start, stop):
            by_slice.setdefault(slices[i], []).append(i)
        for name, places in by_slice.items():
            if name not in self.evaluators:  # OTHER, the first time
                self._open(name)
            evaluator, gathered = self.evaluators[name], self.buffers[name]
            self.latest[name] = outcomes[places[-1]].t_label
            k = 0
            while k < len(places):
                missing = every - (evaluator.n + len(gathered)) % every
                take = places[k : k + min(missing, GATHER_MAX - len(gathered))]
                gathered += [outcomes[i] for i in take]
                k += len(take)
                if (evaluator.n + len(gathered)) % every == 0:  # a record is due
                    self._update(name)
                    cause = outcomes[take[-1]]
                    due.append((take[-1], (cause, name, evaluator, cause.t_label)))
                elif len(gathered) >= GATHER_MAX:
                    self._update(name)

    # -- state -------------------------------------------------------------------------------
    def index(self) -> dict[str, Any]:
        """The small part of :meth:`state`: the tracker, the slices in order and their latest
        label times."""
        return {
            "tracker": self.tracker.state(),
            "slices": list(self.evaluators),
            "latest": [self.latest.get(name) for name in self.evaluators],
        }

    def state(self) -> dict[str, Any]:
        """:meth:`index`, each slice's evaluator state and its gathered outcomes."""
        return {
            **self.index(),
            "evaluators": {name: ev.state() for name, ev in self.evaluators.items()},
            "buffers": {name: [list(o) for o in rows] for name, rows in self.buffers.items()},
        }

    @classmethod
    def from_state(
        cls,
        state: dict[str, Any],
        make: Callable[[], ModelEvaluator],
        restore: Callable[[dict[str, Any]], ModelEvaluator],
        every: int,
        on_leave: Callable[[str], None] | None = None,
    ) -> SlicedModel:
        """The object of :meth:`state`; ``restore`` makes a slice's evaluator from its state.
        ``state["pieces"]``, when given (a restore from checkpoints), names the pieces each
        slice's gathered outcomes came from, which a checkpoint deletes once they are given."""
        model = cls(SliceTracker.from_state(state["tracker"]), make, every, on_leave)
        pieces = state.get("pieces", {})
        for name, latest in zip(state["slices"], state["latest"], strict=True):
            model.evaluators[name] = restore(state["evaluators"][name])
            rows = [outcome_of(row) for row in state.get("buffers", {}).get(name, [])]
            model.buffers[name] = rows
            if latest is not None:
                model.latest[name] = latest
            if pieces.get(name):
                model._pieces[name] = list(pieces[name])
                model._in_pieces[name] = len(rows)
        return model


def slice_key(model_id: str, name: str) -> str:
    """The name a slice's parts have in a checkpoint (its model's name, then the slice's)."""
    return f"{model_id}\x00{name}"
