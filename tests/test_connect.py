"""A worker's first look at the cluster (streameval.app.output.connect), without a broker: the
topics it has just created may be missing from the metadata for a moment. The rest of connect
runs against real brokers in tests/integration/."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from streameval.app import output
from streameval.app.output import KafkaRefused


class _Admin:
    """An admin client whose metadata lists the created topics from its ``shows_at``-th call."""

    def __init__(self, shows_at: int | None) -> None:
        self.calls, self.shows_at = 0, shows_at

    def list_topics(self, timeout: float) -> SimpleNamespace:
        self.calls += 1
        if self.calls == 1 and self.shows_at is not None:
            raise RuntimeError("a broker went away")  # a KafkaException, to the worker
        topics = {"events": SimpleNamespace(partitions={0: None}, error=None)}
        if self.shows_at is not None and self.calls >= self.shows_at:
            topics["events-changelog"] = SimpleNamespace(partitions={0: None}, error=None)
        elif self.shows_at is not None and self.calls == self.shows_at - 1:  # listed, no leader
            topics["events-changelog"] = SimpleNamespace(partitions={}, error="LEADER_NOT_AVAIL")
        return SimpleNamespace(topics=topics)


def test_the_topics_just_created_are_waited_for():
    """Seen on one KRaft broker: the metadata right after CreateTopics lacked a changelog, and
    the worker stopped with a KeyError."""
    admin = _Admin(shows_at=4)  # an error, absent, listed without partitions, there
    metadata = output._listing(admin, ["events", "events-changelog"], threading.Event())
    assert admin.calls == 4 and "events-changelog" in metadata.topics


def test_kafka_gone_right_after_it_created_the_topics_is_waited_for(monkeypatch):
    """A broker stopped (SIGSTOP) as soon as the worker said "created topics": the worker
    gave up after CREATED_TOPICS_WAIT_S of Kafka's silence and exited 1 ("… has not listed
    them"). Kafka's silence is waited for, as at the start; only the time it answers without
    them counts."""
    import time

    monkeypatch.setattr(output, "CREATED_TOPICS_WAIT_S", 0.05)

    class Silent:
        """Three requests that time out (each longer than the topics' time), then the list."""

        calls = 0

        def list_topics(self, timeout: float) -> SimpleNamespace:
            self.calls += 1
            if self.calls <= 3:
                time.sleep(0.1)
                raise RuntimeError("Local: Timed out")  # a KafkaException, to the worker
            listed = SimpleNamespace(partitions={0: None}, error=None)
            return SimpleNamespace(topics={"events": listed, "events-changelog": listed})

    admin = Silent()
    metadata = output._listing(admin, ["events", "events-changelog"], threading.Event())
    assert admin.calls == 4 and "events-changelog" in metadata.topics


def test_topics_that_never_show_stop_the_worker_with_what_to_do(monkeypatch):
    monkeypatch.setattr(output, "CREATED_TOPICS_WAIT_S", 0.3)
    with pytest.raises(KafkaRefused, match=r"events-changelog .*check the brokers' logs"):
        output._listing(_Admin(shows_at=None), ["events-changelog"], threading.Event())


def test_a_worker_stopped_while_it_waits_for_its_topics_just_stops():
    """SIGTERM meanwhile is no Kafka failure: connect() returns nothing, the worker exits 0."""
    stopping = threading.Event()
    stopping.set()
    assert output._listing(_Admin(shows_at=None), ["events-changelog"], stopping) is None


# -- the check of the checkpoints that follows (streameval.cli_state.check_before_start) -----
def _failing(*errors: Exception):
    """A preflight that raises ``errors`` in turn, then passes; its calls counted."""
    calls = []

    def preflight(*_args, **_kwargs) -> None:
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]

    return preflight, calls


