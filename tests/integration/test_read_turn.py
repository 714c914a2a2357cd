"""A turn of the worker's loop reads what is there: it does not wait out its timeout for a
full batch, as confluent-kafka's ``consume(n, timeout)`` does (librdkafka's batch consume;
confluent-kafka 2.13 and later cut a timeout of 200 ms or more into 200 ms pieces and return
after the first piece that got a message, so the worker's waits of 50 ms and 5 ms are whole)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from streameval.app.runner import read_turn

pytestmark = pytest.mark.kafka

WAIT_S = 0.15  # below confluent-kafka's 200 ms pieces
GROUPS, SIZE = 20, 5


def _read_groups(bootstrap: str, read) -> tuple[float, list[int]]:
    """Seconds ``read(consume, 1000, WAIT_S)`` took, in all, to read 20 groups of 5 messages,
    each produced once the one before was read; and what it read."""
    topic = f"turn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    took, got = 0.0, []
    try:
        for group in range(GROUPS):
            for i in range(SIZE):
                producer.produce(topic, b"%d" % (group * SIZE + i))
            assert producer.flush(30) == 0
            started = time.monotonic()
            while len(got) < (group + 1) * SIZE:
                messages = read(consumer.consume, 1000, WAIT_S)
                assert all(m.error() is None for m in messages)
                got += [int(m.value()) for m in messages]
            took += time.monotonic() - started
    finally:
        consumer.close()
    return took, got


def test_a_turn_returns_with_the_first_message_and_what_is_queued(kafka_bootstrap):
    """The same 20 groups of 5: ``consume(1000, 0.15)`` waits its whole 0.15 s for each (it
    has fewer than 1 000), at least 3 s in all; a turn returns once a message is there."""
    waited, plain = _read_groups(kafka_bootstrap, lambda consume, n, wait: consume(n, wait))
    turned, read = _read_groups(kafka_bootstrap, read_turn)
    assert plain == read == list(range(GROUPS * SIZE))
    # the client's behaviour read_turn is there for (if this fails, consume no longer waits)
    assert waited >= GROUPS * WAIT_S, waited
    assert turned < waited / 2, (turned, waited)
