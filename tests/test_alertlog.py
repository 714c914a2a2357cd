"""The example Alertmanager webhook receiver (`streameval alert-log`)."""

import json
import urllib.error
import urllib.request

import pytest
from streameval.alertlog import AlertLog

NOTIFICATION = {
    "version": "4",
    "status": "firing",
    "alerts": [
        {"status": "firing", "labels": {"alertname": "StreamevalDriftAlarm", "model": "nb"},
         "annotations": {"summary": "Drift alarm for model nb"}},
        {"status": "resolved", "labels": {"alertname": "StreamevalDeadLetters"},
         "annotations": {}},
    ],
}  # fmt: skip


def _post(port: int, body: bytes) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/alerts", data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


@pytest.fixture
def log():
    lines: list[str] = []
    receiver = AlertLog("127.0.0.1", 0, echo=lines.append, keep=3).start()
    receiver.lines = lines
    yield receiver
    receiver.stop()


def test_prints_one_line_per_alert_and_keeps_them(log):
    assert _post(log.port, json.dumps(NOTIFICATION).encode()) == 200
    assert log.lines == [
        "firing StreamevalDriftAlarm model=nb: Drift alarm for model nb",
        "resolved StreamevalDeadLetters",
    ]
    assert [a["labels"]["alertname"] for a in log.received()] == [
        "StreamevalDriftAlarm", "StreamevalDeadLetters"]  # fmt: skip


def test_keeps_only_the_latest(log):
    for _ in range(3):
        assert _post(log.port, json.dumps(NOTIFICATION).encode()) == 200
    assert len(log.received()) == 3


@pytest.mark.parametrize("body", [b"{not json", b"{}", b'{"alerts": 5}', b'{"alerts": [1, 2]}',
                                  b'{"alerts": [{"labels": "x"}]}'])  # fmt: skip
def test_refuses_what_is_not_a_notification_and_keeps_serving(log, body):
    assert _post(log.port, body) == 400
    assert log.received() == [] and log.lines == []
    assert _post(log.port, json.dumps(NOTIFICATION).encode()) == 200
