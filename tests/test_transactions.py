"""Exactly-once without a broker: the transactional id a worker process takes (and takes again
after a crash), the delivery errors that abort a transaction against those that stop the
worker, and the settings. The real transactions run against a broker in
tests/integration/test_worker.py, tests/integration/test_secured.py and tests/reliability/."""

from __future__ import annotations

import gc
import logging
import os
import re
import threading
import time
from types import SimpleNamespace

import confluent_kafka
import pytest
from confluent_kafka import KafkaError, KafkaException
from streameval.app import checkpoint, transactions
from streameval.app.changelog import ChangelogError
from streameval.app.checkpoint import Checkpoints
from streameval.app.join_stage import JoinStage
from streameval.app.output import KafkaErrors, NoAnswer, Output, OutputError
from streameval.app.settings import SettingsError, WorkerSettings
from streameval.app.transactions import TransactionAborted, Transactions, claim_transactional_id
from streameval.store import DiskState

from tests.test_mistakes import _worker


@pytest.fixture(autouse=True)
def _collect():
    """Collect each test's outputs and their producers when it ends. An output refers to
    itself (its delivery callback is a closure over it), so only the garbage collector frees
    it; left to it, producers built against the unreachable 127.0.0.1:1 outlived their tests,
    and librdkafka wrote their failed connections into the output of the whole run."""
    yield
    gc.collect()


#: a cluster nobody answers at, for outputs whose producers are never used: librdkafka logs
#: each failed connection (level 3) from its own thread, which pytest's capture may miss
_NOWHERE = {"bootstrap.servers": "127.0.0.1:1", "log_level": 2}


def _settings(state_dir, **kwargs) -> WorkerSettings:
    return WorkerSettings(state_dir=state_dir, app_id="fraud", **kwargs)


def test_a_restart_takes_the_same_id_and_a_second_live_process_another(tmp_path):
    """The id outlives the process (a restart on the same disk fences the one it replaces);
    two live processes on one state_dir never share one (they would fence each other)."""
    settings = _settings(tmp_path)
    first, lock = claim_transactional_id(settings)
    second, lock2 = claim_transactional_id(settings)  # a second data-path process
    assert first.startswith("fraud-") and second.startswith("fraud-") and first != second
    lock.close()  # the first process dies: its lock goes with it
    again, lock3 = claim_transactional_id(settings)
    assert again == first
    lock2.close(), lock3.close()
    assert sorted(p.name for p in (tmp_path / "fraud").iterdir()) == [
        "producer-0.id",
        "producer-0.lock",
        "producer-1.id",
        "producer-1.lock",
    ]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_a_state_dir_the_worker_may_not_write_is_named(tmp_path):
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(SettingsError, match=r"state_dir = '.*': the worker keeps its"):
            claim_transactional_id(_settings(tmp_path / "state"))
    finally:
        tmp_path.chmod(0o700)


def test_a_state_dir_that_is_a_file_is_named(tmp_path):
    (tmp_path / "state").write_text("")
    with pytest.raises(SettingsError, match=r"Point state_dir \(or STREAMEVAL_STATE_DIR\)"):
        claim_transactional_id(_settings(tmp_path / "state"))


class _Message:
    def topic(self) -> str:
        return "metrics"


@pytest.mark.parametrize(
    ("code", "aborts"),
    [
        (KafkaError._MSG_TIMED_OUT, True),  # Kafka away longer than the transaction timeout
        (KafkaError.NOT_ENOUGH_REPLICAS, True),
        (KafkaError._TRANSPORT, True),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, False),  # the topic is gone: stop, say so
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, False),
        (KafkaError.MSG_SIZE_TOO_LARGE, False),
    ],
)
def test_a_passing_failure_aborts_the_transaction_a_refusal_stops_the_worker(code, aborts):
    """Exactly-once: a record that failed for a reason a retry may cure aborts the open
    transaction (the stages go back to their last checkpoint and compute it again); one Kafka
    refuses stops the worker (it would be refused again). At-least-once: both stop it."""
    transactional = Transactions(_NOWHERE, KafkaErrors(), "fraud-x")
    transactional._on_delivery(KafkaError(code), _Message())
    assert (transactional.failed is not None) is aborts
    assert (transactional.error is not None) is not aborts
    plain = Output(_NOWHERE, KafkaErrors())
    plain._on_delivery(KafkaError(code), _Message())
    assert plain.error is not None and plain.failed is None


def test_purged_messages_are_no_failure():
    output = Transactions(_NOWHERE, KafkaErrors(), "fraud-x")
    output._on_delivery(KafkaError(KafkaError._PURGE_QUEUE), _Message())
    assert output.failed is None and output.error is None


