"""The join's state on disk and its incremental checkpoints, on a real broker: limits that
bind, SIGKILL during checkpoints and restores, restarts on an empty disk, a partition with many
pending instances moving to another worker, a changelog deleted under a running worker and a
full disk — each ends with replay's numbers (after a clean stop where one is due)."""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import time

import pytest
from streameval.simulate.scripted import ScriptedStream

from tests.integration.test_worker import CONFIG, Deployment
from tests.streaming import make_config, replay_finals

pytestmark = pytest.mark.kafka


@pytest.fixture
def deploy(kafka_bootstrap, tmp_path):
    made = []

    def make(stream, config=CONFIG):
        deployment = Deployment(kafka_bootstrap, tmp_path, stream, config)
        made.append(deployment)
        return deployment

    yield make
    for deployment in made:
        for process, _, _ in deployment.workers:
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.mark.parametrize(
    ("toml", "limit"),
    [("max_pending = 20", {"max_pending": 20}), ("label_ttl_ms = 900", {"label_ttl_ms": 900})],
    ids=["max_pending", "label_ttl"],
)
def test_limits_that_bind_give_replays_numbers(deploy, stream, toml, limit):
    """``max_pending`` (per join partition) and ``label_ttl`` drop instances at their event
    time: the worker's numbers are replay's split into the same join partitions (the
    worker's events topic, created by it, has topics/topics.toml's 6)."""
    config = CONFIG.replace("label_grace_ms = 1000", f"label_grace_ms = 1000\n{toml}")
    expected = replay_finals(stream, make_config(join={"label_grace_ms": 1000, **limit}),
                             join_partitions=6)  # fmt: skip
    assert expected != replay_finals(stream, make_config())  # the limit does bind
    deployment = deploy(stream, config)
    deployment.produce()
    deployment.start_worker()
    assert deployment.wait_for(expected) == expected
    deployment.stop_all()


def test_sigkill_in_checkpoints_and_restores_and_empty_disks(deploy, stream, expected):
    """Checkpoints ten times a second and SIGKILL in the middle of a restore, of catching up,
    of checkpointing, or at any moment from the start; some restarts on the killed worker's
    disk (even a half-restored one), some on an empty one: replay's numbers, nothing lost or
    counted twice."""
    config = CONFIG.replace(
        "snapshot_interval_s = 0.5", "snapshot_interval_s = 0.1\ncheckpoint_max_changes = 100"
    )
    deployment = deploy(stream, config)  # and the joins' early checkpoints every 100 changes
    deployment.env["STREAMEVAL_IDLE_MS"] = "8000"  # pauses are not the end of the stream
    rng = random.Random(4)
    state = deployment.tmp / "state"
    # (when to kill, whether the next worker starts on an empty disk)
    plan = [("assigned", False), ("assigned", True), ("restoring", False), ("any", False),
            ("assigned", True), ("restoring", False)]  # fmt: skip
    for n, (when, wipe) in enumerate(plan):
        deployment.produce(1 / (len(plan) - n))
        process, _ = deployment.start_worker()
        log = deployment.workers[-1][2]
        if when == "any":
            time.sleep(rng.uniform(0.5, 10.0))
        else:  # right after its first partition is restored (one line each, even when its
            # changelog holds nothing yet), or 0–1.5 s after all are
            mark = "caught up from changelog" if when == "restoring" else "assigned:"
            deadline = time.monotonic() + 60
            while mark not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.005)
            assert mark in log.read_text(), log.read_text()[-3000:]
            time.sleep(0.0 if when == "restoring" else rng.uniform(0.0, 1.5))
        process.send_signal(signal.SIGKILL)
        process.wait()
        if wipe:
            shutil.rmtree(state, ignore_errors=True)
    deployment.start_worker()
    assert deployment.wait_for(expected) == expected
    deployment.stop_all()
    logs = "".join(log.read_text() for _, _, log in deployment.workers)
    after_wipes = "".join(deployment.workers[n + 1][2].read_text()
                          for n, (_, wipe) in enumerate(plan) if wipe)  # fmt: skip
    assert "caught up from changelog offset 0" in after_wipes  # an empty disk, rebuilt
    assert re.search(r"caught up from changelog offset [1-9]", logs)  # its own disk


