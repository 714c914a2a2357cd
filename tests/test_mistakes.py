"""The mistakes people make, each run as the console script a user runs: a message that says
what, which value and what to do, a non-zero exit status, and never a Python traceback (nor a
Kafka client's own lines on the terminal)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STREAMEVAL = str(Path(sys.executable).parent / "streameval")


def _run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("STREAMEVAL_")}
    done = subprocess.run([STREAMEVAL, *args], capture_output=True, text=True, timeout=120,
                          env={**environ, **(env or {})}, cwd=cwd)  # fmt: skip
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    assert not re.search(r"^%\d\|", output, re.M), output  # librdkafka's own stderr lines
    return done.returncode, output


def _replay(tmp_path: Path, toml: str, events: str = ""):
    """``streameval replay`` of ``events`` with ``toml`` as its configuration."""
    (tmp_path / "c.toml").write_text(toml)
    (tmp_path / "events.jsonl").write_text(events)
    return _run("replay", "--config", str(tmp_path / "c.toml"), str(tmp_path / "events.jsonl"))


def _worker(tmp_path: Path, toml: str):
    """``streameval worker`` with ``toml`` as its configuration (and no Kafka to reach)."""
    (tmp_path / "worker.toml").write_text(toml)
    return _run("worker", "--config", str(tmp_path / "worker.toml"), "--bootstrap", "127.0.0.1:1")


@pytest.mark.parametrize("address", ["127.0.0.1:1", "no-such-host.invalid:9092"])
def test_topics_create_with_a_wrong_or_unreachable_address(address):
    code, output = _run("topics", "create", "--bootstrap", address)
    assert code == 1
    assert f"Kafka at {address} did not answer" in output and "--bootstrap" in output


def test_a_second_worker_on_a_host_whose_metrics_port_is_taken(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, output = _run("worker", "--bootstrap", "127.0.0.1:1", "--metrics-host",
                            "127.0.0.1", "--metrics-port", str(port), cwd=tmp_path)  # fmt: skip
    assert code == 2
    assert f"metrics_port {port} on 127.0.0.1 cannot be used" in output
    assert "--metrics-port or STREAMEVAL_METRICS_PORT" in output


def test_the_demo_with_a_wrong_address_or_a_taken_port_says_so(tmp_path):
    """Both were a traceback: Kafka's, from creating the topics; the port's, from the worker
    it started (after a local Kafka had been started for nothing)."""
    code, output = _run("demo", "--bootstrap", "127.0.0.1:1", "--duration", "5", cwd=tmp_path)
    assert code == 1
    assert "Kafka at 127.0.0.1:1 did not answer" in output and "--bootstrap" in output
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, output = _run("demo", "--metrics-port", str(port), "--duration", "5", cwd=tmp_path)
    assert code == 2
    assert f"metrics_port {port} on 0.0.0.0 cannot be used" in output
    assert "choose another with --metrics-port" in output


def test_simulate_to_a_kafka_that_does_not_answer_says_so(tmp_path):
    """It said "produced 120 events" and exited 0: nothing checked that they were sent."""
    code, output = _run("simulate", "--instances", "10", "--bootstrap", "127.0.0.1:1",
                        cwd=tmp_path)  # fmt: skip
    assert code == 1
    assert "Kafka at 127.0.0.1:1 did not answer" in output and "produced" not in output


def test_streameval_kafka_that_is_not_json(tmp_path):
    env = {"STREAMEVAL_KAFKA": "security.protocol=SSL"}
    code, output = _run("worker", "--bootstrap", "127.0.0.1:1", env=env, cwd=tmp_path)
    assert code == 2
    assert "$STREAMEVAL_KAFKA is not valid JSON" in output
    assert """STREAMEVAL_KAFKA='{"security.protocol": "SSL"}'""" in output


def test_strings_where_numbers_belong_are_refused_every_one_at_once(tmp_path):
    code, output = _worker(tmp_path, '[worker]\nmetrics_port = "9464"\nidle_ms = "5"\n')
    assert code == 2
    assert "metrics_port = '9464': a string; write an integer without quotes" in output
    assert "idle_ms = '5': a string" in output
    code, output = _replay(tmp_path, 'publish_every = "100"\nmax_classes = "5"\n')
    assert code == 2
    assert "publish_every = '100': a string where an integer belongs" in output
    assert "(publish_every = 100)" in output and "max_classes = '5'" in output


def test_every_bad_estimator_of_a_list_is_named(tmp_path):
    toml = 'estimators = ["window:0", "cumulative", "fading:2", "windows:10"]\n'
    code, output = _replay(tmp_path, toml)
    assert code == 2
    for bad in ("'window:0' is not allowed", "'fading:2' is not allowed", "'windows:10' is not"):
        assert bad in output
    assert output.count("use 'cumulative'") == 1  # the forms allowed, said once


def test_an_unknown_worker_setting_points_at_a_section_that_exists(tmp_path):
    code, output = _worker(tmp_path, "[worker]\nexactly_once = true\n")
    assert code == 2
    assert "exactly_once = True: unknown setting" in output
    doc, section = re.search(r"listed in (docs/\w+\.md), '(\w+)'", output).groups()
    assert re.search(rf"^## {section}$", (ROOT / doc).read_text(), re.M)


@pytest.mark.parametrize(
    ("toml", "said"),
    [
        ("metric_port = 9464", "metric_port = 9464: unknown "
         "setting; did you mean 'metrics_port'?"),
        ("publish_interval = 2", "did you mean 'publish_interval_s'?"),  # its unit forgotten
        ("label_grace_ms = 100", "label_grace_ms = 100: an "
         "evaluation setting, not a worker one: it belongs in the [join] table, outside "
         "[worker]"),
        ("estimators = ['cumulative']", "it belongs at the top of the file, outside [worker]"),
        ("join = { label_ttl_ms = 5 }", "it belongs in a [join] table of its own"),
        ('topics_dir = "t"', "not a setting of the file: set $STREAMEVAL_TOPICS_DIR in the "
         "environment"),
        ('commit_interval_ms = "5s"', "commit_interval_ms = '5s': a string; write an integer "
         "number of milliseconds without quotes (commit_interval_ms = 5000)"),
    ],
)  # fmt: skip
def test_a_misspelt_or_misplaced_worker_setting_gets_what_was_meant(tmp_path, toml, said):
    code, output = _worker(tmp_path, f"[worker]\n{toml}\n")
    assert code == 2
    assert said in output
    assert "Input should be" not in output  # pydantic's words, once said better


def test_a_string_that_is_no_number_gets_no_advice_to_unquote_it(tmp_path):
    code, output = _worker(tmp_path, '[worker]\nprocesses = "two"\n')
    assert code == 2
    assert "processes = 'two': a string; write an integer without quotes" in output
    assert "processes = two" not in output  # not TOML either
    code, output = _replay(tmp_path, 'publish_every = "10s"\n')
    assert code == 2
    assert "a string where an integer belongs; write it without quotes" in output
    assert "publish_every = 10s" not in output


@pytest.mark.parametrize(
    ("toml", "said"),
    [
        ('estimators = "window:1000"', "estimators = 'window:1000': a list belongs here; write "
         'it as one (estimators = ["window:1000"])'),
        ('[join]\nlabel_ttl_ms = "7d"', "join.label_ttl_ms = '7d': a string where an integer "
         "number of milliseconds belongs; write it without quotes (label_ttl_ms = 604800000)"),
        ("[join]\nlabel_ttl = 3", "join.label_ttl = 3: unknown key; did you mean 'label_ttl_ms'?"),
        ("publish_evry = 10", "publish_evry = 10: unknown key; did you mean 'publish_every'?"),
        ("label_grace_ms = 5", "label_grace_ms = 5: not a key of this table; it belongs in the "
         "[join] table"),
        ("[delayed]\nece_bins = 3", "not a key of this table; it belongs in the [scores] table"),
        ("publish_interval_s = 2", "a worker setting; it belongs in the [worker] table"),
        ("[comparisons]\na = 'x'\nb = 'y'", "a list belongs here; write each as a table of its "
         "own ([[comparisons]])"),
        ('estimators = "window:1000, fading:0.999"', 'write it as one (estimators = '
         '["window:1000", "fading:0.999"])'),
        ('detectors = "page_hinkley"', 'write it as one (detectors = [{ type = "page_hinkley" '
         "}])"),
        ("[models.x.y]\nz = 1", "models.x.y = {'z': 1}: unknown key; check the spelling"),
        ("[models.m]\npositive = 1", "models.m.positive = 1: unknown key; did you mean "
         "'positive_label'?"),
        ("positive_label = 1", "not a key of this table; it belongs in a [models.<id>] table"),
        ('bootstrap = "kafka:9092"', "bootstrap = 'kafka:9092': a worker setting; it belongs in "
         "the [worker] table"),
        ("[wokrer]\nmetrics_port = 1", "wokrer = {'metrics_port': 1}: unknown key; did you mean "
         "'worker'?"),
    ],
)  # fmt: skip
def test_a_misspelt_or_misplaced_evaluation_key_gets_what_was_meant(tmp_path, toml, said):
    code, output = _replay(tmp_path, toml + "\n")
    assert code == 2
    assert said in output


@pytest.mark.parametrize(
    ("variable", "said"),
    [
        ("STREAMEVAL_EXPORT_MEASURES=accuracy,kappa", "$STREAMEVAL_EXPORT_MEASURES is not valid "
         """JSON; it holds a list, e.g. STREAMEVAL_EXPORT_MEASURES='["accuracy", "kappa"]'"""),
        ("STREAMEVAL_EXPORT_ESTIMATORS=window:1000",
         """from the environment as JSON: STREAMEVAL_EXPORT_ESTIMATORS='["window:1000"]'"""),
        ("STREAMEVAL_CHANGELOG_CONFIGS=min.insync.replicas=2", "it holds a table of settings, "
         """e.g. STREAMEVAL_CHANGELOG_CONFIGS='{"min.insync.replicas": "2"}'"""),
        ("STREAMEVAL_COMMIT_INTERVAL_MS=5s", "commit_interval_ms (or "
         "$STREAMEVAL_COMMIT_INTERVAL_MS) = '5s': an integer number of milliseconds belongs here "
         "(commit_interval_ms = 5000, or STREAMEVAL_COMMIT_INTERVAL_MS=5000)"),
        ("STREAMEVAL_PROCESSES=all", "processes (or $STREAMEVAL_PROCESSES) = 'all': an integer "
         "belongs here"),
        ("streameval_export_measures=auc f1", "STREAMEVAL_EXPORT_MEASURES='[\"auc\", \"f1\"]'"),
    ],
)  # fmt: skip
def test_a_variable_that_is_not_what_its_setting_takes_gets_an_example_of_its_own(
    tmp_path, variable, said
):
    name, value = variable.split("=", 1)
    code, output = _run("worker", "--bootstrap", "127.0.0.1:1", env={name: value}, cwd=tmp_path)
    assert code == 2
    assert said in output
    assert "security.protocol" not in output  # the example of STREAMEVAL_KAFKA alone


def test_stray_variables_are_named_with_what_was_meant():
    from streameval.app.settings import stray_variables

    said = stray_variables(
        {
            "STREAMEVAL_PROCESES": "2",
            "STREAMEVAL_LABEL_GRACE_MS": "0",
            "STREAMEVAL_QWXZ": "1",
            "streameval_proceses": "2",  # (read whatever its case, as the settings are)
            "streameval_processes": "2",  # a setting
            "STREAMEVAL_config": "w.toml",  # not the file: that one is read in capitals
            "STREAMEVAL_APP_ID": "fraud",  # a setting
            "STREAMEVAL_CONFIG": "w.toml",  # the file
            "STREAMEVAL_TEST_BOOTSTRAP": "k:9092",  # the test suite's
            "PROCESES": "2",  # not ours
        }
    )
    assert said == [
        "$STREAMEVAL_LABEL_GRACE_MS names no setting and is ignored; label_grace_ms is an "
        "evaluation setting, read from --config: it belongs in the [join] table",
        "$STREAMEVAL_PROCESES names no setting and is ignored; did you mean $STREAMEVAL_PROCESSES?",
        "$STREAMEVAL_QWXZ names no setting and is ignored (the settings are listed in "
        "docs/worker.md, 'Settings')",
        "$STREAMEVAL_config names no setting and is ignored (in this case: $STREAMEVAL_CONFIG)",
        "$streameval_proceses names no setting and is ignored; did you mean $STREAMEVAL_PROCESSES?",
    ]


def test_a_positive_label_of_the_wrong_type_is_named_as_the_thing_to_change(tmp_path):
    """TOML's positive_label = 1 against labels "1": every outcome was refused with the advice
    to send labels of one type, and the model's id, printed as rich markup, lost its
    brackets (in the table too)."""
    t0, lines = 1_767_225_600_000, []
    for i in range(20):
        lines += [
            f'{{"type": "prediction", "instance_id": "i{i}", "model_id": "fraud[v2]", '
            f'"ts": {t0 + 1000 * i}, "label": "1"}}',
            f'{{"type": "label", "instance_id": "i{i}", "ts": {t0 + 1000 * i + 10}, '
            f'"label": "{i % 2}"}}',
        ]
    toml = '[models."fraud[v2]"]\npositive_label = 1\n'
    code, output = _replay(tmp_path, toml, "\n".join(lines) + "\n")
    assert code == 0  # the outcomes are refused, and counted; the file is read to its end
    flat = " ".join(output.split())  # (rich folds long lines)
    assert "model 'fraud[v2]': its labels come as \"1\" but its positive_label is 1" in flat
    assert 'write positive_label = "1" in [models."fraud[v2]"]' in flat
    assert "send labels of one type" not in flat
    assert "model fraud[v2]: 20 outcomes refused (label_type_clash)" in flat
    # labels of the positive label's type but one: the data mixes types, not the config
    mixed = [
        line.replace('"label": "1"', '"label": 1').replace('"label": "0"', '"label": 0')
        for line in lines[:-1]
    ] + [lines[-1].replace('"label": "1"', '"label": "1"')]
    code, output = _replay(tmp_path, toml, "\n".join(mixed) + "\n")
    flat = " ".join(output.split())
    assert "send labels of one type" in flat and "write positive_label" not in flat, flat


def test_a_comparison_naming_a_model_that_never_appears_is_said(tmp_path):
    lines, t0 = [], 1_767_225_600_000  # 2026-01-01, in milliseconds
    for i in range(20):
        ts = t0 + 1000 * i
        lines += [
            f'{{"type": "instance", "instance_id": "i{i}", "ts": {ts}}}',
            f'{{"type": "prediction", "instance_id": "i{i}", "model_id": "champion", '
            f'"ts": {ts}, "label": "yes"}}',
            f'{{"type": "label", "instance_id": "i{i}", "ts": {ts + 10}, "label": "no"}}',
        ]
    toml = '[[comparisons]]\na = "champion"\nb = "challanger"\n'  # misspelt
    code, output = _replay(tmp_path, toml, "\n".join(lines) + "\n")
    assert code == 0  # the numbers of champion are right; the comparison is what is missing
    assert "comparison champion vs challanger: no outcome of 'challanger'" in output
    assert "models seen: champion" in output


def test_sigterm_while_the_worker_waits_for_an_unreachable_kafka_stops_it_cleanly(tmp_path):
    """An orchestrator stopping a worker that never reached Kafka (a wrong address, the
    cluster down): exit status 0 once the metadata request in progress gives up (at most
    10 s), a line saying so, no traceback."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("STREAMEVAL_")}
    (tmp_path / "worker.toml").write_text("[models.a]\n")
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [STREAMEVAL, "worker", "--config", str(tmp_path / "worker.toml"), "--bootstrap",
             "127.0.0.1:1", "--metrics-port", "0"],
            env={**environ, "STREAMEVAL_STATE_DIR": str(tmp_path / "state"),
                 "STREAMEVAL_PROCESES": "2"}, cwd=tmp_path,
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:  # (a wait ends early only if something else broke: the log says what)
            deadline = time.monotonic() + 60
            while "is not reachable" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert "is not reachable" in log.read_text(), log.read_text()
            stopped = time.monotonic()
            process.send_signal(signal.SIGTERM)
            assert process.wait(15) == 0, log.read_text()
        finally:
            process.kill()
    assert time.monotonic() - stopped < 12  # at most one metadata request of 10 s
    output = log.read_text()
    assert "SIGTERM before start-up was complete: stopping" in output
    assert "Traceback" not in output, output
    # a misspelt variable is said before Kafka is reached for, with the one it meant
    stray = "$STREAMEVAL_PROCESES names no setting and is ignored; did you mean $STREAMEVAL_PR"
    assert stray in output
    assert output.index(stray) < output.index("is not reachable")


