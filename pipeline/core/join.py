"""The join of instances, predictions and late labels into outcomes.

A plain class driven by event time (the ``ts`` of each message) plus an explicit ``now`` for
the rules that depend on how long something has waited (``label_grace``, ``label_ttl``), so that
replay and tests are deterministic. docs/replay.md states the rules for users.
"""

from __future__ import annotations

import heapq
import sys
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable
from typing import Any, NamedTuple

__all__ = [
    "DROP_REASONS",
    "INSTANCE",
    "LABEL",
    "PREDICTION",
    "EventRow",
    "Join",
    "Outcome",
    "label_order",
]

#: Every reason a record is dropped or counted as odd, in the order the docs list them.
DROP_REASONS = (
    "leaky_prediction",  # stamped after its label: it could have seen the label
    "late_prediction",  # arrived after its instance was resolved for that model
    "duplicate_prediction",  # same model, same ts, same label as one already buffered
    "duplicate_label",  # same label again
    "conflicting_label",  # a different label for an instance that has one
    "orphan_label",  # no model predicted the instance by the time it was resolved
    "label_before_instance",  # label ts earlier than the instance time: data error
    "duplicate_instance",  # a second instance record
    "late_instance",  # instance record after the instance was resolved
    "expired_unlabelled",  # no label within label_ttl (per model that predicted)
    "evicted_max_pending",  # pushed out of a full buffer (per model that predicted)
)

Label = str | int
#: The kinds of event, as :class:`EventRow` and the worker's wire format carry them
INSTANCE, PREDICTION, LABEL = 0, 1, 2
#: (kind, instance_id, model_id or "", ts, label or "", source index, source offset)
EventRow = tuple[int, str, str, int, Label, int, int]


class Outcome(NamedTuple):
    """One resolved instance for one model.

    ``times`` and ``labels`` are the model's prediction timeline, oldest first, every entry
    stamped at or before the label: ``labels[0]`` is the initial prediction, ``labels[-1]`` the
    final one, anything between are re-predictions (the evolving predictions of Grzenda et al.).
    A named tuple: cheap to build by the million, and it travels between the worker's stages
    as a msgpack array as it is.
    """

    model_id: str
    instance_id: str
    y_true: Label
    times: tuple[int, ...]
    labels: tuple[Label, ...]
    t_instance: int
    t_label: int
    #: when the join resolved it in its clock (label arrival + ``label_grace``): with
    #: ``instance_id`` the key that orders outcomes (:meth:`Join.advance`)
    due: int = 0

    @property
    def initial(self) -> Label:
        return self.labels[0]

    @property
    def final(self) -> Label:
        return self.labels[-1]


# What the join holds for one pending instance: one flat list, the fewest objects per instance
# (the memory per pending instance must stay small):
#   [t_instance, has_record, label, label_ts, label_arrival, model, ts, label, model, ts, ...]
# t_instance is None until the instance record or a prediction gives it; the predictions
# follow as (model_id, ts, label) triples in arrival order. Model ids and string labels are
# interned, so a pending instance shares them with every other one.
T_INSTANCE, HAS_RECORD, LABEL, LABEL_TS, LABEL_ARRIVAL, PREDICTIONS = range(6)
_intern = sys.intern
#: builds an :class:`Outcome` from a tuple of its fields without the Python-level ``__new__``
#: of named tuples (the join makes one per model per resolved instance)
_new_outcome = tuple.__new__


def _new_record(t_instance: int | None, has_record: bool) -> list:
    return [t_instance, has_record, None, None, None]


def label_order(label: Label) -> tuple[int, Label]:
    """A total order of labels, integers before strings: how the join breaks ties between
    records that compete (two labels of one instance stamped alike, two predictions of one
    model stamped alike) by their content, never by which arrived first.

    >>> sorted(["b", 2, "a", 1], key=label_order)
    [1, 2, 'a', 'b']
    """
    return (1, label) if isinstance(label, str) else (0, label)


def _by_time_then_label(entry: tuple[int, Label]) -> tuple[int, tuple[int, Label]]:
    return entry[0], label_order(entry[1])