def test_a_changelog_deleted_under_a_running_worker(deploy, stream, expected, kafka_bootstrap):
    """The join changelog deleted while a worker runs: the worker stops with a message that
    says what happened and what to do; started again on its disk, it writes its join state
    into a new changelog and ends with replay's numbers."""
    from confluent_kafka.admin import AdminClient

    deployment = deploy(stream)
    deployment.env["STREAMEVAL_IDLE_MS"] = "8000"
    deployment.produce(0.5)
    with deployment.pause():  # not the end of the stream
        process, _ = deployment.start_worker()
        log = deployment.workers[-1][2]
        deadline = time.monotonic() + 60
        while "assigned:" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2.0)  # some checkpoints
        topic = f"{deployment.prefix}{deployment.prefix}app-join-changelog"  # the worker's
        assert topic in _topics(kafka_bootstrap)
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        admin.delete_topics([topic])[topic].result(30)
        while topic in _topics(kafka_bootstrap):
            time.sleep(0.2)
        time.sleep(3.0)  # the brokers drop its partitions a moment after the controller
    deployment.produce()  # so the next checkpoint has something to write
    _stops_cleanly(deployment, process, r"CRITICAL.*join-changelog.*is gone from Kafka", 120)
    deployment.start_worker()
    assert deployment.wait_for(expected) == expected
    deployment.stop_all()
    assert "writing the whole store into it" in deployment.workers[0][2].read_text()


def test_a_full_disk_stops_the_worker_and_it_continues_once_freed(deploy, stream, expected):
    """The store cannot write (every file the worker writes is capped, as on a full disk):
    the worker stops with a message saying what to do, without a traceback; started again
    with room, it catches up from the changelog and ends with replay's numbers."""
    deployment = deploy(stream)
    deployment.env["STREAMEVAL_IDLE_MS"] = "15000"  # the restart is not the end of the stream
    deployment.produce()
    process, _ = deployment.start_worker(max_file_bytes=100_000)
    _stops_cleanly(deployment, process, r"CRITICAL.*cannot write the store.*is the disk full")
    deployment.start_worker()
    assert deployment.wait_for(expected) == expected
    deployment.stop_all()


def _stops_cleanly(deployment, process, message: str, timeout: float = 180) -> None:
    """The worker stops by itself with a non-zero status (for a supervisor to see) and a log
    line matching ``message``, without a traceback."""
    log = deployment.workers[-1][2]
    assert process.wait(timeout=timeout) != 0, log.read_text()[-3000:]
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]
    assert re.search(message, text), text[-3000:]
    deployment.workers.clear()  # it stopped as it should


def _topics(bootstrap: str) -> list[str]:
    from confluent_kafka.admin import AdminClient

    return list(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)


@pytest.mark.parametrize("pending", [int(os.environ.get("STREAMEVAL_MOVE_PENDING", 100_000))])
def test_a_partition_with_many_pending_instances_moves(deploy, tmp_path, pending):
    """A worker holds ``pending`` instances waiting for labels; a second worker joins and
    takes over join partitions, which it rebuilds from their changelogs on its empty disk; then
    the labels come: replay's numbers. (``make soak`` runs it with 10⁶.)"""
    stream = ScriptedStream(instances=pending, max_repredictions=0, interval_ms=1,
                            min_delay_ms=2 * pending, mean_delay_ms=1000.0, seed=8)  # fmt: skip
    expected = replay_finals(stream, make_config(publish_every=10_000))
    toml = CONFIG.replace("publish_every = 500", "publish_every = 10000")
    deployment = deploy(stream, toml)
    deployment.env["STREAMEVAL_IDLE_MS"] = "8000"
    first_label = next(i for i, (topic, _, _) in enumerate(deployment.pending)
                       if topic == "labels")  # fmt: skip
    deployment.produce(first_label / len(deployment.pending))  # every instance, no label
    deployment.env["STREAMEVAL_STATE_DIR"] = str(tmp_path / "first")
    deployment.start_worker()
    _wait_for_pending(deployment, pending)
    deployment.env["STREAMEVAL_STATE_DIR"] = str(tmp_path / "second")
    deployment.start_worker()
    second = deployment.workers[1][2]
    deadline = time.monotonic() + 120
    while "assigned:" not in second.read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    deployment.produce()  # the labels, once the partitions have moved
    assert deployment.wait_for(expected, timeout=max(600, pending // 500)) == expected
    deployment.stop_all()
    text = second.read_text()
    held = [int(n) for n in re.findall(r"join \d+: (\d+) pending instances", text)]
    assert sum(held) > pending // 4, text[-3000:]  # it rebuilt partitions full of them


def _wait_for_pending(deployment, pending: int, timeout: float = 300) -> None:
    from tests.integration.test_worker import _scrape

    port = deployment.workers[0][1]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            held = re.search(r"^streameval_pending_instances (\S+)$", _scrape(port), re.M)
        except OSError:
            held = None
        if held is not None and float(held[1]) >= pending:
            time.sleep(1.5)  # and a checkpoint after it
            return
        time.sleep(1)
    raise AssertionError(f"the worker never held {pending} pending instances")