def test_a_refused_kafka_setting_never_shows_a_password(tmp_path):
    code, output = _worker(
        tmp_path,
        '[models.a]\n[worker.kafka]\n"sasl.password" = "hunter2-secret"\n'
        '"isolation.level" = "read_uncommitted"\n',
    )
    assert code == 2
    assert "isolation.level" in output and "<hidden>" in output
    assert "hunter2-secret" not in output


def test_the_group_s_timing_is_set_in_one_place_and_checked_at_start_up(tmp_path):
    code, output = _worker(
        tmp_path, "[worker]\nsession_timeout_ms = 60000\nmax_poll_interval_ms = 30000\n"
    )
    assert code == 2 and "max_poll_interval_ms" in output
    assert "below session_timeout_ms (60000)" in output
    for key, setting in [
        ("max.poll.interval.ms", "max_poll_interval_ms"),
        ("session.timeout.ms", "session_timeout_ms"),
    ]:
        code, output = _worker(tmp_path, f'[worker.kafka]\n"{key}" = "600000"\n')
        assert code == 2 and f"'{key}' is the worker setting {setting}" in output
        assert f"STREAMEVAL_{setting.upper()}" in output
    code, output = _worker(
        tmp_path, "[worker]\nmax_poll_interval_ms = 100000\ntransaction_timeout_ms = 60000\n"
    )
    assert code == 2 and "max_poll_interval_ms (100000) is below it plus 65000" in output
    assert "transaction_timeout_ms" in output


