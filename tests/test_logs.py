"""The worker's logging (streameval.logs) and its readiness and liveness (Pipeline.is_ready,
Pipeline.is_live): what the probes and the log lines say, without a broker. The worker with a
broker that goes away: tests/integration/test_health.py."""

from __future__ import annotations

import logging
import logging.config
import time

import orjson
import pytest
from streameval.app.lifecycle import defect
from streameval.app.output import KafkaErrors, KafkaRefused
from streameval.app.runner import Pipeline
from streameval.app.settings import SettingsError, load_settings
from streameval.logs import KAFKA_LOG, RateLimit, logging_config


@pytest.fixture
def restore_logging():
    root, loggers = logging.root, logging.Logger.manager.loggerDict
    saved = (root.level, list(root.handlers))
    levels = {name: logger.level for name, logger in loggers.items()
              if isinstance(logger, logging.Logger)}  # fmt: skip
    filters = list(KAFKA_LOG.filters)
    yield
    root.setLevel(saved[0])
    root.handlers[:] = saved[1]
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    KAFKA_LOG.filters[:] = filters


def test_json_lines_one_object_each_with_the_traceback(restore_logging, capfd):
    logging.config.dictConfig(logging_config("info", "json"))
    log = logging.getLogger("streameval.worker")
    log.info("assigned: %d input partitions", 9)
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("a step failed")
    logging.getLogger("faust.worker").info("[^Worker]: Starting...")  # debug only
    lines = [orjson.loads(line) for line in capfd.readouterr().err.splitlines()]
    assert [(line["level"], line["logger"], line["message"]) for line in lines] == [
        ("info", "streameval.worker", "assigned: 9 input partitions"),
        ("error", "streameval.worker", "a step failed"),
    ]
    assert "ValueError: boom" in lines[1]["exception"] and "exception" not in lines[0]
    assert lines[0]["time"].endswith("+00:00") and lines[0]["pid"] > 0


def test_text_lines_have_no_terminal_codes_and_faust_chatter_only_at_debug(restore_logging, capfd):
    logging.config.dictConfig(logging_config("info", "text"))
    logging.getLogger("streameval.worker").warning("drift alarm: model %s", "m")
    logging.getLogger("mode.services").info("[^-App]: Starting...")
    logging.getLogger("streameval.app.faust_app").info("[^--_Service]: Starting...")
    err = capfd.readouterr().err
    assert "\x1b" not in err
    assert err.count("\n") == 1 and "[WARNING] drift alarm: model m" in err
    logging.config.dictConfig(logging_config("debug", "text"))
    logging.getLogger("mode.services").debug("[^-App]: Starting...")
    assert "Starting..." in capfd.readouterr().err


def test_the_kafka_clients_say_each_problem_once_a_minute(restore_logging, capfd):
    logging.config.dictConfig(logging_config("info", "text"))
    for ms in range(20):  # as librdkafka logs a broker that is away: ~20 a second
        KAFKA_LOG.error("%s [%s] %s", "FAIL", "rdkafka#consumer-3",
                        f"[thrd:127.0.0.1:9092/1]: Connect to 127.0.0.1:9092 failed: "
                        f"Connection refused (after {ms}ms in state CONNECT)")  # fmt: skip
    KAFKA_LOG.warning("%s [%s] %s", "SESSTMOUT", "rdkafka#consumer-3", "session timed out")
    lines = capfd.readouterr().err.splitlines()
    assert len(lines) == 2 and "Connection refused" in lines[0] and "SESSTMOUT" in lines[1]


def test_a_problem_is_said_again_after_the_interval():
    now = [0.0]
    limit = RateLimit(every=60.0, clock=lambda: now[0])
    record = logging.LogRecord("k", logging.ERROR, "", 0, "broker %s down", ("1",), None)
    assert limit.filter(record) and not limit.filter(record)
    now[0] = 59.9
    assert not limit.filter(record)
    now[0] = 60.0
    assert limit.filter(record)


class _Error:
    def __init__(self, code: int) -> None:
        self._code = code

    def code(self) -> int:
        return self._code

    def __str__(self) -> str:
        return f"error {self._code}"


def test_ready_only_in_the_group_restored_reachable_and_not_stopping():
    from confluent_kafka import KafkaError

    settings, config = load_settings(None, bootstrap="127.0.0.1:1", shutdown_timeout_s=7)
    pipeline = Pipeline(settings, config, {"bootstrap.servers": "127.0.0.1:1"})
    assert pipeline.is_live and not pipeline.is_ready  # not in the group yet
    pipeline.ready.set()
    assert pipeline.is_ready
    pipeline.restoring = True  # partitions being restored (a rebalance)
    assert not pipeline.is_ready
    pipeline.restoring = False
    errors = pipeline._kafka_errors
    errors(_Error(KafkaError._ALL_BROKERS_DOWN))
    assert not pipeline.is_ready and pipeline.is_live  # waiting for Kafka: no restart helps
    errors.brokers({"brokers": {"127.0.0.1:1/1": {"state": "TRY_CONNECT"}}})
    assert not pipeline.is_ready
    errors.brokers({"brokers": {"127.0.0.1:1/1": {"state": "UP"}}})
    assert pipeline.is_ready
    before = time.monotonic()
    pipeline.stop()
    assert not pipeline.is_ready
    assert before + 7 <= pipeline.stop_by <= time.monotonic() + 7
    pipeline.failure = RuntimeError("the data path stopped")
    assert not pipeline.is_live


