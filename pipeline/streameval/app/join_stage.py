"""Stage 1 of the worker, one join partition: the core's join on an event-time watermark, as a
plain class (no Kafka, no threads, no clock; ``tests/test_stages.py`` drives it without a
broker).

The watermark is the smallest progress (the largest ``ts`` read) over the input partitions that
are not idle, as the router reports them with every event batch; the join's clock is one less,
and the stage publishes it as its *frontier*: every later outcome it sends has a later ``due``.
Why that makes the worker's numbers replay's: docs/architecture.md, "Ordering". An event batch
already applied (by input partition and offset) is skipped.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from streameval.config import EvaluationConfig
from streameval.core.join import Join
from streameval.core.outcome import Outcome
from streameval.core.state import META, decode_value, encode_value
from streameval.event_time import NO_TS

from .evolve import Refused, Stored, join_shape, join_shape_of_meta, judge
from .statekeys import STAGE
from .wire import WIRE_VERSION, EventBatch, OutcomeBatch

__all__ = ["SLICE_EVENTS", "JoinStage"]

TopicPartition = tuple[str, int]
#: The most waiting events the worker's join applies in one step: what one event batch sets
#: off, and so a checkpoint's size, stays bounded. A constant, not a setting: the steps'
#: outcome batches are numbered, and a restarted stage must number them as before.
SLICE_EVENTS = 500


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
        notices = config.maturity.enabled
        self.join = Join(j.label_grace_ms, j.label_ttl_ms, j.max_pending, state, notices)
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

    def prepare(self, cut: Any) -> None:
        self.join.prepare(cut)

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
        stage.join = Join.resume(join_meta, state, state.waiting(), config.maturity.enabled)
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
        stage.join = Join.restore(items, state, config.maturity.enabled)
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