@pytest.mark.parametrize(
    ("guarantee", "store"), [("at_least_once", "disk"), ("exactly_once", "memory")]
)
def test_a_state_dir_that_is_a_file_is_said_before_kafka(tmp_path, guarantee, store):
    """The disk store and exactly-once's transactional ids live under ``state_dir``: a file
    there stops the worker at start-up, before it reaches for Kafka (here none answers)."""
    (tmp_path / "state").write_text("")
    code, output = _run(
        "worker", "--bootstrap", "127.0.0.1:1", "--metrics-port", "0",
        env={"STREAMEVAL_STATE_DIR": str(tmp_path / "state"),
             "STREAMEVAL_PROCESSING_GUARANTEE": guarantee, "STREAMEVAL_STORE": store},
        cwd=tmp_path,
    )  # fmt: skip
    assert code == 2, output
    assert f"state_dir = '{tmp_path / 'state'}'" in output, output
    assert "Point state_dir (or STREAMEVAL_STATE_DIR) at a directory" in output, output
    assert "is not reachable" not in output and "NoneType: None" not in output, output


@pytest.mark.parametrize(
    "command",
    [
        ["topics", "create", "--prefix", "team/fraud-"],
        ["topics", "describe", "--prefix", "team/fraud-"],
        ["topics", "create", "--app-id", "fraud eval"],
        ["topics", "create", "--app-id", ""],
        ["produce", "EVENTS", "--prefix", "team/fraud-"],
        ["simulate", "--prefix", "team:fraud-"],
    ],
)
def test_a_prefix_or_app_id_kafka_would_refuse_is_named_before_kafka(tmp_path, command):
    """Every command that makes topic names of --prefix or --app-id refuses characters no
    topic name may have, naming the option; Kafka's own refusal came as "did not answer"."""
    (tmp_path / "events.jsonl").write_text("")
    command = [str(tmp_path / "events.jsonl") if c == "EVENTS" else c for c in command]
    code, output = _run(*command, "--bootstrap", "127.0.0.1:1")
    option = "--app-id" if "--app-id" in command else "--prefix"
    assert code == 2, output
    assert f"Invalid value for '{option}'" in output, output
    said = "at least one character" if "" in command else "has characters no Kafka topic"
    assert said in output, output


