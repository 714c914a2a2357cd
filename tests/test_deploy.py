"""The deployment files, checked without a Docker engine: docker-compose.yml against the Compose
Specification schema and against the files, ports and names it refers to; the Dockerfile linted;
Prometheus and Alertmanager configs checked by their own tools, every alert unit-tested by
``promtool test rules``; the Grafana dashboards as generated and as provisioned.

The tools (promtool, amtool, hadolint) are installed by ``make test`` (deploy/prometheus/
install-tools and the test extras); a missing tool fails these tests, it never skips them.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
COMPOSE = ROOT / "docker-compose.yml"
ALERTS = DEPLOY / "prometheus/rules/alerts.yml"
RECORDING = DEPLOY / "prometheus/rules/recording.yml"
ALERT_TESTS = DEPLOY / "prometheus/tests/alerts.test.yml"
DASHBOARDS = DEPLOY / "grafana/dashboards"


def tool(name: str) -> str:
    """The path of a tool the tests need; fails (never skips) when it is missing."""
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    assert found, f"{name} is not installed: run `make test` (deploy/prometheus/install-tools)"
    return found


def run(*command: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def interpolate(text: str) -> str:
    """Compose's ``${VAR:-default}`` / ``${VAR}`` interpolation, from this environment."""

    def value(match: re.Match) -> str:
        name, default = match.group(1), match.group(3) or ""
        return os.environ.get(name) or default

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:?-([^}]*))?\}", value, text)


def compose() -> dict:
    return yaml.safe_load(interpolate(COMPOSE.read_text()))


# -- docker compose ------------------------------------------------------------------------------


def test_compose_file_follows_the_compose_specification():
    schema = json.loads((ROOT / "tests/data/compose-spec.json").read_text())
    validator = jsonschema.Draft7Validator(schema)  # the schema's own draft
    validator.validate(compose())
    # and the schema does reject wrong files: the check is not vacuous
    for service, key, value in [("worker", "replica", 2), ("kafka", "portz", ["9092:9092"]),
                                ("grafana", "depends_on", "prometheus")]:  # fmt: skip
        broken = copy.deepcopy(compose())
        broken["services"][service][key] = value
        with pytest.raises(jsonschema.ValidationError):
            validator.validate(broken)


def test_compose_has_the_whole_stack():
    services = compose()["services"]
    stack = {"kafka", "worker", "simulator", "prometheus", "alertmanager", "grafana"}
    assert stack <= set(services)
    assert services["kafka"]["image"].startswith("apache/kafka:")  # the official image
    assert "broker,controller" in services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"]  # KRaft
    assert services["worker"]["deploy"]["replicas"] == 2  # two workers in one group
    assert "STREAMEVAL_APP_ID" not in services["worker"]["environment"]  # one group for both


def test_compose_references_exist():
    """Every build context, Dockerfile, bind-mounted file, service and named volume exists, and
    every image is pinned to a version (which image tags a registry holds cannot be checked
    offline; the pinned tags are the ones docs/operations.md names)."""
    doc = compose()
    services = doc["services"]
    for name, service in services.items():
        if "build" in service:
            build = service["build"]
            context = ROOT / (build if isinstance(build, str) else build.get("context", "."))
            dockerfile = build.get("dockerfile", "Dockerfile") if isinstance(build, dict) else (
                "Dockerfile")  # fmt: skip
            assert (context / dockerfile).is_file(), f"{name}: no {context / dockerfile}"
        image = service.get("image")
        assert image, f"{name} has no image"
        repository, _, tag = image.rpartition(":")
        assert repository and tag and tag != "latest", f"{name}: pin {image!r} to a version"
        if "build" not in service:
            assert re.fullmatch(r"v?\d+\.\d+\.\d+", tag), f"{name}: {image!r} is not a release tag"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith((".", "/")):
                assert (ROOT / source).exists(), f"{name} mounts {source}, which does not exist"
            else:
                assert source in doc.get("volumes", {}), f"{name}: undeclared volume {source}"
        for other in service.get("depends_on", {}):
            assert other in services, f"{name} depends on unknown service {other}"
    built = {s["image"] for s in services.values() if "build" in s}
    for name, service in services.items():
        if service["image"].startswith("streameval:"):
            assert service["image"] in built, f"{name} uses an image nothing builds"


