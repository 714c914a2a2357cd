"""`streameval produce`: a user's events file onto the input topics of a real broker."""

from __future__ import annotations

import time
import uuid
from collections import Counter

import orjson
import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient
from streameval.cli import main
from streameval.codec import KafkaTimeDecoder, decode_event
from streameval.simulate.scripted import ScriptedStream
from streameval.topics import INPUT_KINDS, create_topics, load_topics

pytestmark = pytest.mark.kafka


def _consume(bootstrap, topics, expected, timeout=60):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe(topics)
    messages = []
    deadline = time.monotonic() + timeout
    while len(messages) < expected and time.monotonic() < deadline:
        for message in consumer.consume(500, timeout=1.0):
            assert message.error() is None, message.error()
            messages.append(message)
    consumer.close()
    assert len(messages) == expected
    return messages


def test_a_file_goes_to_the_input_topics_keyed_by_instance_stamped_as_told(
    kafka_bootstrap, tmp_path
):
    """Each line to its type's topic (with the prefix), keyed by its instance id, in file order
    per partition; with ``ts_source = "kafka"`` each record's timestamp is its ``ts``, so the
    worker's decoder reads the times replay reads. Topics that do not exist are named."""
    prefix = f"p{uuid.uuid4().hex[:8]}-"
    start = int(time.time() * 1000) - 60_000  # recent: retention keeps it
    stream = ScriptedStream(instances=200, start_ms=start, seed=3)
    lines = list(stream.lines())
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"\xef\xbb\xbf" + b"\n".join(lines) + b"\n\n")  # a BOM, a blank line
    config = tmp_path / "evaluation.toml"
    config.write_text('[time]\nts_source = "kafka"\n')
    args = ["produce", str(events), "--bootstrap", kafka_bootstrap, "--prefix", prefix,
            "--config", str(config)]  # fmt: skip

    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    assert f"topic {prefix}instances does not exist" in result.output
    assert "streameval topics create" in result.output

    create_topics(AdminClient({"bootstrap.servers": kafka_bootstrap}), load_topics(prefix))
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    kinds = Counter(decode_event(line).__struct_config__.tag for line in lines)
    for topic, kind in INPUT_KINDS.items():
        assert f"{kinds[kind]:>9,}  {prefix}{topic}" in result.output
    assert f"{len(lines):>9,}  records" in result.output

    messages = _consume(kafka_bootstrap, [prefix + topic for topic in INPUT_KINDS], len(lines))
    decoder = KafkaTimeDecoder({prefix + topic: kind for topic, kind in INPUT_KINDS.items()})
    expected = [orjson.loads(line) for line in lines]
    got: dict[tuple[str, int], list] = {}
    for message in messages:
        kind, record = decoder.decode_message(message)
        assert kind is not None, record.reason
        assert message.key() == record.instance_id.encode()
        assert message.timestamp()[1] == record.ts == orjson.loads(message.value())["ts"]
        got.setdefault((message.topic(), message.partition()), []).append(
            {**orjson.loads(message.value()), "type": kind})  # fmt: skip
    for (topic, _), records in got.items():  # each partition holds its events in file order
        mine = [e for e in expected if prefix + _TOPIC[e["type"]] == topic]
        assert [e for e in mine if e in records] == records
    assert sorted(map(orjson.dumps, (r for rs in got.values() for r in rs))) == sorted(
        map(orjson.dumps, expected))  # fmt: skip


_TOPIC = {kind: topic for topic, kind in INPUT_KINDS.items()}


def test_simulate_to_topics_that_do_not_exist_says_so_and_sends_nothing(kafka_bootstrap):
    """`simulate` without --out said "produced N events" and exited 0 whatever happened to
    them: to topics that do not exist (or a Kafka that does not answer) it now stops saying
    why, before anything is sent. (Run as the console script: River and librdkafka in this
    process would break the process pools that later tests fork.)"""
    import os
    import subprocess
    import sys
    from pathlib import Path

    prefix = f"s{uuid.uuid4().hex[:8]}-"
    command = [str(Path(sys.executable).parent / "streameval"), "simulate", "--instances", "10",
               "--bootstrap", kafka_bootstrap, "--prefix", prefix]  # fmt: skip
    environ = {k: v for k, v in os.environ.items() if not k.startswith("STREAMEVAL_")}

    def run() -> tuple[int, str]:
        done = subprocess.run(command, env=environ, capture_output=True, text=True, timeout=120)
        return done.returncode, done.stdout + done.stderr

    code, output = run()
    assert code == 1, output
    assert f"topic {prefix}instances does not exist: create the topics first" in output
    assert "produced" not in output
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    create_topics(admin, [s for s in load_topics(prefix) if s.role == "input"])
    code, output = run()
    assert code == 0, output
    assert f"produced 120 events to {prefix}instances" in output
