"""`streameval demo` end to end: it shows every model, catches the drift, and leaves nothing
running behind it."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from streameval.devkafka import free_port

pytestmark = pytest.mark.kafka

MODELS = ("hoeffding_tree", "naive_bayes", "logistic_regression", "no_change", "majority")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has exited
        return stat.read().split()[2] != "Z"


def test_demo_runs_catches_the_drift_and_cleans_up(kafka_bootstrap):
    result = subprocess.run(
        [sys.executable, "-m", "streameval.cli", "demo", "--duration", "60", "--bootstrap",
         kafka_bootstrap, "--metrics-port", str(free_port())],
        capture_output=True, text=True, timeout=240, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    final = output[output.rindex("final numbers") :]
    for model in MODELS:
        assert re.search(rf"{model}\s+│\s+\d+", final), f"{model} missing:\n{final}"
    alarms = re.findall(r"drift alarm: (\w+)", output)
    assert {"hoeffding_tree", "naive_bayes", "logistic_regression"} & set(alarms), output[-4000:]
    pid = int(re.search(r"worker pid (\d+)", output)[1])
    assert not _alive(pid), "the worker is still running"
    leftovers = subprocess.run(["pgrep", "-f", "streameval.cli worker"], capture_output=True,
                               text=True).stdout.split()  # fmt: skip
    assert str(pid) not in leftovers