def test_the_guarantee_and_its_settings_are_checked_at_start_up(tmp_path):
    code, output = _worker(tmp_path, '[worker]\nprocessing_guarantee = "exactly-once"\n')
    assert code == 2
    assert "processing_guarantee" in output and "'exactly_once'" in output
    assert "'at_least_once'" in output
    code, output = _worker(tmp_path, "[worker]\ncommit_interval_ms = 0\n")
    assert code == 2 and "commit_interval_ms" in output
    code, output = _worker(
        tmp_path, "[worker]\ncommit_interval_ms = 5000\ntransaction_timeout_ms = 10000\n"
    )
    assert code == 2 and "transaction_timeout_ms" in output
    assert "below 4 × commit_interval_ms (5000)" in output
    code, output = _worker(tmp_path, '[worker.kafka]\n"transactional.id" = "mine"\n')
    assert code == 2 and "'transactional.id' is set by the worker itself" in output


def test_max_poll_interval_leaves_room_for_the_wait_for_a_previous_owner(tmp_path):
    """Exactly-once: an assignment waits up to transaction_timeout_ms and 5 s before it
    restores, inside the rebalance callback (tests/test_mistakes.py has the refusal)."""
    ok = _settings(tmp_path, transaction_timeout_ms=60_000, max_poll_interval_ms=125_000)
    assert ok.max_poll_interval_ms == 125_000
    with pytest.raises(ValueError, match=r"max_poll_interval_ms \(124999\) is below it plus"):
        _settings(tmp_path, transaction_timeout_ms=60_000, max_poll_interval_ms=124_999)
    # at-least-once has no previous owner's transaction to wait for
    plain = _settings(tmp_path, processing_guarantee="at_least_once", max_poll_interval_ms=10_000)
    assert plain.max_poll_interval_ms == 10_000


class _Hangs:
    """A producer whose send_offsets_to_transaction never returns, as librdkafka's may when
    the group coordinator's broker came back (librdkafka #5456, #5511)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.committed = 0

    def flush(self, timeout: float) -> int:
        return 0

    def send_offsets_to_transaction(self, offsets, group, timeout) -> None:
        self.release.wait()

    def commit_transaction(self, timeout) -> None:
        self.committed += 1


def test_a_commit_whose_offsets_call_hangs_takes_a_new_producer(monkeypatch):
    """The stuck call would keep the transaction open (and every restore of the partitions it
    holds waiting): past its timeout and a margin the producer is given up — a new one of the
    same id aborts the transaction — and the stages go back to their checkpoints. A hang is
    not a fencing: it does not count toward the renewals that stop the worker."""
    monkeypatch.setattr(transactions, "HUNG_AFTER_S", 0.2)
    output = Transactions(_NOWHERE, KafkaErrors(), "fraud-x")
    hangs = output.producer = _Hangs()
    began = time.monotonic()
    with pytest.raises(transactions._Hung, match=r"did not return within .*#5456"):
        output._send_offsets([object()], object(), 0.1)
    assert time.monotonic() - began < 5 and len(output._hung) == 1
    made = []

    class _New:  # what _renew makes: a producer of the same id, which takes it and begins
        def __init__(self, config: dict) -> None:
            assert config["transactional.id"] == "fraud-x"
            self.began = 0
            made.append(self)

        def init_transactions(self, timeout: float) -> None:
            pass

        def begin_transaction(self) -> None:
            self.began += 1

        def flush(self, timeout: float) -> int:
            return 0

    monkeypatch.setattr(confluent_kafka, "Producer", _New)
    told = []
    output.renewed.append(told.append)  # the changelogs write with the new producer
    monkeypatch.setattr(output, "_send_offsets", _raises(transactions._Hung("hung")))
    for _ in range(transactions.RENEW_MAX + 2):  # more than the fencings a worker outlives
        with pytest.raises(TransactionAborted, match="hung"):
            output.commit([object()], object())
    assert told == made and len(made) == transactions.RENEW_MAX + 2
    assert output.producer is made[-1] and all(new.began == 1 for new in made)
    assert hangs.committed == 0  # nothing of the hung transaction was committed
    assert output._renewals == []
    monkeypatch.setattr(output, "_send_offsets", _raises(transactions._Fenced("fenced")))
    for _ in range(transactions.RENEW_MAX):  # fencings, though, are counted
        with pytest.raises(TransactionAborted, match="fenced"):
            output.commit([object()], object())
    with pytest.raises(OutputError, match="fenced"):
        output.commit([object()], object())
    hangs.release.set()


def test_a_hung_offsets_call_at_the_deadline_leaves_the_transaction_to_the_next_start(
    monkeypatch,
):
    """Stopping: no new producer past the deadline; the next start's first transaction
    aborts what is open (the same transactional id)."""
    output = Transactions(_NOWHERE, KafkaErrors(), "fraud-x")
    hangs = output.producer = _Hangs()
    output.deadline = time.monotonic() + 0.3
    with pytest.raises(NoAnswer):
        output._send_offsets([object()], object(), 0.3)
    assert output.stuck
    hangs.release.set()


def _raises(err):
    def call(*args):
        raise err

    return call


def test_an_offsets_call_that_returns_is_waited_for_and_its_error_kept():
    output = Transactions(_NOWHERE, KafkaErrors(), "fraud-x")
    hangs = output.producer = _Hangs()
    hangs.release.set()
    output._send_offsets([], object(), 0.1)  # returns: nothing raised

    class _Refuses(_Hangs):
        def send_offsets_to_transaction(self, offsets, group, timeout) -> None:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID))

    output.producer = _Refuses()
    with pytest.raises(KafkaException) as raised:
        output._send_offsets([], object(), 0.1)
    assert raised.value.args[0].code() == KafkaError.UNKNOWN_MEMBER_ID


def test_the_campaign_reads_the_waits_a_worker_logs_at_assignment():
    """The fault campaign reports how long workers waited for other processes'
    transactions before restoring, from the worker's log lines."""
    from streameval.app.rebalance import WAITED_CHANGELOGS, WAITED_OFFSETS

    from tests.reliability.campaign import WAITED

    text = "\n".join([WAITED_OFFSETS % 61.04, WAITED_CHANGELOGS % (3.0, "c[1], c[4]")])
    assert WAITED.findall(text) == ["61.0", "3.0"]


