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


def _events(stage, first: int, n: int, labelled: int) -> None:
    """``n`` instances from ``first`` on, each predicted by two models, the first ``labelled``
    of them labelled: pending instances and remembered resolved ones in the join."""
    from streameval.core.outcome import INSTANCE, LABEL, PREDICTION

    rows = []
    for i in range(first, first + n):
        ts = 1_000 * i
        rows += [(INSTANCE, f"i{i}", "", ts, None, 0, len(rows), None)]
        rows += [(PREDICTION, f"i{i}", m, ts + 1, "a", 0, len(rows), None) for m in ("m", "n")]
        if i < first + labelled:
            rows.append((LABEL, f"i{i}", "", ts + 2, "b", 0, len(rows), None))
    stage.join.add_events(rows, 1_000 * (first + n))


def _kept(items) -> dict:
    """The instances a join keeps: pending records and remembered resolved ids."""
    from streameval.core.state import MEMORY, RECORD

    return {k: v for k, v in items if v is not None and k[:1] in (RECORD, MEMORY)}


def _restoring(changelog, tmp_path):
    """Restore join partition 0 into a disk store under ``tmp_path`` (the same store each
    time, as a worker restarting on its own disk), and checkpoint it."""
    from streameval.app.checkpoint import _restore_join
    from streameval.app.settings import WorkerSettings

    from ..streaming import make_config

    config = make_config()
    settings = WorkerSettings(state_dir=tmp_path, app_id="carry")

    def restored(log: Changelog):
        return _restore_join(log, 0, settings, config, [], "legacy", None)

    def checkpoint(stage, log: Changelog, piece: int | None = None) -> None:
        """Whole, or cut short after its first ``piece`` records (then the worker dies)."""
        cut = stage.cut()
        if piece is None:
            _written(log, cut.changes, 0)
            stage.written(cut, log.position(0), log.sealed(0))
        else:
            next(log.write(0, cut.changes, piece))
            log.producer.flush(30)

    return config, restored, checkpoint


def test_what_a_cut_short_checkpoint_left_in_its_intent_survives_more_crashes(changelog, tmp_path):
    """A crash cut a checkpoint's materialization short: some values are in its intent only,
    and the next checkpoint must write them again before it deletes that intent. The disk
    store that restored them remembers so through a crash before that checkpoint, and
    through one that cuts that checkpoint short in turn; then a worker that rebuilds the
    partition from the changelog alone has every instance."""
    from streameval.app.join_stage import JoinStage

    config, restored, checkpoint = _restoring(changelog, tmp_path)
    stage = JoinStage(0, config, [])
    writer = changelog()
    _events(stage, 0, 40, 10)
    checkpoint(stage, writer)
    _events(stage, 40, 40, 30)
    checkpoint(stage, writer, piece=2)  # its intent and its seal; then the worker dies

    first = restored(changelog())  # a disk store, empty: built from the changelog
    assert first.join.state.pending_count() == stage.join.pending
    first.join.state.close()
    lacked = changelog()
    again = restored(lacked)  # crashed before a checkpoint: read on from its disk
    assert set(again.join.state.carried) == set(lacked.carried(0)) != set()
    _events(again, 80, 5, 0)
    checkpoint(again, lacked, piece=2)  # its intent (with what it carries) and its seal
    again.join.state.close()
    last = changelog()
    third = restored(last)
    assert set(last.carried(0)) >= set(lacked.carried(0))
    _events(third, 85, 5, 0)
    checkpoint(third, last)
    assert third.join.state.carried == []
    rebuilt, sealed, _ = changelog().read(0)
    assert sealed
    assert _kept(rebuilt.items()) == _kept(third.join.state.items())
    third.join.state.close()


