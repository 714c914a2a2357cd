"""The local Kafka launcher: start, stop, restart, two at once, no JVM left behind."""

import os
import subprocess
import sys
import time

import pytest
from streameval.devkafka import KafkaInstance, free_port

pytestmark = pytest.mark.launcher


def _jvm_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ", 1)[1][0] != "Z"


def _produce_and_count(bootstrap: str) -> int:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("probe", 1, 1)])["probe"].result(timeout=30)
    return len(admin.list_topics(timeout=10).brokers)


def test_start_stop_twice_in_a_row(tmp_path):
    for _ in range(2):
        kafka = KafkaInstance.start(tmp_path / "k")
        pid = kafka.pid
        assert _produce_and_count(kafka.bootstrap) == 1
        assert kafka.log_file.exists() and "started" in kafka.log_file.read_text()
        kafka.stop()
        assert not _jvm_running(pid)
        kafka.stop()  # idempotent


def test_two_launchers_at_once_do_not_collide(tmp_path):
    with KafkaInstance.start(tmp_path / "a") as a, KafkaInstance.start(tmp_path / "b") as b:
        assert a.port != b.port and a.controller_port != b.controller_port
        assert _produce_and_count(a.bootstrap) == 1
        assert _produce_and_count(b.bootstrap) == 1
        pids = (a.pid, b.pid)
    assert not any(_jvm_running(pid) for pid in pids)


def test_the_jvm_dies_with_a_killed_test_process(tmp_path):
    """A SIGKILLed parent (a crashed test run) leaves no orphan broker."""
    script = (
        "import sys, time; from streameval.devkafka import KafkaInstance;"
        f"k = KafkaInstance.start({str(tmp_path / 'c')!r}); print(k.pid, flush=True);"
        "time.sleep(600)"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pid = int(child.stdout.readline())
    assert _jvm_running(pid)
    child.kill()
    child.wait()
    deadline = time.monotonic() + 30
    while _jvm_running(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _jvm_running(pid)


def test_cli_start_status_stop(tmp_path):
    name = f"test-{os.getpid()}"
    bin_dir = os.path.dirname(sys.executable)
    cli = [os.path.join(bin_dir, "streameval"), "kafka"]
    started = subprocess.run([*cli, "start", "--name", name], capture_output=True, text=True)
    assert started.returncode == 0, started.stderr
    bootstrap = started.stdout.strip()
    try:
        assert bootstrap.startswith("127.0.0.1:")
        again = subprocess.run([*cli, "start", "--name", name], capture_output=True, text=True)
        assert again.stdout.strip() == bootstrap and "already running" in again.stderr
        status = subprocess.run([*cli, "status", "--name", name], capture_output=True, text=True)
        assert status.returncode == 0 and bootstrap in status.stdout
    finally:
        stopped = subprocess.run([*cli, "stop", "--name", name], capture_output=True, text=True)
    assert stopped.returncode == 0
    status = subprocess.run([*cli, "status", "--name", name], capture_output=True, text=True)
    assert status.returncode == 1 and "not running" in status.stderr


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    command = [os.path.join(os.path.dirname(sys.executable), "streameval"), "kafka", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env)


def _consume_all(bootstrap: str, topic: str) -> list[bytes]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{time.time()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([topic])
    values, deadline = [], time.monotonic() + 30
    try:
        while not values and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def test_cli_start_after_stop_comes_back_on_its_ports_with_its_data():
    """`kafka stop` then `kafka start`: the same bootstrap address, the topics and messages
    still there; `kafka start --fresh` after a stop: an empty broker."""
    import shutil

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"test-restart-{os.getpid()}"
    try:
        started = _cli("start", "--name", name)
        assert started.returncode == 0, started.stderr
        bootstrap = started.stdout.strip()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("kept", 1, 1)])["kept"].result(timeout=30)
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce("kept", b"written before the stop")
        assert producer.flush(30) == 0
        assert _cli("stop", "--name", name).returncode == 0

        again = _cli("start", "--name", name)
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip() == bootstrap and "restarted with its data" in again.stderr
        assert _consume_all(bootstrap, "kept") == [b"written before the stop"]
        assert _cli("stop", "--name", name).returncode == 0

        fresh = _cli("start", "--name", name, "--fresh")
        assert fresh.returncode == 0, fresh.stderr
        topics = AdminClient({"bootstrap.servers": fresh.stdout.strip()}).list_topics(timeout=30)
        assert "kept" not in topics.topics
    finally:
        _cli("stop", "--name", name)
        shutil.rmtree(KafkaInstance.named(name), ignore_errors=True)


def test_a_restart_whose_port_another_process_holds_names_the_port(tmp_path):
    """No JVM is started: the ports are checked first."""
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        env = {**os.environ, "STREAMEVAL_CACHE": str(tmp_path)}
        directory = tmp_path / "instances" / "held"
        directory.mkdir(parents=True)
        KafkaInstance(str(directory), port=taken, controller_port=free_port())._write_state()
        restarted = _cli("start", "--name", "held", env=env)
    assert restarted.returncode == 1
    assert f"the port {taken} of the broker in {directory} is taken" in restarted.stderr
    assert "streameval kafka start --name held --fresh" in restarted.stderr


def test_pom_and_launcher_pin_the_same_version():
    from streameval.devkafka import KAFKA_FILES, KAFKA_VERSION

    pom = (KAFKA_FILES / "pom.xml").read_text()
    assert f"<artifactId>kafka_2.13</artifactId>\n      <version>{KAFKA_VERSION}</version>" in pom


def test_stop_never_signals_a_process_that_is_not_our_broker(tmp_path):
    """After a reboot the recorded pid may belong to anything: here, this very test."""
    stale = KafkaInstance(str(tmp_path), port=1, controller_port=2, pid=os.getpid())
    assert not stale.running()
    stale.stop()  # must not SIGTERM/SIGKILL the test process
    assert stale.pid is None


def test_the_jars_of_earlier_poms_go_unless_a_running_process_names_them(tmp_path):
    """A new pom resolves into a directory of its own; the older ones (about 50 MB each) are
    deleted, but not the one a broker still runs from."""
    from streameval.devkafka import prune_jars

    keep, legacy, old, used = (tmp_path / n for n in ("libs-new", "libs", "libs-old", "libs-used"))
    for directory in (keep, legacy, old, used, tmp_path / "libs-new.partial"):
        directory.mkdir()
        (directory / "kafka.jar").write_bytes(b"jar")
    (tmp_path / "pom.xml").write_text("<project/>")
    (tmp_path / "libs-link").symlink_to(old)  # not ours to follow
    code = "import sys, time; print('up', flush=True); time.sleep(60)"
    broker = subprocess.Popen(
        [sys.executable, "-c", code, "-cp", f"{used}/*"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert broker.stdout.readline() == "up\n"
        assert prune_jars(tmp_path, keep) == [legacy, old]
    finally:
        broker.kill()
        broker.wait()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "libs-link",
        "libs-new",
        "libs-new.partial",
        "libs-used",
        "pom.xml",
    ]