def test_kafka_refusing_a_request_is_not_said_to_be_unreachable():
    import click
    from confluent_kafka import KafkaError, KafkaException
    from streameval.cli_kafka import _kafka_errors

    for code, said in (
        (KafkaError.INVALID_REPLICATION_FACTOR, "Kafka at k:9092 refused: 3 is more than"),
        (KafkaError._TRANSPORT, "Kafka at k:9092 did not answer (3 is more than"),
        (KafkaError._INVALID_ARG, "the Kafka client failed (3 is more than"),
        (KafkaError._AUTHENTICATION, "Kafka at k:9092 refused the connection (3 is more than"),
        (KafkaError.NOT_CONTROLLER, "Kafka at k:9092 is not ready (3 is more than"),
        (KafkaError._WAIT_COORD, "Kafka at k:9092 is not ready (3 is more than"),
        (KafkaError._TIMED_OUT_QUEUE, "Kafka at k:9092 did not answer (3 is more than"),
    ):
        with pytest.raises(click.ClickException) as caught, _kafka_errors("k:9092"):
            raise KafkaException(KafkaError(code, "3 is more than the 1 broker"))
        assert caught.value.message.startswith(said), caught.value.message


@pytest.mark.parametrize(
    "command", [["topics", "create"], ["topics", "describe"], ["state", "show"], ["produce"]]
)
def test_a_kafka_client_setting_mistyped_is_said_as_such(tmp_path, command):
    """A -X key the Kafka client does not know fails before any request: the message says it
    is the client's setting, not that Kafka refused or did not answer."""
    (tmp_path / "events.jsonl").write_text(
        '{"type": "instance", "instance_id": "a", "ts": 1767225600000}\n'
    )
    events = [str(tmp_path / "events.jsonl")] if command == ["produce"] else []
    code, output = _run(*command, *events, "--bootstrap", "127.0.0.1:1",
                        "-X", "securty.protocol=SSL", cwd=tmp_path)  # fmt: skip
    assert code in (1, 2), output
    assert 'No such configuration property: "securty.protocol"' in output, output
    assert "did not answer" not in output and "refused" not in output, output


