"""Test-suite wide settings and the Kafka broker of the integration tests."""

import os
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, settings

from tests.streaming import make_config, make_stream, replay_finals

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
# A CI run is derandomized so that a red build is reproducible from its log alone.
settings.register_profile("ci", parent=settings.get_profile("default"), derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        done = subprocess.run(["docker", "info"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _no_broker(reason: str):
    message = f"no Kafka broker for the integration tests: {reason}"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)  # CI must never pass without its broker
    pytest.skip(message)


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory):
    """A real broker, in this order: ``$STREAMEVAL_TEST_BOOTSTRAP`` (an existing cluster), a
    Docker engine if one answers (testcontainers' Kafka module, KRaft), the project's own
    launcher (Apache Kafka from Maven Central)."""
    existing = os.environ.get("STREAMEVAL_TEST_BOOTSTRAP")
    if existing:
        yield existing
        return
    if _docker_answers():
        try:
            from testcontainers.kafka import KafkaContainer
        except ImportError:
            pass
        else:
            with KafkaContainer().with_kraft() as container:
                yield container.get_bootstrap_server()
            return
    from streameval.devkafka import KafkaInstance, LauncherError

    try:
        instance = KafkaInstance.start(tmp_path_factory.mktemp("kafka"), tie_to_parent=True)
    except LauncherError as err:
        _no_broker(str(err))
    try:
        yield instance.bootstrap
    finally:
        instance.stop()


@pytest.fixture(scope="session")
def stream():
    """The streaming tests' stream (tests/streaming.py)."""
    return make_stream(instances=3000)


@pytest.fixture(scope="session")
def expected(stream):
    """What `streameval replay` makes of it: the answer streaming must give."""
    return replay_finals(stream, make_config())
