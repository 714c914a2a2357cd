"""The worker's join and evaluation stages as plain classes: no Kafka, no threads, no clock.

:mod:`streameval.app.runner` moves bytes between Kafka and these classes (and the ingest stage,
:class:`~streameval.app.router.Router`); everything that decides a number is in the three, so
it is tested without a broker (``tests/test_stages.py``).

Ordering — why streaming gives the numbers replay gives
--------------------------------------------------------
The numbers under windows, fading factors and the persistent baseline depend on the order of a
model's outcomes, and a worker group reads three topics and many partitions at uneven speeds.
The stages therefore order outcomes by **event time**, never by arrival:

* :class:`~streameval.app.router.Router` (ingest) reports, with every batch it sends to a join
  partition, the progress of each input partition it reads: the largest ``ts`` read so far,
  and whether the partition is idle (read to its end and quiet for ``idle_ms``).
* :class:`JoinStage` computes a watermark W — the smallest progress over every input partition
  that is not idle — so every event with ``ts < W`` has arrived (each input partition carries
  non-decreasing ``ts``; events that break this are *late*, counted by the join). Its join
  clock is W − 1: a label at ``t`` resolves at ``t + label_grace`` on that clock, i.e. after
  every prediction stamped ≤ ``t`` has arrived, whatever the interleaving of topics. Outcomes
  carry ``due`` (the label's time plus the grace) and the join partition publishes its clock as
  its *frontier*: every later outcome it sends has ``due`` ≥ the frontier.
* :class:`EvalStage` merges the outcome batches of every join partition and releases, in order of
  ``(due, instance_id, model_id)``, exactly the outcomes with ``due`` below the smallest
  frontier. That order is a function of the events alone, the same for any partitioning,
  consumption interleaving, rebalance or restart, and the same as replay's (whose clock is the
  largest ``ts`` read and whose join resolves in ``(due, instance_id)`` order).

When every input partition is idle the watermark moves past the largest ``ts`` plus the grace:
labels waiting out their grace resolve, as at the end of a replay.

Exactly once
------------
Every event carries its input partition and offset, every outcome batch the offset of the event
batch that caused it; a stage skips what it has already applied. A stage restored from a
snapshot re-reads its input from the snapshot's offset and re-sends identical outcome batches,
which the next stage skips. Nothing is lost or counted twice.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from streameval.config import EvaluationConfig
from streameval.core.join import Join, Outcome, take_runs
from streameval.core.state import META, decode_value, encode_value
from streameval.engine import Engine
from streameval.event_time import NO_TS
from streameval.records import Record

from .evolve import (
    Refused,
    Stored,
    join_shape,
    join_shape_of_meta,
    judge,
    model_shape_of,
)
from .wire import (
    WIRE_VERSION,
    EventBatch,
    OutcomeBatch,
)

__all__ = [
    "EvalStage",
    "JoinStage",
    "config_fingerprint",
]

log = logging.getLogger("streameval.worker")

#: a stage's own scalars among its checkpoint's keys (the join's use other first bytes)
STAGE = b"t"

TopicPartition = tuple[str, int]
#: Outcomes handed to the evaluators at a time (memory, not results: they are split-invariant)
EVALUATE_CHUNK = 4096
#: Outcomes an evaluation stage gathers before it evaluates them, unless its :meth:`tick`
#: comes first: the models' numpy updates cost per call (30 outcomes at a time are 14 times
#: slower than 4 096), and a join that applies its due events in steps sends them a few dozen
#: at a time. The numbers do not depend on it.
RELEASE_MIN = 2_048
#: The most waiting events the worker's join applies in one step: what one event batch sets
#: off, and so a checkpoint's size, stays bounded. A constant, not a setting: the steps'
#: outcome batches are numbered, and a restarted stage must number them as before.
SLICE_EVENTS = 500
#: An evaluation checkpoint from before outcome batches were numbered: the whole batch applied
_WHOLE = 2**62


def config_fingerprint(config: EvaluationConfig) -> str:
    """A short hash of the whole evaluation configuration, as checkpoints of version 1
    recorded it (those are continued only under the configuration they were taken under;
    later ones record each part's own settings: streameval.app.evolve). Not ``[time]``: it
    came later, says how input is read, and every time a checkpoint holds is milliseconds."""
    data = orjson.dumps(config.model_dump(exclude={"time"}), option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(data).hexdigest()[:16]


# ------------------------------------------------------------------------------------------
class JoinStage:
    """Stage 1, one join partition: the core :class:`~streameval.core.join.Join` on an event-time
    watermark, with duplicate events (by input partition and offset) skipped.

    Parameters
    ----------
    partition
        The join partition (events-topic partition) this stage owns.
    config
        The evaluation configuration (its ``join`` settings are used).
    inputs
        Every input partition that exists: the watermark waits for each one.
    slice_events
        The most waiting events one step applies (None: all). With a bound, an event batch
        that moves the clock past more of them leaves the stage :attr:`behind`, and
        :meth:`proceed` applies the rest, a step at a time; each step's outcome batch is
        numbered (:attr:`part`).
    """

    def __init__(
        self,
        partition: int,
        config: EvaluationConfig,
        inputs: Iterable[TopicPartition],
        state: Any = None,
        slice_events: int | None = None,
    ) -> None:
        j = config.join
        self.partition = partition
        self.grace = j.label_grace_ms
        self.join = Join(j.label_grace_ms, j.label_ttl_ms, j.max_pending, state)
        self.inputs = set(inputs)
        self.slice_events = slice_events
        self.progress: dict[TopicPartition, tuple[int, bool]] = {}
        self.applied: dict[TopicPartition, int] = {}
        self.offset = -1  # last events-topic offset applied
        self.part = 0  # steps taken since that batch (its outcome batches' numbers)
        self.frontier = NO_TS
        self.duplicates = 0

    @property
    def behind(self) -> bool:
        """Whether events are due that :meth:`proceed` has yet to apply (take no event batch
        until they are: the outcomes must come in the order of one step)."""
        return self.join.behind

    def proceed(self) -> list[Outcome]:
        """The next step of what the latest event batch set off; its outcomes."""
        self.part += 1
        return self.join.advance(self.frontier, budget=self.slice_events)

    def apply(self, offset: int, batch: EventBatch) -> list[Outcome]:
        """Apply the event batch at ``offset`` (the first step of what it sets off, if the
        stage has a ``slice_events``); return the outcomes it resolved, in order."""
        if offset <= self.offset:
            return []
        self.offset = offset
        self.part = 0
        applied = self.applied
        sources = [(s.topic, s.partition) for s in batch.sources]
        seen = [applied.get(tp, -1) for tp in sources]
        budget = self.slice_events
        out, repeats = self.join.add_events(batch.events, self.frontier, seen, budget)
        for tp, offset in zip(sources, seen, strict=True):
            if offset >= 0:
                applied[tp] = offset
        self.duplicates += repeats
        progress = self.progress
        for source in batch.sources:
            tp = (source.topic, source.partition)
            before = progress.get(tp)
            ts = source.ts if before is None or source.ts > before[0] else before[0]
            progress[tp] = (ts, source.idle)
        frontier = self._watermark() - 1
        if frontier > self.frontier:
            self.frontier = frontier
            self.join.advance(frontier, out, budget)
        return out

    def _watermark(self) -> int:
        low, high, all_idle = None, NO_TS, True
        for tp in self.inputs:
            seen = self.progress.get(tp)
            if seen is None:
                return NO_TS  # no word yet from this input partition: wait for it
            ts, idle = seen
            if ts > high:
                high = ts
            if not idle:
                all_idle = False
                if low is None or ts < low:
                    low = ts
        if all_idle:  # nothing more is coming now: let labels past their grace resolve
            return high + self.grace + 2 if high > NO_TS else NO_TS
        return low

    def batch(self, outcomes: list[Outcome]) -> OutcomeBatch:
        """The outcomes of the latest step, with the join's clock as the frontier: every
        outcome this partition sends later has a later ``due``."""
        return OutcomeBatch(
            WIRE_VERSION, self.partition, self.offset, self.join.clock, outcomes, self.part
        )

    # -- checkpoints ------------------------------------------------------------------------
    def changes(self) -> dict[bytes, bytes | None]:
        """What changed since the last :meth:`cut` (streameval.app.changelog), with the
        stage's own scalars: the offset it covers, its frontier, progress and dedup marks."""
        changes = self.join.changes()
        changes[STAGE] = encode_value(
            {
                "partition": self.partition,
                "offset": self.offset,
                "part": self.part,
                "frontier": self.frontier,
                "progress": [[t, p, ts, idle] for (t, p), (ts, idle) in self.progress.items()],
                "applied": [[t, p, o] for (t, p), o in self.applied.items()],
                "duplicates": self.duplicates,
            }
        )
        return changes

    def cut(self) -> Any:
        """Close a checkpoint while the stage goes on: its changes are the cut's
        ``changes``; :meth:`written` once they are durable."""
        return self.join.freeze(self.changes())

    def summary(self) -> dict[str, Any]:
        """What a checkpoint's seal says of this join partition (``streameval state show``
        and a worker's start read the seals): the rules it joins under, where it is, what it
        holds."""
        join = self.join
        return {
            "join": {
                "label_grace_ms": join.label_grace,
                "label_ttl_ms": join.label_ttl,
                "max_pending": join.max_pending,
            },
            "offset": self.offset,
            "part": self.part,
            "frontier": self.frontier,
            "pending": join.pending,
            "remembered": join.state.memory_count(),
            "waiting": join.waiting,
        }

    def written(self, cut: Any, *where: Any) -> None:
        self.join.written(cut, *where)

    @classmethod
    def resume(
        cls,
        scalars: dict[bytes, bytes],
        config: EvaluationConfig,
        inputs: Iterable[TopicPartition],
        state: Any,
        slice_events: int | None = None,
    ) -> JoinStage:
        """The stage over a disk store that holds its instances, from their scalars."""
        meta = decode_value(scalars[STAGE])
        stage = cls(meta["partition"], config, inputs, state, slice_events)
        stage._take(meta)
        join_meta = _adopt(decode_value(scalars[META]), config, meta["partition"])
        stage.join = Join.resume(join_meta, state, state.waiting())
        return stage

    def _take(self, meta: dict[str, Any]) -> None:
        self.offset = meta["offset"]
        self.part = meta.get("part", 0)  # absent before steps were numbered
        self.frontier = meta["frontier"]
        self.progress = {(t, p): (ts, idle) for t, p, ts, idle in meta["progress"]}
        self.applied = {(t, p): o for t, p, o in meta["applied"]}
        self.duplicates = meta["duplicates"]

    @classmethod
    def restore(
        cls,
        items: Iterable[tuple[bytes, bytes]],
        config: EvaluationConfig,
        inputs: Iterable[TopicPartition],
        state: Any = None,
        slice_events: int | None = None,
    ) -> JoinStage:
        """The stage from the latest value of every key its checkpoints wrote."""
        items = list(items)
        meta = decode_value(next(v for k, v in items if k == STAGE))
        stage = cls(meta["partition"], config, inputs, slice_events=slice_events)
        stage._take(meta)
        join_meta = _adopt(
            decode_value(next(v for k, v in items if k == META)), config, meta["partition"]
        )
        items = [(k, encode_value(join_meta) if k == META else v) for k, v in items if k != STAGE]
        stage.join = Join.restore(items, state)
        return stage


def _adopt(meta: dict[str, Any], config: EvaluationConfig, partition: int) -> dict[str, Any]:
    """A join's scalars under ``config``: the configured rules if a reset cleared its own
    (``streameval state reset --join``), else its own, which must be the configured ones."""
    shape = join_shape_of_meta(meta)
    if shape is None:
        want = join_shape(config)
        return {
            **meta,
            "label_grace": want["label_grace_ms"],
            "label_ttl": want["label_ttl_ms"],
            "max_pending": want["max_pending"],
        }
    verdict = judge(Stored(joins={partition: shape}), config)
    if verdict.refusals:
        raise Refused(verdict, f"join partition {partition}")
    return meta


# ------------------------------------------------------------------------------------------
@dataclass(slots=True)
class EvalCut:
    """What one checkpoint of an evaluation partition writes (``changes``), and what its
    changelog then holds: ``parts`` of the models and pairs in ``touched``."""

    changes: dict[bytes, bytes | None]
    parts: dict[bytes, bytes]
    touched: set[str]


class EvalStage:
    """Stage 2, one evaluation partition: merge the join partitions' outcome batches in event
    order and run the models and comparisons (:class:`~streameval.engine.Engine`) on them.

    Parameters
    ----------
    partition
        The evaluation partition (outcomes-topic partition) this stage owns.
    config
        The evaluation configuration.
    join_partitions
        How many join partitions send outcomes (each one's frontier is awaited).
    """

    #: outcomes gathered before they are evaluated (:data:`RELEASE_MIN`; tests vary it)
    release_min = RELEASE_MIN

    def __init__(self, partition: int, config: EvaluationConfig, join_partitions: int) -> None:
        self.partition = partition
        self.engine = Engine(config)
        self.join_partitions = join_partitions
        self.frontiers: dict[int, int] = {}
        #: join partition -> the last outcome batch applied: (event-batch offset, step)
        self.applied: dict[int, tuple[int, int]] = {}
        self.offset = -1  # last outcomes-topic offset read
        # what waits for the frontiers: sorted runs, one per outcome batch (by the arrival
        # number of its first outcome), of (due, instance_id, model_id, arrival, outcome)
        self._runs: dict[int, list[tuple[int, str, str, int, Outcome]]] = {}
        self._waiting = 0
        self._seq = 0
        self._limit = NO_TS  # everything with due below it has been released
        self._written: dict[bytes, bytes] = {}  # every key's value at the last checkpoint
        self._pending: dict[bytes, bytes] = {}  # the parts of the checkpoint being written
        # each run is under a key of its own in the checkpoints: those that came or shrank
        # since the last one, those a checkpoint has, and those gone from it since
        self._dirty: set[int] = set()
        self._stored: set[int] = set()
        self._gone: list[int] = []
        self._shown: set[str] = set()  # models and pairs that have reached a checkpoint
        self._whole: set[str] = set()  # ... that the latest :meth:`changes` wrote whole
        #: models moved to another partition (streameval.app.stateops), whose outcomes in
        #: the batches before this offset of the outcomes topic went there with them
        self._moved: tuple[frozenset[str], int] | None = None

    @property
    def waiting(self) -> int:
        """Outcomes received but not yet released (their join partitions' frontiers lag)."""
        return self._waiting

    def apply(self, offset: int, batch: OutcomeBatch) -> tuple[list[Record], list[Outcome]]:
        """Take the outcome batch at ``offset``; return (records, outcomes released)."""
        self.offset = max(self.offset, offset)
        q = batch.partition
        number = (batch.offset, batch.part)
        if number <= self.applied.get(q, (-1, 0)):
            return [], []  # re-sent by a join partition restored from an older snapshot
        self.applied[q] = number
        outcomes, seq = batch.outcomes, self._seq
        if self._moved is not None:
            if offset < self._moved[1]:
                moved = self._moved[0]
                outcomes = [o for o in outcomes if o.model_id not in moved]
            else:
                self._moved = None
        if outcomes:
            models, instances, *_, dues = zip(*outcomes, strict=True)  # columns, at C speed
            run = list(
                zip(
                    dues,
                    instances,
                    models,
                    range(seq + 1, seq + len(outcomes) + 1),
                    outcomes,
                    strict=True,
                )
            )
            run.sort()  # in due order already but for ties: nearly free
            self._runs[seq + 1] = run
            self._dirty.add(seq + 1)
            self._waiting += len(run)
            self._seq = seq + len(outcomes)
        if batch.frontier > self.frontiers.get(q, NO_TS):
            self.frontiers[q] = batch.frontier
        return self._release(self.release_min)

    def _release(self, least: int) -> tuple[list[Record], list[Outcome]]:
        """Evaluate what is due below the smallest frontier, if that is at least ``least``
        outcomes. Outcomes a join partition sends later have due >= its frontier, hence >=
        any limit already used: only a higher limit can release more, and only from the
        front of each run."""
        if len(self.frontiers) < self.join_partitions or not self._runs:
            return [], []
        limit = min(self.frontiers.values())
        if limit <= self._limit:
            return [], []
        key = (limit,)
        if least > 1:
            due = 0
            for run in self._runs.values():
                due += bisect.bisect_left(run, key)
                if due >= least:
                    break
            else:
                return [], []  # too few yet: they wait for more, or for the tick
        self._limit = limit
        taken = self._take(key)
        if not taken:
            return [], []
        taken.sort()  # sorted runs: timsort merges them
        self._waiting -= len(taken)
        released = [entry[4] for entry in taken]
        records: list[Record] = []
        start = 0
        while start < len(released):  # bounded chunks: the delayed block is (n, bins + 2)
            end = min(start + EVALUATE_CHUNK, len(released))
            while (
                end < len(released) and released[end].instance_id == released[end - 1].instance_id
            ):
                end += 1  # never split one instance's outcomes (comparisons pair them)
            records += self.engine.evaluate(released[start:end])
            start = end
        return records, released

    def _take(self, key: tuple) -> list[tuple[int, str, str, int, Outcome]]:
        """The waiting outcomes before ``key``, run by run (not sorted as a whole)."""
        taken, shortened, emptied = take_runs(self._runs, key)
        self._dirty.update(shortened)
        for number in emptied:
            self._dirty.discard(number)
            if number in self._stored:  # a checkpoint has it: its key goes
                self._stored.discard(number)
                self._gone.append(number)
        return taken

    def tick(self) -> tuple[list[Record], list[Outcome]]:
        """Evaluate every outcome due, however few; then the latest records of every model
        and pair that changed since its last record (every ``publish_interval``, and at
        shutdown). Returns (records, outcomes released)."""
        records, released = self._release(1)
        return records + self.engine.finish(flush=False), released

    # -- checkpoints ------------------------------------------------------------------------
    def changes(self) -> dict[bytes, bytes | None]:
        """What changed since the last :meth:`cut` (streameval.app.changelog): each model's
        and pair's state, encoded and cut into chunks of which only the changed ones count —
        a window of 10⁵ outcomes costs what moved in it, not its size — the outcomes that
        came or went while waiting for the frontiers, and the stage's scalars."""
        engine = self.engine
        parts: dict[bytes, bytes] = {}
        whole = self._whole = set(engine.touched)  # the models and pairs written whole
        for tag, evaluators in ((MODEL, engine.models), (PAIR, engine.pairs)):
            for name, evaluator in evaluators.items():
                if name in engine.touched or name not in self._shown:
                    self._shown.add(name)
                    whole.add(name)
                    # JSON, as every state() is made to round-trip exactly through
                    parts.update(_chunks(tag + _name(name), orjson.dumps(evaluator.state())))
        parts[STAGE] = encode_value(
            {
                "partition": self.partition,
                "offset": self.offset,
                "frontiers": [[q, f] for q, f in self.frontiers.items()],
                "applied": [[q, o, part] for q, (o, part) in self.applied.items()],
                "seq": self._seq,
                "engine": engine.scalars(),
                **({"moved": [sorted(self._moved[0]), self._moved[1]]} if self._moved else {}),
            }
        )
        written = self._written
        changes: dict[bytes, bytes | None] = {}
        for key, value in parts.items():
            if written.get(key) != value:
                changes[key] = value
        for key in written.keys() - parts.keys():  # a part that shrank: its last chunks go
            # (and the waiting outcomes' chunks of a checkpoint from before they had keys)
            if key[:1] == BUFFER or _owner(key) in whole:
                changes[key] = None
        pack, runs = _SEQ.pack, self._runs
        for number in self._gone:
            changes[OUTCOME + pack(number)] = None
        for number in self._dirty:
            changes[OUTCOME + pack(number)] = encode_value([(e[3], *e[4]) for e in runs[number]])
        self._pending = parts
        return changes

    def _runs_written(self) -> None:
        """The runs as :meth:`changes` gave them are in a checkpoint."""
        self._stored |= self._dirty
        self._dirty.clear()
        self._gone.clear()

    def cut(self) -> Any:
        """Close a checkpoint while the stage goes on: its changes are the cut's
        ``changes``; :meth:`written` once they are durable."""
        cut = EvalCut(self.changes(), self._pending, self._whole)
        self.engine.touched.clear()
        self._pending = {}
        self._runs_written()
        return cut

    def written(self, cut: EvalCut) -> None:
        self._settle(cut.parts, cut.touched)

    def summary(self) -> dict[str, Any]:
        """What a checkpoint's seal says of this evaluation partition: every model and pair
        with a history, its count and the settings that shape it (streameval.app.evolve), and
        where the partition is."""
        shapes: list[dict[str, Any]] = []
        index: dict[bytes, int] = {}
        models = {}
        for name, model in self.engine.models.items():
            shape = model_shape_of(model.settings())
            key = orjson.dumps(shape, option=orjson.OPT_SORT_KEYS)
            if key not in index:
                index[key] = len(shapes)
                shapes.append(shape)
            models[name] = [model.n, index[key]]
        pairs = {
            key: [pair.n, pair.model_a, pair.model_b, list(pair.estimators)]
            for key, pair in self.engine.pairs.items()
            if pair.n
        }
        applied = [[q, o, part] for q, (o, part) in self.applied.items()]
        return {
            "offset": self.offset,
            "applied": applied,
            "waiting": self._waiting,
            "models": models,
            "pairs": pairs,
            "shapes": shapes,
        }

    def _settle(self, parts: dict[bytes, bytes], touched: set[str]) -> None:
        """``parts`` (of the models and pairs in ``touched``, and the buffer) are durable."""
        written = self._written
        for key in [k for k in written if k[:1] == BUFFER or _owner(k) in touched]:
            if key not in parts:
                del written[key]
        written.update(parts)

    @classmethod
    def restore(
        cls, items: Iterable[tuple[bytes, bytes]], config: EvaluationConfig, join_partitions: int
    ) -> EvalStage:
        """The stage from the latest value of every key its checkpoints wrote."""
        items = dict(items)
        meta = decode_value(items[STAGE])
        stage = cls(meta["partition"], config, join_partitions)
        stage.offset = meta["offset"]
        stage.frontiers = {q: f for q, f in meta["frontiers"]}
        # (before steps were numbered, one outcome batch held all that an event batch set off)
        stage.applied = {q: (o, part[0] if part else _WHOLE) for q, o, *part in meta["applied"]}
        engine_state = dict(meta["engine"])
        engine_state["models"], engine_state["pairs"] = {}, {}
        whole: dict[bytes, list[tuple[int, bytes]]] = {}
        waiting = {}
        for key, value in items.items():
            if key[:1] == OUTCOME:
                waiting[_SEQ.unpack(key[1:])[0]] = decode_value(value)
            elif key[:1] in (MODEL, PAIR, BUFFER):
                head, index = key[:-4], _INDEX.unpack(key[-4:])[0]
                whole.setdefault(head, []).append((index, value))
        buffer: list = []
        for head, chunks in whole.items():
            data = b"".join(v for _, v in sorted(chunks))
            if head[:1] == BUFFER:
                buffer = decode_value(data)
            else:
                value = orjson.loads(data)
                kind = "models" if head[:1] == MODEL else "pairs"
                engine_state[kind][head[3:].decode()] = value
        models, pairs = engine_state["models"], engine_state["pairs"]
        stored = Stored(
            models={m: model_shape_of(s["config"]) for m, s in models.items() if s["n"]},
            pairs={
                k: (s["model_a"], s["model_b"], {"estimators": s["estimators"]})
                for k, s in pairs.items()
                if s["n"]
            },
        )
        verdict = judge(stored, config)
        if verdict.refusals:
            raise Refused(verdict, f"evaluation partition {meta['partition']}")
        stage.engine = engine = Engine.from_state(config, engine_state)
        stage._written = {k: v for k, v in items.items() if k[:1] != OUTCOME}
        # what continues under other settings is written whole by the next checkpoint
        stage._shown = {
            m
            for m, s in models.items()
            if m in engine.models and engine.models[m].settings() == s["config"]
        }
        stage._shown |= {
            k
            for k, s in pairs.items()
            if k in engine.pairs and list(engine.pairs[k].estimators) == s["estimators"]
        }
        if "moved" in meta:
            stage._moved = (frozenset(meta["moved"][0]), meta["moved"][1])
        stage._seq = meta.get("seq", 0)
        if buffer:  # from before the runs had keys: one run, written at the next checkpoint
            number = stage._seq + 1
            waiting[number] = [(number + i, *row) for i, row in enumerate(buffer)]
            stage._seq += len(buffer)
            stage._dirty.add(number)
        for number, rows in waiting.items():
            run = []
            for seq, model_id, instance_id, y_true, times, labels, t_instance, t_label, due in rows:
                outcome = Outcome(
                    model_id,
                    instance_id,
                    y_true,
                    tuple(times),
                    tuple(labels),
                    t_instance,
                    t_label,
                    due,
                )
                run.append((due, instance_id, model_id, seq, outcome))
            stage._runs[number] = run
            stage._waiting += len(run)
        stage._stored = set(waiting) - stage._dirty
        return stage


#: keys of an evaluation stage's checkpoint: a model's, a pair's state, a run of waiting
#: outcomes (by the arrival number of its first); the waiting outcomes in chunks, before that
MODEL, PAIR, OUTCOME, BUFFER = b"M", b"P", b"O", b"B"
_SEQ = struct.Struct(">Q")
#: bytes per chunk of a model's encoded state
STATE_CHUNK = 16 * 1024
_INDEX = struct.Struct(">I")
_LENGTH = struct.Struct(">H")


def _name(name: str) -> bytes:
    data = name.encode()
    return _LENGTH.pack(len(data)) + data


def _owner(key: bytes) -> str | None:
    """The model or pair a chunk key belongs to."""
    if key[:1] not in (MODEL, PAIR):
        return None
    return key[3:-4].decode()


def _chunks(head: bytes, data: bytes) -> Iterable[tuple[bytes, bytes]]:
    """``data`` cut into chunks under ``head`` + chunk number (at least one chunk)."""
    for i, start in enumerate(range(0, max(len(data), 1), STATE_CHUNK)):
        yield head + _INDEX.pack(i), data[start : start + STATE_CHUNK]