class _Slow:
    """A transactional producer whose commit waits until released, as a broker's does while
    it appends the transaction's markers; it keeps what it is given, in order."""

    def __init__(self, fails: bool = False) -> None:
        self.release = threading.Event()
        self.fails = fails
        self.log: list = []

    def produce(self, topic, value, key=None, partition=-1, headers=None, on_delivery=None):
        self.log.append(("produce", topic, value))

    def __len__(self) -> int:
        return 0

    def poll(self, timeout) -> int:
        self.log.append(("poll",))
        return 0

    def flush(self, timeout) -> int:
        return 0

    def send_offsets_to_transaction(self, offsets, group, timeout) -> None:
        pass

    def commit_transaction(self, timeout) -> None:
        self.release.wait()
        if self.fails:
            raise KafkaException(KafkaError(KafkaError._STATE, txn_requires_abort=True))
        self.log.append(("commit",))

    def abort_transaction(self, timeout) -> None:
        self.log.append(("abort",))

    def begin_transaction(self) -> None:
        self.log.append(("begin",))


def test_the_data_path_goes_on_while_a_commit_is_on_its_way():
    """The commit waits for Kafka in a thread of its own: meanwhile produce() holds each
    message for the next transaction (this one's offsets and checkpoints do not cover what
    made them), the producer is left alone, and once the commit lands the held messages go
    out in their order, after the next transaction began."""
    output = Transactions(_NOWHERE, KafkaErrors(), "fraud-x")
    slow = output.producer = _Slow()
    output.produce("metrics", b"before")
    output.commit_in_background([], object())
    output.produce("metrics", b"held 1")
    output.produce("events", b"held 2", partition=3)
    output.poll()
    output.send_now()
    with pytest.raises(RuntimeError, match="must land first"):
        output.flush()
    with pytest.raises(RuntimeError, match="must land first"):
        output.abort()
    assert output.committing and not output.landed()
    assert slow.log == [("produce", "metrics", b"before")]
    assert output.held_bytes == 12  # past HELD_MAX_BYTES the data path waits for the commit
    slow.release.set()
    assert output.landed(wait=True) and not output.committing
    assert slow.log[1:] == [("commit",), ("begin",)]
    output.release()
    assert slow.log[1:] == [
        ("commit",), ("begin",), ("produce", "metrics", b"held 1"), ("produce", "events", b"held 2")
    ]  # fmt: skip
    assert output.topics == {"metrics", "events"}  # of the next transaction
    assert output.held_bytes == 0
    assert output.landed()  # nothing on its way: landed


def test_a_commit_aborted_on_its_way_throws_the_held_messages_away():
    """They were made from state the stages give up: the caller restores them from their last
    checkpoints, and what they make again is produced then."""
    output = Transactions(_NOWHERE, KafkaErrors(), "fraud-x")
    slow = output.producer = _Slow(fails=True)
    output.commit_in_background([], object())
    output.produce("metrics", b"held")
    slow.release.set()
    with pytest.raises(TransactionAborted):
        output.landed(wait=True)
    assert not output.committing
    output.release()  # nothing: thrown away
    assert ("abort",) in slow.log and ("produce", "metrics", b"held") not in slow.log
    output.produce("metrics", b"after")  # into the transaction begun after the abort
    assert slow.log[-2:] == [("begin",), ("produce", "metrics", b"after")]


class _Changelog:
    """A changelog partition that produces each change as a record, a piece at a time."""

    topic = "fraud-join-changelog"

    def __init__(self, producer) -> None:
        self.producer = producer

    def describe(self, q, summary) -> None:
        pass

    def write(self, q, changes, piece):
        for i in range(0, len(changes), piece):
            for change in changes[i : i + piece]:
                self.producer.produce(self.topic, change)
            yield piece

    def confirm(self, q) -> None:
        return None


