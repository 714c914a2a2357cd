"""Topics and dead letters against a real broker."""

import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from streameval.codec import BatchDecoder
from streameval.topics import create_topics, describe_topics, load_topics

pytestmark = pytest.mark.kafka


@pytest.fixture
def prefix():
    return f"t{uuid.uuid4().hex[:8]}-"


def test_create_is_idempotent_and_reports_differences(kafka_bootstrap, prefix):
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    specs = load_topics(prefix, partitions=2)
    # someone created one topic by hand, with other settings: report it, do not touch it
    odd = prefix + "labels"
    admin.create_topics([NewTopic(odd, 1, 1, config={"retention.ms": "1000"})])[odd].result(30)
    first = create_topics(admin, specs)
    assert sorted(first.created) == sorted(s.name for s in specs if s.name != odd)
    assert set(first.mismatched) == {odd}
    assert any("partitions: 1, declared 2" in d for d in first.mismatched[odd])
    assert any("retention.ms: 1000" in d for d in first.mismatched[odd])
    second = create_topics(admin, specs)
    assert second.created == []
    assert sorted(second.unchanged) == sorted(first.created)
    assert second.mismatched == first.mismatched
    rows = {r["name"]: r for r in describe_topics(admin, specs)}
    assert rows[prefix + "metrics"]["exists"] and rows[prefix + "metrics"]["partitions"] == 2
    assert rows[odd]["configs"]["retention.ms"] == "1000"


MALFORMED = {
    "predictions": [
        (b"{not json", "invalid_json"),
        (b'\x00\x00\x00\x00\x07{"instance_id": "i9", "model_id": "m", "ts": 1767225600005, '
         b'"label": "a"}', "schema_registry"),
        (b'{"instance_id": "i9", "model_id": "m", "ts": 1767225600005}', "missing_field"),
        (b'{"instance_id": "i9", "model_id": "m", "ts": "5", "label": "a"}', "wrong_type"),
        (b'{"instance_id": "", "model_id": "m", "ts": 1767225600005, "label": "a"}', "empty_value"),
        (b'{"instance_id": "i9", "model_id": "m", "ts": 1e300, "label": "a"}', "wrong_type"),
        (b'{"instance_id": "i9", "model_id": "m", "ts": 1767225600000000, "label": "a"}',
         "wrong_ts_unit"),
        (b'{"instance_id": "i9", "model_id": "m", "ts": 1767225600005, "label": "a", '
         b'"scores": {"a": 0.9}}', "bad_scores"),
        (b'{"type": "label", "instance_id": "i9", "model_id": "m", "ts": 1767225600005, '
         b'"label": "a"}', "unknown_type"),
        (b'{"instance_id": "i9", "model_id": "m", "ts": 1767225600005, "label": "'
         + b"x" * 2_000_000 + b'"}', "oversized"),
    ],
    "labels": [(b"[1, 2]", "not_an_object"), (b'{"instance_id": "i9", "ts": NaN}', "invalid_json")],
    "instances": [(b'{"instance_id": "i9", "ts": -1}', "bad_timestamp")],
}  # fmt: skip
VALID = {
    "instances": [b'\xef\xbb\xbf{"instance_id": "i1", "ts": 1767225601000, '  # a BOM: tolerated
                  b'"features": {"x": 1.5}}'],
    "predictions": [
        b'{"instance_id": "i1", "model_id": "m", "ts": 1767225601001, "label": "spam", '
        b'"scores": {"spam": 0.9, "ham": 0.1}}',
        b'{"instance_id": "i1", "model_id": "m", "ts": 1767225601002, "label": 3, '
        b'"type": "prediction"}',
    ],
    "labels": [b'{"instance_id": "i1", "ts": 1767225602000, "label": "spam"}'],
}  # fmt: skip


def _consume(bootstrap, topics, expected, timeout=60):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "fetch.message.max.bytes": 4_000_000})  # fmt: skip
    consumer.subscribe(topics)
    messages = []
    import time

    deadline = time.monotonic() + timeout
    while len(messages) < expected and time.monotonic() < deadline:
        for m in consumer.consume(100, timeout=1.0):
            assert m.error() is None, m.error()
            messages.append(m)
    consumer.close()
    assert len(messages) == expected
    return messages


