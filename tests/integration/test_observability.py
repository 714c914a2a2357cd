"""The deployed Prometheus rules, Alertmanager route and Grafana dashboards against real series.

A worker evaluates the simulator's drifting stream on the test broker; a real Prometheus (from
the OS packages) scrapes it every second with the rules of deploy/prometheus, and sends alerts to
a real Alertmanager configured from deploy/alertmanager, whose webhook is `streameval alert-log`.
Then: the drift alert fires and reaches Alertmanager and its receiver; every recording rule
evaluates to data; every query of every dashboard panel, variable and annotation returns data.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from streameval.alertlog import AlertLog
from streameval.devkafka import free_port
from streameval.topics import create_topics, load_topics

from ..test_deploy import DASHBOARDS, DEPLOY, tool

pytestmark = pytest.mark.kafka
MODELS = ("hoeffding_tree", "naive_bayes", "no_change", "majority")
RATE, INSTANCES, DRIFT = 300, 9000, 3000  # 30 s of traffic, the drift after 10 s


def _get(url: str, timeout: float = 5) -> dict | list:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def _wait_until_ready(process: subprocess.Popen, url: str, log: Path, what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, f"{what} exited:\n{log.read_text()[-3000:]}"
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"{what} never got ready:\n{log.read_text()[-3000:]}")


class Prometheus:
    """Prometheus's HTTP API, for the queries the dashboards make."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}/api/v1/"

    def api(self, path: str, **params: str | float) -> dict | list:
        body = _get(self.base + path + "?" + urllib.parse.urlencode(params, doseq=True))
        assert body["status"] == "success", body
        return body["data"]

    def series(self, match: str, start: float, end: float) -> list[dict]:
        return self.api("series", **{"match[]": match}, start=start, end=end)

    def query(self, expr: str, start: float, end: float, instant: bool = False) -> list[dict]:
        if instant:
            return self.api("query", query=expr, time=end)["result"]
        return self.api("query_range", query=expr, start=start, end=end, step=1)["result"]


@pytest.fixture
def stack(kafka_bootstrap, tmp_path):
    """Topics, a worker, Prometheus, Alertmanager and the alert log; torn down afterwards."""
    from confluent_kafka.admin import AdminClient

    prefix = f"o{uuid.uuid4().hex[:8]}-"
    app_id = prefix + "app"
    create_topics(AdminClient({"bootstrap.servers": kafka_bootstrap}),
                  load_topics(prefix, partitions=3, app_id=app_id))  # fmt: skip
    processes: list[tuple[subprocess.Popen, Path]] = []

    def start(name: str, command: list[str], env: dict | None = None) -> subprocess.Popen:
        log = tmp_path / f"{name}.log"
        process = subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                                   env={**os.environ, **(env or {})})  # fmt: skip
        processes.append((process, log))
        return process

    alert_log = AlertLog("127.0.0.1", 0, echo=None).start()
    metrics_port, prometheus_port, alertmanager_port = free_port(), free_port(), free_port()

    worker = start("worker", [sys.executable, "-m", "streameval.cli", "worker", "--config",
                              str(DEPLOY / "streameval.toml")], env={
        "STREAMEVAL_BOOTSTRAP": kafka_bootstrap, "STREAMEVAL_TOPIC_PREFIX": prefix,
        "STREAMEVAL_APP_ID": app_id, "STREAMEVAL_METRICS_PORT": str(metrics_port),
        "STREAMEVAL_METRICS_HOST": "127.0.0.1"})  # fmt: skip

    # Alertmanager: the deployed route and receiver, sending at once, to the local alert log
    am = yaml.safe_load((DEPLOY / "alertmanager/alertmanager.yml").read_text())
    for route in [am["route"], *am["route"].get("routes", [])]:
        route.update(group_wait="1s", group_interval="1s")
    for receiver in am["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = f"http://127.0.0.1:{alert_log.port}/alerts"
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(am))
    # Debian names the binary prometheus-alertmanager
    alertmanager_bin = shutil.which("prometheus-alertmanager") or tool("alertmanager")
    alertmanager = start("alertmanager", [
        alertmanager_bin, f"--config.file={tmp_path / 'alertmanager.yml'}",
        f"--storage.path={tmp_path / 'am-data'}",
        f"--web.listen-address=127.0.0.1:{alertmanager_port}",
        "--cluster.listen-address="])  # fmt: skip

    # Prometheus: the deployed rules and jobs, every second, the worker as the only target
    prom = yaml.safe_load((DEPLOY / "prometheus/prometheus.yml").read_text())
    prom["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    prom["rule_files"] = [str(DEPLOY / "prometheus" / f) for f in prom["rule_files"]]
    prom["alerting"]["alertmanagers"][0]["static_configs"] = [
        {"targets": [f"127.0.0.1:{alertmanager_port}"]}]  # fmt: skip
    for job in prom["scrape_configs"]:
        port = metrics_port if job["job_name"] == "streameval" else prometheus_port
        job.pop("dns_sd_configs", None)
        job["static_configs"] = [{"targets": [f"127.0.0.1:{port}"]}]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(prom))
    prometheus = start("prometheus", [
        tool("prometheus"), f"--config.file={tmp_path / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp_path / 'prom-data'}",
        f"--web.listen-address=127.0.0.1:{prometheus_port}"])  # fmt: skip

    _wait_until_ready(alertmanager, f"http://127.0.0.1:{alertmanager_port}/-/ready",
                      tmp_path / "alertmanager.log", "Alertmanager")  # fmt: skip
    _wait_until_ready(prometheus, f"http://127.0.0.1:{prometheus_port}/-/ready",
                      tmp_path / "prometheus.log", "Prometheus")  # fmt: skip
    _wait_until_ready(worker, f"http://127.0.0.1:{metrics_port}/healthz",
                      tmp_path / "worker.log", "the worker")  # fmt: skip

    class Stack:
        pass

    s = Stack()
    s.bootstrap, s.prefix, s.tmp, s.alert_log = kafka_bootstrap, prefix, tmp_path, alert_log
    s.prometheus = Prometheus(prometheus_port)
    s.alertmanager = f"http://127.0.0.1:{alertmanager_port}/api/v2/"
    s.start = start
    try:
        yield s
    finally:
        for process, _ in processes:
            if process.poll() is None:
                process.terminate()
        for process, _ in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        alert_log.stop()