class _Stage:
    def __init__(self, changes: list[bytes]) -> None:
        self.changes, self.told = changes, []

    def cut(self) -> SimpleNamespace:
        return SimpleNamespace(changes=list(self.changes))

    def summary(self) -> dict:
        return {}

    def written(self, cut) -> None:
        self.told.append(cut.changes)


def _sent(slow: _Slow) -> list:
    said = [entry for entry in slow.log if entry[0] != "poll"]
    return [entry[1:] if entry[0] == "produce" else entry[0] for entry in said]


def test_a_checkpoint_stops_the_data_path_for_its_cut_and_writes_its_records_over_turns(
    monkeypatch,
):
    """Exactly-once: the cut is the stop. From it on, what the data path produces is held
    for the next transaction, the checkpoint's changelog records go into this one a piece per
    turn of the loop, the commit goes to its thread once they all have, and the held messages
    follow it."""
    monkeypatch.setattr(checkpoint, "CHANGELOG_PIECE", 1)
    monkeypatch.setattr(checkpoint, "CHANGELOG_TURN_S", 0.0)  # one piece per turn
    output = Transactions(_NOWHERE, KafkaErrors(), "fraud-x")
    slow = output.producer = _Slow()
    changelog, stage = _Changelog(slow), _Stage([b"a", b"b", b"c"])
    done: list = []
    transactions: list[float] = []  # streameval_transaction_seconds
    telemetry = SimpleNamespace(
        checkpointed=lambda took, pause: None, transaction=transactions.append
    )
    checkpoints = Checkpoints(output, None, telemetry, lambda log, q: done.append(q))
    output.produce("metrics", b"before")
    checkpoints.transact([(changelog, 0, stage)], ["offsets"], object(), wait=False)
    output.produce("metrics", b"after the cut")
    assert checkpoints.committing and not output.committing
    assert _sent(slow) == [("metrics", b"before")]  # the stop was the cut alone
    assert not checkpoints.landed()  # a turn: one piece
    assert _sent(slow)[1:] == [("fraud-join-changelog", b"a")]
    assert not checkpoints.landed() and not checkpoints.landed()
    assert not output.committing  # the generator is not exhausted yet
    assert not checkpoints.landed()  # exhausted: the commit is handed to its thread
    assert output.committing and stage.told == [] and done == []
    output.produce("metrics", b"while committing")
    slow.release.set()
    assert transactions == []
    assert checkpoints.landed(wait=True) and not checkpoints.committing
    assert len(transactions) == 1 and transactions[0] > 0  # once, when it landed
    assert checkpoints.landed() and len(transactions) == 1
    assert _sent(slow) == [
        ("metrics", b"before"),
        ("fraud-join-changelog", b"a"),
        ("fraud-join-changelog", b"b"),
        ("fraud-join-changelog", b"c"),
        "commit",
        "begin",
        ("metrics", b"after the cut"),
        ("metrics", b"while committing"),
    ]
    assert stage.told == [[b"a", b"b", b"c"]] and done == [0]
    output.produce("metrics", b"next")  # holding no more
    assert _sent(slow)[-1] == ("metrics", b"next")


class _SlowStore(_Stage):
    def written(self, cut) -> None:
        time.sleep(0.3)  # a disk store writing its batch
        super().written(cut)


def test_a_transactions_time_starts_at_its_cut_not_at_the_settle_before_it():
    """A revocation's checkpoint first writes the disk store batches of the checkpoint
    committed before it: that settle is a step of its own, not the transaction's time."""
    output = Transactions(_NOWHERE, KafkaErrors(), "fraud-x")
    slow = output.producer = _Slow()
    slow.release.set()
    changelog, stage = _Changelog(slow), _SlowStore([b"a"])
    transactions: list[float] = []
    telemetry = SimpleNamespace(
        checkpointed=lambda took, pause: None, transaction=transactions.append
    )
    checkpoints = Checkpoints(output, None, telemetry, lambda log, q: None)
    checkpoints.transact([(changelog, 0, stage)], [], object(), settle_later=True)
    assert checkpoints.committed is not None and stage.told == []  # its settle comes later
    checkpoints.transact([(changelog, 0, stage)], [], object())  # settles it first
    assert len(stage.told) == 2 and len(transactions) == 2
    assert transactions[1] < 0.25  # the 0.3 s settle before its cut is not in it


def test_a_checkpoint_whose_records_are_refused_throws_the_held_messages_away(monkeypatch):
    """A refusal while its records are written stops the worker: the messages held since the
    cut never go out, and nothing is held any more."""
    output = Transactions(_NOWHERE, KafkaErrors(), "fraud-x")
    slow = output.producer = _Slow()

    class Gone(_Changelog):
        def write(self, q, changes, piece):
            raise ChangelogError("the changelog fraud-join-changelog (partition 0) is gone")
            yield

    checkpoints = Checkpoints(output, None, None, lambda log, q: None)
    checkpoints.transact([(Gone(slow), 0, _Stage([b"a"]))], [], object(), wait=False)
    output.produce("metrics", b"held")
    with pytest.raises(ChangelogError, match="is gone"):
        checkpoints.landed()
    assert not checkpoints.committing and not output.committing and not output.holding
    assert output.held_bytes == 0 and ("metrics", b"held") not in _sent(slow)


