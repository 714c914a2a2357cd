"""The worker's stages without a broker: any interleaving, restart or duplicate gives replay's
numbers (the broker-backed tests in tests/integration/ check the same through Kafka)."""

from __future__ import annotations

import random
import zlib
from collections import Counter
from dataclasses import replace

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streameval.app.changelog_format import Restorer, checkpoint_records, live
from streameval.app.eval_stage import EvalStage
from streameval.app.join_stage import JoinStage
from streameval.app.router import Router
from streameval.app.statekeys import STAGE
from streameval.app.topology import Topology
from streameval.app.wire import (
    INSTANCE,
    LABEL,
    PREDICTION,
    WIRE_VERSION,
    EventBatch,
    OutcomeBatch,
    Source,
    WireError,
    decode_events,
    decode_outcomes,
    encode,
)
from streameval.codec import canonical_scores, decode_event
from streameval.core.outcome import Outcome
from streameval.engine import Engine
from streameval.event_time import NO_TS
from streameval.messages import StoredMessage
from streameval.simulate.malformed import Record, mix
from streameval.simulate.scripted import TOPIC_OF
from streameval.topics import INPUT_KINDS

from tests.streaming import evolved_finals, finals, make_config, replay_finals


def _compacted(log, cleaned, rng):
    """``log`` after Kafka's log cleaner went over its first ``cleaned`` records: of a key
    written again later in that range only the last record stays, and some tombstones go."""
    last = {key: i for i, (key, _) in enumerate(log[:cleaned])}
    kept = [
        (key, value)
        for i, (key, value) in enumerate(log[:cleaned])
        if last[key] == i and not (value is None and rng.random() < 0.5)
    ]
    return kept + log[cleaned:]


