"""What the worker's idle rule reads of librdkafka, on a real broker: the offset an
end-of-partition event gives, and the high watermark the consumer caches from its fetches
(streameval.app.router, ``Router.sources``)."""

from __future__ import annotations

import time
import uuid

import pytest

pytestmark = pytest.mark.kafka


def test_an_end_is_at_the_cached_high_watermark_until_more_is_fetched(kafka_bootstrap):
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"ends-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    plain = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(5):
        plain.produce(topic, b"%d" % i, partition=0)
    plain.flush(30)
    writer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": topic})
    writer.init_transactions(30)
    writer.begin_transaction()
    for i in range(3):
        writer.produce(topic, b"%d" % i, partition=1)
    writer.commit_transaction(30)  # offsets 0-2, then the commit marker at 3
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": topic,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
            "isolation.level": "read_committed",  # the worker's (librdkafka's default)
        }
    )
    consumer.subscribe([topic])

    def high(p):
        return consumer.get_watermark_offsets(TopicPartition(topic, p), cached=True)[1]

    def ends(want, seconds=30):
        """The end-of-partition events read until each partition of ``want`` has been read
        to its end at the offset given (a transaction's marker lands after its commit
        returns: an end may first come before it)."""
        found = {}
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and any(found.get(p) != o for p, o in want.items()):
            for message in consumer.consume(100, 0.2):
                error = message.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    found[message.partition()] = message.offset()
        return {p: found.get(p) for p in want}

    try:
        # after the last record; past a transaction's commit marker
        assert ends({0: 5, 1: 4}) == {0: 5, 1: 4}
        assert (high(0), high(1)) == (5, 4)
        writer.begin_transaction()  # open: the high watermark passes what can be read
        writer.produce(topic, b"open", partition=1)
        writer.flush(30)
        plain.produce(topic, b"5", partition=0)
        plain.flush(30)
        assert ends({0: 6}) == {0: 6}
        deadline = time.monotonic() + 30
        while high(1) <= 4 and time.monotonic() < deadline:
            consumer.consume(100, 0.2)
        assert high(1) == 5  # fetched past its end while the transaction is open
        writer.commit_transaction(30)
        assert ends({1: 6}) == {1: 6}
        assert (high(0), high(1)) == (6, 6)
    finally:
        consumer.close()
        admin.delete_topics([topic])
