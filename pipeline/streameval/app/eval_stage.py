"""Stage 2 of the worker, one evaluation partition: the join partitions' outcomes merged in
event order and evaluated by the :class:`~streameval.engine.Engine`, as a plain class (no
Kafka, no threads, no clock; ``tests/test_stages.py`` drives it without a broker).

Outcomes wait until every join partition's frontier has passed them, and are then released in
``(due, instance_id, model_id)`` order: a function of the events alone (docs/architecture.md,
"Ordering"). An outcome batch already applied (by event-batch offset and step) is skipped.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from streameval.config import EvaluationConfig
from streameval.core.outcome import Outcome, outcome_of
from streameval.core.sliced import slice_key
from streameval.core.state import decode_value, encode_value
from streameval.engine import Engine
from streameval.event_time import NO_TS
from streameval.records import Record

from .evolve import Refused, Stored, judge, model_shape_of
from .statekeys import (
    BUFFER,
    CHUNK_INDEX,
    GATHERED,
    MATURITY,
    MODEL,
    OUTCOME,
    PAIR,
    PARTS,
    RUN,
    SLICE,
    SLICES,
    STAGE,
    WHOLE,
    decode_state,
    encode_name,
    encode_state,
    model_of,
    owner_of,
    state_chunks,
)
from .wire import OutcomeBatch

__all__ = ["EVALUATE_CHUNK", "RELEASE_MIN", "SLICE_TICKS", "EvalCut", "EvalStage"]

#: Outcomes handed to the evaluators at a time (memory, not results: they are split-invariant)
EVALUATE_CHUNK = 4096
#: Every how many periodic ticks (``publish_interval``) a stage's slices publish their latest
#: numbers between the records due at their ``publish_every`` counts
SLICE_TICKS = 10
#: Outcomes an evaluation stage gathers before it evaluates them, unless its :meth:`tick`
#: comes first: the models' numpy updates cost per call, and a join that applies its due
#: events in steps sends them a few dozen at a time. The numbers do not depend on it.
RELEASE_MIN = 2_048


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
        #: the first outcome of each run and its number, as a heap: only the runs whose first
        #: outcome is due are looked at (a join partition that lags leaves thousands of runs
        #: waiting, and a look at each per outcome batch made the stage fall behind for good)
        self._heads: list[tuple[tuple[int, str, str, int, Outcome], int]] = []
        self._counted = NO_TS  # the last limit too few outcomes were due below
        self._waiting = 0
        self._seq = 0
        self._ticks = 0
        self._limit = NO_TS  # everything with due below it has been released
        self._written: dict[bytes, bytes] = {}  # every key's value at the last checkpoint
        self._pending: dict[bytes, bytes] = {}  # the parts of the checkpoint being written
        #: per model, the pieces of gathered outcomes :meth:`changes` gave (for :meth:`cut`)
        self._pieces: dict[str, tuple[dict, list]] = {}
        #: keys a restore found of slices that did not come back: deleted by the next cut
        self._stale: list[bytes] = []
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
            models, instances, *_, dues, _, _ = zip(*outcomes, strict=True)  # columns, in C
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
            heapq.heappush(self._heads, (run[0], seq + 1))
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
            # what is due below a limit has all come (what comes later is due at or after it)
            if limit <= self._counted:
                return [], []
            due, heads, runs, looked = 0, self._heads, self._runs, []
            while heads and heads[0][0] < key and due < least:
                looked.append(heapq.heappop(heads))
                due += bisect.bisect_left(runs[looked[-1][1]], key)
            for entry in looked:
                heapq.heappush(heads, entry)
            if due < least:
                self._counted = limit
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
        taken: list[tuple[int, str, str, int, Outcome]] = []
        heads, runs, cut_short = self._heads, self._runs, []
        while heads and heads[0][0] < key:
            number = heapq.heappop(heads)[1]
            run = runs[number]
            cut = bisect.bisect_left(run, key)
            if cut < len(run):
                taken += run[:cut]
                runs[number] = run = run[cut:]
                self._dirty.add(number)
                cut_short.append((run[0], number))
            else:
                taken += run
                del runs[number]
                self._dirty.discard(number)
                if number in self._stored:  # a checkpoint has it: its key goes
                    self._stored.discard(number)
                    self._gone.append(number)
        for entry in cut_short:  # (after the loop: their heads are past the key)
            heapq.heappush(heads, entry)
        return taken

    def tick(self, periodic: bool = False) -> tuple[list[Record], list[Outcome]]:
        """Evaluate every outcome due, however few; then the latest records of every model
        and pair that changed since its last record (every ``publish_interval``, and at
        shutdown). Returns (records, outcomes released).

        The slices' evaluators take what they gathered, and publish, at every
        :data:`SLICE_TICKS`-th ``periodic`` tick and at every other: each update costs a
        model's evaluation call and then a checkpoint of its state (streameval.core.sliced),
        so a slice's latest numbers lag its outcomes by up to that many ticks."""
        records, released = self._release(1)
        slices = True
        if periodic:
            self._ticks += 1
            slices = self._ticks % SLICE_TICKS == 0
        return records + self.engine.finish(flush=False, slices=slices), released

    # -- checkpoints ------------------------------------------------------------------------
    def changes(self) -> dict[bytes, bytes | None]:
        """What changed since the last :meth:`cut` (streameval.app.changelog): each model's
        and pair's state, encoded and cut into chunks of which only the changed ones count —
        a window of 10⁵ outcomes costs what moved in it, not its size — the outcomes that
        came or went while waiting for the frontiers, and the stage's scalars."""
        engine = self.engine
        parts: dict[bytes, bytes] = {}
        whole = self._whole = set(engine.touched)  # the models and pairs written whole
        states: dict[bytes, dict[str, Callable[[], Any]]] = {
            MODEL: {name: ev.state for name, ev in engine.models.items()},
            PAIR: {name: pair.state for name, pair in engine.pairs.items()},
            # a model's other parts, written with it
            MATURITY: {name: m.state for name, m in engine.maturity.items()},
            SLICES: {name: sliced.index for name, sliced in engine.slices.items()},
            SLICE: {},  # a slice's evaluator, written when it changed
        }
        for model_id, sliced in engine.slices.items():
            for name, evaluator in sliced.evaluators.items():
                states[SLICE][slice_key(model_id, name)] = evaluator.state
            whole.update(slice_key(model_id, name) for name in sliced.updated | sliced.left)
        names = engine.touched.union(*states.values())
        for name in names - self._shown:
            whole.add(name)
            self._shown.add(name)
        for tag, of_tag in states.items():
            for name, state in of_tag.items():
                if name in whole:
                    # JSON, as every state() is made to round-trip exactly through
                    parts.update(state_chunks(tag + encode_name(name), encode_state(state())))
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
            if key[:1] == BUFFER or owner_of(key) in whole:
                changes[key] = None
        pack, runs = RUN.pack, self._runs
        for number in self._gone:
            changes[OUTCOME + pack(number)] = None
        for number in self._dirty:
            changes[OUTCOME + pack(number)] = encode_value([(e[3], *e[4]) for e in runs[number]])
        for key in self._stale:  # parts of slices that did not come back from a restore,
            changes.setdefault(key, None)  # unless a part of the same key was written anew
        # what each slice gathered, a piece per checkpoint: written once, deleted once given
        self._pieces = {}
        piece = CHUNK_INDEX.pack
        for model_id, sliced in engine.slices.items():
            new, gone = self._pieces[model_id] = sliced.pieces()
            for name, number in gone:
                changes[GATHERED + encode_name(slice_key(model_id, name)) + piece(number)] = None
            for (name, number), rows in new.items():
                key = GATHERED + encode_name(slice_key(model_id, name)) + piece(number)
                changes[key] = encode_value([tuple(o) for o in rows])
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
        for model_id, (new, _) in self._pieces.items():
            sliced = self.engine.slices.get(model_id)
            if sliced is not None:
                sliced.pieces_written(new)
                sliced.taken()
        self._pieces = {}
        self._stale = []
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
        # models with label maturity and no outcome yet (labels late): a move takes them too
        pending = sorted(self.engine.maturity.keys() - self.engine.models.keys())
        return {
            "offset": self.offset,
            "applied": applied,
            "waiting": self._waiting,
            "models": models,
            **({"pending_models": pending} if pending else {}),
            "pairs": pairs,
            "shapes": shapes,
        }

    def _settle(self, parts: dict[bytes, bytes], touched: set[str]) -> None:
        """``parts`` (of the models and pairs in ``touched``, and the buffer) are durable."""
        written = self._written
        for key in [k for k in written if k[:1] == BUFFER or owner_of(k) in touched]:
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
        stage.applied = {q: (o, part[0] if part else WHOLE) for q, o, *part in meta["applied"]}
        engine_state = dict(meta["engine"])
        engine_state["models"], engine_state["pairs"] = {}, {}
        whole: dict[bytes, list[tuple[int, bytes]]] = {}
        waiting = {}
        gathered: dict[str, list[tuple[int, list]]] = {}
        for key, value in items.items():
            if key[:1] == OUTCOME:
                waiting[RUN.unpack(key[1:])[0]] = decode_value(value)
            elif key[:1] == GATHERED:
                number = CHUNK_INDEX.unpack(key[-4:])[0]
                gathered.setdefault(owner_of(key), []).append((number, decode_value(value)))
            elif key[:1] in (*PARTS, BUFFER):
                head, index = key[:-4], CHUNK_INDEX.unpack(key[-4:])[0]
                whole.setdefault(head, []).append((index, value))
        buffer: list = []
        for head, chunks in whole.items():
            data = b"".join(v for _, v in sorted(chunks))
            if head[:1] == BUFFER:
                buffer = decode_value(data)
            elif head[:1] == SLICE:  # a slice's evaluator, in its model's slices
                model_id, _, name = head[3:].decode().partition("\x00")
                sliced = engine_state.setdefault("slices", {}).setdefault(model_id, {})
                sliced.setdefault("evaluators", {})[name] = decode_state(data)
            elif head[:1] == SLICES:
                sliced = engine_state.setdefault("slices", {}).setdefault(head[3:].decode(), {})
                sliced.update(decode_state(data))
            else:
                value = decode_state(data)
                kind = {MODEL: "models", PAIR: "pairs", MATURITY: "maturity"}[head[:1]]
                engine_state.setdefault(kind, {})[head[3:].decode()] = value
        for model_id, sliced in list(engine_state.get("slices", {}).items()):
            # each slice's gathered outcomes: after the n its evaluator has, the pieces that
            # follow on without a gap (a piece before n was given to it since; one after a
            # gap is of a slice of the same name that started over: no one's)
            buffers, taken = sliced["buffers"], sliced["pieces"] = {}, {}
            for name in sliced.get("slices", ()):
                state = sliced.get("evaluators", {}).get(name)
                if state is None:  # a part missing: the model's slices start over
                    engine_state["slices"][model_id] = {}
                    break
                rows, numbers, at = [], [], state["n"]
                for number, piece in sorted(gathered.get(slice_key(model_id, name), ())):
                    if number == at:
                        rows += piece
                        numbers.append(number)
                        at += len(piece)
                buffers[name], taken[name] = rows, numbers
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
        stage._written = {k: v for k, v in items.items() if k[:1] not in (OUTCOME, GATHERED)}
        # the parts of slices that did not come back (another slicing, a reset, started
        # over) go with the next checkpoint, so that no later slice reads them as its own
        live = {slice_key(m, name) for m, s in engine.slices.items() for name in s.evaluators}
        for key in items:
            tag = key[:1]
            stale = (tag == SLICES and owner_of(key) not in engine.slices) or (
                tag in (SLICE, GATHERED) and owner_of(key) not in live
            )
            if stale:
                stage._stale.append(key)
                stage._written.pop(key, None)
        for model_id, sliced in engine.slices.items():  # and pieces no slice took back
            listed = {
                GATHERED + encode_name(slice_key(model_id, name)) + CHUNK_INDEX.pack(number)
                for name, numbers in sliced.written_pieces().items()
                for number in numbers
            }
            stage._stale += [
                k
                for k in items
                if k[:1] == GATHERED and model_of(owner_of(k)) == model_id and k not in listed
            ]
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
            for seq, *fields in rows:
                outcome = outcome_of(fields)
                run.append((outcome.due, outcome.instance_id, outcome.model_id, seq, outcome))
            stage._runs[number] = run
            stage._waiting += len(run)
            if run:
                stage._heads.append((run[0], number))
        heapq.heapify(stage._heads)
        stage._stored = set(waiting) - stage._dirty
        return stage