class Harness:
    """Input partitions, routers, join and evaluation stages, and the internal "topics" as
    lists, driven in a random order with random crashes."""

    def __init__(
        self,
        stream,
        config,
        *,
        inputs=3,
        joins=4,
        evals=3,
        routers=2,
        seed=0,
        records=None,
        slice_events=None,
        transactions=0.0,
    ):
        self.rng = random.Random(seed)
        # the share of checkpoints written as under exactly-once (:meth:`snapshot`)
        self.transactions = transactions
        self.transaction_rng = random.Random(seed + 1)
        self.aborted = 0  # transactions a crash aborted
        # how many outcomes an evaluation stage gathers before it evaluates them
        self.release_min = self.rng.choice([1, 40, 2048])
        self.config = config
        self.slice_events = slice_events
        self.steps = 0  # join steps taken after an event batch (slice_events)
        self.cut_behind = 0  # join checkpoints taken between two such steps
        self.inputs = {}
        if records is None:  # the stream, keyed by instance id, no Kafka timestamps
            records = [
                Record(
                    TOPIC_OF[e["type"]],
                    (e.get("instance_id") or "?").encode(),
                    orjson.dumps(e),
                    None,
                )
                for _, _, e in stream.events()
            ]
        self.expect = {}  # (topic, partition, offset) -> the dead-letter code it must get
        for record in records:
            key = record.key
            p = zlib.crc32(key) % inputs if key is not None else self.rng.randrange(inputs)
            log = self.inputs.setdefault((record.topic, p), [])
            self.expect[record.topic, p, len(log)] = record.expect
            log.append(
                StoredMessage(record.topic, p, len(log), key, record.value, record.timestamp)
            )
        for topic in INPUT_KINDS:
            for p in range(inputs):
                self.inputs.setdefault((topic, p), [])
        tps = sorted(self.inputs)
        self.routers = [
            Router(INPUT_KINDS, joins, idle_ms=100, slices=config.slices.field)
            for _ in range(routers)
        ]
        self.owner = {tp: i % routers for i, tp in enumerate(tps)}
        for tp, i in self.owner.items():
            self.routers[i].assign([tp])
        self.read = dict.fromkeys(tps, 0)  # next input offset per partition
        self.committed = dict.fromkeys(tps, 0)
        self.committed_progress = {}  # what the worker keeps in the commit's metadata
        self.events = [[] for _ in range(joins)]
        self.outcomes = [[] for _ in range(evals)]
        self.joins = [JoinStage(q, config, tps, slice_events=slice_events) for q in range(joins)]
        self.join_pos = [0] * joins
        self.evals = [EvalStage(r, config, joins) for r in range(evals)]
        for stage in self.evals:
            stage.release_min = self.release_min
        self.eval_pos = [0] * evals
        self.topology = Topology(config, evals)
        self.records = []
        self.dead = 0
        self.letters = []
        self.wall = 0.0
        self.changelogs = {}  # (kind, index) -> the records of its changelog partition
        self.sealed = {}  # (kind, index) -> (latest checkpoint number, its intent chunks)
        self.carry = {}  # (kind, index) -> what a restore found not yet materialized

    # one step of each kind -----------------------------------------------------------------
    def ingest(self, i, *, heartbeat=False):
        router = self.routers[i]
        messages = []
        for tp in router.owned:
            log = self.inputs[tp]
            take = 0 if heartbeat else self.rng.randint(0, 40)
            chunk = log[self.read[tp] : self.read[tp] + take]
            self.read[tp] += len(chunk)
            messages += chunk
        self.rng.shuffle(messages)  # topics and partitions interleave arbitrarily...
        messages.sort(key=lambda m: (m.topic(), m.partition(), m.offset()))  # ...not offsets
        per_partition, letters = router.route(messages)
        for tp in router.owned:
            if self.read[tp] >= len(self.inputs[tp]):
                router.at_end(*tp, self.wall)
        self.dead += len(letters)
        self.letters += letters
        sources = router.sources(self.wall)
        for q, rows in enumerate(per_partition):
            self.events[q].append(encode(EventBatch(WIRE_VERSION, sources, rows)))
        if self.rng.random() < 0.3:
            for tp in router.owned:
                self.committed[tp] = self.read[tp]
                self.committed_progress[tp] = router.progress(tp)

    def crash_ingest(self, i):
        """Re-read from the last commit: events are sent again (as duplicates), and the
        router starts from the progress committed with the offsets."""
        router = self.routers[i]
        owned = router.owned
        for tp in owned:
            self.read[tp] = self.committed[tp]
        router.revoke(owned)
        router.assign(owned, self.committed_progress)

    def join(self, q):
        stage, log = self.joins[q], self.events[q]
        for _ in range(self.rng.randint(1, 3)):
            if stage.behind:  # the next step of what the last batch set off, first
                clock = stage.join.clock
                batches = self.topology.after_step(stage, clock, stage.proceed())
                self.steps += 1
            elif self.join_pos[q] < len(log):
                offset = self.join_pos[q]
                self.join_pos[q] += 1
                before = (stage.frontier, stage.join.clock)
                outcomes = stage.apply(offset, decode_events(log[offset]))
                batches = self.topology.after_batch(stage, before, outcomes)
            else:
                return
            for r, batch in batches:
                self.outcomes[r].append(encode(batch))

    def evaluate(self, r):
        stage, log = self.evals[r], self.outcomes[r]
        for _ in range(self.rng.randint(1, 3)):
            if self.eval_pos[r] >= len(log):
                return
            offset = self.eval_pos[r]
            self.eval_pos[r] += 1
            records, _ = stage.apply(offset, decode_outcomes(log[offset]))
            self.records += records

    def snapshot(self, kind, index, crash=True):
        """An incremental checkpoint into the stage's changelog — now and then cut short by a
        crash, after which the stage restarts from the changelog. Some of them are written
        as under exactly-once (a share ``transactions`` of them): no intent, and a crash
        aborts the transaction, so a reader sees none of its records."""
        stage = (self.joins if kind == "join" else self.evals)[index]
        log = self.changelogs.setdefault((kind, index), [])
        number, chunks = self.sealed.get((kind, index), (0, 0))
        cut = stage.cut()  # as the worker checkpoints: cut, and written once durable
        changes = {**self.carry.pop((kind, index), {}), **cut.changes}
        self.cut_behind += kind == "join" and stage.behind
        transaction = self.transaction_rng.random() < self.transactions
        records, new_chunks = checkpoint_records(
            number + 1, changes, chunks, {"v": 1}, intent=not transaction
        )
        if crash and self.rng.random() < 0.2:  # a crash in the middle of the checkpoint
            written = int(self.rng.random() * len(records))  # one draw, whatever the count
            if not transaction:
                log.extend(records[:written])
            self.aborted += transaction
            self.restore(kind, index)
            return
        log.extend(records)
        stage.written(cut)
        self.sealed[kind, index] = (number + 1, new_chunks)

    def restore(self, kind, index):
        """A new stage from its changelog, which the broker has compacted in part."""
        log = self.changelogs.get((kind, index), [])
        log[:] = _compacted(log, self.rng.randrange(len(log) + 1), self.rng)
        restorer = Restorer()
        for key, value in log:
            restorer.add(key, value)
        items = list(live(restorer.finish()))
        self.carry[kind, index] = restorer.carry
        tps = sorted(self.inputs)
        if restorer.seal is not None:
            self.sealed[kind, index] = (restorer.seal["n"], restorer.seal["chunks"])
        if kind == "join":
            slices = self.slice_events
            stage = (
                JoinStage.restore(items, self.config, tps, slice_events=slices)
                if items
                else JoinStage(index, self.config, tps, slice_events=slices)
            )
            self.joins[index] = stage
            self.join_pos[index] = stage.offset + 1
        else:
            joins = len(self.joins)
            stage = (
                EvalStage.restore(items, self.config, joins)
                if items
                else EvalStage(index, self.config, joins)
            )
            stage.release_min = self.release_min
            self.evals[index] = stage
            self.eval_pos[index] = stage.offset + 1

    def stop(self):
        """As a SIGTERM stops a worker: each join takes the event batches it has, then every
        stage takes a checkpoint (evaluation stages may have outcome batches left to read)."""
        for q in range(len(self.joins)):
            while self.join_pos[q] < len(self.events[q]) or self.joins[q].behind:
                self.join(q)
        for kind, stages in (("join", self.joins), ("eval", self.evals)):
            for index in range(len(stages)):
                self.snapshot(kind, index, crash=False)

    def restart(self, config, reset_estimators=(), reset_join=False):
        """Every stage restored under another configuration, after what `streameval state
        reset` (``reset_estimators``, ``reset_join``) and a worker's start do to the
        checkpoints first (streameval.app.stateops): models that the configured pairs place
        elsewhere move. Returns the moves."""
        from streameval.app import edits
        from streameval.app.stateops import Survey, _plan_moves
        from streameval.core.state import decode_value

        def fold(kind, index):
            restorer = Restorer()
            for key, value in self.changelogs.get((kind, index), []):
                restorer.add(key, value)
            return dict(live(restorer.finish()))

        def write(kind, index, change):
            number, chunks = self.sealed.get((kind, index), (0, 0))
            change = {**self.carry.pop((kind, index), {}), **change}
            records, chunks = checkpoint_records(number + 1, change, chunks, {"v": 2})
            self.changelogs[(kind, index)].extend(records)
            self.sealed[(kind, index)] = (number + 1, chunks)
            return change

        found = Survey("app", None, eval_partitions=len(self.evals))
        items = {r: fold("eval", r) for r in range(len(self.evals))}
        for r in items:
            for name in reset_estimators:
                change, _ = edits.reset_estimator(items[r], name)
                items[r] = edits.apply(items[r], write("eval", r, change))
        if reset_join:
            for q in range(len(self.joins)):
                write("join", q, edits.reset_join(fold("join", q)))
        found.evals = {r: {"n": 0, "summary": edits.summarize_eval(items[r])} for r in items}
        moves = _plan_moves(found, config)
        for (source, target), (models, pairs) in moves.items():
            offset = decode_value(items[source][STAGE])["offset"]
            batches = self.outcomes[source][offset + 1 :]
            unread = edits.unread(batches, items[source], models)
            until = len(self.outcomes[source])
            changes = edits.move(items[source], items[target], models, pairs, unread, until)
            for r, change in zip((source, target), changes, strict=True):
                items[r] = edits.apply(items[r], write("eval", r, change))
        self.config = config
        self.topology = Topology(config, len(self.evals))
        for kind, stages in (("join", self.joins), ("eval", self.evals)):
            for index in range(len(stages)):
                self.restore(kind, index)
        return moves

    def run(self, crashes=0.0, until=None):
        """Drive the stages until every input is read (``until``: this share of it, and
        return without the end of the stream); the final records."""
        rng = self.rng
        total = sum(len(log) for log in self.inputs.values())
        while any(self.read[tp] < len(log) for tp, log in self.inputs.items()):
            if until is not None and sum(self.read.values()) >= until * total:
                return None
            self.wall += 1
            choice = rng.random()
            if choice < 0.4:
                self.ingest(rng.randrange(len(self.routers)))
            elif choice < 0.7:
                self.join(rng.randrange(len(self.joins)))
            else:
                self.evaluate(rng.randrange(len(self.evals)))
            if crashes and rng.random() < crashes:
                kind = rng.choice(["ingest", "join", "eval"])
                if kind == "ingest":
                    self.crash_ingest(rng.randrange(len(self.routers)))
                else:
                    index = rng.randrange(len(self.joins if kind == "join" else self.evals))
                    if rng.random() < 0.5:
                        self.snapshot(kind, index)
                    else:
                        self.restore(kind, index)
        for _ in range(3):  # everything read: every input goes idle
            self.wall += 1000
            for i in range(len(self.routers)):
                self.ingest(i, heartbeat=True)
            while any(
                self.join_pos[q] < len(self.events[q]) or self.joins[q].behind
                for q in range(len(self.joins))
            ) or any(
                self.eval_pos[r] < len(self.outcomes[r]) for r in range(len(self.evals))
            ):  # until every stage has caught up with its input
                for q in range(len(self.joins)):
                    self.join(q)
                for r in range(len(self.evals)):
                    self.evaluate(r)
        for stage in self.evals:
            self.records += stage.tick()[0]
        return finals(self.records)


def test_the_stream_exercises_every_rule(expected):
    assert {m for m, _ in expected["metrics"]} == {"champion", "challenger", "baseline"}
    assert expected["alarms"], "the injected drift raised no alarm"
    assert expected["comparisons"]


@pytest.mark.parametrize("seed", range(4))
def test_any_interleaving_gives_replays_numbers(stream, expected, seed):
    harness = Harness(stream, make_config(), seed=seed)
    assert harness.run() == expected
    assert harness.dead == 7


@pytest.mark.parametrize("seed", range(4))
def test_crashes_restores_and_duplicates_give_replays_numbers(stream, expected, seed):
    harness = Harness(stream, make_config(), seed=100 + seed)
    assert harness.run(crashes=0.05) == expected
    assert sum(j.duplicates for j in harness.joins) > 0  # resent events were skipped


@pytest.mark.parametrize("seed", range(3))
def test_checkpoints_written_in_transactions_give_replays_numbers(stream, expected, seed):
    """Checkpoints without an intent, as the worker writes them under exactly-once, mixed with
    those of at-least-once (a worker may change its guarantee between runs): a crash in one
    of them leaves nothing of it, and the restores give replay's numbers."""
    # (seeds whose schedules abort a transaction: the draws follow what the stages do, and
    # with the join's waiting events in chunks the schedule of seed 300 aborts none)
    harness = Harness(stream, make_config(), seed=301 + seed, transactions=0.5)
    assert harness.run(crashes=0.05) == expected
    assert harness.aborted > 0 and sum(j.duplicates for j in harness.joins) > 0