def _produce_bad_input(bootstrap: str, prefix: str) -> None:
    """Malformed messages (dead letters) and a label no model predicted (a dropped record)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for value in (b"{not json", b'{"instance_id": "x"}', b"[1, 2, 3]"):
        producer.produce(prefix + "predictions", value, b"x")
    label = {"instance_id": "never-predicted", "ts": int(time.time() * 1000), "label": 1}
    producer.produce(prefix + "labels", json.dumps(label).encode(), b"never-predicted")
    assert producer.flush(30) == 0


def _regex_escape(value: str) -> str:
    """As Grafana escapes each value of a multi-value variable inside a PromQL regex string
    (a pair is named "a|b": its "|" must not become an alternation)."""
    return re.sub(r"([\\^$*+?.()|\[\]{}])", r"\\\\\1", value)


def _resolve(expr: str, values: dict[str, str]) -> str:
    """Grafana's variable substitution: "All" of a multi-value variable is a regex alternation."""
    for name in sorted(values, key=len, reverse=True):  # $model_a before $model
        expr = expr.replace("${" + name + "}", values[name]).replace("$" + name, values[name])
    return expr.replace("$__rate_interval", "5s").replace("$__interval", "1s")


def _label_values(prometheus: Prometheus, query: str, start: float, end: float) -> list[str]:
    """Grafana's ``label_values(selector, label)`` against Prometheus's series API."""
    inner = query.strip().removeprefix("label_values(").removesuffix(")")
    selector, _, label = inner.rpartition(",")
    found = prometheus.series(selector.strip(), start, end)
    return sorted({s[label.strip()] for s in found if label.strip() in s})


def _has_numbers(result: list[dict]) -> bool:
    """Data, not only NaN: at least one sample of one series is a number."""
    samples = [v for series in result for v in series.get("values", [series.get("value")])]
    return any(v is not None and v[1] not in ("NaN", "+Inf", "-Inf") for v in samples)


def _unix(rfc3339: str) -> float:
    """Prometheus's activeAt (RFC 3339, nanoseconds) as Unix seconds."""
    stamp, _, fraction = rfc3339.rstrip("Z").partition(".")
    seconds = datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp()
    return seconds + float("0." + (fraction or "0"))