def test_the_topic_creation_command_offered_quotes_what_a_shell_would_split(tmp_path):
    """A changelog config value with a blank went into the offered command unquoted, so
    pasting it created the topics without that value."""
    import shlex

    from streameval.app.output import creation_refused
    from streameval.app.settings import WorkerSettings
    from streameval.topics import load_topics

    settings = WorkerSettings(
        state_dir=tmp_path, app_id="fraud", topic_prefix="team.",
        changelog_configs={"message.timestamp.type": "Create Time"},
    )  # fmt: skip
    missing = load_topics(app_id="fraud", prefix="team.")[:2]
    said = creation_refused(Exception("refused"), missing, settings)
    command = re.search(r"`(streameval topics create[^`]*)`", said)[1]
    assert shlex.split(command) == [
        "streameval", "topics", "create", "--app-id", "fraud", "--prefix", "team.",
        "--changelog-config", "message.timestamp.type=Create Time",
    ]  # fmt: skip


def test_a_positive_label_in_another_case_than_the_labels_is_said(tmp_path):
    """positive_label = "yes" for labels "Yes"/"No": precision, recall and F1 were null, and
    nothing said why."""
    t0, lines = 1_767_225_600_000, []
    for i in range(10):
        label = "Yes" if i % 2 else "No"
        lines += [
            f'{{"type": "prediction", "instance_id": "i{i}", "model_id": "churn", '
            f'"ts": {t0 + 1000 * i}, "label": "{label}"}}',
            f'{{"type": "label", "instance_id": "i{i}", "ts": {t0 + 1000 * i + 10}, '
            f'"label": "{label}"}}',
        ]
    code, output = _replay(tmp_path, '[models.churn]\npositive_label = "yes"\n',
                           "\n".join(lines) + "\n")  # fmt: skip
    assert code == 0, output
    flat = " ".join(output.split())
    assert "its outcomes name 'Yes', which differs from positive_label 'yes' only in case" in flat
    assert 'write positive_label = "Yes" in [models.churn]' in flat, flat
    code, output = _replay(tmp_path, '[models.churn]\npositive_label = "Yes"\n',
                           "\n".join(lines) + "\n")  # fmt: skip
    assert code == 0 and "positive_label of model" not in output, output