def test_valid_and_malformed_records_are_routed(kafka_bootstrap, prefix):
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    specs = load_topics(prefix, partitions=1)
    for spec in specs:  # the test sends a 2 MB record: allow it on the input topics
        if spec.role == "input":
            spec.configs["max.message.bytes"] = "4194304"
    create_topics(admin, specs)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": 4_000_000})
    sent = 0
    for topic in ("instances", "predictions", "labels"):
        for value in VALID[topic] + [v for v, _ in MALFORMED[topic]]:
            producer.produce(prefix + topic, value=value, key=b"i-key")
            sent += 1
    assert producer.flush(30) == 0
    inputs = _consume(kafka_bootstrap, [prefix + t for t in VALID], sent)

    decoder = BatchDecoder({prefix + "instances": "instance", prefix + "predictions": "prediction",
                            prefix + "labels": "label"})  # fmt: skip
    decoded: dict[str | None, list] = {None: [], "instance": [], "prediction": [], "label": []}
    for message in inputs:
        kind, result = decoder.decode_message(message)
        decoded[kind].append(result)
    letters = decoded[None]
    for letter in letters:  # the records the worker's router produces for them
        producer.produce(prefix + "dead-letters", value=letter.payload(), key=letter.key,
                         headers=letter.headers())  # fmt: skip
    assert producer.flush(30) == 0
    assert [r.instance_id for r in decoded["instance"]] == ["i1"]
    assert [r.label for r in decoded["prediction"]] == ["spam", 3]
    assert decoded["prediction"][0].scores == {"spam": 0.9, "ham": 0.1}
    assert [r.ts for r in decoded["label"]] == [1767225602000]
    assert [r.ts for r in decoded["prediction"]] == [1767225601001, 1767225601002]
    expected_codes = sorted(code for cases in MALFORMED.values() for _, code in cases)
    assert sorted(d.code for d in letters) == expected_codes
    assert sum(decoder.counters.values()) == len(expected_codes)

    letters = _consume(kafka_bootstrap, [prefix + "dead-letters"], len(expected_codes))
    by_offset = {(m.topic(), m.partition(), m.offset()): m for m in inputs}
    for letter in letters:
        headers = {k: v.decode() for k, v in letter.headers()}
        source = by_offset[(headers["streameval.source.topic"],
                            int(headers["streameval.source.partition"]),
                            int(headers["streameval.source.offset"]))]  # fmt: skip
        if headers["streameval.reason.code"] == "oversized":  # the first MiB, and its length
            assert source.value().startswith(letter.value()) and len(letter.value()) == 2**20
            assert int(headers["streameval.value.bytes"]) == len(source.value())
        else:
            assert letter.value() == source.value()  # the original bytes, unchanged
        assert letter.key() == b"i-key"
        assert headers["streameval.reason"]  # a sentence for a person
        assert headers["streameval.reason.code"] in expected_codes


def test_a_topic_the_cluster_refuses_to_create_stops_the_worker_with_its_words(
    kafka_bootstrap, prefix, tmp_path
):
    """A changelog config the broker refuses (it came as a traceback of a KafkaException from
    topic creation): the worker stops with Kafka's words, the topics it lacks and what to
    change, exit status 1."""
    import os
    import subprocess
    import sys

    environ = {k: v for k, v in os.environ.items() if not k.startswith("STREAMEVAL_")}
    done = subprocess.run(
        [sys.executable, "-m", "streameval.cli", "worker", "--bootstrap", kafka_bootstrap,
         "--prefix", prefix, "--app-id", "app", "--metrics-port", "0"],
        env={**environ, "STREAMEVAL_STATE_DIR": str(tmp_path),
             "STREAMEVAL_PROCESSING_GUARANTEE": "at_least_once",
             "STREAMEVAL_CHANGELOG_CONFIGS": '{"min.insync.replicas": "many"}'},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output, output
    assert "Kafka refused to create the topics the worker lacks" in output, output
    assert f"{prefix}app-join-changelog" in output and "changelog_configs" in output
    # (the command an administrator would run keeps the worker's changelog configs)
    command = f"streameval topics create --app-id app --prefix {prefix} --changelog-config"
    assert f"`{command} min.insync.replicas=many`" in output
