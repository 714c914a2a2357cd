"""A checkpoint produced in pieces, on a real broker: what a reader folds is the checkpoint
whole once its last piece is acknowledged, and the one before it if the writer stops between
two pieces."""

from __future__ import annotations

import uuid

import pytest
from streameval.app.changelog import Changelog

pytestmark = pytest.mark.kafka


@pytest.fixture
def changelog(kafka_bootstrap):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"pieces-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})])[
        topic
    ].result(30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    client = {"bootstrap.servers": kafka_bootstrap}
    yield lambda: Changelog(topic, producer, client, "fingerprint")
    admin.delete_topics([topic])


def _written(changelog: Changelog, changes: dict, piece: int) -> list[int]:
    pieces = list(changelog.write(0, changes, piece))
    changelog.producer.flush(30)
    assert changelog.acknowledged(0)
    assert changelog.confirm(0) is None
    return pieces


def test_a_checkpoint_in_pieces_reads_back_whole_or_not_at_all(changelog):
    writer = changelog()
    first = {f"k{i}".encode(): f"v{i}".encode() for i in range(10)}
    pieces = _written(writer, first, 4)
    # 10 materialized records, one intent chunk and the seal, 4 at a time: two stops
    assert pieces == [4, 4]
    state, sealed, _ = changelog().read(0)
    assert sealed
    assert _state(state) == first

    second = {**{f"k{i}".encode(): None for i in range(5)}, b"new": b"value"}
    expected = {**{k: v for k, v in first.items() if k not in second}, b"new": b"value"}
    before_its_seal = writer.write(0, second, 1)
    assert next(before_its_seal) == 1  # its intent only: without its seal, no checkpoint
    writer.producer.flush(30)
    assert _state(changelog().read(0)[0]) == first

    # as after a checkpoint that failed: the next one is written again under its number
    cut_short = writer.write(0, second, 2)
    assert next(cut_short) == 2  # the intent and the seal: the checkpoint exists ...
    assert next(cut_short) == 2  # ... and is read whole from its intent, half materialized
    writer.producer.flush(30)
    state, sealed, _ = changelog().read(0)
    assert sealed
    assert _state(state) == expected


def _state(changes: dict) -> dict:
    return {k: v for k, v in changes.items() if v is not None}


def test_the_latest_seal_is_read_from_the_end(changelog):
    """What a worker's start and `state show` read: the latest seal alone — from the last
    records, more of them when a checkpoint is larger — and, for a checkpoint of an earlier
    release (whose seal says nothing of what it holds), that checkpoint's intent."""
    from streameval.app.changelog_format import CHECKPOINT_VERSION, checkpoint_records

    writer = changelog()
    for n in range(3):  # the last one larger than the first look from the end
        writer.describe(0, {"checkpoint": n})
        _written(writer, {f"k{i}".encode(): b"x" * n for i in range(1000 + 2000 * n)}, 0)
    seal, intent = changelog().latest(0)
    expected = (CHECKPOINT_VERSION, 3, {"checkpoint": 2}, {})
    assert (seal["v"], seal["n"], seal["summary"], intent) == expected
    earlier = {b"m": b"meta", b"gone": None}
    records, _ = checkpoint_records(4, earlier, 1, {"v": 1, "config": "0123456789abcdef"})
    for key, value in records:
        writer.producer.produce(writer.topic, value, key, 0)
    writer.producer.flush(30)
    seal, intent = changelog().latest(0)
    assert (seal["v"], seal["n"], intent) == (1, 4, earlier)
    assert changelog().read(0)[1]  # and a worker reads it (its parts are judged one by one)
