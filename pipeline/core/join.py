"""The join of instances, predictions and late labels into outcomes.

A plain class driven by event time (the ``ts`` of each message) plus an explicit ``now`` for
the rules that depend on how long something has waited (``label_grace``, ``label_ttl``), so that
replay and tests are deterministic. The rules are those of DESIGN.md "Join semantics".
"""

from __future__ import annotations

import heapq
from collections import Counter, OrderedDict, deque
from typing import Any, NamedTuple

__all__ = ["DROP_REASONS", "Join", "Outcome"]

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


class _Pending:
    """What the join holds for one instance until it is resolved."""

    __slots__ = ("has_record", "label", "label_arrival", "label_ts", "predictions", "t_instance")

    def __init__(self, t_instance: int | None, has_record: bool) -> None:
        self.t_instance = t_instance
        self.has_record = has_record
        self.label: Label | None = None
        self.label_ts: int | None = None
        self.label_arrival: int | None = None
        self.predictions: dict[str, list[tuple[int, Label]]] = {}

    def to_list(self) -> list:
        preds = {m: [[t, y] for t, y in p] for m, p in self.predictions.items()}
        return [self.t_instance, self.has_record, self.label, self.label_ts, self.label_arrival,
                preds]  # fmt: skip

    @classmethod
    def from_list(cls, row: list) -> _Pending:
        pending = cls(row[0], row[1])
        pending.label, pending.label_ts, pending.label_arrival = row[2], row[3], row[4]
        pending.predictions = {m: [(t, y) for t, y in p] for m, p in row[5].items()}
        return pending