@pytest.mark.parametrize("seed", range(3))
def test_joins_applying_due_events_in_steps_give_replays_numbers(stream, expected, seed):
    """Joins that apply a few due events per step (``slice_events``), their outcome batches
    numbered by step, checkpointed and crashed between steps: replay's numbers."""
    harness = Harness(stream, make_config(), seed=200 + seed, slice_events=3)
    assert harness.run(crashes=0.05) == expected
    assert harness.steps > 100 and harness.cut_behind > 0


@pytest.mark.parametrize("seed", range(2))
def test_malformed_and_odd_records_change_no_number(stream, expected, seed):
    """Thousands of malformed records (the two poison pills, wrong shapes, timestamps that
    would move the clocks) and odd ones (duplicates, conflicting labels, labels of unknown
    instances, second instance records) mixed into the stream, keyed at random, with crashes:
    every malformed record is a dead letter with the reason it must have, and the numbers are
    replay's of the valid events alone."""
    records = mix(replace(stream, malformed=0), bad=3_000, odd=1_000, seed=seed)
    harness = Harness(None, make_config(), records=records, seed=seed)
    assert harness.run(crashes=0.02) == expected
    got = {(d.topic, d.partition, d.offset): d.code for d in harness.letters}
    assert got == {where: code for where, code in harness.expect.items() if code is not None}
    assert all(d.reason for d in harness.letters)
    assert harness.joins[0].join.counters  # the odd records were counted
    counted = sum((j.join.counters for j in harness.joins), Counter())
    for reason in ("duplicate_label", "conflicting_label", "orphan_label", "duplicate_instance"):
        assert counted[reason] > 0, reason


@pytest.mark.parametrize(
    "limit", [{"max_pending": 40}, {"label_ttl_ms": 900}], ids=["max_pending", "label_ttl"]
)
def test_limits_that_bind_mean_what_they_mean_in_replay(stream, limit):
    """With ``max_pending`` or ``label_ttl`` binding (outcomes lost to them), the worker's
    stages still give replay's numbers — replay split into the worker's join partitions."""
    config = make_config(join={"label_grace_ms": 1_000, **limit})
    expected = replay_finals(stream, config, join_partitions=4)
    unlimited = replay_finals(stream, make_config())
    assert expected["metrics"] != unlimited["metrics"]  # the limit does bind
    harness = Harness(stream, config, joins=4, seed=3)
    assert harness.run(crashes=0.03) == expected


@pytest.mark.parametrize("seed", range(8))
def test_slices_give_replays_numbers_through_crashes(stream, seed):
    """Every model per country (a few countries large, a tail of small ones, some instances
    without one): each slice's records — those due at its publish_every counts and its last —
    and the models' lists of their slices are replay's, through crashes and restores, the
    slices' gathered outcomes checkpointed in pieces."""
    sliced = replace(stream, countries=15)
    config = make_config(
        slices={"by": "attributes.country", "top_k": 4, "window": 300, "hysteresis": 0.2}
    )
    expected = replay_finals(sliced, config)
    assert len({s for _, s, _ in expected["slices"]}) >= 4  # the top ones and the rest
    harness = Harness(sliced, config, seed=300 + seed)
    assert harness.run(crashes=0.05) == expected


def _sliced_stage(top_k: int = 2):
    """An evaluation stage whose model m has slices fr and de, and what its checkpoints
    write (applied to a dict as a compacted changelog holds them)."""
    config = make_config(
        publish_every=1000,
        maturity={"enabled": False},
        slices={"by": "attributes.c", "top_k": top_k, "window": 10_000},
    )
    stage = EvalStage(0, config, 1)
    stage.release_min = 1
    return stage, config, {}


def _sliced_outcomes(lo: int, hi: int) -> list[Outcome]:
    return [
        Outcome("m", f"i{i:06d}", "a", (i,), ("a" if i % 3 else "b",), i, i + 1, i + 1, (),
                "fr" if i % 2 else "de")
        for i in range(lo, hi)
    ]  # fmt: skip


def _checkpoint_into(stage: EvalStage, store: dict) -> None:
    cut = stage.cut()
    for key, value in cut.changes.items():
        if value is None:
            store.pop(key, None)
        else:
            store[key] = value
    stage.written(cut)


def _gathered(stage: EvalStage) -> dict:
    sliced = stage.engine.slices["m"]
    return {
        name: (ev.n, [o.instance_id for o in sliced.buffers[name]])
        for name, ev in sliced.evaluators.items()
    }


def test_a_restore_gives_back_every_outcome_the_slices_gathered():
    """Outcomes gathered over several checkpoints, and after a flush on a quiet model (a
    worker's tenth tick), all come back from the changelog, and the stage goes on exactly."""
    stage, config, store = _sliced_stage()
    stage.apply(1, OutcomeBatch(WIRE_VERSION, 0, 1, 500, _sliced_outcomes(0, 100)))
    _checkpoint_into(stage, store)
    stage.apply(2, OutcomeBatch(WIRE_VERSION, 0, 2, 900, _sliced_outcomes(100, 200)))
    _checkpoint_into(stage, store)
    restored = EvalStage.restore(store.items(), config, 1)
    assert _gathered(restored) == _gathered(stage)
    assert _gathered(stage)["fr"] == (0, [f"i{i:06d}" for i in range(1, 200, 2)])
    for _ in range(10):  # the model quiet, its slices take what they gathered
        stage.tick(periodic=True)
    _checkpoint_into(stage, store)
    restored = EvalStage.restore(store.items(), config, 1)
    restored.release_min = 1
    assert _gathered(restored) == _gathered(stage) == {"de": (100, []), "fr": (100, [])}
    batch = OutcomeBatch(WIRE_VERSION, 0, 3, 2000, _sliced_outcomes(200, 1900))
    assert repr(restored.apply(3, batch)) == repr(stage.apply(3, batch))
    assert repr(restored.tick()) == repr(stage.tick())


def test_slices_started_over_write_their_parts_anew_over_the_old_ones():
    """Another top_k at a restart: the old slices' parts are deleted by the first checkpoint,
    but not those the new slices of the same names wrote in it."""
    stage, _, store = _sliced_stage(top_k=2)
    stage.apply(1, OutcomeBatch(WIRE_VERSION, 0, 1, 500, _sliced_outcomes(0, 100)))
    _checkpoint_into(stage, store)
    _, config, _ = _sliced_stage(top_k=3)
    stage = EvalStage.restore(store.items(), config, 1)
    stage.release_min = 1
    assert not stage.engine.slices  # they start over
    stage.apply(2, OutcomeBatch(WIRE_VERSION, 0, 2, 900, _sliced_outcomes(100, 200)))
    for _ in range(10):
        stage.tick(periodic=True)
    _checkpoint_into(stage, store)
    restored = EvalStage.restore(store.items(), config, 1)
    assert _gathered(restored) == _gathered(stage) == {"de": (50, []), "fr": (50, [])}


def test_a_model_reset_counts_its_maturity_from_the_next_cohort():
    """`state reset --model`: instances it predicted before are pending in the join; their
    labels must not count against predictions made since (the share would pass 1)."""
    from streameval.app import edits
    from streameval.codec import LabelEvent, PredictionEvent

    config = make_config(
        join={"label_grace_ms": 0},
        maturity={"cohort_ms": 10_000, "every_ms": 1000, "cohorts": 3},
    )
    t0 = 1_767_225_600_000
    engine = Engine(config)
    engine.process([PredictionEvent(f"i{i}", "m", t0 + i * 100, "a") for i in range(20)])
    stage = EvalStage(0, config, 1)
    stage.engine = engine
    items = {}
    _checkpoint_into(stage, items)
    items = edits.apply(items, edits.reset_model(items, "m"))
    restored = EvalStage.restore(items.items(), config, 1)
    # (the join keeps its pending instances)
    restored.engine.joins, restored.engine.join = engine.joins, engine.join
    labels = [LabelEvent(f"i{i}", t0 + 3000 + i * 100, "a") for i in range(20)]
    records = restored.engine.process([*labels, PredictionEvent("z", "m", t0 + 25_000, "b")])
    assert [r for r in records if r.kind == "label_maturity"]
    for record in [r for r in records if r.kind == "label_maturity"]:
        assert record.labelled <= record.predicted and not record.cohorts, record