def test_a_checkpoint_left_half_written_is_never_committed():
    """Kafka gone at a shutdown's deadline while a checkpoint's records are written: some of
    them are in the open transaction, and the stages gave their changes to it. A later commit
    (the shutdown's final checkpoint) must not make that half visible: it aborts, and the last
    checkpoints stand."""
    output = Transactions(_NOWHERE, KafkaErrors(), "fraud-x")
    slow = output.producer = _Slow()
    slow.release.set()

    class Stalling(_Changelog):
        def write(self, q, changes, piece):
            self.producer.produce(self.topic, changes[0])
            yield 1
            raise NoAnswer("1 messages not acknowledged by Kafka")

    telemetry = SimpleNamespace(checkpointed=lambda took, pause: None, transaction=lambda _: None)
    checkpoints = Checkpoints(output, None, telemetry, lambda log, q: None)
    stage = _Stage([b"a", b"b"])
    checkpoints.transact([(Stalling(slow), 0, stage)], [], object(), wait=False)
    with pytest.raises(NoAnswer):
        checkpoints.landed(wait=True)
    assert not checkpoints.committing and output.given_up is not None
    with pytest.raises(TransactionAborted, match="half written"):
        checkpoints.transact([(_Changelog(slow), 0, stage)], [], object(), wait=True)
    assert "commit" not in _sent(slow) and _sent(slow)[-2:] == ["abort", "begin"]
    assert stage.told == []  # its last checkpoint stands
    assert output.given_up is None  # the next transaction is a clean one


def test_held_messages_that_cannot_all_be_produced_fail_the_transaction_they_went_into():
    """Kafka gone at a shutdown's deadline while the held messages go out after a commit:
    the open transaction lacks some of them, and the state that made them is past its
    checkpoint. It must never be committed (the final checkpoint aborts instead)."""
    output = Transactions(_NOWHERE, KafkaErrors(), "fraud-x")
    slow = output.producer = _Slow()
    slow.release.set()
    output.commit_in_background([], object())
    output.produce("metrics", b"held 1")
    output.produce("metrics", b"held 2")
    assert output.landed(wait=True)

    def full(*args, **kwargs):
        raise BufferError("the local queue is full")

    slow.produce = full
    output.deadline = time.monotonic()  # stopping, and past it
    with pytest.raises(NoAnswer):
        output.release()
    assert not output.holding and output.held_bytes == 0
    assert output.given_up is not None
    with pytest.raises(TransactionAborted, match="held messages not produced"):
        output.commit([], object())
    assert _sent(slow)[-2:] == ["abort", "begin"] and output.given_up is None


def test_lost_partitions_write_no_more_of_a_checkpoint(monkeypatch):
    """The group went on without the worker: the checkpoint being written is given up and
    the open transaction failed, so that nothing of it is committed."""
    monkeypatch.setattr(checkpoint, "CHANGELOG_TURN_S", 0.0)
    monkeypatch.setattr(checkpoint, "CHANGELOG_PIECE", 1)
    output = Transactions(_NOWHERE, KafkaErrors(), "fraud-x")
    slow = output.producer = _Slow()
    checkpoints = Checkpoints(output, None, None, lambda log, q: None)
    checkpoints.transact([(_Changelog(slow), 0, _Stage([b"a", b"b"]))], [], object(), wait=False)
    output.produce("metrics", b"held")
    assert not checkpoints.landed()  # one piece written
    checkpoints.give_up("the partitions were lost")
    assert not checkpoints.committing and not output.holding and output.held_bytes == 0
    assert output.given_up == "the partitions were lost"
    assert _sent(slow) == [("fraud-join-changelog", b"a")]
    checkpoints.give_up("again")  # nothing being written: nothing to do
    assert output.given_up == "the partitions were lost"
    output.abort()  # (what the worker does next)
    assert output.given_up is None and _sent(slow)[-2:] == ["abort", "begin"]


class _SlowCut(_Stage):
    def cut(self) -> SimpleNamespace:
        time.sleep(0.12)  # the data path's thread waits: little CPU of its own
        return super().cut()