def test_errors_other_than_all_brokers_down_leave_it_reachable():
    from confluent_kafka import KafkaError

    errors = KafkaErrors()
    errors(_Error(KafkaError._TRANSPORT))  # one connection: librdkafka tries again
    assert errors.reachable
    errors.brokers({})  # statistics without brokers say nothing
    assert errors.reachable


def test_a_refusal_no_retry_cures_is_kept_with_what_to_change():
    from confluent_kafka import KafkaError

    errors = KafkaErrors()
    errors(_Error(KafkaError._TRANSPORT))
    assert errors.refused is None  # a broker down: waiting helps
    errors(_Error(KafkaError._AUTHENTICATION))
    assert "refused the worker's credentials" in errors.refused
    assert "sasl.username, sasl.password" in errors.refused
    errors(_Error(KafkaError._SSL))  # the first one is kept
    assert "credentials" in errors.refused
    other = KafkaErrors()
    other(_Error(KafkaError._SSL))
    assert "TLS handshake with Kafka failed" in other.refused and "ssl.ca.location" in other.refused


def test_a_record_refused_at_produce_bars_every_later_checkpoint():
    """Once librdkafka knows a topic is gone or forbidden, produce() raises at once and the
    record is never queued: the refusal must stick, so that no checkpoint (which would cover
    that record) is written after it, whoever tries — the shutdown or a revocation."""
    import pytest
    from confluent_kafka import KafkaError, KafkaException
    from streameval.app.changelog import ChangelogError
    from streameval.app.checkpoint import Checkpoints
    from streameval.app.output import Output, OutputError

    from tests.test_transactions import _NOWHERE

    class Refusing:
        def produce(self, *args, **kwargs):
            raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    output = Output(_NOWHERE, KafkaErrors())
    output.producer = Refusing()
    with pytest.raises(OutputError, match="may not write to w-metrics"):
        output.produce("w-metrics", b"{}")
    assert "may not write to w-metrics" in output.error
    checkpoints = Checkpoints(output, consumer=None, telemetry=None, durable=lambda *_: None)
    checkpoints.begin([], offsets=[object()])
    with pytest.raises(ChangelogError, match="without writing another checkpoint"):
        checkpoints.advance(wait=True)


def test_an_error_that_stops_the_worker_has_a_traceback_only_if_it_is_a_defect(
    restore_logging, capfd
):
    """A mistake a user can mend is said in one line; a defect keeps where it happened; a
    child's end (made, never raised) is one line. And a record logged "with" an exception
    outside any except block, as Faust's service framework logs a crash, has no "NoneType:
    None" line."""
    logging.config.dictConfig(logging_config("info", "text"))
    said = []
    for error in (KafkaRefused("Kafka refused"), SettingsError("state_dir = 'x': point it")):
        try:
            raise error
        except Exception as err:
            said.append(defect(err))
    try:
        {}["model"]
    except KeyError as err:
        said.append(defect(err))
        logging.getLogger("streameval.worker").error("stopped: %s", err, exc_info=err)
    said.append(defect(RuntimeError("data-path process 1 exited on its own (...)")))
    assert said == [False, False, True, False]
    logging.getLogger("mode").error("Crashed reason=%r", KeyError("x"), exc_info=True)
    err = capfd.readouterr().err
    assert "Traceback" in err and "KeyError: 'model'" in err
    assert "Crashed reason=KeyError('x')" in err and "NoneType: None" not in err


def test_a_models_refused_outcomes_are_said_at_once_then_at_most_once_a_minute(caplog, monkeypatch):
    """The worker said nothing of outcomes a model refused. Now it says the first at once,
    and then, at most once a minute, how many more and the latest reason."""
    from collections import Counter
    from types import SimpleNamespace

    from streameval.app.telemetry import Telemetry

    now = [1000.0]
    monkeypatch.setattr("streameval.app.runner.time", SimpleNamespace(monotonic=lambda: now[0]))
    engine = SimpleNamespace(rejected=Counter(), refusals={"m": ("label 'x' is over", 3)})
    worker = SimpleNamespace(telemetry=Telemetry(None, []), _said_refused={})
    worker.telemetry.exporter = SimpleNamespace(count_dropped=lambda *_: None)
    stage = SimpleNamespace(engine=engine)
    caplog.set_level(logging.WARNING, logger="streameval.worker")

    def said():
        lines = [r.getMessage() for r in caplog.records]
        caplog.clear()
        return lines

    Pipeline._outcomes_refused(worker, 0, stage)
    assert said() == [
        "model 'm' refused 3 outcomes: label 'x' is over (counted in "
        "streameval_dropped_records_total; its numbers leave them out)"
    ]
    engine.refusals["m"] = ("label 'y' is over", 1)
    now[0] += 30
    Pipeline._outcomes_refused(worker, 0, stage)
    assert said() == []  # within the minute: it waits, and its count grows meanwhile
    engine.refusals["m"] = ("label 'z' is over", 2)
    now[0] += 31
    Pipeline._outcomes_refused(worker, 0, stage)
    assert said() == [
        "model 'm' refused 2 more outcomes: label 'z' is over (counted in "
        "streameval_dropped_records_total; its numbers leave them out)"
    ]
    now[0] += 120
    Pipeline._outcomes_refused(worker, 0, stage)
    assert said() == [] and engine.refusals == {}  # nothing new, nothing said
    engine.refusals["m"] = ("label 'w' is over", 1)  # without an exporter: no counter claimed
    worker.telemetry.exporter = None
    now[0] += 60
    Pipeline._outcomes_refused(worker, 0, stage)
    assert said() == [
        "model 'm' refused 1 more outcome: label 'w' is over (its numbers leave them out)"
    ]