def test_a_changelog_created_again_gets_the_whole_store_through_crashes(
    changelog, kafka_bootstrap, tmp_path
):
    """A changelog deleted and created again (here: another topic) while the worker was
    away lacks the whole store: each start writes it all into the new one until a checkpoint
    has — also after a crash before any and one in the middle of its intent. Once a
    checkpoint is sealed in the new changelog, that is the state: a store that still owes
    the whole of it is rebuilt from it instead, whoever wrote it (a checkpoint of its own
    cut short after its seal, or another worker's while the partition was away)."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from streameval.app.join_stage import JoinStage

    config, restored, checkpoint = _restoring(changelog, tmp_path / "b")
    # another worker, with an empty disk of its own each time
    elsewhere = lambda name: _restoring(changelog, tmp_path / name)[1]  # noqa: E731
    stage = JoinStage(0, config, [])
    writer = changelog()
    _events(stage, 0, 40, 10)
    checkpoint(stage, writer)
    restored(changelog()).join.state.close()  # the store, at the old changelog's end
    original = _kept(changelog().read(0)[0].items())

    def topic():
        name = f"again-{uuid.uuid4().hex[:8]}"
        admin.create_topics([NewTopic(name, 1, 1, config={"cleanup.policy": "compact"})])[
            name
        ].result(30)
        made.append(name)
        return lambda: Changelog(name, writer.producer, writer.client, "fingerprint")

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    made: list[str] = []
    try:
        again = topic()
        for cut_at in (None, 1):  # no checkpoint; one cut short before its seal
            log = again()
            whole = restored(log)
            assert set(log.carried(0)) == {k for k, _ in whole.join.state.items()}
            if cut_at is not None:
                checkpoint(whole, log, piece=cut_at)
            whole.join.state.close()  # the worker dies
        log = again()
        whole = restored(log)
        checkpoint(whole, log, piece=2)  # its intent and its seal; then the worker dies
        whole.join.state.close()
        log = again()
        rebuilt = restored(log)  # from the new changelog: its intent holds it all
        assert not rebuilt.join.state.carries_all
        checkpoint(rebuilt, log)
        assert _kept(again().read(0)[0].items()) == _kept(rebuilt.join.state.items())
        assert _kept(rebuilt.join.state.items()) == original
        rebuilt.join.state.close()

        # created again, and another worker wrote into it first: the store, whose position is
        # past the new changelog's end, is rebuilt from it
        again = topic()
        other = elsewhere("a1")(again())
        _events(other, 200, 3, 0)
        checkpoint(other, again())
        other.join.state.close()
        back = restored(again())
        assert _kept(back.join.state.items()) == _kept(again().read(0)[0].items()) != original
        back.join.state.close()

        # created again once more; the worker dies before writing, and the partition goes to
        # a worker with an empty disk, which writes its (empty) join into it, then comes back
        again = topic()
        restored(again()).join.state.close()  # owes the new changelog the whole store
        other = elsewhere("a2")(again())
        _events(other, 100, 3, 0)
        log = again()
        checkpoint(other, log)
        other.join.state.close()
        back = restored(again())
        assert _kept(back.join.state.items()) == _kept(again().read(0)[0].items()) != original
        back.join.state.close()
    finally:
        admin.delete_topics(made)


def _ahead_of_an_open_transaction(
    changelog, bootstrap: str, tmp_path, name: str, committed_first: bool = False
):
    """A disk store (restored through ``_restoring``) one checkpoint past the changelog's last
    stable offset: that checkpoint's records are in a transaction left open, written by the
    worker that restored the store (its lineage), after one it committed if
    ``committed_first``. The store's state is closed; returns the helper's ``config`` and
    ``restored``, the changelog's state before the transaction, the store's with it, and the
    transactional producer."""
    from confluent_kafka import Producer
    from streameval.app.join_stage import JoinStage

    config, restored, checkpoint = _restoring(changelog, tmp_path)
    stage = JoinStage(0, config, [])
    _events(stage, 0, 40, 10)
    checkpoint(stage, changelog())
    open_log = changelog()
    ahead = restored(open_log)
    if committed_first:
        _events(ahead, 40, 20, 5)
        checkpoint(ahead, open_log)
    before = _kept(changelog().read(0)[0].items())
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": name})
    producer.init_transactions(30)
    producer.begin_transaction()
    open_log.producer, open_log.transactional = producer, True
    _events(ahead, 60, 20, 5)
    checkpoint(ahead, open_log)  # written, acknowledged, never committed
    assert ahead.join.state.position > changelog().read(0)[2]
    held = _kept(ahead.join.state.items())
    ahead.join.state.close()  # the worker dies with its transaction open
    return config, restored, before, held, producer


def test_a_restore_past_the_deadline_does_not_take_a_held_changelog_for_a_new_one(
    changelog, kafka_bootstrap, tmp_path, caplog
):
    """The disk store is past the changelog's last stable offset, and the transaction that
    holds the records between them is still open when the assignment's deadline has passed
    (one begun after the assignment waited out those open then). The restore does not wait
    again, and does not take the
    changelog for one deleted and created again, which would write the store's uncommitted
    checkpoint into it: it rebuilds the store from the records before the transaction."""
    import time

    _, restored, before, _, producer = _ahead_of_an_open_transaction(
        changelog, kafka_bootstrap, tmp_path, f"hang-{tmp_path.name}"
    )
    try:
        log = changelog()
        log.wait_until = time.monotonic() + 1.0  # the assignment's deadline: 1 s from now
        began = time.monotonic()
        with caplog.at_level("WARNING", logger="streameval.worker"):
            back = restored(log)
        assert time.monotonic() - began < 20  # not OPEN_WAIT_S
        assert "a transaction that hangs holds the changelog" in caplog.text
        assert "deleted and created again" not in caplog.text
        assert _kept(back.join.state.items()) == before
        assert not back.join.state.carries_all and log.carried(0) == {}
        back.join.state.close()
    finally:
        producer.abort_transaction(30)


def test_an_assignment_waits_out_a_hanging_transaction_and_says_how_to_end_it(
    changelog, kafka_bootstrap, caplog
):
    """A transaction still open on a changelog partition 15 s after ``transaction_timeout_ms``
    hangs: the worker says so at ERROR with the
    abort command for that partition, at the offset where the transaction starts, and waits
    on — a restore now would miss the transaction's records. Once an administrator has
    aborted it, the wait ends and that join partition's store is rebuilt from the changelog."""
    import threading
    import time
    from types import SimpleNamespace

    from confluent_kafka import Consumer, Producer, TopicPartition
    from streameval.app.rebalance import Rebalancing

    log = changelog()
    _written(log, {b"k": b"v"}, 0)
    stable_end = log.position(0)
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"hang-{log.topic}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(log.topic, b"held", key=b"k", partition=0)  # (a compacted topic)
    assert producer.flush(30) == 0

    client = {"bootstrap.servers": kafka_bootstrap}
    worker = Rebalancing()
    worker.topics = SimpleNamespace(events="never-events", outcomes="never-outcomes")
    worker.settings = SimpleNamespace(transaction_timeout_ms=1000, app_id="hang-test")
    worker.join_changelog, worker.eval_changelog = log, changelog()
    worker.client, worker.stopping, worker.unsettled = client, threading.Event(), False
    consumer = Consumer({**client, "group.id": "hang-test"})
    failed: list[BaseException] = []

    def wait() -> None:
        try:
            worker._await_stable(consumer, [TopicPartition("never-events", 0)])
        except BaseException as err:  # shown by the test
            failed.append(err)
            raise

    waited = threading.Thread(target=wait)
    try:
        with caplog.at_level("INFO", logger="streameval.worker"):
            waited.start()
            deadline = time.monotonic() + 60
            while "a hanging transaction" not in caplog.text and time.monotonic() < deadline:
                assert not failed and waited.is_alive()
                time.sleep(0.2)
            assert "a hanging transaction" in caplog.text
            time.sleep(2)
            assert waited.is_alive()  # it waits on: nothing is restored past the transaction
            producer.abort_transaction(30)  # what the administrator's abort does
            waited.join(60)
        assert not waited.is_alive()
        assert (
            f"abort --topic {log.topic} --partition 0 --start-offset {stable_end}`" in caplog.text
        )
        assert "has ended" in caplog.text and not worker.unsettled
        assert worker._rebuild == {0}
    finally:
        worker.stopping.set()
        waited.join(10)
        consumer.close()