def _check(monkeypatch, preflight) -> tuple[list[int], list[float]]:
    from streameval.app import stateops
    from streameval.app.settings import load_settings
    from streameval.cli_state import check_before_start

    monkeypatch.delenv("STREAMEVAL_CONFIG", raising=False)
    connects: list[int] = []
    slept: list[float] = []
    monkeypatch.setattr(output, "connect", lambda *_: connects.append(1) or {"events": 1})
    monkeypatch.setattr(stateops, "preflight", preflight)
    monkeypatch.setattr("time.sleep", slept.append)
    worker, config = load_settings(None, bootstrap="127.0.0.1:1")
    check_before_start(worker, config, None)
    return connects, slept


def test_kafka_gone_during_the_check_of_the_checkpoints_is_waited_for(monkeypatch, caplog):
    """Seen in the fault campaign: a worker started two seconds before its broker was killed
    had reached it, then stopped with status 1 when the check of its checkpoints that follows
    timed out ("Failed to get metadata: Local: Timed out"), or when the group's coordinator
    was not elected yet. It waits and checks again, from Kafka's first answer, as when Kafka
    is unreachable at its start."""
    from concurrent.futures import TimeoutError as FutureTimeout

    from confluent_kafka import KafkaError, KafkaException
    from streameval.app.changelog import Unreadable

    preflight, calls = _failing(
        KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to get metadata")),
        KafkaException(KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE, "ConsumerGroupDescribe")),
        Unreadable("cannot read app-eval-changelog[0]: Local: Broker transport failure"),
        FutureTimeout(),  # a request's future (describe_consumer_groups) not done in time
        KafkaException(KafkaError(KafkaError._WAIT_COORD, "waiting for the coordinator")),
        *[KafkaException(KafkaError(KafkaError._TRANSPORT, "gone"))] * 4,
    )
    with caplog.at_level("WARNING", "streameval.worker"):
        connects, slept = _check(monkeypatch, preflight)
    assert len(calls) == 10 and len(connects) == 10  # Kafka waited for before each check
    assert slept == [1, 2, 4, 8, 16, 30, 30, 30, 30]
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert len(said) == 9 and all("stopped answering during the check" in s for _, s in said)
    assert "Failed to get metadata" in said[0][1] and "ConsumerGroupDescribe" in said[1][1]
    assert "a request timed out" in said[3][1]
    assert {level for level, _ in said} == {"WARNING"}  # (not for long)


def test_kafka_unanswering_for_long_during_the_check_is_an_error_with_a_hint(monkeypatch, caplog):
    """Brokers reachable at their bootstrap address but not at the addresses they advertise
    answer the first request and no other: the worker waits on, and says where to look."""
    from confluent_kafka import KafkaError, KafkaException
    from streameval import cli_state

    monkeypatch.setattr(cli_state, "CHECK_LONG_S", 0.0)
    preflight, _ = _failing(KafkaException(KafkaError(KafkaError._TIMED_OUT, "Timed out")))
    with caplog.at_level("WARNING", "streameval.worker"):
        _check(monkeypatch, preflight)
    (record,) = caplog.records
    assert record.levelname == "ERROR" and "advertised.listeners" in record.getMessage()


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ("GROUP_AUTHORIZATION_FAILED", "Kafka at 127.0.0.1:1 refused: no"),
        ("_INVALID_ARG", "the Kafka client failed (no)"),
        ("_SSL", "Kafka at 127.0.0.1:1 refused the connection (no)"),
    ],
)
def test_kafka_refusing_the_check_of_the_checkpoints_stops_the_worker_at_once(
    monkeypatch, code, said
):
    """A refusal is not waited for: the worker stops with what to do, having checked once."""
    import click
    from confluent_kafka import KafkaError, KafkaException

    preflight, calls = _failing(KafkaException(KafkaError(getattr(KafkaError, code), "no")))
    with pytest.raises(click.ClickException) as caught:
        _check(monkeypatch, preflight)
    assert caught.value.message.startswith(said) and len(calls) == 1


def test_checkpoints_the_configuration_cannot_continue_stop_the_worker_with_the_reason(
    monkeypatch,
):
    import click
    from streameval.app.stateops import StateError

    preflight, calls = _failing(StateError("model 'a' changes its windows: reset it"))
    with pytest.raises(click.ClickException, match="changes its windows: reset it"):
        _check(monkeypatch, preflight)
    assert len(calls) == 1