def test_a_switch_where_a_number_belongs_and_an_empty_state_dir_are_refused(tmp_path):
    """pydantic took a TOML switch for 0 or 1 (``metrics_port = false`` turned /metrics off
    without a word), and an empty ``state_dir`` (an unset shell variable expanded into
    ``STREAMEVAL_STATE_DIR=$DIR``) for the working directory, where the worker wrote."""
    toml = "[worker]\nmetrics_port = false\nprocesses = true\npublish_interval_s = true\n"
    code, output = _worker(tmp_path, toml)
    assert code == 2, output
    assert "metrics_port = false: true or false; write an integer" in output, output
    assert "processes = true: true or false; write an integer" in output, output
    assert "publish_interval_s = true: true or false; write a number of seconds" in output
    code, output = _worker(tmp_path, '[worker]\nstate_dir = ""\n')
    assert code == 2, output
    assert "state_dir (or $STREAMEVAL_STATE_DIR) = '': empty; name a directory" in output
    work = tmp_path / "work"
    work.mkdir()
    code, output = _run(
        "worker", "--bootstrap", "127.0.0.1:1", "--metrics-port", "0",
        env={"STREAMEVAL_STATE_DIR": ""}, cwd=work,
    )  # fmt: skip
    assert code == 2 and "state_dir (or $STREAMEVAL_STATE_DIR) = '': empty" in output, output
    assert not list(work.iterdir())  # nothing written where it was started


def test_numbers_and_switches_among_the_kafka_settings_are_taken_as_librdkafka_writes_them(
    tmp_path,
):
    from streameval.app.settings import load_settings

    (tmp_path / "w.toml").write_text(
        '[worker.kafka]\n"linger.ms" = 5\n"enable.idempotence" = true\n"client.id" = "007"\n'
        '"batch.size" = 1e6\n"retry.backoff.ms" = 100.0\n"x.ratio" = 0.5\n'
        '[worker.changelog_configs]\n"min.insync.replicas" = 2\n"retention.ms" = -1\n'
    )
    settings, _config = load_settings(tmp_path / "w.toml")
    assert settings.kafka == {
        "linger.ms": "5", "enable.idempotence": "true", "client.id": "007",
        "batch.size": "1000000", "retry.backoff.ms": "100", "x.ratio": "0.5",
    }  # fmt: skip
    assert settings.changelog_configs == {"min.insync.replicas": "2", "retention.ms": "-1"}