def test_a_long_stop_says_what_the_data_path_got_of_the_machine(caplog):
    """A checkpoint's stop over 100 ms is logged with its thread's CPU time, waits,
    preemptions and page faults: a stop spent waiting was not the worker's own work."""
    output = Transactions(_NOWHERE, KafkaErrors(), "fraud-x")
    slow = output.producer = _Slow()
    slow.release.set()
    telemetry = SimpleNamespace(checkpointed=lambda took, pause: None, transaction=lambda _: None)
    checkpoints = Checkpoints(output, None, telemetry, lambda log, q: None)
    with caplog.at_level(logging.INFO, logger="streameval.worker"):
        checkpoints.transact([(_Changelog(slow), 0, _SlowCut([b"a"]))], ["offsets"], object())
    [line] = [r.getMessage() for r in caplog.records if "over 100 ms" in r.getMessage()]
    cut = re.search(r"cut (\S+) s \(CPU (\S+) s, preempted \d+×, waited (\d+)×, \d+ page", line)
    assert cut is not None, line
    took, cpu, waits = float(cut[1]), float(cut[2]), int(cut[3])
    assert took >= 0.12 and cpu < took / 2 and waits >= 1


def test_a_watch_tells_work_from_waiting():
    watch = checkpoint.Watch()
    time.sleep(0.05)
    waited = watch.used()
    watch = checkpoint.Watch()
    end = time.thread_time() + 0.05
    while time.thread_time() < end:
        pass
    worked = watch.used()
    assert waited.cpu < 0.025 <= worked.cpu and waited.waits >= 1


class _Disk(DiskState):
    def __init__(self) -> None:  # (no database: the stage below builds no real batch)
        pass


class _Join(JoinStage):
    """A join partition's stage that says when its store batch is built and written."""

    def __init__(self, changes: list[bytes]) -> None:  # (none of a real stage's state)
        self.changes, self.said = changes, []
        self.join = SimpleNamespace(state=_Disk())

    def cut(self) -> SimpleNamespace:
        self.said.append("cut")
        return SimpleNamespace(changes=list(self.changes))

    def summary(self) -> dict:
        return {}

    def prepare(self, cut) -> None:
        self.said.append("prepare")

    def written(self, cut, *where) -> None:
        self.said.append("written")


class _Acknowledged(_Changelog):
    acked = False

    def acknowledged(self, q) -> bool:
        return self.acked

    def position(self, q) -> int:
        return 0

    def sealed(self, q) -> None:
        return None


def test_at_least_once_builds_the_store_batch_while_kafka_acknowledges():
    """Under at-least-once a turn with no other checkpoint step builds a join partition's
    store batch while its records wait for Kafka's acknowledgement; the batch is written once
    they are acknowledged, never before."""
    output = SimpleNamespace(
        error=None, next_epoch=lambda: 1, oldest_unanswered=lambda: 2, send_now=lambda: None
    )
    produced: list = []
    changelog = _Acknowledged(SimpleNamespace(produce=lambda topic, value: produced.append(value)))
    join = _Join([b"a", b"b"])
    telemetry = SimpleNamespace(checkpointed=lambda took, pause: None)  # no transactions
    consumer = SimpleNamespace(commit=lambda offsets, asynchronous: None)
    checkpoints = Checkpoints(output, consumer, telemetry, lambda log, q: None)

    def turn() -> None:
        checkpoints.stepped = False
        checkpoints.advance()

    checkpoints.begin([(changelog, 0, join)], ["offsets"])
    turn()  # its records
    assert produced == [b"a", b"b"] and join.said == ["cut"]
    turn()  # not yet acknowledged: its batch is built meanwhile
    assert join.said == ["cut", "prepare"] and checkpoints.stepped
    turn()  # nothing more to do until Kafka answers
    assert join.said == ["cut", "prepare"] and not checkpoints.stepped
    changelog.acked = True
    turn()
    assert join.said == ["cut", "prepare", "written"] and not checkpoints.rounds


def test_each_disk_store_batch_of_a_committed_checkpoint_goes_in_a_turn_of_its_own():
    """Exactly-once: once a commit has landed, each join partition's disk store writes its
    batch in a turn of the loop of its own (``settle(whole=False)``; the evaluation stages
    with the last); a cut first writes whatever is left."""
    output = Transactions(_NOWHERE, KafkaErrors(), "fraud-x")
    slow = output.producer = _Slow()
    slow.release.set()
    pauses: list = []
    telemetry = SimpleNamespace(
        checkpointed=lambda took, pause: pauses.append(pause), transaction=lambda _: None
    )
    checkpoints = Checkpoints(output, None, telemetry, lambda log, q: None)
    changelog = _Acknowledged(slow)
    a, b, evaluation = _Join([b"a"]), _Join([b"b"]), _Stage([b"e"])
    stages = [(changelog, 0, a), (changelog, 1, b), (changelog, 2, evaluation)]
    checkpoints.transact(stages, ["offsets"], object(), settle_later=True)
    assert checkpoints.committed is not None and "written" not in a.said + b.said
    checkpoints.settle(whole=False)  # a turn: the first store
    assert a.said[-1] == "written" and "written" not in b.said and evaluation.told == []
    assert pauses == [] and checkpoints.committed is not None
    checkpoints.settle(whole=False)  # the next: the evaluation stage and the last store
    assert b.said[-1] == "written" and evaluation.told == [[b"e"]]
    assert len(pauses) == 1 and checkpoints.committed is None
    checkpoints.transact(stages, ["offsets"], object(), settle_later=True)
    checkpoints.settle(whole=False)
    assert a.said.count("written") == 2 and b.said.count("written") == 1
    checkpoints.transact(stages, ["offsets"], object(), settle_later=True)  # the rest first
    assert b.said[-2:] == ["written", "cut"] and a.said.count("written") == 2
    assert a.said == ["cut", "written", "cut", "written", "cut"]