def test_a_moved_models_refused_outcomes_add_up_with_those_of_the_target():
    """A model every outcome of which was refused has no evaluator, so a move can leave its
    counts behind; moved back later, its rows met the ones left there, and the restore kept
    only the last (now exported in streameval_dropped_records_total)."""
    from collections import Counter

    from streameval.app import edits

    config = make_config(publish_every=1000)
    source, target = EvalStage(0, config, 1), EvalStage(1, config, 1)
    source.engine.rejected = Counter({("m", "class_limit"): 3, ("n", "class_limit"): 1})
    target.engine.rejected = Counter({("m", "class_limit"): 2})
    items: dict = {0: {}, 1: {}}
    _checkpoint_into(source, items[0])
    _checkpoint_into(target, items[1])
    out_source, out_target = edits.move(items[0], items[1], {"m"}, set(), [], 0)
    moved = {r: EvalStage.restore(edits.apply(items[r], change).items(), config, 1)
             for r, change in ((0, out_source), (1, out_target))}  # fmt: skip
    assert moved[0].engine.rejected == {("n", "class_limit"): 1}
    assert moved[1].engine.rejected == {("m", "class_limit"): 5}


def test_a_model_with_predictions_and_no_label_yet_moves_with_its_maturity():
    """A model whose labels have not come yet has only its label maturity in a partition:
    the seal's summary names it, so that a move takes it along (streameval.app.stateops)."""
    from streameval.app import edits
    from streameval.app.stateops import Survey, _plan_moves

    config = make_config(publish_every=1000)
    stage = EvalStage(2, config, 1)  # model "late" belongs in partition 1 of 4
    notices = [Outcome("late", "", 3, (), (), 0, 999, 999, ())]
    stage.apply(1, OutcomeBatch(WIRE_VERSION, 0, 1, 5_000, notices))
    stage.tick()
    assert stage.summary()["pending_models"] == ["late"]
    items: dict = {}
    _checkpoint_into(stage, items)
    assert edits.summarize_eval(items)["pending_models"] == ["late"]
    found = Survey("app", None, eval_partitions=4)
    found.evals = {2: {"n": 0, "summary": edits.summarize_eval(items)}}
    assert _plan_moves(found, config) == {(2, 1): ({"late"}, set())}


def _no_stale_slice_parts(harness) -> int:
    """That every part of a slice in each evaluation changelog is of a slice its stage has
    (and a piece of gathered outcomes one its index names); how many parts there are."""
    from streameval.app.statekeys import GATHERED, SLICE, SLICES, owner_of
    from streameval.core.sliced import slice_key

    count = 0
    for r, stage in enumerate(harness.evals):
        restorer = Restorer()
        for key, value in harness.changelogs[("eval", r)]:
            restorer.add(key, value)
        items = dict(live(restorer.finish()))
        slices = stage.engine.slices
        live_slices = {slice_key(m, name) for m, s in slices.items() for name in s.evaluators}
        pieces = {
            (slice_key(m, name), number)
            for m, s in slices.items()
            for name, numbers in s.written_pieces().items()
            for number in numbers
        }
        for key in items:
            if key[:1] in (SLICE, GATHERED):
                assert owner_of(key) in live_slices, key
                count += 1
            if key[:1] == GATHERED:  # the pieces the index names, no other
                assert (owner_of(key), int.from_bytes(key[-4:], "big")) in pieces, key
            elif key[:1] == SLICES:
                assert owner_of(key) in slices, key
        for s in slices.values():
            assert len(s.tracker.tracked) <= s.tracker.top_k
    return count


def test_slices_start_over_when_their_settings_change_and_leave_nothing_behind(stream):
    """Another top_k at a restart: every model's slices start over (the whole models go on
    exactly), and no part of the old slices stays in a changelog for a later one to read as
    its own; so too after `state reset --estimator`, which the slices' evaluators had."""
    sliced = replace(stream, countries=15)

    def config(top_k, estimators=("cumulative", "window:1000", "fading:0.999")):
        by = {"by": "attributes.country", "top_k": top_k, "window": 300}
        return make_config(slices=by, estimators=list(estimators))

    harness = Harness(sliced, config(4), seed=11)
    harness.run(crashes=0.03, until=0.5)
    harness.stop()
    assert _no_stale_slice_parts(harness) > 0
    harness.restart(config(3))
    harness.stop()  # a checkpoint at once: the old slices' parts are gone from it
    assert _no_stale_slice_parts(harness) == 0
    harness.run(crashes=0.03, until=0.8)
    harness.stop()
    assert _no_stale_slice_parts(harness) > 0
    fewer = config(3, ("cumulative", "fading:0.999"))
    harness.restart(fewer, reset_estimators=["window:1000"])
    harness.stop()
    assert _no_stale_slice_parts(harness) == 0
    got = harness.run(crashes=0.03)
    harness.stop()
    _no_stale_slice_parts(harness)
    # the whole models' numbers: what never changed is replay's under the first settings
    first = replay_finals(sliced, config(4))
    for key, record in got["metrics"].items():
        ours = orjson.loads(record)["estimators"]
        theirs = orjson.loads(first["metrics"][key])["estimators"]
        assert ours["cumulative"] == theirs["cumulative"]
    assert got["maturity"] == first["maturity"]


def test_one_partition_each(stream, expected):
    harness = Harness(stream, make_config(), inputs=1, joins=1, evals=1, routers=1, seed=9)
    assert harness.run() == expected


def test_watermark_waits_for_every_input_partition():
    config = make_config()
    inputs = [("labels", 0), ("predictions", 0)]
    stage = JoinStage(0, config, inputs)
    batch = EventBatch(WIRE_VERSION, [Source("labels", 0, 10_000, False)], [])
    stage.apply(0, batch)
    assert stage.frontier < 0  # predictions/0 has not spoken yet
    stage.apply(1, EventBatch(WIRE_VERSION, [Source("predictions", 0, 4_000, False)], []))
    assert stage.frontier == 3_999
    stage.apply(2, EventBatch(WIRE_VERSION, [Source("predictions", 0, 4_000, True)], []))
    assert stage.frontier == 9_999  # an idle input no longer holds the others back
    stage.apply(3, EventBatch(WIRE_VERSION, [Source("labels", 0, 10_000, True)], []))
    assert stage.frontier == 10_000 + config.join.label_grace_ms + 1  # all idle: flush
    stage.apply(4, EventBatch(WIRE_VERSION, [Source("labels", 0, 10_500, False)], []))
    assert stage.frontier == 10_000 + config.join.label_grace_ms + 1  # never backwards


def test_an_unknown_wire_version_is_refused():
    data = encode(EventBatch(WIRE_VERSION + 1, [], []))
    with pytest.raises(WireError, match="wire version"):
        decode_events(data)
    with pytest.raises(WireError, match="not an event batch"):
        decode_events(b"\x01\x02")


