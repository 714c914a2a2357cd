"""A worker whose Kafka goes away: it says so on /readyz (and stays live on /livez), it says it
once rather than twenty times a second, and SIGTERM still stops it within
``shutdown_timeout_s`` — without a final checkpoint, which a restart makes up for exactly (as
after a SIGKILL: tests/integration/test_worker.py). Kafka gone longer than the session timeout,
the group has gone on without the worker: it has dropped its partitions and everything it had
not sent (docs/architecture.md), and has nothing left to write when told to stop."""

from __future__ import annotations

import os
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import orjson
import pytest
from streameval.devkafka import KafkaInstance

from tests.integration.test_worker import Deployment

pytestmark = pytest.mark.kafka


def _status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return 0  # not listening (yet)


def _lines(log: Path) -> list[dict]:
    """The worker's log, one JSON object per line — nothing else (no librdkafka lines of its
    own, no terminal codes, no bare traceback)."""
    return [orjson.loads(line) for line in log.read_text().splitlines()]


def _until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_kafka_gone_not_ready_still_live_quiet_and_sigterm_stops_in_time(tmp_path, stream):
    kafka = KafkaInstance.start(tmp_path / "kafka")  # a broker of its own: the test kills it
    try:
        deployment = Deployment(kafka.bootstrap, tmp_path, stream)
        deployment.env["STREAMEVAL_SHUTDOWN_TIMEOUT_S"] = "10"
        deployment.env["STREAMEVAL_LOG_FORMAT"] = "json"  # every line, the clients' too
        deployment.produce(0.5)
        process, port = deployment.start_worker()
        log = deployment.workers[0][2]
        _until(lambda: _status(port, "/readyz") == 200, 120, "never ready")
        assert _status(port, "/livez") == 200
        assert _status(port, "/healthz") == 200  # the readiness, under its older name
        os.kill(kafka.pid, signal.SIGKILL)
        gone = time.monotonic()
        _until(lambda: _status(port, "/readyz") == 503, 30, "still ready without Kafka")
        assert _status(port, "/livez") == 200  # nothing to restart: it waits for Kafka
        time.sleep(max(0.0, 20 - (time.monotonic() - gone)))  # 20 s without Kafka
        said = [
            line["message"]
            for line in _lines(log)
            if line["logger"] == "streameval.kafka" or line["message"].startswith("Kafka:")
        ]
        assert 0 < len(said) <= 15, "\n".join(said)  # once each, not 20 lines a second
        asked = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait(60)
        took = time.monotonic() - asked
        text = log.read_text()
        assert took < 10 + 5, f"stopped {took:.1f} s after SIGTERM\n{text[-3000:]}"
        assert code == 0, text[-3000:]
        lines = _lines(log)
        assert not any("exception" in line for line in lines), text[-3000:]
        warned = [line["message"] for line in lines if line["level"] == "warning"]
        assert any(
            "without a final checkpoint" in said or "partitions lost" in said for said in warned
        ), text[-3000:]
        assert not any("Starting..." in line["message"] for line in lines)  # Faust's: debug
        deployment.workers.clear()
    finally:
        kafka.stop()