@pytest.mark.parametrize("committed_first", [False, True])
def test_after_a_hanging_transaction_is_aborted_the_store_is_rebuilt_from_the_changelog(
    changelog, kafka_bootstrap, tmp_path, caplog, committed_first
):
    """The store took a checkpoint whose transaction the broker accepted and then left
    hanging; an administrator aborts it. The store now holds a checkpoint the changelog does
    not (read on from its position, it would keep it, and the inputs, whose committed
    offsets the abort took back too, would be counted again). The worker that waited
    rebuilds it (``rebuild``); any other restore of it sees that the changelog's latest seal
    does not descend from the store's checkpoint, and rebuilds it too — also when that
    latest seal is a checkpoint of the same worker's lineage (``committed_first``), only
    an earlier one."""
    from streameval.app.checkpoint import restore_join
    from streameval.app.settings import WorkerSettings

    config, restored, before, held, producer = _ahead_of_an_open_transaction(
        changelog, kafka_bootstrap, tmp_path, f"abort-{tmp_path.name}", committed_first
    )
    producer.abort_transaction(30)  # the administrator's abort
    assert held != before

    with caplog.at_level("WARNING", logger="streameval.worker"):
        back = restored(changelog())  # a restart on the same disk
    assert "which is not in the changelog's history" in caplog.text
    assert _kept(back.join.state.items()) == before
    back.join.state.close()
    settings = WorkerSettings(state_dir=tmp_path, app_id="carry")
    rebuilt = restore_join(changelog(), 0, settings, config, [], "legacy", None, rebuild=True)
    assert _kept(rebuilt.join.state.items()) == before
    rebuilt.join.state.close()