def test_the_router_before_and_after_its_partitions():
    """A worker routes (empty batches, heartbeats) before its first assignment; messages of
    partitions it no longer owns are skipped; progress and ends follow what was read."""
    router = Router(INPUT_KINDS, 2, idle_ms=100)
    assert router.route([]) == ([[], []], [])
    router.assign([("labels", 0)])
    t0 = 1_767_225_600_000
    label = orjson.dumps({"instance_id": "i1", "ts": t0, "label": "a"})
    per_partition, letters = router.route(
        [
            StoredMessage("labels", 0, 3, None, label),
            StoredMessage("labels", 1, 0, None, label),
            StoredMessage("labels", 0, 4, None, b"{"),
        ]
    )
    assert [row for rows in per_partition for row in rows] == [
        (LABEL, "i1", "", t0, "a", 0, 3, None)
    ]
    assert [letter.offset for letter in letters] == [4]
    assert router.consumed == {("labels", 0): 5}
    router.at_end("labels", 0, 1_000.0)
    assert router.sources(1_050.0) == [Source("labels", 0, t0, False)]
    assert router.sources(1_100.0) == [Source("labels", 0, t0, True)]
    router.route([StoredMessage("labels", 0, 5, None, label)])  # read again: not at its end
    assert router.sources(5_000.0) == [Source("labels", 0, t0, False)]
    router.revoke([("labels", 0)])
    assert router.route([StoredMessage("labels", 0, 6, None, label)]) == ([[], []], [])


def test_an_input_quiet_while_kafka_is_away_is_not_idle():
    """Nothing can be fetched while Kafka does not answer: a partition read to its end turns
    idle only idle_ms after Kafka is back, so that what was sent meanwhile comes first."""
    router = Router(INPUT_KINDS, 2, idle_ms=100)
    router.assign([("labels", 0), ("labels", 1)])
    t0 = 1_767_225_600_000
    label = orjson.dumps({"instance_id": "i1", "ts": t0, "label": "a"})
    router.route([StoredMessage("labels", 0, 0, None, label)])
    router.at_end("labels", 0, 1_000.0)
    for wall in (1_050.0, 1_500.0, 9_000.0):  # away from 1 050 ms to 9 000 ms
        router.away(wall)
    assert [s.idle for s in router.sources(9_050.0)] == [False, False]
    assert [s.idle for s in router.sources(9_100.0)] == [True, False]  # 1 was never read


def test_an_input_is_not_idle_for_the_time_the_worker_did_not_run():
    """A process paused (or starved of CPU) runs neither its loop nor librdkafka's fetches,
    while records may be sent: the quiet time of a partition read to its end starts again
    when the worker reads again, as after Kafka was away. A long turn of work, the CPU busy
    all the while, is not such a time: librdkafka fetches meanwhile."""
    router = Router(INPUT_KINDS, 2, idle_ms=100)
    router.assign([("labels", 0)])
    router.reading(1_000.0, 0.0)
    router.at_end("labels", 0, 1_000.0, 3)
    router.reading(1_060.0, 5.0)
    assert [s.idle for s in router.sources(1_100.0)] == [True]
    router.reading(1_400.0, 300.0)  # 340 ms of work since the last read: still idle
    assert [s.idle for s in router.sources(1_400.0)] == [True]
    router.reading(1_900.0, 310.0)  # 490 ms without running: over idle_ms and the slack
    assert [s.idle for s in router.sources(1_900.0)] == [False]
    router.reading(1_950.0, 320.0)
    assert [s.idle for s in router.sources(1_999.0)] == [False]
    assert [s.idle for s in router.sources(2_000.0)] == [True]
    # a read may wait for messages: with any idle_ms and however long it may wait, that is
    # not a time away; only what its wait does not explain is
    router = Router(INPUT_KINDS, 2, idle_ms=1)
    router.assign([("labels", 0)])
    router.at_end("labels", 0, 1_000.0, 3)
    for wall in range(1_000, 6_000, 500):
        router.reading(float(wall), 0.0, 500.0)
    assert [s.idle for s in router.sources(5_500.0)] == [True]  # since 1 000 ms
    router.reading(6_000.0, 0.0, 300.0)  # 200 ms not explained: over idle_ms and the slack
    assert [s.idle for s in router.sources(6_000.0)] == [False]
    assert [s.idle for s in router.sources(6_001.0)] == [True]


def test_an_input_with_records_fetched_past_its_end_is_not_idle_while_the_worker_is_behind():
    """A read that fills its batch may leave records in the consumer's queue: a partition
    whose high watermark, as last fetched, is past the offset it was read to its end at has
    records waiting there and is not idle, however long ago its end was read. Only then: a
    transaction open on a partition puts its high watermark past that end too."""
    router = Router(INPUT_KINDS, 2, idle_ms=100)
    tps = [("labels", 0), ("labels", 1), ("predictions", 0)]
    router.assign(tps)
    router.at_end("labels", 0, 1_000.0, 5)  # fetched on to 9: four records wait
    router.at_end("labels", 1, 1_000.0, 7)  # fetched to its end
    router.at_end("predictions", 0, 1_000.0)  # the offset of its end not told
    fetched = {("labels", 0): 9, ("labels", 1): 7, ("predictions", 0): 12}.__getitem__

    def idle(sources):
        return [s.idle for s in sources]

    assert idle(router.sources(5_000.0, fetched)) == [False, True, True]
    assert idle(router.sources(5_000.0)) == [True, True, True]  # not behind
    t0 = 1_767_225_600_000
    label = orjson.dumps({"instance_id": "i1", "ts": t0, "label": "a"})
    router.route([StoredMessage("labels", 0, o, None, label) for o in range(5, 9)])
    router.at_end("labels", 0, 5_000.0, 9)  # read on to its new end
    assert idle(router.sources(5_100.0, fetched)) == [True, True, True]
    assert idle(router.sources(5_100.0, lambda tp: -1001)) == [True, True, True]  # not known


def _ingest_stand_in(router, sent, reachable=True, high=-1001):
    """The worker's own ingest step on a stand-in for its Kafka clients: what it produces
    goes to ``sent``; its consumer's cached high watermark of every partition is ``high``."""
    from types import SimpleNamespace

    from confluent_kafka import TopicPartition
    from streameval.app.runner import Pipeline

    def watermarks(tp, cached=False):
        assert isinstance(tp, TopicPartition) and cached  # never a request to the broker
        return (0, high)

    worker = SimpleNamespace(
        router=router,
        _kafka_errors=SimpleNamespace(reachable=reachable),
        _input_next={},
        output=SimpleNamespace(produce=lambda topic, value, *a, **k: sent.append(value)),
        topics=SimpleNamespace(dead_letters="dead", events="events"),
        telemetry=SimpleNamespace(input=lambda *a: None),
        stats=SimpleNamespace(event_batches=0),
        consumer=SimpleNamespace(get_watermark_offsets=watermarks),
    )
    worker._fetched = lambda tp: Pipeline._fetched(worker, tp)
    return lambda *args: Pipeline._ingest(worker, *args)


@pytest.mark.parametrize("reachable", [True, False])
def test_the_worker_sends_no_idle_input_while_no_broker_is_up(reachable):
    """The data path's heartbeat to the join says a partition quiet since before the outage
    is idle only while a broker is up."""
    router = Router(INPUT_KINDS, 1, idle_ms=100)
    router.assign([("labels", 0)])
    router.at_end("labels", 0, 1_000.0)
    sent = []
    ingest = _ingest_stand_in(router, sent, reachable)
    ingest([], 9_000.0, True, [])  # a heartbeat, 8 s after the end
    (batch,) = [decode_events(value) for value in sent]
    assert [source.idle for source in batch.sources] == [reachable]