@pytest.mark.parametrize(
    "command",
    [["topics", "describe"], ["worker", "--metrics-port", "0"], ["demo", "--duration", "5"]],
)
def test_a_url_given_as_the_bootstrap_is_refused_at_once(command):
    """librdkafka cannot parse ``http://host:port`` and so reaches no broker: the commands
    said Kafka did not answer, after their wait, and the worker retried for ever."""
    code, output = _run(*command, "--bootstrap", "http://localhost:9092")
    assert code == 2, output
    assert "'http://localhost:9092' is a URL; a Kafka address is HOST:PORT" in output, output
    # said at once, not after waiting for Kafka
    assert "did not answer" not in output and "not reachable" not in output, output


def test_every_bootstrap_librdkafka_reads_is_taken(tmp_path):
    from streameval.app.settings import load_settings
    from streameval.clients import client_config

    for servers in ("[::1]:9092", "kafka", "SASL_SSL://k1:9093,k2:9093", "ssl://a:1, b:2"):
        assert client_config(servers)["bootstrap.servers"] == servers
        assert load_settings(bootstrap=servers)[0].bootstrap == servers


@pytest.mark.parametrize("command", ["replay", "worker"])
def test_a_configuration_file_that_is_not_utf8_is_said_so(tmp_path, command):
    """PowerShell 5's `>` writes UTF-16: a traceback of the UTF-8 decoder came out. A UTF-8
    byte order mark (Notepad's) is read past, as TOML readers do not."""
    (tmp_path / "events.jsonl").write_text(
        '{"type": "label", "instance_id": "i", "ts": 1767225600000, "label": "a"}\n'
    )
    target = ([str(tmp_path / "events.jsonl")] if command == "replay"
              else ["--bootstrap", "127.0.0.1:1", "--metrics-port", "0"])  # fmt: skip
    config = tmp_path / "c.toml"
    config.write_bytes("publish_every = 100\n".encode("utf-16"))
    code, output = _run(command, "--config", str(config), *target)
    assert code == 2, output
    assert f"configuration file '{config}' is UTF-16 text, not UTF-8" in output, output
    config.write_bytes(b"\xef\xbb\xbfpublish_every = 0\n")  # read past the mark: 0 is refused
    code, output = _run(command, "--config", str(config), *target)
    assert code == 2 and "publish_every = 0" in output and "not valid TOML" not in output, output


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"auto.offset.reset": "latest"}, "'auto.offset.reset' is set by the worker itself"),
        ({"group.id": "mine"}, "'group.id' is set by the worker itself (its group is app_id)"),
        ({"statistics.interval.ms": 0}, "'statistics.interval.ms' is set by the worker itself"),
        ({"heartbeat.interval.ms": 3000}, "'heartbeat.interval.ms' is set by the worker itself"),
        (
            {"enable.idempotence": False},
            "'enable.idempotence' = 'false': the worker sets it to true",
        ),
        ({"transaction.timeout.ms": 5000}, "is the worker setting transaction_timeout_ms"),
        ({"group.protocol": "consumer"}, "the worker's group uses the classic protocol"),
        (
            {"partition.assignment.strategy": "cooperative-sticky"},
            "the worker takes an eager strategy: range, roundrobin or both",
        ),
    ],
)
def test_a_kafka_setting_the_worker_relies_on_is_refused_not_overridden(given, said):
    """The worker's clients are given these whatever ``kafka`` says: a value there would be
    dropped without a word, so it is refused at start-up, with the reason."""
    from streameval.app.settings import SettingsError, load_settings

    with pytest.raises(SettingsError) as refused:
        load_settings(None, bootstrap="127.0.0.1:1", kafka=given)
    assert said in str(refused.value), str(refused.value)


def test_a_kafka_setting_may_repeat_a_value_the_worker_works_with():
    from streameval.app.settings import load_settings

    given = {
        "enable.idempotence": 1, "group.protocol": "classic",
        "partition.assignment.strategy": "roundrobin, range",
    }  # fmt: skip
    settings, _ = load_settings(None, bootstrap="127.0.0.1:1", kafka=given)
    assert settings.kafka["enable.idempotence"] == "1"


