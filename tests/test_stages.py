"""The worker's stages without a broker: any interleaving, restart or duplicate gives replay's
numbers (the broker-backed tests in tests/integration/ check the same through Kafka)."""

from __future__ import annotations

import random
import zlib

import orjson
import pytest

from pipeline.app.runner import INPUT_KINDS
from pipeline.app.stages import EvalStage, JoinStage, Router, model_partitioner
from pipeline.app.wire import (
    LABEL,
    WIRE_VERSION,
    EventBatch,
    Source,
    WireError,
    decode_events,
    decode_outcomes,
    encode,
)
from pipeline.schemas import StoredMessage
from pipeline.simulate.scripted import TOPIC_OF
from tests.streaming import finals, make_config


class Harness:
    """Input partitions, routers, join and evaluation stages, and the internal "topics" as
    lists, driven in a random order with random crashes."""

    def __init__(self, stream, config, *, inputs=3, joins=4, evals=3, routers=2, seed=0):
        self.rng = random.Random(seed)
        self.config = config
        self.inputs = {}
        for _, _, event in stream.events():
            topic = TOPIC_OF[event["type"]]
            key = (event.get("instance_id") or "?").encode()
            p = zlib.crc32(key) % inputs
            log = self.inputs.setdefault((topic, p), [])
            log.append(StoredMessage(topic, p, len(log), key, orjson.dumps(event)))
        for topic in INPUT_KINDS:
            for p in range(inputs):
                self.inputs.setdefault((topic, p), [])
        tps = sorted(self.inputs)
        self.routers = [Router(INPUT_KINDS, joins, idle_ms=100) for _ in range(routers)]
        self.owner = {tp: i % routers for i, tp in enumerate(tps)}
        for tp, i in self.owner.items():
            self.routers[i].assign([tp])
        self.read = dict.fromkeys(tps, 0)  # next input offset per partition
        self.committed = dict.fromkeys(tps, 0)
        self.events = [[] for _ in range(joins)]
        self.outcomes = [[] for _ in range(evals)]
        self.joins = [JoinStage(q, config, tps) for q in range(joins)]
        self.join_pos = [0] * joins
        self.evals = [EvalStage(r, config, joins) for r in range(evals)]
        self.eval_pos = [0] * evals
        self.partition_of = model_partitioner(config, evals)
        self.records = []
        self.dead = 0
        self.wall = 0.0
        self.snapshots = {}

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
        sources = router.sources(self.wall)
        for q, rows in enumerate(per_partition):
            self.events[q].append(encode(EventBatch(WIRE_VERSION, sources, rows)))
        if self.rng.random() < 0.3:
            for tp in router.owned:
                self.committed[tp] = self.read[tp]

    def crash_ingest(self, i):
        """Re-read from the last commit: events are sent again (as duplicates)."""
        for tp in self.routers[i].owned:
            self.read[tp] = self.committed[tp]

    def join(self, q):
        stage, log = self.joins[q], self.events[q]
        for _ in range(self.rng.randint(1, 3)):
            if self.join_pos[q] >= len(log):
                return
            offset = self.join_pos[q]
            self.join_pos[q] += 1
            before = stage.frontier
            outcomes = stage.apply(offset, decode_events(log[offset]))
            per_eval = [[] for _ in self.evals]
            for outcome in outcomes:
                per_eval[self.partition_of(outcome.model_id)].append(outcome)
            for r, own in enumerate(per_eval):
                if own or stage.frontier != before:
                    self.outcomes[r].append(encode(stage.batch(own)))

    def evaluate(self, r):
        stage, log = self.evals[r], self.outcomes[r]
        for _ in range(self.rng.randint(1, 3)):
            if self.eval_pos[r] >= len(log):
                return
            offset = self.eval_pos[r]
            self.eval_pos[r] += 1
            records, _ = stage.apply(offset, decode_outcomes(log[offset]))
            self.records += records

    def snapshot(self, kind, index):
        stage = (self.joins if kind == "join" else self.evals)[index]
        self.snapshots[kind, index] = orjson.dumps(stage.state())

    def restore(self, kind, index):
        saved = self.snapshots.get((kind, index))
        tps = sorted(self.inputs)
        if kind == "join":
            if saved is None:
                stage = JoinStage(index, self.config, tps)
            else:
                stage = JoinStage.from_state(orjson.loads(saved), self.config, tps)
            self.joins[index] = stage
            self.join_pos[index] = stage.offset + 1
        else:
            joins = len(self.joins)
            if saved is None:
                stage = EvalStage(index, self.config, joins)
            else:
                stage = EvalStage.from_state(orjson.loads(saved), self.config, joins)
            self.evals[index] = stage
            self.eval_pos[index] = stage.offset + 1

    def run(self, crashes=0.0):
        rng = self.rng
        while any(self.read[tp] < len(log) for tp, log in self.inputs.items()):
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
        self.wall += 1000  # everything read: every input goes idle
        for _ in range(3):
            for i in range(len(self.routers)):
                self.ingest(i, heartbeat=True)
            for _ in range(200):
                for q in range(len(self.joins)):
                    self.join(q)
                for r in range(len(self.evals)):
                    self.evaluate(r)
        for stage in self.evals:
            self.records += stage.tick()
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
    label = orjson.dumps({"instance_id": "i1", "ts": 7, "label": "a"})
    per_partition, letters = router.route([StoredMessage("labels", 0, 3, None, label),
                                           StoredMessage("labels", 1, 0, None, label),
                                           StoredMessage("labels", 0, 4, None, b"{")])  # fmt: skip
    assert [row for rows in per_partition for row in rows] == [(LABEL, "i1", "", 7, "a", 0, 3)]
    assert [letter.offset for letter in letters] == [4]
    assert router.consumed == {("labels", 0): 5}
    router.at_end("labels", 0, 1_000.0)
    assert router.sources(1_050.0) == [Source("labels", 0, 7, False)]
    assert router.sources(1_100.0) == [Source("labels", 0, 7, True)]
    router.route([StoredMessage("labels", 0, 5, None, label)])  # read again: not at its end
    assert router.sources(5_000.0) == [Source("labels", 0, 7, False)]
    router.revoke([("labels", 0)])
    assert router.route([StoredMessage("labels", 0, 6, None, label)]) == ([[], []], [])