@pytest.mark.parametrize(
    ("high", "full", "idle"), [(9, True, False), (7, True, True), (9, False, True)]
)
def test_the_worker_behind_sends_no_idle_input_with_records_fetched_past_its_end(high, full, idle):
    """After a read that filled its batch, an input partition read to its end at offset 7
    is idle only if its consumer has fetched nothing past 7; after one that did not, the
    queue was empty and quiet time alone decides."""
    router = Router(INPUT_KINDS, 1, idle_ms=100)
    router.assign([("labels", 0)])
    sent = []
    ingest = _ingest_stand_in(router, sent, high=high)
    ingest([], 1_000.0, False, [("labels", 0, 7)])  # the end read, at offset 7
    ingest([], 9_000.0, True, [], full)  # a heartbeat, 8 s later
    (batch,) = [decode_events(value) for value in sent]
    assert [source.idle for source in batch.sources] == [idle]


_EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["instance", "prediction", "prediction", "label"]),
        st.sampled_from(["i1", "i2", "i3"]),
        st.sampled_from(["m", "n"]),
        st.integers(0, 30).map(lambda ms: 1_767_225_600_000 + ms),  # ts
        st.sampled_from(["a", "b", 1]),
        st.integers(0, 2),  # the partition of its topic a producer happened to choose
        st.sampled_from([None, 0.25, 0.75]),  # a prediction's scores: none, or its label's p
    ),
    max_size=40,
)


def _scores(label, p):
    """A prediction's scores as a producer sends them (None: it sends none)."""
    if p is None:
        return None
    other = {"a": "b", "b": "a", 1: 0}[label]
    return {str(label): p, str(other): 1 - p}


def _through_join_stage(logs, config, seed):
    """Outcomes of one join partition fed the input partitions ``logs`` in a random
    interleaving, each partition in its own order, as the router reports them."""
    rng = random.Random(seed)
    tps = sorted(logs)
    stage = JoinStage(0, config, tps)
    read = dict.fromkeys(tps, 0)
    outcomes, offset = [], 0

    def progress(tp):
        done = read[tp]
        ts = max((e[3] for e in logs[tp][:done]), default=NO_TS)
        return Source(tp[0], tp[1], ts, done == len(logs[tp]))  # read to its end: idle

    while True:
        open_tps = [tp for tp in tps if read[tp] < len(logs[tp])]
        rows = []
        if open_tps:
            tp = rng.choice(open_tps)
            src = tps.index(tp)
            for _ in range(rng.randint(1, 3)):
                if read[tp] < len(logs[tp]):
                    kind, iid, model, ts, label, _, p = logs[tp][read[tp]]
                    code = {"instance": INSTANCE, "prediction": PREDICTION, "label": LABEL}[kind]
                    scores = _scores(label, p) if code == PREDICTION else None
                    rows.append(
                        (
                            code,
                            iid,
                            model if code == PREDICTION else "",
                            ts,
                            label if code != INSTANCE else "",
                            src,
                            read[tp],
                            None if scores is None else canonical_scores(scores, label),
                        )
                    )
                    read[tp] += 1
        outcomes += stage.apply(
            offset, EventBatch(WIRE_VERSION, [progress(tp) for tp in tps], rows)
        )
        offset += 1
        if not open_tps:
            return outcomes


def _notices_apart(rows: list) -> tuple[list, dict]:
    """The outcomes among a join's rows, and its notices of newly predicted instances summed
    by (model, second of the prediction, second applied), zero sums left out."""
    counts: Counter = Counter()
    for row in rows:
        if not row.times:
            counts[row.model_id, row.t_instance, row.due] += row.y_true
    return [row for row in rows if row.times], {k: v for k, v in counts.items() if v}


@settings(max_examples=300, deadline=None)
@given(events=_EVENTS, grace=st.integers(0, 6), seeds=st.tuples(st.integers(), st.integers()))
def test_competing_records_resolve_alike_for_any_keying_and_interleaving(events, grace, seeds):
    """Conflicting labels, second instance records, re-predictions stamped alike (scores
    or none, alike or not): the outcomes depend on the events alone — not on the partitions
    producers chose, nor on the order in which the join read them — and they are replay's."""
    config = make_config(join={"label_grace_ms": grace})
    order = sorted(range(len(events)), key=lambda i: events[i][3])  # delivered in ts order

    def key(o):
        return (o.due, o.instance_id, o.model_id)

    logs = {}
    for i in order:  # one keying: the partition each event names
        kind, *_, part, _ = events[i]
        logs.setdefault((kind + "s", part), []).append(events[i])
    first, first_notices = _notices_apart(_through_join_stage(logs, config, seeds[0]))
    first.sort(key=key)
    logs = {}
    for i in order:  # another: everything of a topic in one partition
        logs.setdefault((events[i][0] + "s", 0), []).append(events[i])
    second, second_notices = _notices_apart(_through_join_stage(logs, config, seeds[1]))
    second.sort(key=key)
    assert first == second
    # the newly predicted instances the join counts (label maturity) are alike too, however
    # its steps grouped them
    assert first_notices == second_notices
    engine = Engine(config)
    replayed = []
    for i in order:
        kind, iid, model, ts, label, _, p = events[i]
        fields = {"instance_id": iid, "ts": ts}
        if kind != "instance":
            fields["label"] = label
        if kind == "prediction":
            fields["model_id"] = model
            if p is not None:
                fields["scores"] = _scores(label, p)
        replayed += engine.resolve([decode_event(orjson.dumps({"type": kind, **fields}))])
    replayed += engine.join.flush()
    replayed, replayed_notices = _notices_apart(replayed)
    assert sorted(replayed, key=key) == first
    assert replayed_notices == first_notices


