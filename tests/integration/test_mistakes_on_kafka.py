"""The mistakes a worker meets only once Kafka answers, run as the console script a user runs:
a message that names the setting, a non-zero exit status and no traceback — from whichever of
its data-path processes meets the mistake first."""

from __future__ import annotations

import uuid

import pytest

from tests.test_mistakes import _run

pytestmark = pytest.mark.kafka


@pytest.mark.parametrize("processes", [1, 2])
def test_a_state_dir_that_is_a_file_stops_the_worker_saying_so(
    kafka_bootstrap, tmp_path, processes
):
    """Exactly-once keeps each process's transactional id under ``state_dir``, claimed after
    the topics are there: every process meets a file where a directory should be."""
    (tmp_path / "state").write_text("")
    app = f"statedir-{uuid.uuid4().hex[:8]}"
    code, output = _run(
        "worker",
        "--bootstrap",
        kafka_bootstrap,
        env={
            "STREAMEVAL_APP_ID": app,
            "STREAMEVAL_TOPIC_PREFIX": f"{app}-",
            "STREAMEVAL_STATE_DIR": str(tmp_path / "state"),
            "STREAMEVAL_METRICS_PORT": "0",
            "STREAMEVAL_PROCESSES": str(processes),
        },
        cwd=tmp_path,
    )
    assert code == 1, output
    assert f"state_dir = '{tmp_path / 'state'}'" in output, output
    assert "Point state_dir (or STREAMEVAL_STATE_DIR) at a directory" in output, output
    assert "NoneType: None" not in output, output  # (_run checks there is no traceback)