def _wait(condition, timeout: float, what: str, logs: Path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(1)
    worker = (logs / "worker.log").read_text()[-3000:]
    raise AssertionError(f"{what} did not happen within {timeout} s; worker log:\n{worker}")


def test_alerts_recording_rules_and_dashboards_on_real_series(stack):
    t0 = time.time()
    simulator = stack.start("simulator", [
        sys.executable, "-m", "streameval.cli", "simulate", "--realtime", "--rate", str(RATE),
        "--instances", str(INSTANCES), "--drift", str(DRIFT), "--delay", "exponential",
        "--delay-value", "1000", "--seed", "7", "--bootstrap", stack.bootstrap,
        "--prefix", stack.prefix, *[arg for m in MODELS for arg in ("--model", m)]])  # fmt: skip
    _produce_bad_input(stack.bootstrap, stack.prefix)
    prometheus = stack.prometheus

    # -- the drift alert fires in Prometheus, reaches Alertmanager and its webhook receiver -------
    drift_at = t0 + DRIFT / RATE  # the simulator starts after t0, so the drift is later still

    def drift_firing():  # for the injected drift, not a warm-up alarm of a learning model
        alerts = prometheus.api("alerts")["alerts"]
        return [a for a in alerts if a["labels"]["alertname"] == "StreamevalDriftAlarm"
                and a["state"] == "firing" and _unix(a["activeAt"]) >= drift_at]  # fmt: skip

    firing = _wait(drift_firing, 150, "the drift alert firing after the drift", stack.tmp)
    assert {a["labels"]["model"] for a in firing} <= set(MODELS)
    query = urllib.parse.urlencode({"filter": 'alertname="StreamevalDriftAlarm"'})
    received = _wait(lambda: _get(stack.alertmanager + "alerts?" + query), 30,
                     "Alertmanager receiving the drift alert", stack.tmp)  # fmt: skip
    assert received[0]["status"]["state"] == "active"
    annotations = received[0]["annotations"]
    assert annotations["description"]
    assert annotations["runbook_url"] == "docs/operations.md#streamevaldriftalarm"
    notified = _wait(lambda: [a for a in stack.alert_log.received()
                              if a["labels"]["alertname"] == "StreamevalDriftAlarm"], 30,
                     "the webhook receiving the drift alert", stack.tmp)  # fmt: skip
    assert notified[0]["status"] == "firing"

    assert simulator.wait(120) == 0, (stack.tmp / "simulator.log").read_text()[-3000:]
    time.sleep(5)  # a few more scrapes and rule evaluations after the last labels
    end = time.time()

    # -- every recording rule evaluates, and to data -----------------------------------------------
    groups = prometheus.api("rules")["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    broken = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not broken, broken
    recorded = [r["name"] for r in rules if r["type"] == "recording"]
    in_file = yaml.safe_load((DEPLOY / "prometheus/rules/recording.yml").read_text())
    assert len(recorded) == sum(len(g["rules"]) for g in in_file["groups"])
    empty = [name for name in recorded if not _has_numbers(prometheus.query(name, t0, end))]
    assert not empty, f"recording rules without data: {empty}"

    # -- every query of every dashboard returns data -----------------------------------------------
    problems = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        values: dict[str, str] = {}
        for variable in board["templating"]["list"]:
            if variable["type"] == "datasource":  # the Prometheus queried here
                continue
            query = _resolve(variable["query"]["query"], values)
            found = _label_values(prometheus, query, t0, end)
            if not found:
                problems.append(f"{path.name}: variable {variable['name']}: {query} has no values")
            values[variable["name"]] = "|".join(map(_regex_escape, found)) or "none"
        queries = [(p["title"], t["expr"], t.get("instant", False))
                   for p in board["panels"] for t in p.get("targets", [])]  # fmt: skip
        queries += [(a["name"], a["expr"], False) for a in board["annotations"]["list"]
                    if "expr" in a]  # fmt: skip
        for title, expr, instant in queries:
            resolved = _resolve(expr, values)
            if not _has_numbers(prometheus.query(resolved, t0, end, instant=instant)):
                problems.append(f"{path.name}: {title}: {resolved} returned no data")
    assert not problems, "\n".join(problems)