def test_the_router_holds_event_times_to_when_they_were_sent_and_to_their_partition():
    """TimeRules in the router: ahead of the Kafka timestamp by more than max_future_ms, or
    older than the partition's progress by more than label_ttl_ms, is a dead letter that
    moves no progress; a quiet partition that resumes days later is no jump; the progress
    committed with an offset makes a restarted router decide as before."""
    day, hour = 86_400_000, 3_600_000
    t0 = 1_767_225_600_000
    config = make_config(join={"label_grace_ms": 1_000, "label_ttl_ms": 7 * day})
    router = Router(INPUT_KINDS, 1, rules=config.time_rules())
    router.assign([("labels", 0)])

    def route(offset, ts, sent):
        value = orjson.dumps({"instance_id": f"i{offset}", "ts": ts, "label": "a"})
        rows, letters = router.route(
            [StoredMessage("labels", 0, offset, None, value, sent)], now_ms=t0 + 30 * day
        )
        return [d.code for d in letters] or len(rows[0])

    assert route(0, t0, t0) == 1
    assert route(1, t0 + 2 * hour, t0) == ["ts_in_future"]
    assert router.progress(("labels", 0)) == t0  # refused: no progress
    assert route(2, t0 + hour // 2, t0) == 1  # within max_future_ms of its sending
    assert route(3, t0 + 3 * day, t0 + 3 * day) == 1  # a quiet partition resumes: no jump
    assert route(4, t0 - 5 * day, t0 + 3 * day) == ["ts_too_old"]
    assert route(5, t0 - 3 * day, t0 + 3 * day) == 1  # out of order, within label_ttl_ms
    assert router.progress(("labels", 0)) == t0 + 3 * day
    assert route(6, t0 + 20 * day, None) == 1  # no Kafka timestamp: held to now (t0 + 30 d)
    assert route(7, t0 + 31 * day, None) == ["ts_in_future"]
    letter = router.route(
        [
            StoredMessage(
                "labels",
                0,
                8,
                None,
                orjson.dumps({"instance_id": "x", "ts": t0 - 20 * day, "label": "a"}),
                t0,
            )
        ]
    )[1][0]
    assert "labels[0]" in letter.reason and "label_ttl_ms" in letter.reason

    restarted = Router(INPUT_KINDS, 1, rules=config.time_rules())
    restarted.assign([("labels", 0)], {("labels", 0): router.progress(("labels", 0))})
    router = restarted
    assert route(9, t0 + 10 * day, t0 + 30 * day) == ["ts_too_old"]  # as before the restart


def test_the_router_reads_event_time_as_the_settings_say():
    """``[time] ts_source = "kafka"``: the record timestamp is the event's time (a ``ts`` field
    may be absent, and is not read), and the time rules hold it as they hold ``ts``; a message
    without one is a dead letter. ``ts_unit``: ``ts`` in seconds becomes milliseconds."""
    day, t0 = 86_400_000, 1_767_225_600_000
    router = Router(INPUT_KINDS, 1, rules=make_config(time={"ts_source": "kafka"}).time_rules())
    router.assign([("labels", 0)])
    values = [b'{"instance_id": "i%d", "label": "a"}' % n for n in range(5)]
    values[1] = b'{"instance_id": "i1", "ts": 3, "label": "a"}'
    stamps = [t0 + 5, t0 + 9, None, t0 - 8 * day, t0 // 1000]
    messages = [StoredMessage("labels", 0, n, None, values[n], stamps[n]) for n in range(5)]
    rows, letters = router.route(messages, now_ms=t0 + day)
    assert rows[0] == [
        (LABEL, "i0", "", t0 + 5, "a", 0, 0, None),
        (LABEL, "i1", "", t0 + 9, "a", 0, 1, None),
    ]
    assert [letter.code for letter in letters] == ["no_timestamp", "ts_too_old", "wrong_ts_unit"]
    assert router.progress(("labels", 0)) == t0 + 9

    router = Router(INPUT_KINDS, 1, rules=make_config(time={"ts_unit": "s"}).time_rules())
    router.assign([("labels", 0)])
    value = b'{"instance_id": "i0", "ts": %d, "label": "a"}' % (t0 // 1000)
    rows, letters = router.route([StoredMessage("labels", 0, 0, None, value, t0)], now_ms=t0)
    assert rows[0] == [(LABEL, "i0", "", t0, "a", 0, 0, None)] and letters == []


def _outcomes(n, due=1_000):
    return [
        Outcome(
            "champion", f"i{i:03}", "yes", (10,), ("yes" if i % 3 else "no",), 10, due + i, due + i
        )
        for i in range(n)
    ]


def _checkpoint(stage):
    """A checkpoint as the worker takes one: cut, then written once it is durable."""
    cut = stage.cut()
    stage.written(cut)
    return cut.changes


def test_waiting_outcomes_cost_a_checkpoint_what_came_and_went():
    """Outcomes waiting for another join partition's frontier are kept in runs, one per
    outcome batch, each under a key of its own: a checkpoint writes the runs that came or
    shrank since the last one and deletes those that went, never the whole buffer; a stage
    restored from it holds the same outcomes, and so does one restored from a checkpoint of
    before the runs had keys (their chunks are deleted)."""
    from streameval.app.statekeys import BUFFER, OUTCOME, STAGE, state_chunks
    from streameval.core.state import decode_value, encode_value

    def runs(changes):
        return {k: v for k, v in changes.items() if k[:1] == OUTCOME}

    config = make_config()
    stage = EvalStage(0, config, join_partitions=2)
    stage.apply(0, OutcomeBatch(WIRE_VERSION, 0, 0, 5_000, _outcomes(100)))
    stage.apply(1, OutcomeBatch(WIRE_VERSION, 0, 1, 5_000, _outcomes(10, due=2_000)))
    assert stage.waiting == 110  # join partition 1 has not spoken: they wait
    log = {}
    first = _checkpoint(stage)
    assert len(runs(first)) == 2  # one key per batch
    log.update(first)
    assert runs(stage.changes()) == {}  # nothing came or went
    stage.apply(2, OutcomeBatch(WIRE_VERSION, 0, 2, 5_000, _outcomes(1, due=3_000)))
    second = _checkpoint(stage)
    assert list(runs(second)) == [OUTCOME + (111).to_bytes(8, "big")]
    log.update(second)
    restored = EvalStage.restore(live(log), config, 2)
    assert restored.waiting == stage.waiting == 111
    # partition 1's frontier releases the first 50 of the first batch: that run shrinks
    assert stage.apply(3, OutcomeBatch(WIRE_VERSION, 1, 0, 1_050, [])) == ([], [])  # too few
    released = stage.tick()[1]  # released however few
    assert len(released) == 50
    third = _checkpoint(stage)
    assert (
        list(runs(third)) == [OUTCOME + (1).to_bytes(8, "big")]
        and third[OUTCOME + bytes(7) + b"\x01"]
    )
    log.update(third)
    # and then the rest of it and all of the second: their keys go
    stage.apply(4, OutcomeBatch(WIRE_VERSION, 1, 1, 2_500, []))
    stage.tick()
    fourth = _checkpoint(stage)
    assert len(runs(fourth)) == 2 and set(runs(fourth).values()) == {None}
    log.update(fourth)
    again = EvalStage.restore(live(log), config, 2)
    assert again.waiting == stage.waiting == 1
    for s in (again, stage):
        s.apply(5, OutcomeBatch(WIRE_VERSION, 1, 2, 10_000, []))
    assert repr(again.tick()) == repr(stage.tick())  # repr: NaN is not equal to itself

    # a checkpoint of the previous release: the waiting outcomes in chunks, no "seq"
    old = EvalStage(0, config, join_partitions=2)
    old.apply(0, OutcomeBatch(WIRE_VERSION, 0, 0, 5_000, _outcomes(100)))
    items = {k: v for k, v in old.changes().items() if k[:1] != OUTCOME}
    meta = decode_value(items[STAGE])
    del meta["seq"]
    meta["applied"] = [[q, o] for q, o, _ in meta["applied"]]
    items[STAGE] = encode_value(meta)
    items.update(state_chunks(BUFFER, encode_value([list(o) for o in _outcomes(100)])))
    upgraded = EvalStage.restore(items.items(), config, 2)
    assert upgraded.waiting == 100
    changes = _checkpoint(upgraded)
    assert len(runs(changes)) == 1 and None not in runs(changes).values()
    assert [v for k, v in changes.items() if k[:1] == BUFFER] == [None]
    upgraded.apply(1, OutcomeBatch(WIRE_VERSION, 1, 0, 10_000, []))
    assert upgraded.tick()[1] == _outcomes(100)
    assert runs(upgraded.changes()) == {OUTCOME + (1).to_bytes(8, "big"): None}


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.integers(0, 2),  # the join partition that sends
            st.integers(0, 6),  # how many outcomes
            st.integers(0, 40),  # how far its frontier moves on
            st.booleans(),  # a tick after it
        ),
        max_size=40,
    ),
    least=st.integers(1, 8),
    seed=st.integers(0, 3),
)
def test_outcomes_waiting_in_many_runs_are_released_as_one_sorted_buffer_would_be(
    steps, least, seed
):
    """With join partitions whose frontiers lag one another, outcome batches wait as many
    runs. The stage keeps one heap entry per run, at the run's first outcome (checked after
    every step), so as to look only at the runs whose first outcome is due; it releases
    exactly what a single sorted buffer would — everything due below the smallest frontier,
    once at least ``release_min`` of it is due or at a tick — in the same order, also after a
    restore from a checkpoint taken on the way."""
    rng = random.Random(seed)
    config = make_config()
    stage = EvalStage(0, config, join_partitions=3)
    stage.release_min = least
    log: dict = {}
    frontiers = [0, 0, 0]
    offsets = [0, 0, 0]
    waiting: list[tuple] = []  # the reference: (due, instance, model, arrival, outcome)
    arrival, limit, number = 0, NO_TS, 0
    released, expected = [], []
    for q, n, move, tick in steps:
        due = frontiers[q]
        outcomes = []
        for _ in range(n):  # a join partition's outcomes are due at or after its frontier
            due += rng.randrange(3)
            number += 1
            outcomes.append(Outcome("champion", f"i{number:04}", "yes", (1,), ("no",), 1, due, due))
        outcomes.sort(key=lambda o: (o.due, o.instance_id))
        frontiers[q] = max(due, frontiers[q] + move)
        for o in outcomes:
            arrival += 1
            waiting.append((o.due, o.instance_id, o.model_id, arrival, o))
        released += stage.apply(
            sum(offsets), OutcomeBatch(WIRE_VERSION, q, offsets[q], frontiers[q], outcomes)
        )[1]
        offsets[q] += 1
        for at_least in (least, 1) if tick else (least,):
            if min(frontiers) > limit:
                due_now = sorted(e for e in waiting if e[0] < min(frontiers))
                if len(due_now) >= at_least:
                    limit = min(frontiers)
                    expected += [e[4] for e in due_now]
                    waiting = [e for e in waiting if e[0] >= limit]
            if at_least == 1:
                released += stage.tick()[1]
        if rng.random() < 0.2:  # a checkpoint, and the stage restored from it
            log.update(_checkpoint(stage))
            stage = EvalStage.restore(live(log), config, 3)
            stage.release_min = least
        # one entry per run in the heap of their first outcomes, each run's first
        assert sorted(stage._heads) == sorted((run[0], n) for n, run in stage._runs.items())
    assert released == expected
    assert stage.waiting == len(waiting)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_configuration_that_adds_goes_on_and_moves_models_exactly(stream, seed):
    """Half the stream, a clean stop, then a configuration with another estimator and
    detector, a publishing cadence of its own, and a comparison that joins two groups of
    models — so champion and challenger move to another evaluation partition, with the
    outcomes of theirs the old one had received but not read: every old part goes on exactly,
    every new one starts at the restart (tests.streaming.evolved_finals), under crashes
    before and after."""
    from streameval.core.drift import DEFAULT_DETECTORS

    old = make_config()
    new = make_config(
        publish_every=300,
        estimators=["window:100000", "cumulative", "window:1000", "fading:0.999"],
        detectors=[
            *DEFAULT_DETECTORS,
            {"type": "page_hinkley", "threshold": 30, "standardize": True},
        ],
        comparisons=[{"a": "champion", "b": "challenger"}, {"a": "baseline", "b": "champion"}],
    )
    harness = Harness(stream, old, seed=seed)
    assert harness.run(crashes=0.03, until=0.5) is None
    harness.stop()
    counts = {"models": {}, "pairs": {}}
    for stage in harness.evals:
        counts["models"].update({m: ev.n for m, ev in stage.engine.models.items()})
        counts["pairs"].update({k: p.n for k, p in stage.engine.pairs.items() if p.n})
    moves = harness.restart(new)
    assert moves == {(1, 0): ({"champion", "challenger"}, {"champion|challenger"})}
    got = harness.run(crashes=0.03)
    held = Counter(m for stage in harness.evals for m, ev in stage.engine.models.items() if ev.n)
    assert set(held.values()) == {1}, held  # no model counted in two partitions
    expected = evolved_finals(list(stream.lines()), [(old, counts), (new, None)])
    assert got["metrics"] == expected["metrics"]
    assert got["comparisons"] == expected["comparisons"]
    assert expected != {k: replay_finals(stream, new)[k] for k in expected}  # it matters


