"""The worker against a broker that requires SASL/SCRAM-SHA-512 over TLS and enforces ACLs
(the launcher's ``secured`` instance, with a CA and certificate made for the test): with the
right credentials it gives replay's numbers as on a plain broker; without them, with a wrong
password, or as a principal that may not write its outputs it stops with a message that says
what to change; and no password appears in a log line, an error message, ``/metrics`` or a
dead-letter header."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from streameval.devkafka import KafkaInstance, LauncherError
from streameval.topics import create_topics, load_topics

from tests.integration.test_worker import CONFIG, Deployment, _scrape

pytestmark = pytest.mark.launcher


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """The broker, and two users that may do anything to the topics (all named w…-…) and
    groups of the tests and write under their transactional ids (w… too) — the test of
    ``no-output`` then takes one right away — and a third, ``no-txn``, without the
    transactional ids."""
    try:
        broker = KafkaInstance.start(tmp_path_factory.mktemp("secured"), secured=True)
    except LauncherError as err:
        pytest.fail(f"no secured broker: {err}", pytrace=False)
    names = ("evaluator", "no-output", "no-txn", "least")  # least: its rights by the test
    users = {name: secrets.token_urlsafe(16) for name in names}
    for name, password in users.items():
        broker.add_user(name, password)
    allow = AclPermissionType.ALLOW
    bindings = [
        AclBinding(ResourceType.TOPIC, "w", ResourcePatternType.PREFIXED, "User:no-txn", "*",
                   AclOperation.ALL, allow),
        AclBinding(ResourceType.GROUP, "*", ResourcePatternType.LITERAL, "User:no-txn", "*",
                   AclOperation.ALL, allow),
    ]  # fmt: skip
    for name in ("evaluator", "no-output"):
        bindings += [
            AclBinding(ResourceType.TOPIC, "w", ResourcePatternType.PREFIXED, f"User:{name}",
                       "*", AclOperation.ALL, allow),
            AclBinding(ResourceType.GROUP, "*", ResourcePatternType.LITERAL, f"User:{name}",
                       "*", AclOperation.ALL, allow),
            AclBinding(ResourceType.TRANSACTIONAL_ID, "w", ResourcePatternType.PREFIXED,
                       f"User:{name}", "*", AclOperation.WRITE, allow),
            AclBinding(ResourceType.TRANSACTIONAL_ID, "w", ResourcePatternType.PREFIXED,
                       f"User:{name}", "*", AclOperation.DESCRIBE, allow),
        ]  # fmt: skip
    admin = AdminClient(broker.client())  # (kept: its futures need it alive)
    for future in admin.create_acls(bindings).values():
        future.result(30)
    broker.users = users
    yield broker
    broker.stop()


def _deployment(broker, tmp_path, stream, user: str | None, password: str | None = None):
    """Topics made as the super user; the worker's settings with ``user``'s credentials (none:
    no security settings at all)."""
    config = CONFIG
    if user is not None:
        password = broker.users[user] if password is None else password
        client = broker.client(user, password)
        config += "\n[worker.kafka]\n" + "".join(
            f'"{key}" = "{value}"\n' for key, value in client.items() if key != "bootstrap.servers"
        )
    return Deployment(broker.bootstrap, tmp_path, stream, config, client=broker.client())


@pytest.fixture
def deployments():
    made = []
    yield made
    for deployment in made:
        deployment.kill_all()


def _never_shows(texts: list[str], users: dict[str, str]) -> None:
    for text in texts:
        for password in users.values():
            assert password not in text


def test_with_its_credentials_a_worker_gives_replays_numbers(
    secured, tmp_path, stream, expected, deployments
):
    deployment = _deployment(secured, tmp_path, stream, "evaluator")
    deployments.append(deployment)
    deployment.produce()
    _, port = deployment.start_worker()
    assert deployment.wait_for(expected) == expected
    letters = deployment.dead_letters(7)
    assert len(letters) == 7
    headers = [f"{k}={v!r}" for letter in letters for k, v in letter.headers()]
    metrics = _scrape(port)
    deployment.stop_all()
    log = deployment.workers[0][2].read_text()
    _never_shows([log, metrics, "\n".join(headers)], secured.users)


def _fails(deployment, within: float = 90) -> str:
    process, _ = deployment.start_worker()
    try:
        process.wait(within)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError(deployment.workers[-1][2].read_text()[-3000:]) from None
    output = deployment.workers[-1][2].read_text()
    assert process.returncode == 1, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    return output


def test_without_security_settings_the_worker_says_what_to_set(
    secured, tmp_path, stream, deployments
):
    deployment = _deployment(secured, tmp_path, stream, None)
    deployments.append(deployment)
    started = time.monotonic()
    output = _fails(deployment, within=150)
    assert time.monotonic() - started < 120  # 30 s of closed connections, then the message
    assert "has closed every connection before answering for 30 s" in output, output[-2000:]
    assert "security.protocol" in output


def test_a_wrong_password_is_refused_without_being_shown(secured, tmp_path, stream, deployments):
    wrong = secrets.token_urlsafe(16)
    deployment = _deployment(secured, tmp_path, stream, "evaluator", password=wrong)
    deployments.append(deployment)
    output = _fails(deployment)
    assert "Kafka refused the worker's credentials" in output, output[-2000:]
    assert "sasl.username, sasl.password" in output
    _never_shows([output], {**secured.users, "wrong": wrong})


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_a_principal_that_may_not_write_the_outputs_is_told_which(
    secured, tmp_path, stream, deployments, guarantee
):
    deployment = _deployment(secured, tmp_path, stream, "no-output")
    deployment.env["STREAMEVAL_PROCESSING_GUARANTEE"] = guarantee
    deployments.append(deployment)
    metrics = deployment.prefix + "metrics"
    deny = AclBinding(ResourceType.TOPIC, metrics, ResourcePatternType.LITERAL, "User:no-output",
                      "*", AclOperation.WRITE, AclPermissionType.DENY)  # fmt: skip
    admin = AdminClient(secured.client())
    for future in admin.create_acls([deny]).values():
        future.result(30)
    deployment.produce()
    output = _fails(deployment)
    assert f"may not write to {metrics}" in output and "Grant it WRITE" in output, output[-2000:]
    _never_shows([output], secured.users)


def test_a_principal_without_its_transactional_ids_is_told_which_right_to_grant(
    secured, tmp_path, stream, deployments
):
    deployment = _deployment(secured, tmp_path, stream, "no-txn")
    deployment.env["STREAMEVAL_PROCESSING_GUARANTEE"] = "exactly_once"
    deployments.append(deployment)
    output = _fails(deployment)
    assert "Kafka refused the worker's transactions" in output, output[-2000:]
    assert "WRITE and DESCRIBE on the TransactionalId" in output
    assert 'processing_guarantee = "at_least_once"' in output
    _never_shows([output], secured.users)


def test_the_rights_operations_md_lists_are_enough_with_a_prefix_apart_from_the_app_id(
    secured, tmp_path, stream, expected, deployments
):
    """A principal given just the rights of docs/operations.md ("Security"), for a topic prefix
    that the app id does not start with: the worker gives replay's numbers under exactly-once,
    and `state reset` works once the transactional ids under the topic prefix are granted too
    (before, it says which to grant). Without CREATE, the worker names the topics to create and
    the command. (The topics' rights are granted by prefix, a superset of the table's
    per-topic ones: what this checks is the groups, the transactional ids and CREATE.)"""
    deployment = _deployment(secured, tmp_path, stream, "least")
    deployments.append(deployment)
    app = f"a{uuid.uuid4().hex[:8]}"  # not under the topic prefix (w…-)
    deployment.env["STREAMEVAL_APP_ID"] = app
    deployment.env["STREAMEVAL_PROCESSING_GUARANTEE"] = "exactly_once"
    operations = AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE
    admin = AdminClient(secured.client())
    _grant(admin, [(ResourceType.TOPIC, deployment.prefix, op) for op in operations])
    _grant(admin, [(ResourceType.GROUP, app, AclOperation.READ)])
    _grant(admin, [(ResourceType.TRANSACTIONAL_ID, app, op) for op in operations[1:]])
    output = _fails(deployment)
    assert "the worker's principal may not create the topics it lacks" in output, output[-2000:]
    assert f"streameval topics create --app-id {app} --prefix {deployment.prefix}" in output
    deployment.workers.pop()  # (ended, as it should)
    create_topics(admin, load_topics(deployment.prefix, app_id=app, partitions=3))
    deployment.produce()
    deployment.start_worker()
    assert deployment.wait_for(expected) == expected
    deployment.stop_all()
    log = deployment.workers[0][2].read_text()
    assert "refused" not in log.lower() and "AUTHORIZATION" not in log, log[-3000:]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("STREAMEVAL_")}
    reset = [sys.executable, "-m", "streameval.cli", "state", "reset", "--config",
             str(deployment.config), "--bootstrap", deployment.bootstrap, "--app-id", app,
             "--prefix", deployment.prefix, "--all-models"]  # fmt: skip
    done = subprocess.run(reset, env=environ, capture_output=True, text=True, timeout=180)
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert "Kafka refused the transactional id" in said and "Traceback" not in said, said
    assert f"with the prefix {deployment.prefix}{app} (the topic prefix, then app_id" in said
    start = deployment.prefix + app
    _grant(admin, [(ResourceType.TRANSACTIONAL_ID, start, op) for op in operations[1:]])
    done = subprocess.run(reset, env=environ, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    _never_shows([log, said, done.stdout + done.stderr], secured.users)


def _grant(admin, rights) -> None:
    """ALLOW ``least`` each (resource type, name prefix, operation) of ``rights``."""
    bindings = [AclBinding(kind, name, ResourcePatternType.PREFIXED, "User:least", "*", op,
                           AclPermissionType.ALLOW) for kind, name, op in rights]  # fmt: skip
    for future in admin.create_acls(bindings).values():
        future.result(30)