def _published(service: dict) -> dict[int, int]:
    """Container port → host port of a service's published ports."""
    out = {}
    for entry in service.get("ports", []):
        host, _, container = str(entry).rpartition(":")
        out[int(container)] = int(host)
    return out


def test_compose_ports_and_addresses_agree():
    """Every address one piece uses to reach another names a service and a port it listens on."""
    services = compose()["services"]
    hosts = [port for s in services.values() for port in _published(s).values()]
    assert len(hosts) == len(set(hosts)), f"a host port is published twice: {hosts}"

    kafka = services["kafka"]["environment"]
    listening = {int(a.rsplit(":", 1)[1]) for a in kafka["KAFKA_LISTENERS"].split(",")}
    advertised = dict(a.split("://") for a in kafka["KAFKA_ADVERTISED_LISTENERS"].split(","))
    assert set(_published(services["kafka"])) <= listening
    for name, service in services.items():
        bootstrap = service.get("environment", {}).get("STREAMEVAL_BOOTSTRAP")
        if bootstrap:
            assert bootstrap == advertised["PLAINTEXT"], f"{name} bootstraps from {bootstrap}"

    worker = services["worker"]
    metrics_port = int(worker["environment"]["STREAMEVAL_METRICS_PORT"])
    assert str(metrics_port) in worker["expose"]
    prometheus = yaml.safe_load((DEPLOY / "prometheus/prometheus.yml").read_text())
    job = next(j for j in prometheus["scrape_configs"] if j["job_name"] == "streameval")
    (sd,) = job["dns_sd_configs"]
    assert sd["names"] == ["worker"] and sd["port"] == metrics_port
    (target,) = prometheus["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    host, port = target.split(":")
    assert host in services and int(port) in _published(services[host])

    datasource = yaml.safe_load(
        (DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text()
    )["datasources"][0]
    url = urlsplit(datasource["url"])
    assert url.hostname in services and url.port in _published(services[url.hostname])

    alertmanager = yaml.safe_load((DEPLOY / "alertmanager/alertmanager.yml").read_text())
    for receiver in alertmanager["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            url = urlsplit(hook["url"])
            command = services[url.hostname]["command"]
            assert command[0] == "alert-log" and command[command.index("--port") + 1] == str(
                url.port
            )
            assert str(url.port) in services[url.hostname]["expose"]


def test_compose_mounts_what_the_containers_read():
    services = compose()["services"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in services["worker"]["volumes"]}
    config = services["worker"]["command"][services["worker"]["command"].index("--config") + 1]
    assert config in mounts and (ROOT / mounts[config]).is_file()
    providers = DEPLOY / "grafana/provisioning/dashboards/streameval.yml"
    provider = yaml.safe_load(providers.read_text())
    path = provider["providers"][0]["options"]["path"]
    grafana = {v.split(":")[1]: v.split(":")[0] for v in services["grafana"]["volumes"]}
    assert (ROOT / grafana[path]).resolve() == DASHBOARDS.resolve()
    home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (DASHBOARDS / Path(home).relative_to(path)).is_file()


def test_the_compose_evaluation_config_loads():
    from streameval.app.settings import load_settings

    settings, config = load_settings(DEPLOY / "streameval.toml", bootstrap="kafka:19092")
    assert {"hoeffding_tree", "naive_bayes"} <= set(config.models)
    assert config.comparisons and settings.idle_ms == 3000


def test_dockerfile_lints_clean():
    run(tool("hadolint"), "Dockerfile")


# -- Prometheus and Alertmanager -----------------------------------------------------------------


def test_prometheus_config_and_rules_check():
    out = run(tool("promtool"), "check", "config", "deploy/prometheus/prometheus.yml")
    assert "2 rule files found" in out
    run(tool("promtool"), "check", "rules", str(RECORDING), str(ALERTS))


def test_every_alert_passes_its_unit_tests():
    out = run(tool("promtool"), "test", "rules", str(ALERT_TESTS))
    assert "SUCCESS" in out


def _alert_rules() -> list[dict]:
    return [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]


def _operations_sections() -> set[str]:
    """The anchors of docs/operations.md's headings, as GitHub and most renderers make them."""
    anchors = set()
    for line in (ROOT / "docs/operations.md").read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower().replace("`", "")
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def test_every_alert_has_a_unit_test_a_runbook_and_a_severity():
    tests = yaml.safe_load(ALERT_TESTS.read_text())["tests"]
    tested = {case["alertname"] for t in tests for case in t.get("alert_rule_test", [])
              if case.get("exp_alerts")}  # fmt: skip
    sections = _operations_sections()
    for rule in _alert_rules():
        name, annotations = rule["alert"], rule["annotations"]
        assert name in tested, f"{name} has no promtool test in which it fires"
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        assert set(annotations) == {"summary", "description", "runbook_url"}, name
        assert annotations["summary"] and len(annotations["description"]) > 80, name
        # its own section of docs/operations.md, relative to the repository root
        page, _, anchor = annotations["runbook_url"].partition("#")
        assert page == "docs/operations.md" and anchor == name.lower(), name
        assert anchor in sections, f"docs/operations.md has no section #{anchor} for {name}"


def test_recording_rules_are_named_level_metric_operations():
    """level:metric:operations (prometheus.io/docs/practices/rules): the level names the labels
    the result keeps (besides job), each sum is by (job, ...), the metric is a worker series."""
    rules = [r for g in yaml.safe_load(RECORDING.read_text())["groups"] for r in g["rules"]]
    for rule in rules:
        name, expr = rule["record"], rule["expr"]
        level, metric, operations = name.split(":")
        assert re.fullmatch(r"[a-z]+(_[a-z]+)*", level), name
        assert re.fullmatch(r"(streameval_[a-z_]+|up)", metric), name
        assert re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)*", operations), name
        groupings = re.findall(r"\bby \(([^)]*)\)", expr)
        assert groupings, f"{name} aggregates with an explicit by (...)"
        for grouping in groupings:
            kept = {label.strip() for label in grouping.split(",")} - {"le"}
            extra = set(rule.get("labels", {}))
            want = {"job"} if level == "job" else {"job", *level.split("_")} - extra
            assert kept == want, f"{name}: by ({grouping}) but the level says {sorted(want)}"


def test_the_issue_alerts_are_all_there():
    names = {r["alert"] for r in _alert_rules()}
    assert {"StreamevalDriftAlarm", "StreamevalWorseThanPersistent", "StreamevalKappaPlusLow",
            "StreamevalLabelCoverageLow", "StreamevalLabelsStopped", "StreamevalDeadLetters",
            "StreamevalConsumerLagHigh", "StreamevalWorkerDown"} <= names  # fmt: skip


def test_alertmanager_config_checks():
    out = run(tool("amtool"), "check-config", "deploy/alertmanager/alertmanager.yml")
    assert "SUCCESS" in out and "1 receivers" in out


def test_operations_doc_explains_every_alert_and_dashboard():
    text = (ROOT / "docs/operations.md").read_text()
    for rule in _alert_rules():
        assert f"`{rule['alert']}`" in text, f"docs/operations.md does not explain {rule['alert']}"
    for dashboard in DASHBOARDS.glob("*.json"):
        assert json.loads(dashboard.read_text())["title"] in text


# -- Grafana -------------------------------------------------------------------------------------


def _dashboards_module():
    sys.path.insert(0, str(DEPLOY / "grafana"))
    try:
        import dashboards

        return dashboards
    finally:
        sys.path.pop(0)


def test_committed_dashboards_are_what_the_generator_builds():
    built = _dashboards_module().render()
    committed = {p.name: p.read_text() for p in DASHBOARDS.glob("*.json")}
    assert committed == built, "run .venv/bin/python deploy/grafana/dashboards.py"


def _datasource_references(node, path=""):
    """Every ``datasource`` value in a dashboard, with where it is."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                yield f"{path}.{key}", value
            else:
                yield from _datasource_references(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _datasource_references(value, f"{path}[{i}]")


def test_dashboards_have_the_views_variables_and_datasource():
    uids = set()
    for path in DASHBOARDS.glob("*.json"):
        board = json.loads(path.read_text())
        uids.add(board["uid"])
        variables = {v["name"] for v in board["templating"]["list"]}
        if path.stem in {"overview", "delayed-labels", "comparison"}:
            assert "estimator" in variables, path.name
        if path.stem in {"overview", "delayed-labels"}:
            assert "model" in variables, path.name
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)), path.name
        for panel in board["panels"]:
            if panel["type"] == "row":
                continue
            assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"])
    assert len(uids) == 4
    overview = json.loads((DASHBOARDS / "overview.json").read_text())
    assert any("drift_alarms" in a.get("expr", "") for a in overview["annotations"]["list"])
    comparison = (DASHBOARDS / "comparison.json").read_text()
    assert '"value": 6.635' in comparison and '"value": -6.635' in comparison  # significance


def test_dashboards_take_the_datasource_from_a_variable():
    """Every query goes to ``${datasource}``, a datasource variable listing the Prometheus
    datasources: provisioned (Grafana ignores ``__inputs``), it falls back to the first of them,
    the one deploy/grafana/provisioning creates; imported, the import dialog asks for
    DS_PROMETHEUS and that becomes the variable's value."""
    provisioned = yaml.safe_load(
        (DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text()
    )["datasources"]
    assert [d["type"] for d in provisioned] == ["prometheus"]  # the variable's only choice
    for path in DASHBOARDS.glob("*.json"):
        text = path.read_text()
        board = json.loads(text)
        (wanted,) = board["__inputs"]
        assert wanted["name"] == "DS_PROMETHEUS" and wanted["type"] == "datasource"
        assert wanted["pluginId"] == "prometheus"
        required = {(r["type"], r["id"]) for r in board["__requires"]}
        panels = {("panel", p["type"]) for p in board["panels"] if p["type"] != "row"}
        assert {("grafana", "grafana"), ("datasource", "prometheus")} | panels == required
        variable, *others = board["templating"]["list"]
        assert variable["name"] == "datasource" and variable["type"] == "datasource"
        assert variable["query"] == "prometheus"
        assert variable["current"]["value"] == "${DS_PROMETHEUS}"
        assert text.count("${DS_PROMETHEUS}") == 2  # the variable's current text and value
        references = list(_datasource_references(board))
        assert len(references) > len(board["panels"]), path.name  # panels, targets, variables
        for where, datasource in references:
            if where.startswith(".annotations.list[0]"):  # Grafana's built-in annotations
                continue
            assert datasource == {"type": "prometheus", "uid": "${datasource}"}, (path, where)
        # the import dialog's substitution: the chosen datasource becomes the variable's value
        imported = json.loads(text.replace("${DS_PROMETHEUS}", "P1809F7CD0C75ACF3"))
        assert imported["templating"]["list"][0]["current"]["value"] == "P1809F7CD0C75ACF3"
        assert text.count("${datasource}") == json.dumps(imported).count("${datasource}")
        assert not any(v["type"] == "datasource" for v in others)


def test_the_significance_line_is_the_comparison_threshold():
    from streameval.core.compare import MCNEMAR_THRESHOLD

    assert _dashboards_module().MCNEMAR_99 == MCNEMAR_THRESHOLD


# -- the dashboards and rules use what the workers export by default -----------------------------


def _default_series() -> list[tuple[str, dict[str, str]]]:
    """Every series of a worker with the default settings that has evaluated, joined, dropped,
    dead-lettered, checkpointed and alarmed: name and labels of each sample."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.parser import text_string_to_metric_families
    from streameval.app.telemetry import build_info
    from streameval.exporter import Exporter
    from streameval.records import DriftAlarmRecord

    from .test_exporter import _latest, _maturity, _replayed, _with_scores

    registry = CollectorRegistry()
    exporter = Exporter(registry, detectors_of=lambda _: ["page_hinkley", "ratio_page_hinkley"])
    exporter.observe(_replayed())
    exporter.observe([_with_scores(r) for r in _latest("challenger")])  # a model with scores
    exporter.observe([DriftAlarmRecord("drift_alarm", "champion", 9, "final", "page_hinkley",
                                       101.0, 100.0, 7, 0.5, "i7", 8, 4, 6, "i4", 5, 0.2, 0.4,
                                       {"type": "page_hinkley"})])  # fmt: skip
    exporter.observe([_maturity("champion", ages=3)])  # a model with older cohorts
    exporter.observe_outcomes("champion", [1000.0, 4000.0])
    exporter.count_input(10)
    exporter.count_dropped("expired_unlabelled", "champion")
    exporter.count_dropped("class_limit", "champion")  # an outcome the model refused
    exporter.count_dead_letters("not_json")
    exporter.count_skipped_batch("join")
    exporter.set_pending(3)
    exporter.set_store(100, 1, 1, 10)
    exporter.set_checkpoint(0.5, 0.01)
    exporter.observe_transaction(0.2)
    exporter.set_lag("labels", "0", 5)
    exporter.set_internal_lag("join", "0", 2)
    exporter.set_build_info(build_info("streameval", "0123456789abcdef"))
    text = exporter.scrape().decode()  # what /metrics serves
    return [(s.name, s.labels) for f in text_string_to_metric_families(text) for s in f.samples]


_SELECTOR = re.compile(r"(?<![\w:])(streameval_\w+)(?![\w:])\s*(?:\{([^}]*)\})?")
_MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
#: the labels whose values the export_* settings choose
_SELECTED = {"measure", "view", "estimator", "class", "bin", "stage", "statistic"}
_RULE_NAME = re.compile(r"(?<![\w:])([a-z_]+:[a-z0-9_]+:[a-z0-9_]+)(?![\w:])")


def _matches(labels: dict[str, str], matchers: list[tuple[str, str, str]]) -> bool:
    for label, op, value in matchers:
        have = labels.get(label, "")
        found = {
            "=": have == value,
            "!=": have != value,
            "=~": bool(re.fullmatch(value, have)),
            "!~": not re.fullmatch(value, have),
        }[op]
        if not found:
            return False
    return True


def _unexported(expr: str, series: list[tuple[str, dict[str, str]]]) -> list[str]:
    """The selectors of ``expr`` that select no series the defaults export; a regex that lists
    measures, views or estimators (``measure=~"accuracy|p_maj"``) must find every one of them.
    Matchers on dashboard variables (``$model``) and on the labels Prometheus adds to a target
    (job, instance) match anything."""
    problems = []
    for name, inside in _SELECTOR.findall(expr):
        matchers = [m for m in _MATCHER.findall(inside or "")
                    if "$" not in m[2] and m[0] not in {"job", "instance"}]  # fmt: skip
        candidates = [labels for n, labels in series if n == name]
        if not any(_matches(labels, matchers) for labels in candidates):
            problems.append(f"{name}{{{inside}}}")
            continue
        for i, (label, op, value) in enumerate(matchers):
            if label in _SELECTED and op == "=~" and re.fullmatch(r"[\w.]+(\|[\w.]+)+", value):
                others = matchers[:i] + matchers[i + 1 :]
                for word in value.split("|"):
                    if not any(_matches(labels, [*others, (label, "=", word)])
                               for labels in candidates):  # fmt: skip
                        problems.append(f'{name}{{{label}="{word}", ...}}')
    return problems


def test_dashboards_and_rules_use_only_series_the_defaults_export():
    """The default cardinality budget (docs/operations.md, "Cardinality") leaves out most
    measures, classes and bins; no panel, variable, annotation, recording rule or alert may
    depend on one of those."""
    series = _default_series()
    recorded = {r["record"] for g in yaml.safe_load(RECORDING.read_text())["groups"]
                for r in g["rules"]}  # fmt: skip
    expressions = [(f"recording rule {r['record']}", r["expr"]) for g in
                   yaml.safe_load(RECORDING.read_text())["groups"] for r in g["rules"]]  # fmt: skip
    expressions += [(f"alert {r['alert']}", r["expr"]) for r in _alert_rules()]
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        expressions += [(f"{path.name}: variable {v['name']}", v["query"]["query"])
                        for v in board["templating"]["list"] if v["type"] == "query"]  # fmt: skip
        expressions += [(f"{path.name}: {p['title']}", t["expr"]) for p in board["panels"]
                        for t in p.get("targets", [])]  # fmt: skip
        expressions += [(f"{path.name}: annotation {a['name']}", a["expr"])
                        for a in board["annotations"]["list"] if "expr" in a]  # fmt: skip
    assert len(expressions) > 50
    problems = [f"{where}: {problem}" for where, expr in expressions
                for problem in _unexported(expr, series)]  # fmt: skip
    problems += [f"{where}: {name} is not a recording rule" for where, expr in expressions
                 for name in _RULE_NAME.findall(expr) if name not in recorded]  # fmt: skip
    assert not problems, "\n".join(problems)