class _Reader:
    """A consumer of a changelog partition of five records whose reads meet ``errors`` in
    turn, one read each (None: nothing at all for 5 s), then the end of the partition (a
    partition whose records are all compacted away: no checkpoint). ``ends``: the high
    offsets it gives, in turn (the last one from then on)."""

    def __init__(self, *errors, ends: tuple[int, ...] = (5,)) -> None:
        self.errors, self.ends, self.reads = list(errors), list(ends), 0

    def get_watermark_offsets(self, _tp, timeout: float) -> tuple[int, int]:
        return 0, self.ends.pop(0) if len(self.ends) > 1 else self.ends[0]

    def consume(self, _n: int, timeout: float) -> list:
        from confluent_kafka import KafkaError

        if self.errors:
            error = self.errors[0]
            return [SimpleNamespace(error=lambda: error)] if error else []
        return [SimpleNamespace(error=lambda: KafkaError(KafkaError._PARTITION_EOF))]

    def assign(self, *_partitions) -> None:
        self.reads += 1

    def unassign(self) -> None:
        if self.errors:
            self.errors.pop(0)

    def close(self) -> None:
        pass


def _changelog():
    from streameval.app.changelog import Changelog

    return Changelog("app-eval-changelog", None, {"bootstrap.servers": "127.0.0.1:1"})


def test_a_read_of_the_latest_seal_kafka_stops_is_read_again_not_taken_for_no_checkpoint(
    monkeypatch,
):
    """A broker gone mid-read made the latest seal look absent ("no checkpoint yet"): the
    check of the checkpoints judged a configuration against less than they hold, and a
    restore wiped its disk store. The read is made again until it reaches the end, and
    Kafka's silence for a minute is said."""
    from confluent_kafka import KafkaError
    from streameval.app import changelog as module
    from streameval.app.changelog import Unreadable

    monkeypatch.setattr("time.sleep", lambda _s: None)
    gone = KafkaError(KafkaError._TRANSPORT, "Broker transport failure")
    reader = _Reader(gone, None, gone)
    assert _changelog().latest(0, reader) == (None, {}) and reader.reads == 4
    monkeypatch.setattr(module, "LATEST_WAIT_S", -1.0)
    with pytest.raises(Unreadable, match=r"app-eval-changelog\[0\] from offset 0 to 5: .*transp"):
        _changelog().latest(0, _Reader(gone, gone))
    with pytest.raises(Unreadable, match="no record for 5 s"):
        _changelog().latest(0, _Reader(None, None))


def test_a_read_that_stops_where_the_partition_now_ends_is_not_read_again(monkeypatch):
    """As Changelog.read(): after 5 s without a record the partition's end is asked again;
    a read already there is done."""
    monkeypatch.setattr("time.sleep", lambda _s: None)
    reader = _Reader(None, ends=(5, 0))
    assert _changelog().latest(0, reader) == (None, {}) and reader.reads == 1


def test_a_right_missing_on_a_changelog_is_said_at_once_not_waited_for(monkeypatch):
    """A principal that may describe a changelog but not read it: Kafka's refusal, with its
    words, from the first read (waiting would not change it)."""
    from confluent_kafka import KafkaError, KafkaException

    denied = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed")
    reader = _Reader(denied)
    with pytest.raises(KafkaException, match="Topic authorization failed"):
        _changelog().latest(0, reader)
    assert reader.reads == 1


def test_the_state_commands_say_kafka_did_not_answer_not_a_traceback():
    """`state show` and `state reset` read the same way: a minute without an answer, or a
    request's future that timed out, ends them with a message."""
    import click
    from streameval.app.changelog import Unreadable
    from streameval.cli_state import _kafka_answers

    for err in (Unreadable("cannot read app-eval-changelog[0] from offset 0 to 5"), TimeoutError()):
        with (
            pytest.raises(click.ClickException) as caught,
            _kafka_answers({"bootstrap.servers": "k:9092"}),
        ):
            raise err
        assert caught.value.message.startswith("Kafka at k:9092 did not answer ("), caught.value
