"""The join of instances, predictions and late labels into outcomes.

A plain class driven by event time. Events are applied **in the order of their timestamps**
(ties by content), whatever order they arrive in: an event waits until the clock has passed
it — the streaming join's watermark, or replay's largest timestamp, minus one and minus
``label_grace``, the most that event time may run out of order within one input partition —
and the timed rules (``label_ttl``, ``max_pending``, how long a resolved instance is
remembered) act at their own event times between the events. So every decision is a function
of the events alone: the same for any keying of the input topics, any interleaving of their
partitions, a replay of a file, or a restart. docs/replay.md states the rules for users.

Here is the clock: which event applies when. What each event and each timed rule does is
:mod:`streameval.core.join_rules`; a pending instance's record and the outcomes it resolves
into, :mod:`streameval.core.pending`; the events waiting for the clock,
:mod:`streameval.core.waiting`. Where the instances live is the state's business
(:mod:`streameval.core.state`, or the worker's disk store): the join asks it for records by
instance id, a batch at a time.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterable
from typing import Any

from streameval.core.join_rules import JoinRules
from streameval.core.outcome import (
    INSTANCE,
    LABEL,
    PREDICTION,
    EventRow,
    Label,
    Outcome,
    Scores,
)
from streameval.core.pending import PREDICTIONS
from streameval.core.state import EVENT, META, WAITING, decode_value
from streameval.core.waiting import Waiting, WaitingEvents

__all__ = ["Join", "join_partition"]


def join_partition(instance_id: str, partitions: int) -> int:
    """The join partition of an instance (CRC-32 of its UTF-8 id; stable across processes):
    the worker routes by it, and a replay that emulates the worker's partitions too.

    >>> join_partition("inst-00001", 6)
    3
    """
    return zlib.crc32(instance_id.encode()) % partitions


class Join(JoinRules):
    """Buffer predictions per instance and model until the label arrives; emit outcomes.

    Rules (docs/replay.md, "How events become outcomes"), applied in event-time order:

    * ``t_instance`` is the instance record's ``ts``, or the first prediction's ``ts`` when no
      instance record arrives (the instances topic is optional). A second instance record is
      a duplicate, counted.
    * A prediction counts if its ``ts`` ≤ the label's ``ts``; one stamped after the label is
      *leaky*: dropped and counted. Several predictions of one model are its evolving
      predictions (first = initial, last = final), ordered by ``ts``, then by label. An exact
      repeat (same model, ``ts`` and label) is a duplicate, dropped and counted.
    * A label resolves the instance when the clock passes it, every event stamped up to then
      being in; every model that predicted it gets an outcome. The clock runs
      ``label_grace`` behind what is known to be in, so a prediction that reaches the join up to
      that much later than its label's time, in event time, still counts. A label nobody
      predicted is an *orphan*. A second label of an instance is ignored and counted: a
      duplicate if equal, else a conflict (the latest conflicts are kept in
      :attr:`conflicts` for logging).
    * A resolved instance is remembered for ``label_ttl`` after its resolution (and at most
      ``max_pending`` of them): later predictions of it are *late*, later labels duplicates or
      conflicts, a later instance record *late*; all counted and ignored.
    * An instance without a label ``label_ttl`` after its first event expires, counted as
      unlabelled per model. When more than ``max_pending`` instances are pending, the oldest
      (by first event) is evicted and counted (a pending instance never has its label: the
      label resolves it).

    Events arrive through :meth:`add_events` (or ``add_*`` one at a time) and wait until
    :meth:`advance` moves the clock past them. An event stamped at or before the clock when it
    arrives is *late* (its partition broke time order): it is applied at once. A clock that
    passes many waiting events may apply them a ``budget`` at a time: the join is then
    :attr:`behind` until further calls of :meth:`advance` have applied the rest, and the
    outcomes are the same as in one step.

    Outcomes are returned in resolution order — by ``(due, instance_id)`` — and that order
    defines "the previous label" for the persistent baseline downstream.

    Parameters
    ----------
    label_grace
        How far (ms of event time) the clock stays behind what is known to be in: how much
        later than its time an event may come and still be applied in its place.
    label_ttl
        How long (ms) an instance may wait for its label, and a resolved one is remembered.
    max_pending
        Bound on the number of instances held (and of resolved instances remembered).
    state
        Where the instances live (default: :class:`~streameval.core.state.MemoryState`).
    notices
        Whether the outcomes it returns also count, as
        :func:`~streameval.core.outcome.notice` rows after each call's outcomes, the instances
        each model predicts for the first time (label maturity: streameval.core.maturity).

    Examples
    --------
    >>> join = Join(label_grace=0)
    >>> join.add_prediction("i1", "m1", ts=100, label="cat", now=99)  # waits for the clock
    []
    >>> join.add_prediction("i1", "m1", ts=150, label="dog", now=120)
    []
    >>> join.add_label("i1", ts=200, label="dog", now=180)
    []
    >>> [o.labels for o in join.advance(200)]  # every event up to 200 is in: resolved
    [('cat', 'dog')]
    >>> join.add_prediction("i1", "m1", ts=210, label="dog", now=220)
    []
    >>> join.counters["late_prediction"]
    1

    References
    ----------
    Grzenda, Gomes, Bifet (2020), *Performance measures for evolving predictions under delayed
    labelling classification*, IJCNN: the latency period [t_instance, t_label] and evolving
    predictions (Section III).
    """

    def __init__(
        self,
        label_grace: int = 5_000,
        label_ttl: int = 7 * 86_400_000,
        max_pending: int = 100_000_000,
        state: Any = None,
        notices: bool = False,
    ) -> None:
        for name, value, low in (
            ("label_grace", label_grace, 0),
            ("label_ttl", label_ttl, 1),
            ("max_pending", max_pending, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name}={value!r} is not allowed; use an integer >= {low}")
        self.label_grace = label_grace
        super().__init__(label_ttl, max_pending, state, notices)
        self._target = self._clock  # where the clock goes once the due events are applied
        self._waiting = WaitingEvents()
        self._seq = 0

    # -- public API -----------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Instances currently held, waiting for a label."""
        return self.state.pending_count()

    @property
    def changed(self) -> int:
        """What a checkpoint would cost now: the keys of the state that changed, and the
        waiting events taken in or applied since the last one."""
        return self.state.changed() + self._waiting.changed()

    @property
    def waiting(self) -> int:
        """Events received but not yet applied (stamped after the clock)."""
        return len(self._waiting)

    @property
    def behind(self) -> bool:
        """Whether the clock has not reached where :meth:`advance` was told yet: events due
        wait for more calls of :meth:`advance` (it was given a ``budget``)."""
        return self._clock < self._target

    def add_instance(
        self, instance_id: str, ts: int, now: int, slice_value: str = ""
    ) -> list[Outcome]:
        row = (INSTANCE, instance_id, "", ts, slice_value, 0, 0, None)
        return self.add_events([row], now)[0]

    def add_prediction(
        self,
        instance_id: str,
        model_id: str,
        ts: int,
        label: Label,
        now: int,
        scores: Scores | None = None,
    ) -> list[Outcome]:
        row = (PREDICTION, instance_id, model_id, ts, label, 0, 0, scores)
        return self.add_events([row], now)[0]

    def add_label(self, instance_id: str, ts: int, label: Label, now: int) -> list[Outcome]:
        return self.add_events([(LABEL, instance_id, "", ts, label, 0, 0, None)], now)[0]

    def add_events(
        self,
        events: Iterable[EventRow],
        now: int,
        seen: list[int] | None = None,
        budget: int | None = None,
    ) -> tuple[list[Outcome], int]:
        """Take a batch of events, then move the clock to ``now`` (never backwards): apply,
        in time order, every event stamped at or before it, with the timed rules between
        (at most ``budget`` waiting events: see :meth:`advance`).

        ``seen`` (optional) holds, per source index, the last source offset taken: an event
        whose offset is not above it is a repeat (a resent batch after a crash) and is skipped;
        ``seen`` is updated. Returns the outcomes and the number of repeats skipped. A join
        that is :attr:`behind` first applies every event due.
        """
        out: list[Outcome] = []
        if self.behind:  # events arriving now come after those already due
            self.advance(self._target + self.label_grace, out)
        clock = self._clock
        run: list[Waiting] = []
        late: list[Waiting] = []
        repeats = 0
        seq = self._seq
        for kind, instance_id, model_id, ts, label, source, offset, scores in events:
            if seen is not None:
                if offset <= seen[source]:
                    repeats += 1
                    continue
                seen[source] = offset
            seq += 1
            entry = (ts, kind, instance_id, model_id, type(label) is str, label, seq, scores)
            if ts > clock:
                run.append(entry)
            else:
                late.append(entry)
        self._seq = seq
        if late:  # stamped at or before the clock already passed: applied at once, as they come
            late.sort(key=lambda e: e[6])
            self._apply(late, out)
        if run:
            run.sort()
            self._waiting.add(run)
        self.advance(now, out, budget)
        return out, repeats

    def advance(
        self, now: int, out: list[Outcome] | None = None, budget: int | None = None
    ) -> list[Outcome]:
        """Move the clock to ``now`` (never backwards): apply the events stamped up to it and
        the timed rules due by then, in time order. Returns the outcomes (also appended to
        ``out`` if given).

        With a ``budget``, at most that many waiting events are applied: if more are due, the
        clock stops just before the next one and the join is :attr:`behind`; each further
        call applies the next ``budget`` (a caller with nothing newer passes the same
        ``now``). The slices give the outcomes of one call without a budget, in the same
        order, and a checkpoint may be taken between any two of them: a worker keeps what one
        event batch sets off — and so its next checkpoint — bounded."""
        if out is None:
            out = []
        now -= self.label_grace  # the join's own clock
        if now > self._target:
            self._target = now
        target = self._target
        waiting = self._waiting
        if waiting.runs:
            waiting.take(target)
        if waiting.due:
            self._apply(waiting.step(budget), out)
            if waiting.due:
                self._notify(out)
                return out  # behind: the rest comes with the next calls
        if self._next <= target + 1:
            self._rules(target + 1, out)
        self._clock = target
        self._notify(out)
        return out

    def flush(self) -> list[Outcome]:
        """The end of a finite stream (replay): apply every waiting event (nothing more can
        come). Instances without a label stay pending."""
        out: list[Outcome] = []
        if self._waiting.runs or self.behind:
            last = self._waiting.latest(self._target)
            self.advance(max(last, self._target) + self.label_grace, out)
        return out

    @property
    def clock(self) -> int:
        """Every event stamped up to this time is applied: later outcomes have a later due."""
        return self._clock

    # -- time order -------------------------------------------------------------------------
    def _apply(self, events: list[Waiting], out: list[Outcome]) -> None:
        """Apply events in the given order, the timed rules due before each in between."""
        state = self.state
        state.prefetch({e[2] for e in events})
        instance, prediction, label_ = self._instance, self._prediction, self._label
        max_pending, pending = self.max_pending, state.pending_count
        for ts, kind, instance_id, model_id, _, label, _, scores in events:
            clock = self._clock
            if ts > clock:
                if self._next <= ts:  # something timed acts before this event
                    self._rules(ts, out)
                self._clock = ts - 1  # everything before it is in
            elif self._next <= clock + 1:  # a late event: it comes now
                self._rules(clock + 1, out)
            if kind == PREDICTION:
                prediction(instance_id, model_id, ts, label, scores, out)
            elif kind == LABEL:
                label_(instance_id, ts, label, out)
            else:
                instance(instance_id, ts, label, out)  # an instance row's label: its slice
            if pending() > max_pending:  # the bound holds after every event
                self._limit(out)

    # -- checkpoints --------------------------------------------------------------------------
    def changes(self) -> dict[bytes, bytes | None]:
        """What changed since the last :meth:`commit`, as the state's encoded key/value pairs
        (None: deleted) plus the join's scalars under the meta key and the events waiting for
        the clock under keys of their own: a checkpoint writes these, and the pairs of every
        checkpoint so far, latest value per key, restore the join."""
        changes = self.state.changes(self.meta())
        self._waiting.changes(changes)
        return changes

    def freeze(self, changes: dict[bytes, bytes | None]) -> Any:
        """Close a checkpoint: ``changes`` (those of :meth:`changes`, with the caller's keys)
        are what it writes, and what changes from now on goes into the next one. Give the
        returned cut to :meth:`written` once the checkpoint is durable; the join goes on
        meanwhile."""
        cut = self.state.freeze(changes)
        self._waiting.committed()
        return cut

    def prepare(self, cut: Any) -> None:
        """Prepare what :meth:`written` writes of ``cut`` (a disk store's batch), before the
        checkpoint is durable; optional."""
        self.state.prepare(cut)

    def written(self, cut: Any, *where: Any) -> None:
        """The checkpoint of ``cut`` (:meth:`freeze`'s) is durable; ``where`` tells a disk
        store what to write with it."""
        self.state.written(cut, *where)

    def commit(self, *where: Any) -> None:
        """The changes so far are durable (written to a checkpoint); ``where`` tells a disk
        store what to write with them."""
        self.state.commit(*where)
        self._waiting.committed()

    @classmethod
    def resume(
        cls,
        meta: dict[str, Any],
        state: Any,
        waiting: Iterable[tuple[bytes, bytes]],
        notices: bool = False,
    ) -> Join:
        """A join over a ``state`` that holds its instances already (a disk store), with its
        scalars (:meth:`meta`) and the events that were waiting for the clock (their keys and
        values, as a checkpoint wrote them); ``notices``
        as the constructor's (a setting, not state: none are held between calls)."""
        join = cls(meta["label_grace"], meta["label_ttl"], meta["max_pending"], state, notices)
        join.restore_meta(meta, waiting)
        return join

    @classmethod
    def restore(
        cls, items: Iterable[tuple[bytes, bytes]], state: Any = None, notices: bool = False
    ) -> Join:
        """A join from the latest value of every key its checkpoints wrote (in any order)."""
        items = [(k, v) for k, v in items if v is not None]
        meta = next(decode_value(v) for k, v in items if k == META)
        join = cls(meta["label_grace"], meta["label_ttl"], meta["max_pending"], state, notices)
        join.state.load(items, join.queue_entries, PREDICTIONS)
        join.restore_meta(meta, [(k, v) for k, v in items if k[:1] in (EVENT, WAITING)])
        join.commit()
        return join

    def meta(self) -> dict[str, Any]:
        """The join's scalars (for a checkpoint; the instances are the state's)."""
        return {
            "label_grace": self.label_grace,
            "label_ttl": self.label_ttl,
            "max_pending": self.max_pending,
            "clock": self._clock,
            "target": self._target,
            "seq": self._seq,
            "counters": dict(self.counters),
            "model_counters": [[r, m, c] for (r, m), c in self.model_counters.items()],
        }

    def restore_meta(self, meta: dict[str, Any], waiting: Iterable[tuple[bytes, bytes]]) -> None:
        """Take back the scalars of :meth:`meta` and the ``waiting`` events (their keys and
        values; the instances are already in the state, and its time queues)."""
        self._clock = meta["clock"]
        self._target = meta.get("target", self._clock)  # absent before slices existed
        self._seq = meta["seq"]
        self._waiting = WaitingEvents.restored(waiting)
        self.counters = Counter(meta["counters"])
        self.model_counters = Counter({(r, m): c for r, m, c in meta["model_counters"]})
        self._schedule()