class Join:
    """Buffer predictions per instance and model until the label arrives; emit outcomes.

    Rules (DESIGN.md, "Join semantics"):

    * ``t_instance`` is the instance record's ``ts``, or the first prediction's ``ts`` when no
      instance record arrives (the instances topic is optional).
    * A prediction counts if its ``ts`` ≤ the label's ``ts``; one stamped after the label is
      *leaky*: dropped and counted. Several predictions of one model are its evolving
      predictions (first = initial, last = final). An exact repeat (same model, ``ts`` and
      label) is a duplicate, dropped and counted.
    * A label is held for ``label_grace`` after it arrives, so that predictions it overtook
      can still join; then every model that predicted the instance is resolved. It arrives at
      ``max(ts, now)``: at ``now`` for a replayed file, whose clock is the largest ``ts`` seen,
      and at its own ``ts`` for the streaming join, whose clock is a watermark that trails the
      labels. With grace 0 resolution is immediate once ``now`` has reached that arrival.
      Predictions for a resolved instance are *late*: dropped and counted. A label nobody
      predicted is an *orphan*.
    * A second label equal to the first is a duplicate; a different one conflicts: both are
      ignored and counted (the latest conflicts are kept in :attr:`conflicts` for logging).
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
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._grace: list[tuple[int, str]] = []  # heap of (due, instance_id)
        self._expiry: list[tuple[int, str]] = []  # heap of (t_instance + ttl, instance_id)
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
        if instance_id in self._resolved:
            self._count("late_instance")
            return out
        pending = self._pending.get(instance_id)
        if pending is None:
            self._insert(instance_id, _Pending(ts, True), out)
        elif pending.has_record:
            self._count("duplicate_instance")
        else:
            pending.has_record = True
            pending.t_instance = ts
            self._schedule_expiry(instance_id, ts)
        return out

    def add_prediction(
        self, instance_id: str, model_id: str, ts: int, label: Label, now: int
    ) -> list[Outcome]:
        out = self.advance(now)
        if instance_id in self._resolved:
            self._count("late_prediction", model_id)
            return out
        pending = self._pending.get(instance_id)
        if pending is None:
            pending = _Pending(None, False)
            self._insert(instance_id, pending, out)
        if pending.label_ts is not None and ts > pending.label_ts:
            self._count("leaky_prediction", model_id)
            return out
        if pending.t_instance is None or (not pending.has_record and ts < pending.t_instance):
            pending.t_instance = ts  # the first prediction's time, until an instance record
            self._schedule_expiry(instance_id, ts)
        timeline = pending.predictions.setdefault(model_id, [])
        entry = (ts, label)
        if entry in timeline:
            self._count("duplicate_prediction", model_id)
            return out
        if timeline and ts < timeline[-1][0]:
            timeline.append(entry)
            timeline.sort(key=lambda e: e[0])
        else:
            timeline.append(entry)
        return out

    def add_label(self, instance_id: str, ts: int, label: Label, now: int) -> list[Outcome]:
        out = self.advance(now)
        known = self._resolved.get(instance_id)
        pending = self._pending.get(instance_id)
        if known is None and pending is not None and pending.label is not None:
            known = (pending.label, pending.label_ts)
        if known is not None:
            if known[0] == label:
                self._count("duplicate_label")
            else:
                self._count("conflicting_label")
                self.conflicts.append((instance_id, known[0], label))
            return out
        if pending is None:
            pending = _Pending(None, False)
            self._insert(instance_id, pending, out)
        arrival = ts if ts > self._now else self._now
        pending.label, pending.label_ts, pending.label_arrival = label, ts, arrival
        due = arrival + self.label_grace
        if due <= self._now:
            self._resolve(instance_id, out)
        else:
            heapq.heappush(self._grace, (due, instance_id))
            self._next_due = min(self._next_due, due)
        return out

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
        expiry = self._expiry
        while expiry and expiry[0][0] < now:
            due, instance_id = heapq.heappop(expiry)
            pending = self._pending.get(instance_id)
            if pending is None or pending.t_instance is None:
                continue
            if pending.t_instance + self.label_ttl != due:
                continue  # a stale heap entry: t_instance moved since it was pushed
            if pending.label is None:
                del self._pending[instance_id]
                self._drop_pending(pending, "expired_unlabelled")
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
            due.append(self._expiry[0][0] + 1)
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
        pending = self._pending.get(instance_id)
        if pending is not None and pending.label_arrival is not None:
            if pending.label_arrival + self.label_grace == due:
                self._resolve(instance_id, out)

    # -- internals --------------------------------------------------------------------------
    def _count(self, reason: str, model_id: str | None = None) -> None:
        self.counters[reason] += 1
        if model_id is not None:
            self.model_counters[reason, model_id] += 1

    def _insert(self, instance_id: str, pending: _Pending, out: list[Outcome]) -> None:
        while len(self._pending) >= self.max_pending:
            oldest_id, oldest = self._pending.popitem(last=False)
            if oldest.label is not None:  # was waiting for its grace: resolve it now instead
                self._pending[oldest_id] = oldest
                self._resolve(oldest_id, out)
            else:
                self._drop_pending(oldest, "evicted_max_pending")
        self._pending[instance_id] = pending
        if pending.t_instance is not None:
            self._schedule_expiry(instance_id, pending.t_instance)

    def _schedule_expiry(self, instance_id: str, t_instance: int) -> None:
        expiry = self._expiry
        if len(expiry) > 2 * len(self._pending) + 1024:
            # entries of resolved instances are only dropped when due: compact now and then
            expiry[:] = [
                (p.t_instance + self.label_ttl, i)
                for i, p in self._pending.items()
                if p.t_instance is not None
            ]
            heapq.heapify(expiry)
        heapq.heappush(expiry, (t_instance + self.label_ttl, instance_id))
        self._next_due = min(self._next_due, t_instance + self.label_ttl + 1)

    def _drop_pending(self, pending: _Pending, reason: str) -> None:
        if pending.predictions:
            for model_id in pending.predictions:
                self._count(reason, model_id)
        else:
            self._count(reason)

    def _resolve(self, instance_id: str, out: list[Outcome]) -> None:
        pending = self._pending.pop(instance_id)
        label, label_ts = pending.label, pending.label_ts
        due = pending.label_arrival + self.label_grace
        resolved = self._resolved
        resolved[instance_id] = (label, self._now)
        self._next_due = min(self._next_due, self._now + self.label_ttl + 1)
        if len(resolved) > self.max_pending:  # remembered for label_ttl, but never unbounded
            resolved.popitem(last=False)
        kept_by_model: dict[str, list[tuple[int, Label]]] = {}
        for model_id, timeline in pending.predictions.items():
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
        if pending.has_record:
            t_instance = pending.t_instance
            if label_ts < t_instance:
                for model_id in kept_by_model:
                    self._count("label_before_instance", model_id)
                return
        else:  # the first prediction that counts
            t_instance = min(kept[0][0] for kept in kept_by_model.values())
        for model_id, kept in kept_by_model.items():
            if len(kept) == 1:
                times, labels = (kept[0][0],), (kept[0][1],)
            else:
                times, labels = zip(*kept, strict=True)
            out.append(
                Outcome(model_id, instance_id, label, times, labels, t_instance, label_ts, due)
            )

    # -- state ----------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """A JSON-ready snapshot (instance ids must be strings, labels str or int)."""
        return {
            "label_grace": self.label_grace,
            "label_ttl": self.label_ttl,
            "max_pending": self.max_pending,
            "now": self._now,
            "pending": [[k, *p.to_list()] for k, p in self._pending.items()],
            "grace": [list(g) for g in self._grace],
            "resolved": [[k, y, t] for k, (y, t) in self._resolved.items()],
            "counters": dict(self.counters),
            "model_counters": [[r, m, c] for (r, m), c in self.model_counters.items()],
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Join:
        join = cls(state["label_grace"], state["label_ttl"], state["max_pending"])
        join._now = state["now"]
        for row in state["pending"]:
            pending = _Pending.from_list(row[1:])
            join._pending[row[0]] = pending
            if pending.t_instance is not None:
                join._expiry.append((pending.t_instance + join.label_ttl, row[0]))
        heapq.heapify(join._expiry)
        join._grace = [(due, i) for due, i in state["grace"]]
        heapq.heapify(join._grace)
        join._resolved = OrderedDict((k, (y, t)) for k, y, t in state["resolved"])
        join.counters = Counter(state["counters"])
        join.model_counters = Counter({(r, m): c for r, m, c in state["model_counters"]})
        join._schedule()
        return join
