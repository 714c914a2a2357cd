"""The worker's consumer in its group, on a real broker: a rebalance's restore, which runs in
the assignment callback, against ``max_poll_interval_ms``."""

from __future__ import annotations

import logging
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer
from streameval.app.output import KafkaErrors, consumer_config
from streameval.app.settings import WorkerSettings

from tests.test_mistakes import _run

pytestmark = pytest.mark.kafka

#: how long the busy member's second assignment takes (a restore from the changelog)
RESTORE_S = 9.0


def _member(bootstrap: str, group: str, max_poll_ms: int, errors: KafkaErrors) -> Consumer:
    settings = WorkerSettings(  # (exactly-once asks max_poll_interval_ms to cover its wait)
        app_id=group,
        session_timeout_ms=6000,
        max_poll_interval_ms=max_poll_ms,
        processing_guarantee="at_least_once",
    )
    config = consumer_config({"bootstrap.servers": bootstrap}, settings, errors, lambda _: None)
    return Consumer(config)


@pytest.mark.parametrize(("max_poll_ms", "kept"), [(7_000, False), (30_000, True)])
def test_a_busy_worker_keeps_its_partitions_through_a_restore_within_max_poll_interval(
    kafka_bootstrap, caplog, max_poll_ms, kept
):
    """A worker with a join behind reads without waiting; librdkafka then counts the time of a
    rebalance's callback, where the worker restores, as time without a read. Longer than
    ``max_poll_interval_ms`` and the group goes on without it: its partitions move, and come
    back only after yet another rebalance (each a restore). Within it, it keeps them."""
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"group-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=30)
    events: list[tuple[str, float, list[int]]] = []
    assigned = threading.Event()
    stop = threading.Event()
    t0 = time.monotonic()

    def on_assign(consumer, partitions):
        assignments = sum(1 for kind, *_ in events if kind == "assign")
        events.append(("assign", time.monotonic() - t0, sorted(p.partition for p in partitions)))
        assigned.set()
        if assignments == 1:  # the rebalance that the second member sets off: a restore
            time.sleep(RESTORE_S)
            events.append(("restored", time.monotonic() - t0, []))

    def on_lost(consumer, partitions):
        events.append(("lost", time.monotonic() - t0, sorted(p.partition for p in partitions)))

    errors = KafkaErrors()

    failed: list[BaseException] = []

    def busy() -> None:
        try:
            member = _member(kafka_bootstrap, topic, max_poll_ms, errors)
        except BaseException as err:  # said by the test, not lost in the thread
            failed.append(err)
            raise
        member.subscribe([topic], on_assign=on_assign, on_lost=on_lost)
        try:
            while not stop.is_set():
                for message in member.consume(100, 0):  # the busy worker's read: no wait
                    if message.error() is not None:
                        errors(message.error())
                time.sleep(0.005)
        finally:
            member.close()

    thread = threading.Thread(target=busy, daemon=True)
    caplog.set_level(logging.ERROR, logger="streameval")
    thread.start()
    try:
        assert assigned.wait(30), failed or "the first member was never assigned"
        other = _member(kafka_bootstrap, topic, 30_000, KafkaErrors())
        other.subscribe([topic])
        # the restore, then time for the busy member's next reads to meet the group's verdict
        until = time.monotonic() + RESTORE_S + 12
        while time.monotonic() < until:
            other.consume(100, 0.05)
        other.close()
    finally:
        stop.set()
        thread.join(30)
    lost = [e for e in events if e[0] == "lost"]
    said = [r.getMessage() for r in caplog.records if "max_poll_interval_ms" in r.getMessage()]
    assigns = [e for e in events if e[0] == "assign"]
    # the second member's rebalance gave the busy one a partition, whose restore ended
    assert len(assigns) >= 2 and len(assigns[1][2]) == 1, events
    assert "restored" in [e[0] for e in events], events
    if kept:
        assert not lost and not said, (events, said)
    else:  # the hazard is real with the worker's consumer: the test can see it
        assert lost, events
        assert said and "STREAMEVAL_MAX_POLL_INTERVAL_MS" in said[0]


@pytest.mark.parametrize("processes", [1, 2])
def test_a_session_timeout_the_brokers_refuse_stops_the_worker_saying_so(
    kafka_bootstrap, tmp_path, processes
):
    """Below the brokers' group.min.session.timeout.ms the group never takes the worker in:
    librdkafka retries its JoinGroup forever, and a worker would wait with nothing to do. With
    two data-path processes, whichever meets the refusal first says it, without a traceback."""
    app = f"refused-{uuid.uuid4().hex[:8]}"
    code, output = _run(
        "worker",
        "--bootstrap",
        kafka_bootstrap,
        env={
            "STREAMEVAL_SESSION_TIMEOUT_MS": "3000",
            "STREAMEVAL_PROCESSES": str(processes),
            "STREAMEVAL_APP_ID": app,
            "STREAMEVAL_TOPIC_PREFIX": f"{app}-",
            "STREAMEVAL_STATE_DIR": str(tmp_path),
            "STREAMEVAL_METRICS_PORT": "0",
        },
    )
    assert code == 1, output
    assert "Kafka refused the worker's session_timeout_ms = 3000 (JoinGroup failed" in output
    assert "group.min.session.timeout.ms" in output and "STREAMEVAL_SESSION_TIMEOUT_MS" in output
    assert "Traceback" not in output and "NoneType: None" not in output, output
    assert "final records and a checkpoint" not in output, output  # it had nothing
