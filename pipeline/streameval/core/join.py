"""The join of instances, predictions and late labels into outcomes.

A plain class driven by event time. Events are applied **in the order of their timestamps**
(ties by content), whatever order they arrive in: an event waits until the clock has passed
it — the streaming join's watermark, or replay's largest timestamp, minus one and minus
``label_grace``, the most that event time may run out of order within one input partition —
and the timed rules (``label_ttl``, ``max_pending``, how long a resolved instance is
remembered) act at their own event times between the events. So every decision is a function
of the events alone: the same for any keying of the input topics, any interleaving of their
partitions, a replay of a file, or a restart. docs/replay.md states the rules for users.

Where the instances live is the :class:`~streameval.core.state.MemoryState`'s business (or the
worker's disk store's): the join asks it for records by instance id, a batch at a time.
"""

from __future__ import annotations

import bisect
import sys
import zlib
from collections import Counter, deque
from collections.abc import Iterable
from typing import Any, NamedTuple

from streameval.core.state import EVENT, META, MemoryState, decode_value, encode_value, event_key

__all__ = [
    "DROP_REASONS",
    "INSTANCE",
    "LABEL",
    "PREDICTION",
    "EventRow",
    "Join",
    "Outcome",
    "join_partition",
    "label_order",
    "queue_entries",
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
    #: when the join resolved it on its clock (the label's time; for a label that came late,
    #: the clock when it came): with ``instance_id`` the key that orders outcomes
    due: int = 0

    @property
    def initial(self) -> Label:
        return self.labels[0]

    @property
    def final(self) -> Label:
        return self.labels[-1]


# What the join holds for one pending instance: one flat list, the fewest objects per instance
#   [created, t_instance, has_record, label, label_ts, due, model, ts, label, model, ts, ...]
# created is the time of its first event (its expiry and eviction order); t_instance is None
# until the instance record or a prediction gives it; label, label_ts and due are set when the
# label comes, which resolves the instance at once (its events up to then are all in).
# The predictions follow as (model_id, ts, label) triples. Model ids and string labels are
# interned, so a pending instance shares them with every other one.
CREATED, T_INSTANCE, HAS_RECORD, LABEL_, LABEL_TS, DUE, PREDICTIONS = range(7)
_intern = sys.intern
#: builds an :class:`Outcome` from a tuple of its fields without the Python-level ``__new__``
_new_outcome = tuple.__new__
#: a waiting event: (ts, kind, instance_id, model_id, label is a string, label, sequence)
_Waiting = tuple[int, int, str, str, bool, Label, int]
_NEVER = 2**62


def join_partition(instance_id: str, partitions: int) -> int:
    """The join partition of an instance (CRC-32 of its UTF-8 id; stable across processes):
    the worker routes by it, and a replay that emulates the worker's partitions too.

    >>> join_partition("inst-00001", 6)
    3
    """
    return zlib.crc32(instance_id.encode()) % partitions


def queue_entries(record: list, label_ttl: int) -> list[tuple[str, int]]:
    """The time-queue entries (queue, time) a pending instance's record stands for: its
    expiry."""
    return [("expiry", record[CREATED] + label_ttl + 1)]


def label_order(label: Label) -> tuple[int, Label]:
    """A total order of labels, integers before strings: how the join orders records that are
    alike but for their label (two labels of one instance stamped alike, two predictions of one
    model stamped alike) — by content, never by which arrived first.

    >>> sorted(["b", 2, "a", 1], key=label_order)
    [1, 2, 'a', 'b']
    """
    return (1, label) if isinstance(label, str) else (0, label)


def _by_time_then_label(entry: tuple[int, Label]) -> tuple[int, tuple[int, Label]]:
    return entry[0], label_order(entry[1])


def _timelines(record: list) -> dict[str, list[tuple[int, Label]]]:
    """The predictions of a record per model (models in order of their first prediction),
    each timeline sorted by ``ts``, ties by :func:`label_order`."""
    timelines: dict[str, list[tuple[int, Label]]] = {}
    for i in range(PREDICTIONS, len(record), 3):
        entry = (record[i + 1], record[i + 2])
        timeline = timelines.get(record[i])
        if timeline is None:
            timelines[record[i]] = [entry]
        elif entry[0] <= timeline[-1][0]:  # out of order (a late event), or a tie: rare
            timeline.append(entry)
            timeline.sort(key=_by_time_then_label)
        else:
            timeline.append(entry)
    return timelines


def _models(record: list) -> list[str]:
    """The models that predicted, in order of their first prediction."""
    return list(dict.fromkeys(record[PREDICTIONS::3]))


def take_runs(runs: dict[Any, list], key: tuple) -> tuple[list, list, list]:
    """Cut sorted runs, named by the keys of ``runs``, at ``key``, in place: what comes before
    it is taken (concatenated run by run, so not sorted as a whole), and each run keeps the
    rest. Returns ``(taken, names of the runs cut short, names of the runs emptied)``.

    >>> runs = {"a": [(1,), (5,)], "b": [(2,), (3,)], "c": [(7,)]}
    >>> take_runs(runs, (4,)), runs
    (([(1,), (2,), (3,)], ['a'], ['b']), {'a': [(5,)], 'c': [(7,)]})
    """
    taken: list = []
    shortened, emptied = [], []
    for name, run in runs.items():
        if not run or run[0] >= key:  # the usual run: none of it is due yet
            continue
        cut = bisect.bisect_left(run, key)
        if cut < len(run):
            taken += run[:cut]
            runs[name] = run[cut:]  # a new value, not a new key: iterating goes on
            shortened.append(name)
        else:
            taken += run
            emptied.append(name)
    for name in emptied:
        del runs[name]
    return taken, shortened, emptied


class Join:
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
      (by first event) goes: resolved early if it already has its label, else evicted and
      counted.

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
        self.state = state = MemoryState() if state is None else state
        #: whether a queue entry still stands (the state drops stale ones when it compacts)
        state.valid = {"expiry": self._expiry_valid, "forget": self._forget_valid}
        # the state's parts the hot path uses, bound once (the dicts never change identity)
        self._records, self._memory, self._touch = state.records, state.memory, state.touch
        #: whether the state wants stale queue entries discarded at once (a disk store does;
        #: the in-memory heaps skip them when they come up)
        self._discards = getattr(state, "discards", False)
        self._clock = -(2**62)  # every event stamped <= clock is applied
        self._target = self._clock  # where the clock goes once the due events are applied
        self._runs: dict[int, list[_Waiting]] = {}  # waiting events: sorted runs, numbered
        self._run_number = 0
        self._due: list[_Waiting] = []  # taken from the runs, sorted; applied from _pos on
        self._pos = 0
        # waiting events since the last commit: taken in (not in a checkpoint yet), and those
        # of a checkpoint applied since (their keys go)
        self._added: dict[int, _Waiting] = {}
        self._applied: list[tuple[int, int]] = []
        self._seq = 0
        self._next = _NEVER  # the earliest queue time at which something is due
        #: the latest conflicting labels (instance_id, kept, ignored), for an adapter to log
        self.conflicts: deque[tuple[str, Label, Label]] = deque(maxlen=10)
        self.counters: Counter[str] = Counter()
        self.model_counters: Counter[tuple[str, str]] = Counter()  # (reason, model_id)

    # -- public API -----------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Instances currently held, waiting for a label."""
        return self.state.pending_count()

    @property
    def changed(self) -> int:
        """How many keys :meth:`changes` would give now: what a checkpoint costs."""
        return self.state.changed() + len(self._added) + len(self._applied)

    @property
    def waiting(self) -> int:
        """Events received but not yet applied (stamped after the clock)."""
        return sum(len(run) for run in self._runs.values()) + len(self._due) - self._pos

    @property
    def behind(self) -> bool:
        """Whether the clock has not reached where :meth:`advance` was told yet: events due
        wait for more calls of :meth:`advance` (it was given a ``budget``)."""
        return self._clock < self._target

    def add_instance(self, instance_id: str, ts: int, now: int) -> list[Outcome]:
        return self.add_events([(INSTANCE, instance_id, "", ts, "", 0, 0)], now)[0]

    def add_prediction(
        self, instance_id: str, model_id: str, ts: int, label: Label, now: int
    ) -> list[Outcome]:
        return self.add_events([(PREDICTION, instance_id, model_id, ts, label, 0, 0)], now)[0]

    def add_label(self, instance_id: str, ts: int, label: Label, now: int) -> list[Outcome]:
        return self.add_events([(LABEL, instance_id, "", ts, label, 0, 0)], now)[0]

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
        run: list[_Waiting] = []
        late: list[_Waiting] = []
        repeats = 0
        seq = self._seq
        for kind, instance_id, model_id, ts, label, source, offset in events:
            if seen is not None:
                if offset <= seen[source]:
                    repeats += 1
                    continue
                seen[source] = offset
            seq += 1
            entry = (ts, kind, instance_id, model_id, type(label) is str, label, seq)
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
            self._runs[self._run_number] = run
            self._run_number += 1
            if len(self._runs) > 1:
                self._merge_runs()
            added = self._added
            for entry in run:
                added[entry[6]] = entry
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
        if self._runs:
            self._take(target)
        if self._due:
            if not self._step(budget, out):
                return out  # behind: the rest comes with the next calls
        if self._next <= target + 1:
            self._rules(target + 1, out)
        self._clock = target
        return out

    def flush(self) -> list[Outcome]:
        """The end of a finite stream (replay): apply every waiting event (nothing more can
        come). Instances without a label stay pending."""
        out: list[Outcome] = []
        if self._runs or self.behind:
            last = max([run[-1][0] for run in self._runs.values()], default=self._target)
            self.advance(max(last, self._target) + self.label_grace, out)
        return out

    @property
    def clock(self) -> int:
        """Every event stamped up to this time is applied: later outcomes have a later due."""
        return self._clock

    # -- time order -------------------------------------------------------------------------
    def _merge_runs(self) -> None:
        """Keep the waiting runs few: every call of :meth:`advance` looks at the head of each.
        The newest run joins the one before it when it continues it (events in time order, the
        usual case) or is at least half its length (so a run's events are merged about log₂ of
        the number waiting times, as in a merge sort). Replay adds one event per call: without
        this, it held one run per event within ``label_grace`` and looked at each per event."""
        runs = self._runs
        while len(runs) > 1:
            names = reversed(runs)
            last, before = next(names), next(names)
            newer, older = runs[last], runs[before]
            if older[-1] < newer[0]:
                older += newer
            elif 2 * len(newer) >= len(older):
                runs[before] = sorted(older + newer)  # two sorted runs: timsort merges them
            else:
                return
            del runs[last]

    def _take(self, now: int) -> None:
        """Move the waiting events stamped up to ``now`` to the events due, in order."""
        taken = take_runs(self._runs, (now + 1,))[0]
        if not taken:
            return
        if self._pos:
            del self._due[: self._pos]
            self._pos = 0
        due = self._due
        due += taken  # all later than those already due
        if len(due) > 1:
            due.sort()  # sorted runs: timsort merges them

    def _step(self, budget: int | None, out: list[Outcome]) -> bool:
        """Apply the next ``budget`` events due (None: all); whether none is left."""
        due, start = self._due, self._pos
        end = len(due) if budget is None else min(len(due), start + max(budget, 1))
        part = due[start:end] if start or end < len(due) else due
        if end == len(due):
            self._due, self._pos = [], 0
        else:
            self._pos = end
        added, applied = self._added, self._applied
        for entry in part:  # no longer waiting: a checkpoint that has it must drop it
            if added.pop(entry[6], None) is None:
                applied.append((entry[0], entry[6]))
        self._apply(part, out)
        return not self._due

    def _apply(self, events: list[_Waiting], out: list[Outcome]) -> None:
        """Apply events in the given order, the timed rules due before each in between."""
        state = self.state
        state.prefetch({e[2] for e in events})
        instance, prediction, label_ = self._instance, self._prediction, self._label
        max_pending, pending = self.max_pending, state.pending_count
        for ts, kind, instance_id, model_id, _, label, _ in events:
            clock = self._clock
            if ts > clock:
                if self._next <= ts:  # something timed acts before this event
                    self._rules(ts, out)
                self._clock = ts - 1  # everything before it is in
            elif self._next <= clock + 1:  # a late event: it comes now
                self._rules(clock + 1, out)
            if kind == PREDICTION:
                prediction(instance_id, model_id, ts, label, out)
            elif kind == LABEL:
                label_(instance_id, ts, label, out)
            else:
                instance(instance_id, ts, out)
            if pending() > max_pending:  # the bound holds after every event
                self._limit(out)

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
        times = [entry[0] for entry in (state.peek("expiry"), state.peek("forget"))
                 if entry is not None]  # fmt: skip
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
    def _new(self, instance_id: str, ts: int, t_instance: int | None, has_record: bool) -> list:
        record = [ts, t_instance, has_record, None, None, None]
        expiry = ts + self.label_ttl + 1
        self.state.create(instance_id, record, expiry)
        if expiry < self._next:
            self._next = expiry
        return record

    def _instance(self, instance_id: str, ts: int, out: list[Outcome]) -> None:
        if self._memory.get(instance_id) is not None:
            self._count("late_instance")
            return
        record = self._records.get(instance_id)
        if record is None:
            self._new(instance_id, ts, ts, True)
        elif record[HAS_RECORD]:
            self._count("duplicate_instance")
        else:
            record[HAS_RECORD] = True
            record[T_INSTANCE] = ts
            self._touch(instance_id)

    def _prediction(
        self, instance_id: str, model_id: str, ts: int, label: Label, out: list[Outcome]
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
        for i in range(PREDICTIONS, len(record), 3):
            if record[i] == model_id and record[i + 1] == ts and record[i + 2] == label:
                self._count("duplicate_prediction", model_id)
                return
        record += (model_id, ts, label)
        self._touch(instance_id)

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
            for model_id in _models(record):
                self._count(reason, model_id)
        else:
            self._count(reason)

    def _resolve(self, instance_id: str, out: list[Outcome]) -> None:
        state = self.state
        record = state.records[instance_id]
        label, label_ts, due = record[LABEL_], record[LABEL_TS], record[DUE]
        if self._discards:
            state.discard("expiry", record[CREATED] + self.label_ttl + 1, instance_id)
        # dropped, remembered until due + ttl (its queue entry is later than anything now)
        state.resolved(instance_id, label, due + self.label_ttl)
        if state.memory_count() > self.max_pending:
            self._limit(out)
        models = record[PREDICTIONS::3]
        if models and len(set(models)) == len(models):
            times = record[PREDICTIONS + 1 :: 3]
            if max(times) <= label_ts:  # the common case: one prediction per model, in time
                t_instance = self._t_instance(record, models, times)
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
        predictions may be stamped after the label (late events)."""
        label, label_ts = record[LABEL_], record[LABEL_TS]
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
        if not kept_by_model:  # nobody predicted it (in time)
            self._count("orphan_label")
            return
        firsts = [kept[0][0] for kept in kept_by_model.values()]
        t_instance = self._t_instance(record, kept_by_model, firsts)
        if t_instance is None:
            return
        for model_id, kept in kept_by_model.items():
            if len(kept) == 1:
                times, labels = (kept[0][0],), (kept[0][1],)
            else:
                times, labels = zip(*kept, strict=True)
            fields = (model_id, instance_id, label, times, labels, t_instance, label_ts, due)
            out.append(_new_outcome(Outcome, fields))

    def _t_instance(self, record: list, models: Iterable[str], firsts: list[int]) -> int | None:
        """The time of a resolved instance: its record's, else its first prediction that counts
        (``firsts``: each model's first). None, counted per model, if the label precedes it."""
        if not record[HAS_RECORD]:
            return min(firsts)
        if record[LABEL_TS] < record[T_INSTANCE]:
            for model_id in models:
                self._count("label_before_instance", model_id)
            return None
        return record[T_INSTANCE]

    # -- checkpoints --------------------------------------------------------------------------
    def changes(self) -> dict[bytes, bytes | None]:
        """What changed since the last :meth:`commit`, as the state's encoded key/value pairs
        (None: deleted) plus the join's scalars under the meta key and the events waiting for
        the clock under keys of their own: a checkpoint writes these, and the pairs of every
        checkpoint so far, latest value per key, restore the join."""
        changes = self.state.changes(self.meta())
        for ts, seq in self._applied:
            changes[event_key(ts, seq)] = None
        for entry in self._added.values():
            changes[event_key(entry[0], entry[6])] = encode_value(entry)
        return changes

    def freeze(self, changes: dict[bytes, bytes | None]) -> Any:
        """Close a checkpoint: ``changes`` (those of :meth:`changes`, with the caller's keys)
        are what it writes, and what changes from now on goes into the next one. Give the
        returned cut to :meth:`written` once the checkpoint is durable; the join goes on
        meanwhile."""
        cut = self.state.freeze(changes)
        self._added.clear()
        self._applied.clear()
        return cut

    def written(self, cut: Any, *where: Any) -> None:
        """The checkpoint of ``cut`` (:meth:`freeze`'s) is durable; ``where`` tells a disk
        store what to write with it."""
        self.state.written(cut, *where)

    def commit(self, *where: Any) -> None:
        """The changes so far are durable (written to a checkpoint); ``where`` tells a disk
        store what to write with them."""
        self.state.commit(*where)
        self._added.clear()
        self._applied.clear()

    @classmethod
    def resume(cls, meta: dict[str, Any], state: Any, waiting: Iterable[list]) -> Join:
        """A join over a ``state`` that holds its instances already (a disk store), with its
        scalars (:meth:`meta`) and the events that were waiting for the clock."""
        join = cls(meta["label_grace"], meta["label_ttl"], meta["max_pending"], state)
        join.restore_meta(meta, waiting)
        return join

    @classmethod
    def restore(cls, items: Iterable[tuple[bytes, bytes]], state: Any = None) -> Join:
        """A join from the latest value of every key its checkpoints wrote (in any order)."""
        items = [(k, v) for k, v in items if v is not None]
        meta = next(decode_value(v) for k, v in items if k == META)
        join = cls(meta["label_grace"], meta["label_ttl"], meta["max_pending"], state)
        join.state.load(items, join.queue_entries, PREDICTIONS)
        join.restore_meta(meta, [decode_value(v) for k, v in items if k[:1] == EVENT])
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

    def restore_meta(self, meta: dict[str, Any], waiting: Iterable[list]) -> None:
        """Take back the scalars of :meth:`meta` and the ``waiting`` events (the instances
        are already in the state, and its time queues)."""
        self._clock = meta["clock"]
        self._target = meta.get("target", self._clock)  # absent before slices existed
        self._seq = meta["seq"]
        runs = sorted(tuple(e) for e in waiting)
        self._runs = {0: runs} if runs else {}
        self._run_number = 1
        self._due, self._pos = [], 0
        self.counters = Counter(meta["counters"])
        self.model_counters = Counter({(r, m): c for r, m, c in meta["model_counters"]})
        self._schedule()