def test_a_store_whose_checkpoint_was_aborted_is_rebuilt_after_others_went_on(
    changelog, kafka_bootstrap, tmp_path, caplog
):
    """After the abort, another worker took the partition, restored it from the changelog
    (the checkpoint before the aborted one, of the same lineage) and checkpointed twice,
    reusing the aborted checkpoint's number. The store that held the aborted checkpoint
    comes back: what it would read on from its position is the other worker's changes only,
    over its own state that has the aborted checkpoint's changes — it is rebuilt instead,
    and holds the other worker's state."""
    _, restored, before, held, producer = _ahead_of_an_open_transaction(
        changelog, kafka_bootstrap, tmp_path, f"abort-{tmp_path.name}", committed_first=True
    )
    producer.abort_transaction(30)
    _, elsewhere, checkpoint = _restoring(changelog, tmp_path / "other")
    writer = changelog()
    other = elsewhere(writer)
    assert _kept(other.join.state.items()) == before
    for first in (100, 120):
        _events(other, first, 20, 5)
        checkpoint(other, writer)
    assert writer.sealed(0).number == 4  # 3 (the aborted one's) and 4
    expected = _kept(other.join.state.items())
    other.join.state.close()

    with caplog.at_level("WARNING", logger="streameval.worker"):
        back = restored(changelog())
    assert "which is not in the changelog's history" in caplog.text
    assert _kept(back.join.state.items()) == expected != held
    back.join.state.close()


def test_a_store_behind_the_changelog_reads_on_from_its_position(changelog, tmp_path, caplog):
    """What the check above must not take for an aborted checkpoint: a store one checkpoint
    behind its own worker's (it died after Kafka had the checkpoint, before the store's
    batch), and one whose partition another worker restored from the store's checkpoint and
    went on from. Both read on from their position; nothing is rebuilt."""
    from streameval.app.join_stage import JoinStage

    config, restored, checkpoint = _restoring(changelog, tmp_path / "a")
    stage = JoinStage(0, config, [])
    writer = changelog()
    _events(stage, 0, 40, 10)
    checkpoint(stage, writer)
    writer = changelog()
    ahead = restored(writer)  # the store, at the changelog's latest checkpoint
    _events(ahead, 40, 20, 5)
    checkpoint(ahead, writer)
    _events(ahead, 60, 20, 5)
    _written(writer, ahead.cut().changes, 0)  # in Kafka; the worker dies before the store's
    ahead.join.state.close()

    with caplog.at_level("WARNING", logger="streameval.worker"):
        back = restored(changelog())  # behind its own lineage's latest checkpoint
        assert _kept(back.join.state.items()) == _kept(changelog().read(0)[0].items())
        back.join.state.close()
        _, elsewhere, other_checkpoint = _restoring(changelog, tmp_path / "b")
        writer = changelog()
        other = elsewhere(writer)  # another worker, from the store's checkpoint on
        for first in (80, 100):
            _events(other, first, 20, 5)
            other_checkpoint(other, writer)
        expected = _kept(other.join.state.items())
        other.join.state.close()
        again = restored(changelog())
    assert "rebuilding" not in caplog.text
    assert _kept(again.join.state.items()) == expected
    again.join.state.close()
