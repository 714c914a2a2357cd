"""What the join does to the instances it holds: each event, and each timed rule.

:class:`JoinRules` is the base of :class:`~streameval.core.join.Join`, which decides *when*
each event applies (its clock, the events waiting for it, slices, checkpoints); here is *what*
each does then: an instance record, a prediction or a label to its pending instance (a label
resolves it at once), the expiry of pending instances, eviction past ``max_pending``, the
forgetting of resolved ones, and the counting of every record dropped or found odd.
"""

from __future__ import annotations

import sys
from collections import Counter, deque
from typing import Any

from streameval.core.maturity import SECOND
from streameval.core.outcome import Label, Outcome, Scores, notice, scores_order
from streameval.core.pending import (
    CREATED,
    DUE,
    HAS_RECORD,
    LABEL_,
    LABEL_TS,
    PREDICTIONS,
    T_INSTANCE,
    models_of,
    plain,
    queue_entries,
    resolve_outcomes,
    scores_of,
)
from streameval.core.state import MemoryState

__all__ = ["DROP_REASONS", "JoinRules"]

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

_intern = sys.intern
_NEVER = 2**62


class JoinRules:
    """The instances a join holds, and what events and timed rules do to them (the base of
    :class:`~streameval.core.join.Join`, whose parameters these are; not used alone).

    The clock (``_clock``) is the subclass's to move: every event stamped up to it is applied,
    and a label that comes at or before it is due at its next tick.
    """

    def __init__(self, label_ttl: int, max_pending: int, state: Any, notices: bool) -> None:
        self.label_ttl = label_ttl
        self.max_pending = max_pending
        #: the newly predicted instances counted for :func:`~streameval.core.outcome.notice`
        #: rows, by (model, second of the prediction, second applied), or None when off
        self.notices: dict[tuple[str, int, int], int] | None = {} if notices else None
        self.state = state = MemoryState() if state is None else state
        #: whether a queue entry still stands (the state drops stale ones when it compacts)
        state.valid = {"expiry": self._expiry_valid, "forget": self._forget_valid}
        # the state's parts the hot path uses, bound once (the dicts never change identity)
        self._records, self._memory, self._touch = state.records, state.memory, state.touch
        #: whether the state wants stale queue entries discarded at once (a disk store does;
        #: the in-memory heaps skip them when they come up)
        self._discards = getattr(state, "discards", False)
        self._clock = -(2**62)  # every event stamped <= clock is applied
        self._next = _NEVER  # the earliest queue time at which something is due
        #: the latest conflicting labels (instance_id, kept, ignored), for an adapter to log
        self.conflicts: deque[tuple[str, Label, Label]] = deque(maxlen=10)
        self.counters: Counter[str] = Counter()
        self.model_counters: Counter[tuple[str, str]] = Counter()  # (reason, model_id)

    # -- the timed rules --------------------------------------------------------------------
    def _rules(self, until: int, out: list[Outcome]) -> None:
        """Everything timed that acts before events stamped ``until``, in time order (at equal
        times: expiries, then forgetting resolved instances)."""
        state = self.state
        peek, pop, prefetch, records = state.peek, state.pop, state.prefetch, self._records
        expiry, forget = peek("expiry"), peek("forget")
        while True:
            if expiry is not None and expiry[0] <= until and (forget is None or expiry <= forget):
                pop("expiry")
                if expiry[1] not in records:
                    prefetch((expiry[1],))
                self._expire(expiry[0], expiry[1])
                expiry = peek("expiry")
            elif forget is not None and forget[0] <= until:
                pop("forget")
                prefetch((forget[1],))
                self._forget(forget[0], forget[1])
                forget = peek("forget")
            else:
                break
        times = [entry[0] for entry in (expiry, forget) if entry is not None]
        self._next = min(times) if times else _NEVER

    def _schedule(self) -> None:
        state = self.state
        entries = (state.peek("expiry"), state.peek("forget"))
        times = [entry[0] for entry in entries if entry is not None]
        self._next = min(times, default=_NEVER)

    # -- queue entries that still stand (stale ones are skipped) ------------------------------
    def _expiry_valid(self, t: int, instance_id: str) -> bool:
        record = self.state.records.get(instance_id)
        return record is not None and record[CREATED] + self.label_ttl + 1 == t

    def _forget_valid(self, t: int, instance_id: str) -> bool:
        entry = self.state.memory.get(instance_id)
        return entry is not None and entry[1] + 1 == t

    def queue_entries(self, record: list) -> list[tuple[str, int]]:
        """The time-queue entries a pending instance's record stands for."""
        return queue_entries(record, self.label_ttl)

    # -- one event ----------------------------------------------------------------------------
    def _new(
        self, instance_id: str, ts: int, t_instance: int | None, has_record: bool | str
    ) -> list:
        record = [ts, t_instance, has_record, None, None, None]
        expiry = ts + self.label_ttl + 1
        self.state.create(instance_id, record, expiry)
        if expiry < self._next:
            self._next = expiry
        return record

    def _instance(self, instance_id: str, ts: int, part: Label, out: list[Outcome]) -> None:
        """An instance record; ``part``: its slice value ("" without one)."""
        if self._memory.get(instance_id) is not None:
            self._count("late_instance")
            return
        # what the record keeps: its slice, or True (an instance row's label is its slice)
        has = _intern(part) if type(part) is str and part else True
        record = self._records.get(instance_id)
        if record is None:
            self._new(instance_id, ts, ts, has)
        elif record[HAS_RECORD]:
            self._count("duplicate_instance")
        else:
            record[HAS_RECORD] = has
            record[T_INSTANCE] = ts
            self._touch(instance_id)

    def _prediction(
        self,
        instance_id: str,
        model_id: str,
        ts: int,
        label: Label,
        scores: Scores | None,
        out: list[Outcome],
    ) -> None:
        if self._memory.get(instance_id) is not None:
            self._count("late_prediction", model_id)
            return
        record = self._records.get(instance_id)
        if record is None:
            record = self._new(instance_id, ts, None, False)
        label_ts = record[LABEL_TS]
        if label_ts is not None and ts > label_ts:
            self._count("leaky_prediction", model_id)
            return
        t_instance = record[T_INSTANCE]
        if t_instance is None or (not record[HAS_RECORD] and ts < t_instance):
            record[T_INSTANCE] = ts  # the first prediction's time, until an instance record
        elif ts == t_instance:
            ts = t_instance  # one int object for both
        if type(model_id) is str:
            model_id = _intern(model_id)
        if type(label) is str:
            label = _intern(label)
        earliest = None  # the model's earliest prediction of the instance so far
        for i in range(PREDICTIONS, len(record), 3):
            if record[i] == model_id:
                if record[i + 1] == ts and plain(record[i + 2]) == label:
                    self._count("duplicate_prediction", model_id)
                    # of repeats that differ in their scores, the one greater in content
                    # order stays, whichever came first
                    if scores_order(scores) > scores_order(scores_of(record[i + 2])):
                        record[i + 2] = [label, scores]
                        self._touch(instance_id)
                    return
                if earliest is None or record[i + 1] < earliest:
                    earliest = record[i + 1]
        record += (model_id, ts, label if scores is None else [label, scores])
        self._touch(instance_id)
        if self.notices is not None:
            self._predicted(model_id, ts, earliest)

    def _predicted(self, model_id: str, ts: int, earliest: int | None) -> None:
        """Count a prediction of ``model_id`` stamped ``ts`` in the notices (its earliest
        before it: None if it is the model's first of the instance)."""
        clock = self._clock
        applied = (ts if ts > clock else clock + 1) // SECOND * SECOND + SECOND - 1
        second = ts // SECOND * SECOND
        notices = self.notices
        if earliest is None:
            key = (model_id, second, applied)
            notices[key] = notices.get(key, 0) + 1
        elif ts < earliest and second != earliest // SECOND * SECOND:
            # a late prediction earlier than the model's first: the instance changes second
            key = (model_id, second, applied)
            notices[key] = notices.get(key, 0) + 1
            key = (model_id, earliest // SECOND * SECOND, applied)
            notices[key] = notices.get(key, 0) - 1

    def _notify(self, out: list[Outcome]) -> None:
        """Append the notices counted since the last call to ``out``."""
        notices = self.notices
        if notices:
            out += [notice(m, second, count, due) for (m, second, due), count in notices.items()]
            notices.clear()

    def _label(self, instance_id: str, ts: int, label: Label, out: list[Outcome]) -> None:
        known = self._memory.get(instance_id)
        if known is not None:  # resolved already
            self._second_label(instance_id, known[0], label)
            return
        record = self._records.get(instance_id)
        if record is None:
            record = self._new(instance_id, ts, None, False)
        elif record[LABEL_] is not None:
            self._second_label(instance_id, record[LABEL_], label)
            return
        if type(label) is str:
            label = _intern(label)
        clock = self._clock
        record[LABEL_], record[LABEL_TS] = label, ts
        record[DUE] = ts if ts > clock else clock + 1  # a late label: resolved when it comes
        self._resolve(instance_id, out)

    def _second_label(self, instance_id: str, kept: Label, other: Label) -> None:
        """Count a label that came after ``kept``: a duplicate, or a conflict (logged)."""
        if other == kept:
            self._count("duplicate_label")
        else:
            self._count("conflicting_label")
            self.conflicts.append((instance_id, kept, other))

    # -- the timed rules ------------------------------------------------------------------------
    def _expire(self, t: int, instance_id: str) -> None:
        state = self.state
        if not self._expiry_valid(t, instance_id):
            return
        record = state.records[instance_id]
        state.drop(instance_id)
        self._drop_pending(record, "expired_unlabelled")

    def _forget(self, t: int, instance_id: str) -> None:
        if self._forget_valid(t, instance_id):
            self.state.forget(instance_id)

    def _limit(self, out: list[Outcome]) -> None:
        """At most ``max_pending`` instances held and remembered: the oldest go first."""
        state = self.state
        while state.pending_count() > self.max_pending:
            t, instance_id = state.pop("expiry")
            state.prefetch((instance_id,))
            if not self._expiry_valid(t, instance_id):
                continue
            record = state.records[instance_id]
            state.drop(instance_id)
            self._drop_pending(record, "evicted_max_pending")
        while state.memory_count() > self.max_pending:
            t, instance_id = state.pop("forget")
            state.prefetch((instance_id,))
            self._forget(t, instance_id)
        self._schedule()

    def _count(self, reason: str, model_id: str | None = None) -> None:
        self.counters[reason] += 1
        if model_id is not None:
            self.model_counters[reason, model_id] += 1

    def _drop_pending(self, record: list, reason: str) -> None:
        if len(record) > PREDICTIONS:
            for model_id in models_of(record):
                self._count(reason, model_id)
        else:
            self._count(reason)

    def _resolve(self, instance_id: str, out: list[Outcome]) -> None:
        state = self.state
        record = state.records[instance_id]
        if self._discards:
            state.discard("expiry", record[CREATED] + self.label_ttl + 1, instance_id)
        due = record[DUE]
        # dropped, remembered until due + ttl (its queue entry is later than anything now)
        state.resolved(instance_id, record[LABEL_], due + self.label_ttl)
        if state.memory_count() > self.max_pending:
            self._limit(out)
        resolve_outcomes(instance_id, record, due, self._count, out)