def test_a_round_keeps_each_step_s_longest_turn_or_adds_to_it(monkeypatch):
    clock = [1000.0]  # the data path's clock, moved by hand: no scheduler in the numbers
    monkeypatch.setattr(checkpoint.time, "monotonic", lambda: clock[0])
    round_ = checkpoint.Round(0, [], [], clock[0])
    for took in (0.02, 0.05, 0.01):
        watch = checkpoint.Watch()
        clock[0] += took
        round_.took("changelog", watch, longest=True)
    watch = checkpoint.Watch()
    clock[0] += 0.03
    round_.took("stop", watch)
    watch = checkpoint.Watch()
    clock[0] += 0.01
    round_.took("stop", watch, more=True)
    assert round_.steps["changelog"] == pytest.approx(0.05, abs=1e-9)
    assert round_.steps["stop"] == pytest.approx(0.04, abs=1e-9)
    assert set(round_.usage) == {"changelog", "stop"}
    assert round_.pause == round_.steps["changelog"]  # the longest step the data path stopped


def test_a_hanging_transaction_is_named_with_the_commands_that_end_it():
    """The error for a transaction the broker lost track of names each partition at the
    offset where it starts, and gives the abort command for each, so that an operator can
    paste them; the group's offsets, whose partition the worker cannot see, get the command
    that finds it."""
    from streameval.app.transactions import HANGING, hanging_transactions

    said = hanging_transactions(
        "kafka:9092", {("app-join-changelog", 1): 480, ("app-events", 0): 9_001}, True
    )
    assert said.startswith(HANGING)
    assert "app-events[0] from offset 9001, app-join-changelog[1] from offset 480" in said
    tool = "kafka-transactions.sh --bootstrap-server kafka:9092"
    assert f"`{tool} abort --topic app-events --partition 0 --start-offset 9001`" in said
    assert f"`{tool} abort --topic app-join-changelog --partition 1 --start-offset 480`" in said
    assert f"`{tool} find-hanging --topic __consumer_offsets --max-transaction-timeout 1`" in said
    only_changelogs = hanging_transactions("kafka:9092", {("app-events", 0): 3})
    assert "__consumer_offsets" not in only_changelogs
    assert 'docs/operations.md, "A hanging transaction"' in only_changelogs


def test_a_worker_told_to_stop_while_an_assignment_waits_restores_nothing(monkeypatch, caplog):
    """Stopping while the assignment waits for the previous owner's transaction: what a
    restore would read may be behind it, and nothing will be processed anyway, so no stage
    is restored (a long restore would eat into shutdown_timeout_s) and nothing is assigned."""
    from confluent_kafka import TopicPartition
    from streameval.app import rebalance

    def never(*args, **kwargs):
        raise AssertionError("restored while stopping")

    monkeypatch.setattr(rebalance, "restore_join", never)
    monkeypatch.setattr(rebalance, "restore_eval", never)
    worker = rebalance.Rebalancing()
    worker.eo, worker.unsettled, worker.ready = True, False, threading.Event()
    worker.topics = SimpleNamespace(events="events", outcomes="outcomes")
    worker._hangs = transactions.HangWatch(5_000)

    def told_to_stop(consumer, partitions) -> None:  # what _await_stable does then
        worker.unsettled = True

    worker._await_stable = told_to_stop
    assigned = []
    consumer = SimpleNamespace(assign=assigned.append, resume=assigned.append)
    partitions = [TopicPartition(t, 0) for t in ("events", "outcomes", "predictions")]
    with caplog.at_level("INFO", logger="streameval.worker"):
        worker._on_assign(consumer, partitions)
    assert assigned == [[]] and not worker.ready.is_set() and not worker.restoring
    assert "3 partitions neither restored nor assigned" in caplog.text


def _partition(ls: int, hi: int, **kwargs) -> dict:
    """One partition of librdkafka's consumer statistics, fetched up to its stable end."""
    return {"fetch_state": "active", "fetchq_cnt": 0, "next_offset": ls, "leader": 1,
            "ls_offset": ls, "hi_offset": hi, **kwargs}  # fmt: skip


