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


def test_topics_that_never_show_stop_the_worker_with_what_to_do(monkeypatch):
    monkeypatch.setattr(output, "CREATED_TOPICS_WAIT_S", 0.3)
    with pytest.raises(KafkaRefused, match=r"events-changelog .*check the brokers' logs"):
        output._listing(_Admin(shows_at=None), ["events-changelog"], threading.Event())


def test_a_worker_stopped_while_it_waits_for_its_topics_just_stops():
    """SIGTERM meanwhile is no Kafka failure: connect() returns nothing, the worker exits 0."""
    stopping = threading.Event()
    stopping.set()
    assert output._listing(_Admin(shows_at=None), ["events-changelog"], stopping) is None