def test_a_window_size_refused_then_reset_starts_just_that_estimator_over(stream):
    """A window size changed: the restore refuses it, naming the estimator to reset; reset,
    the window starts over at the restart and everything else goes on exactly. A join reset
    with another grace: the join starts over under the new one, the models keep theirs."""
    from streameval.app.evolve import Refused

    old = make_config()
    new = make_config(estimators=["cumulative", "window:500", "fading:0.999"])
    harness = Harness(stream, old, seed=3)
    harness.run(crashes=0.03, until=0.5)
    harness.stop()
    counts = {"models": {}, "pairs": {}}
    for stage in harness.evals:
        counts["models"].update({m: ev.n for m, ev in stage.engine.models.items()})
        counts["pairs"].update({k: p.n for k, p in stage.engine.pairs.items() if p.n})
    with pytest.raises(
        Refused,
        match=r"estimators was \[cumulative, window:1000, fading"
        r":0.999\] and is now .* --estimator window:1000",
    ):
        harness.restart(new)
    harness.restart(new, reset_estimators=["window:1000"])
    got = harness.run(crashes=0.03)
    expected = evolved_finals(
        list(stream.lines()), [(old, counts), (new, None)], resets={1: ["window:1000"]}
    )
    assert got["metrics"] == expected["metrics"]
    assert got["comparisons"] == expected["comparisons"]
    final = orjson.loads(got["metrics"]["champion", "final"])["estimators"]
    assert final["window:500"]["n"] == 500 and "window:1000" not in final

    grace = make_config(join={"label_grace_ms": 1500})
    again = Harness(stream, old, seed=4)
    again.run(until=0.5)
    again.stop()
    with pytest.raises(Refused, match=r"join.label_grace_ms was 1000 and is now 1500.*--join"):
        again.restart(grace)
    again.restart(grace, reset_join=True)
    assert all(j.join.label_grace == 1500 and j.join.pending == 0 for j in again.joins)
    assert again.run()["metrics"]  # and on it goes


def test_a_state_that_shrinks_under_a_new_configuration_leaves_no_stale_chunk(monkeypatch):
    """A model continued without a detector has a smaller state: the checkpoint that writes
    it deletes the chunks it no longer has, so the next restore reads it whole."""
    import streameval.app.statekeys as statekeys

    monkeypatch.setattr(statekeys, "STATE_CHUNK", 64)  # many chunks: one fewer is sure
    config = make_config()
    stage = EvalStage(0, config, join_partitions=1)
    stage.apply(0, OutcomeBatch(WIRE_VERSION, 0, 0, 10_000, _outcomes(30)))
    stage.tick()
    log = dict(_checkpoint(stage))
    fewer = make_config(detectors=[{"type": "page_hinkley"}])
    again = EvalStage.restore(live(log), fewer, 1)
    log.update(_checkpoint(again))
    restored = EvalStage.restore(live(log), fewer, 1)
    assert restored.engine.models["champion"].state() == again.engine.models["champion"].state()


def test_a_full_window_costs_a_checkpoint_what_moved_in_it():
    """Each window's outcomes go into a model's chunks as its ring lies, before the rest of
    its state: once the window is full, the checkpoint after 100 more outcomes writes a few
    of the model's chunks, not the window, and a restore from the log gives the same model."""
    from streameval.app.statekeys import MODEL

    def outcomes(lo, hi):
        return [
            Outcome(
                "champion", f"i{i:06}", "yes" if i % 7 else "no", (10,),
                ("yes" if i % 3 else "no",), 10, 1_000 + i, 1_000 + i,
            )
            for i in range(lo, hi)
        ]  # fmt: skip

    config = make_config(estimators=["cumulative", "window:20000"])
    stage = EvalStage(0, config, join_partitions=1)
    stage.apply(0, OutcomeBatch(WIRE_VERSION, 0, 0, 26_000, outcomes(0, 25_000)))
    stage.tick()
    log = dict(_checkpoint(stage))
    chunks = [k for k in log if k[:1] == MODEL and b"champion" in k]
    assert len(chunks) > 40  # the model's windows span many chunks
    stage.apply(1, OutcomeBatch(WIRE_VERSION, 0, 1, 100_000, outcomes(25_000, 25_100)))
    stage.tick()
    second = _checkpoint(stage)
    written = [k for k in second if k[:1] == MODEL and b"champion" in k]
    assert 0 < len(written) <= len(chunks) // 5
    log.update(second)
    restored = EvalStage.restore(live(log), config, 1)
    model = stage.engine.models["champion"]
    assert restored.engine.models["champion"].state() == model.state()