def test_only_partitions_fetched_up_to_their_stable_end_are_watched():
    """librdkafka's offsets of a partition are only current while it fetches it: not when
    the worker paused it (librdkafka still says "active"), when the fetcher is behind the
    stable end, or when the leader is unknown or down. Messages queued for the application
    say nothing of a partition (every partition reports the consumer queue's length)."""
    from streameval.app.transactions import waiting_at_stable_end

    stats = {
        "brokers": {"a:1/1": {"nodeid": 1, "state": "UP"}, "b:2/2": {"nodeid": 2, "state": "DOWN"},
                    "a:1/bootstrap": {"nodeid": -1, "state": "UP"}},
        "topics": {
            "app-events": {"partitions": {
                "-1": _partition(0, 0),
                "0": _partition(5, 9, fetchq_cnt=40),
                "1": _partition(5, 9),  # paused by the worker
                "2": _partition(5, 9, leader=-1),
                "3": _partition(5, 9, next_offset=2),
                "4": _partition(5, 9, leader=2),
                "5": _partition(5, 9, fetch_state="stopped"),
            }},
            "app-outcomes": {"partitions": {"0": _partition(7, 7)}},
            "an-input": {"partitions": {"0": _partition(1, 3)}},
        },
    }  # fmt: skip
    found = waiting_at_stable_end(stats, ("app-events", "app-outcomes"), {("app-events", 1)})
    assert found == {("app-events", 0): (5, 9), ("app-outcomes", 0): (7, 7)}
    assert waiting_at_stable_end({}, ("app-events",), set()) == {}


def test_a_stable_offset_held_below_a_moving_end_past_the_timeout_is_a_hang():
    """Named once its end has moved after the transaction timeout and the broker's margin
    with the stable offset still where it was; again only every few minutes or when another
    partition hangs; said to have ended only once its stable offset is seen to move. A stale
    snapshot (the end not moving) or a missing one proves nothing either way."""
    from streameval.app.transactions import HANGING_MARGIN_S, HANGING_REPEAT_S, HangWatch

    watch = HangWatch(timeout_ms=60_000)
    after = 60 + HANGING_MARGIN_S
    a, b = ("app-events", 0), ("app-outcomes", 2)
    assert watch.observe({a: (5, 9), b: (3, 3)}, 0.0) == ({}, [])
    assert watch.observe({a: (5, 12), b: (3, 8)}, after - 1) == ({}, [])  # b: open since now
    assert watch.observe({a: (5, 12), b: (3, 8)}, after) == ({}, [])  # a: nothing fetched
    assert watch.observe({a: (5, 13)}, after + 1) == ({a: 5}, [])  # fetched: it hangs
    assert watch.observe({a: (5, 14), b: (3, 9)}, after + 5) == ({}, [])  # said already
    assert watch.observe({b: (3, 10)}, 2 * after) == ({b: 3}, [])  # b too, at once
    assert watch.observe({a: (5, 14), b: (3, 10)}, 2 * after + 1) == ({}, [])
    later = 2 * after + HANGING_REPEAT_S
    assert watch.observe({a: (5, 14), b: (3, 10)}, later) == ({a: 5, b: 3}, [])  # again
    assert watch.observe({a: (15, 15), b: (3, 11)}, later + 1) == ({}, [a])  # a aborted
    assert watch.told == {b}
    assert watch.observe({a: (15, 20)}, later + 2) == ({}, [])  # b missing: nothing said
    assert watch.observe({b: (12, 14)}, later + 3) == ({}, [b])  # b aborted
    # stale snapshots: the stable offset below the end, neither moving, however long
    assert watch.observe({a: (15, 20)}, later + 3 + 10 * after) == ({}, [])
    assert watch.observe({a: (15, 21)}, later + 3 + 10 * after) == ({a: 15}, [])


def test_a_rebalance_forgets_the_partitions_that_moved_away_and_keeps_the_rest():
    """After a new assignment, a partition reported hanging that moved away is neither said
    to have ended nor kept (if it comes back still held, it counts from then on, as a new
    one); one that stayed is watched on, and its end is said."""
    from streameval.app.transactions import HANGING_MARGIN_S, HangWatch

    watch = HangWatch(timeout_ms=1_000)
    after = 1 + HANGING_MARGIN_S
    a, b = ("app-events", 0), ("app-events", 1)
    watch.observe({a: (5, 9), b: (7, 9)}, 0.0)
    assert watch.observe({a: (5, 10), b: (7, 10)}, after) == ({a: 5, b: 7}, [])
    watch.keep({b, ("app-outcomes", 3)})  # a moved away
    assert watch.told == {b}
    assert watch.observe({a: (5, 11), b: (7, 11)}, after + 1) == ({}, [])  # a: open since now
    assert watch.observe({a: (5, 12), b: (9, 11)}, 2 * after) == ({}, [b])  # b has ended
    assert watch.observe({a: (5, 13)}, 2 * after + 1) == ({a: 5}, [])


def test_a_hang_on_an_internal_topic_is_worded_for_a_stage_that_waits():
    from streameval.app.transactions import hanging_transactions

    said = hanging_transactions("kafka:9092", {("app-events", 0): 5}, restoring=False)
    assert "The stages reading these partitions wait for it, and read on" in said
    assert "restores" not in said
    assert "--topic app-events --partition 0 --start-offset 5`" in said