def test_the_kafka_settings_change_the_workers_client_defaults():
    """``kafka`` is passed through: a compression, a linger or a fetch wait given there is the
    one the worker's producers and consumer use (the worker's own values were written after
    them, so they were silently ignored); what the worker relies on stays its own."""
    import gc

    from streameval.app.output import KafkaErrors, Output, consumer_config
    from streameval.app.settings import load_settings
    from streameval.app.transactions import Transactions

    given = {"compression.type": "zstd", "linger.ms": 5, "fetch.wait.max.ms": 100}
    settings, _ = load_settings(None, bootstrap="127.0.0.1:1", kafka=given, app_id="fraud")
    client = {"bootstrap.servers": "127.0.0.1:1", **settings.kafka}
    errors = KafkaErrors()
    outputs = [Output(client, errors), Transactions(client, errors, "fraud-x", 30_000)]
    configs = [output._config for output in outputs]
    outputs.clear()
    gc.collect()  # their producers, which would go on calling 127.0.0.1:1 (an output is a cycle)
    for config in configs:
        assert config["compression.type"] == "zstd" and config["linger.ms"] == "5"
        assert config["enable.idempotence"] is True
        assert config["message.max.bytes"] == 67_108_864  # a default not given: the worker's
    assert configs[1]["transaction.timeout.ms"] == 30_000
    consumer = consumer_config(client, settings, errors, None)
    assert consumer["fetch.wait.max.ms"] == "100" and consumer["fetch.min.bytes"] == 65_536
    assert consumer["group.id"] == "fraud" and consumer["auto.offset.reset"] == "earliest"


#: settings of each kind a user may give the worker, with values librdkafka takes
PRODUCER_SAMPLE = {
    "compression.type": "zstd", "linger.ms": "5", "acks": "all", "batch.size": "100000",
    "queue.buffering.max.kbytes": "1024", "delivery.timeout.ms": "30000", "retries": "3",
    "batch.num.messages": "1000", "compression.level": "3", "request.timeout.ms": "20000",
}  # fmt: skip
CONSUMER_SAMPLE = {
    "fetch.wait.max.ms": "100", "fetch.min.bytes": "1", "queued.max.messages.kbytes": "1024",
    "max.partition.fetch.bytes": "100000", "fetch.max.bytes": "1000000", "check.crcs": "true",
    "queued.min.messages": "1000", "partition.assignment.strategy": "cooperative-sticky",
    "fetch.error.backoff.ms": "100", "auto.commit.interval.ms": "1000",
}  # fmt: skip


def _kind_warnings(make, settings: dict) -> list[str]:
    """The properties librdkafka says a client made with ``settings`` ignores (its CONFWARN
    lines: a producer's setting given to a consumer, or the other way round)."""
    import gc
    import logging

    lines: list[str] = []
    logger = logging.Logger("kinds")
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logger.addHandler(handler)
    client = make({"bootstrap.servers": "127.0.0.1:1", **settings, "logger": logger})
    client.poll(0.2)  # librdkafka hands its lines to the logger from poll
    if hasattr(client, "close"):
        client.close()
    del client
    gc.collect()
    found = (re.search(r"property (\S+) is a (?:producer|consumer) property", s) for s in lines)
    return sorted(m.group(1) for m in found if m)


def test_the_kinds_of_kafka_settings_are_librdkafkas():
    """Every setting of the samples is one librdkafka warns about on a client of the other
    kind, under a name (its own or an alias's) that the worker's tables hold."""
    from confluent_kafka import Consumer, Producer
    from streameval.clients import CONSUMER_ONLY, PRODUCER_ONLY

    assert not PRODUCER_ONLY & CONSUMER_ONLY
    assert set(PRODUCER_SAMPLE) <= PRODUCER_ONLY and set(CONSUMER_SAMPLE) <= CONSUMER_ONLY
    to_consumer = _kind_warnings(lambda c: Consumer({**c, "group.id": "g"}), PRODUCER_SAMPLE)
    assert len(to_consumer) == len(PRODUCER_SAMPLE) and set(to_consumer) <= PRODUCER_ONLY
    to_producer = _kind_warnings(Producer, CONSUMER_SAMPLE)
    assert len(to_producer) == len(CONSUMER_SAMPLE) and set(to_producer) <= CONSUMER_ONLY


def test_each_worker_client_takes_the_kafka_settings_of_its_kind():
    """One set of settings reaches all of the worker's clients: each takes those of its kind,
    so librdkafka has nothing to warn about (it did, once per client, for every producer
    setting a consumer was given: on stderr for the clients nobody polls)."""
    from confluent_kafka import Consumer
    from streameval.app.output import KafkaErrors, Output, consumer_config
    from streameval.app.settings import load_settings

    settings, _ = load_settings(None, bootstrap="127.0.0.1:1")
    given = {**PRODUCER_SAMPLE, **CONSUMER_SAMPLE}
    errors = KafkaErrors()
    assert _kind_warnings(lambda c: Output(c, errors).producer, given) == []
    made = lambda c: Consumer(consumer_config(c, settings, errors, lambda stats: None))  # noqa: E731
    assert _kind_warnings(made, given) == []