def _timelines(record: list) -> dict[str, list[tuple[int, Label]]]:
    """The predictions of a record per model (models in order of their first prediction),
    each timeline sorted by ``ts``, ties by :func:`label_order` (not by arrival)."""
    timelines: dict[str, list[tuple[int, Label]]] = {}
    for i in range(PREDICTIONS, len(record), 3):
        entry = (record[i + 1], record[i + 2])
        timeline = timelines.get(record[i])
        if timeline is None:
            timelines[record[i]] = [entry]
        elif entry[0] <= timeline[-1][0]:  # out of order, or a tie: rare
            timeline.append(entry)
            timeline.sort(key=_by_time_then_label)
        else:
            timeline.append(entry)
    return timelines


def _models(record: list) -> list[str]:
    """The models that predicted, in order of their first prediction."""
    return list(dict.fromkeys(record[PREDICTIONS::3]))


class Join:
    """Buffer predictions per instance and model until the label arrives; emit outcomes.

    Rules (docs/replay.md, "How events become outcomes"):

    * ``t_instance`` is the instance record's ``ts``, or the first prediction's ``ts`` when no
      instance record arrives (the instances topic is optional). Of two instance records the
      earlier ``ts`` is kept, the other counted as a duplicate.
    * A prediction counts if its ``ts`` ≤ the label's ``ts``; one stamped after the label is
      *leaky*: dropped and counted. Several predictions of one model are its evolving
      predictions (first = initial, last = final), ordered by ``ts`` and, at equal ``ts``, by
      label (:func:`label_order`). An exact repeat (same model, ``ts`` and label) is a
      duplicate, dropped and counted.
    * A label is held for ``label_grace`` after it arrives, so that predictions it overtook
      can still join; then every model that predicted the instance is resolved. It arrives at
      ``max(ts, now)``: at ``now`` for a replayed file, whose clock is the largest ``ts`` seen,
      and at its own ``ts`` for the streaming join, whose clock is a watermark that trails the
      labels. With grace 0 resolution is immediate once ``now`` has reached that arrival.
      Predictions for a resolved instance are *late*: dropped and counted. A label nobody
      predicted is an *orphan*.
    * Of two labels of one instance the earlier ``ts`` (then :func:`label_order`) is kept, the
      other ignored and counted: a duplicate if equal, else a conflict (the latest conflicts
      are kept in :attr:`conflicts` for logging). Once the instance is resolved, any further
      label is ignored and counted the same way.

    Where records compete, their content decides — never which arrived first — so the
    outcomes do not depend on how the input was keyed or interleaved.
      A resolved instance is remembered — for late predictions and repeated labels — for
      ``label_ttl`` and at most ``max_pending`` resolved instances.
    * An instance without a label ``label_ttl`` after ``t_instance`` is evicted and counted as
      unlabelled per model. At most ``max_pending`` instances wait; past that the oldest
      (first seen) are evicted and counted — or, if the oldest already has its label and is
      only waiting out its grace, resolved early.

    Outcomes are returned in resolution order — by ``(due, instance_id)``, where ``due`` is the
    arrival plus the grace — and that order defines "the previous label" for the persistent
    baseline downstream. Ties of ``due`` are broken by ``instance_id``, not by arrival, so the
    order does not depend on how events from different partitions interleaved.

    Parameters
    ----------
    label_grace
        How long (ms of ``now``) a label waits for predictions it may have overtaken.
    label_ttl
        How long (ms, ``now`` minus ``t_instance``) an instance may wait for its label.
    max_pending
        Bound on the number of instances held.

    Examples
    --------
    >>> join = Join(label_grace=0)
    >>> join.add_prediction("i1", "m1", ts=100, label="cat", now=100)
    []
    >>> join.add_prediction("i1", "m1", ts=150, label="dog", now=150)
    []
    >>> [o.labels for o in join.add_label("i1", ts=200, label="dog", now=200)]
    [('cat', 'dog')]
    >>> join.add_prediction("i1", "m1", ts=210, label="dog", now=210)  # too late now
    []
    >>> join.counters["late_prediction"]
    1

    References
    ----------
    Grzenda, Gomes, Bifet (2020), *Performance measures for evolving predictions under delayed
    labelling classification*, IJCNN: the latency period [t_instance, t_label] and evolving
    predictions (SPEC §6.1).
    """

    def __init__(
        self,
        label_grace: int = 5_000,
        label_ttl: int = 7 * 86_400_000,
        max_pending: int = 1_000_000,
    ) -> None:
        for name, value, low in (
            ("label_grace", label_grace, 0),
            ("label_ttl", label_ttl, 1),
            ("max_pending", max_pending, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name}={value!r} is not allowed; use an integer >= {low}")
        self.label_grace = label_grace
        self.label_ttl = label_ttl
        self.max_pending = max_pending
        self._now = -(2**62)
        self._pending: OrderedDict[str, list] = OrderedDict()  # id -> record (see above)
        self._grace: list[tuple[int, str]] = []  # heap of (due, instance_id)
        self._expiry: list[tuple[int, str]] = []  # heap of (t_instance, instance_id)
        self._resolved: OrderedDict[str, tuple[Label, int]] = OrderedDict()  # id -> (label, ts)
        #: the latest conflicting labels (instance_id, kept, ignored), for an adapter to log
        self.conflicts: deque[tuple[str, Label, Label]] = deque(maxlen=10)
        self._next_due = 2**62  # see _schedule
        self.counters: Counter[str] = Counter()
        self.model_counters: Counter[tuple[str, str]] = Counter()  # (reason, model_id)

    # -- public API -----------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Instances currently buffered."""
        return len(self._pending)

    def add_instance(self, instance_id: str, ts: int, now: int) -> list[Outcome]:
        out = self.advance(now)
        self._instance(instance_id, ts, out)
        return out

    def add_prediction(
        self, instance_id: str, model_id: str, ts: int, label: Label, now: int
    ) -> list[Outcome]:
        out = self.advance(now)
        self._prediction(instance_id, model_id, ts, label, out)
        return out

    def add_label(self, instance_id: str, ts: int, label: Label, now: int) -> list[Outcome]:
        out = self.advance(now)
        self._label(instance_id, ts, label, out)
        return out

    def add_events(
        self, events: Iterable[EventRow], now: int, seen: list[int] | None = None
    ) -> tuple[list[Outcome], int]:
        """Apply a batch of events in order at clock ``now``, exactly as the ``add_*`` calls
        one by one would, in one loop (the streaming join's hot path).

        ``seen`` (optional) holds, per source index, the last source offset applied: an event
        whose offset is not above it is a repeat (a resent batch after a crash) and is skipped;
        ``seen`` is updated. Returns the outcomes and the number of repeats skipped.
        """
        out = self.advance(now)
        now = self._now
        instance, prediction, label_ = self._instance, self._prediction, self._label
        repeats = 0
        for kind, instance_id, model_id, ts, label, source, offset in events:
            if seen is not None:
                if offset <= seen[source]:
                    repeats += 1
                    continue
                seen[source] = offset
            if self._next_due <= now:  # what advance(now) would do before this event
                out += self.advance(now)
            if kind == PREDICTION:
                prediction(instance_id, model_id, ts, label, out)
            elif kind == LABEL:
                label_(instance_id, ts, label, out)
            else:
                instance(instance_id, ts, out)
        return out, repeats

    # -- one event (the clock already advanced) ----------------------------------------------
    def _instance(self, instance_id: str, ts: int, out: list[Outcome]) -> None:
        if instance_id in self._resolved:
            self._count("late_instance")
            return
        record = self._pending.get(instance_id)
        if record is None:
            self._insert(instance_id, _new_record(ts, True), out)
        elif record[HAS_RECORD]:
            self._count("duplicate_instance")
            if (
                ts < record[T_INSTANCE]
            ):  # the earliest record is the instance's, whatever came first
                record[T_INSTANCE] = ts
                self._schedule_expiry(instance_id, ts)
        else:
            record[HAS_RECORD] = True
            record[T_INSTANCE] = ts
            self._schedule_expiry(instance_id, ts)

    def _prediction(
        self, instance_id: str, model_id: str, ts: int, label: Label, out: list[Outcome]
    ) -> None:
        if instance_id in self._resolved:
            self._count("late_prediction", model_id)
            return
        record = self._pending.get(instance_id)
        if record is None:
            record = _new_record(None, False)
            self._insert(instance_id, record, out)
        label_ts = record[LABEL_TS]
        if label_ts is not None and ts > label_ts:
            self._count("leaky_prediction", model_id)
            return
        t_instance = record[T_INSTANCE]
        if t_instance is None or (not record[HAS_RECORD] and ts < t_instance):
            record[T_INSTANCE] = ts  # the first prediction's time, until an instance record
            self._schedule_expiry(instance_id, ts)
        elif ts == t_instance:
            ts = t_instance  # one int object for both
        if type(model_id) is str:
            model_id = _intern(model_id)
        if type(label) is str:
            label = _intern(label)
        for i in range(PREDICTIONS, len(record), 3):
            if record[i] == model_id and record[i + 1] == ts and record[i + 2] == label:
                self._count("duplicate_prediction", model_id)
                return
        record += (model_id, ts, label)

    def _label(self, instance_id: str, ts: int, label: Label, out: list[Outcome]) -> None:
        known = self._resolved.get(instance_id)
        if known is not None:  # resolved already: too late to change anything
            self._second_label(instance_id, known[0], label)
            return
        record = self._pending.get(instance_id)
        if record is None:
            record = _new_record(None, False)
            self._insert(instance_id, record, out)
        elif record[LABEL] is not None:
            # two labels compete: the earlier in event time (ties: label_order) is the
            # instance's label, whichever arrived first
            kept = record[LABEL]
            if (ts, label_order(label)) >= (record[LABEL_TS], label_order(kept)):
                self._second_label(instance_id, kept, label)
                return
            self._second_label(instance_id, label, kept)  # its grace entry is now stale
        arrival = ts if ts > self._now else self._now
        if type(label) is str:
            label = _intern(label)
        record[LABEL], record[LABEL_TS], record[LABEL_ARRIVAL] = label, ts, arrival
        due = arrival + self.label_grace
        if due <= self._now:
            self._resolve(instance_id, out)
        else:
            heapq.heappush(self._grace, (due, instance_id))
            if due < self._next_due:
                self._next_due = due

    def advance(self, now: int) -> list[Outcome]:
        """Move the clock to ``now`` (never backwards): resolve labels whose grace has passed
        and expire instances past ``label_ttl``."""
        if now > self._now:
            self._now = now
        now = self._now
        if now < self._next_due:  # nothing is due yet: the common case, kept cheap
            return []
        out: list[Outcome] = []
        grace = self._grace
        while grace and grace[0][0] <= now:
            self._resolve_due(*heapq.heappop(grace), out)
        expiry, ttl = self._expiry, self.label_ttl
        while expiry and expiry[0][0] + ttl < now:
            t_instance, instance_id = heapq.heappop(expiry)
            record = self._pending.get(instance_id)
            if record is None or record[T_INSTANCE] != t_instance:
                continue  # a stale heap entry: resolved, or t_instance moved since
            if record[LABEL] is None:
                del self._pending[instance_id]
                self._drop_pending(record, "expired_unlabelled")
        resolved = self._resolved
        while resolved:
            first = next(iter(resolved.values()))
            if first[1] + self.label_ttl >= now:
                break
            resolved.popitem(last=False)
        self._schedule()
        return out

    def _schedule(self) -> None:
        """The earliest clock value at which :meth:`advance` has something to do."""
        due = []
        if self._grace:
            due.append(self._grace[0][0])
        if self._expiry:
            due.append(self._expiry[0][0] + self.label_ttl + 1)
        if self._resolved:
            due.append(next(iter(self._resolved.values()))[1] + self.label_ttl + 1)
        self._next_due = min(due, default=2**62)

    def flush(self) -> list[Outcome]:
        """Resolve every instance that has its label now, without waiting for its grace.

        For the end of a finite stream (replay): nothing more can arrive, so waiting is
        pointless. Instances without a label stay pending.
        """
        out: list[Outcome] = []
        while self._grace:
            self._resolve_due(*heapq.heappop(self._grace), out)
        return out

    def _resolve_due(self, due: int, instance_id: str, out: list[Outcome]) -> None:
        """Resolve the instance whose label this grace entry was scheduled for — not a later
        incarnation of the same id (resolved, forgotten, then seen again)."""
        record = self._pending.get(instance_id)
        if record is not None and record[LABEL_ARRIVAL] is not None:
            if record[LABEL_ARRIVAL] + self.label_grace == due:
                self._resolve(instance_id, out)

    # -- internals --------------------------------------------------------------------------
    def _second_label(self, instance_id: str, kept: Label, other: Label) -> None:
        """Count a label that lost to ``kept``: a duplicate, or a conflict (kept for logging)."""
        if other == kept:
            self._count("duplicate_label")
        else:
            self._count("conflicting_label")
            self.conflicts.append((instance_id, kept, other))

    def _count(self, reason: str, model_id: str | None = None) -> None:
        self.counters[reason] += 1
        if model_id is not None:
            self.model_counters[reason, model_id] += 1

    def _insert(self, instance_id: str, record: list, out: list[Outcome]) -> None:
        while len(self._pending) >= self.max_pending:
            oldest_id, oldest = self._pending.popitem(last=False)
            if oldest[LABEL] is not None:  # was waiting for its grace: resolve it now instead
                self._pending[oldest_id] = oldest
                self._resolve(oldest_id, out)
            else:
                self._drop_pending(oldest, "evicted_max_pending")
        self._pending[instance_id] = record
        if record[T_INSTANCE] is not None:
            self._schedule_expiry(instance_id, record[T_INSTANCE])

    def _schedule_expiry(self, instance_id: str, t_instance: int) -> None:
        expiry = self._expiry
        if len(expiry) > 2 * len(self._pending) + 1024:
            # entries of resolved instances are only dropped when due: compact now and then
            expiry[:] = [(r[T_INSTANCE], i) for i, r in self._pending.items()
                         if r[T_INSTANCE] is not None]  # fmt: skip
            heapq.heapify(expiry)
        heapq.heappush(expiry, (t_instance, instance_id))
        self._next_due = min(self._next_due, t_instance + self.label_ttl + 1)

    def _drop_pending(self, record: list, reason: str) -> None:
        if len(record) > PREDICTIONS:
            for model_id in _models(record):
                self._count(reason, model_id)
        else:
            self._count(reason)

    def _resolve(self, instance_id: str, out: list[Outcome]) -> None:
        record = self._pending.pop(instance_id)
        label, label_ts = record[LABEL], record[LABEL_TS]
        due = record[LABEL_ARRIVAL] + self.label_grace
        resolved = self._resolved
        resolved[instance_id] = (label, self._now)
        self._next_due = min(self._next_due, self._now + self.label_ttl + 1)
        if len(resolved) > self.max_pending:  # remembered for label_ttl, but never unbounded
            resolved.popitem(last=False)
        models = record[PREDICTIONS::3]
        if models and len(set(models)) == len(models):
            times = record[PREDICTIONS + 1 :: 3]
            if max(times) <= label_ts:  # the common case: one prediction per model, in time
                t_instance = self._t_instance(record, models, times, due)
                if t_instance is None:
                    return
                labels = record[PREDICTIONS + 2 :: 3]
                for model_id, t, y in zip(models, times, labels, strict=True):
                    fields = (model_id, instance_id, label, (t,), (y,), t_instance, label_ts, due)
                    out.append(_new_outcome(Outcome, fields))
                return
        self._resolve_timelines(instance_id, record, due, out)

    def _resolve_timelines(self, instance_id: str, record: list, due: int,
                           out: list[Outcome]) -> None:  # fmt: skip
        """:meth:`_resolve` in general: any model may have predicted several times, some
        predictions may be stamped after the label."""
        label, label_ts = record[LABEL], record[LABEL_TS]
        kept_by_model: dict[str, list[tuple[int, Label]]] = {}
        for model_id, timeline in _timelines(record).items():
            if timeline[-1][0] <= label_ts:  # the common case: nothing stamped after the label
                kept_by_model[model_id] = timeline
                continue
            kept = [(t, y) for t, y in timeline if t <= label_ts]
            for _ in range(len(timeline) - len(kept)):
                self._count("leaky_prediction", model_id)
            if kept:
                kept_by_model[model_id] = kept
        if not kept_by_model:  # nobody predicted it (in time): the same whatever arrived first
            self._count("orphan_label")
            return
        firsts = [kept[0][0] for kept in kept_by_model.values()]
        t_instance = self._t_instance(record, kept_by_model, firsts, due)
        if t_instance is None:
            return
        for model_id, kept in kept_by_model.items():
            if len(kept) == 1:
                times, labels = (kept[0][0],), (kept[0][1],)
            else:
                times, labels = zip(*kept, strict=True)
            fields = (model_id, instance_id, label, times, labels, t_instance, label_ts, due)
            out.append(_new_outcome(Outcome, fields))

    def _t_instance(
        self, record: list, models: Iterable[str], firsts: list[int], due: int
    ) -> int | None:
        """The time of a resolved instance: its record's, else its first prediction that counts
        (``firsts``: each model's first). None, counted per model, if the label precedes it.

        An instance record stamped after ``due`` is left out, counted as late, as if it had
        arrived after the resolution: only events stamped up to ``due`` are sure to be in when
        an instance resolves (on the streaming join's watermark, or in a replay), so nothing
        stamped later may decide an outcome, or the outcome would depend on arrival order.
        """
        if record[HAS_RECORD]:
            t_instance = record[T_INSTANCE]
            if t_instance <= due:
                if record[LABEL_TS] < t_instance:
                    for model_id in models:
                        self._count("label_before_instance", model_id)
                    return None
                return t_instance
            self._count("late_instance")
        return min(firsts)

    # -- state ----------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """A JSON-ready snapshot (instance ids must be strings, labels str or int). It refers to
        the join's own records: serialize it before the join changes again."""
        return {
            "label_grace": self.label_grace,
            "label_ttl": self.label_ttl,
            "max_pending": self.max_pending,
            "now": self._now,
            # ids and records side by side: the records go out as they are, no copy each
            "pending_ids": list(self._pending),
            "pending": list(self._pending.values()),
            "grace": list(self._grace),  # (due, instance_id) pairs
            # ids and (label, ts) pairs side by side: no container made per resolved instance,
            # which a snapshot of a million of them would pay for in garbage collections
            "resolved_ids": list(self._resolved),
            "resolved": list(self._resolved.values()),
            "counters": dict(self.counters),
            "model_counters": [[r, m, c] for (r, m), c in self.model_counters.items()],
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Join:
        join = cls(state["label_grace"], state["label_ttl"], state["max_pending"])
        join._now = state["now"]
        for instance_id, record in zip(state["pending_ids"], state["pending"], strict=True):
            record = list(record)  # never share a list with the state it came from
            for i in range(PREDICTIONS, len(record), 3):
                if type(record[i]) is str:
                    record[i] = _intern(record[i])
                if type(record[i + 2]) is str:
                    record[i + 2] = _intern(record[i + 2])
            join._pending[instance_id] = record
            if record[T_INSTANCE] is not None:
                join._expiry.append((record[T_INSTANCE], instance_id))
        heapq.heapify(join._expiry)
        join._grace = [(due, i) for due, i in state["grace"]]
        heapq.heapify(join._grace)
        if "resolved_ids" in state:
            join._resolved = OrderedDict(
                zip(state["resolved_ids"], map(tuple, state["resolved"]), strict=True)
            )
        else:  # snapshot version 3: one [id, label, ts] triple each
            join._resolved = OrderedDict((k, (y, t)) for k, y, t in state["resolved"])
        join.counters = Counter(state["counters"])
        join.model_counters = Counter({(r, m): c for r, m, c in state["model_counters"]})
        join._schedule()
        return join
