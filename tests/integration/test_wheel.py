"""The built wheel, installed in a virtualenv outside the checkout, runs every command.

Nothing a command reads at run time may come from the source tree: the topic definitions,
the JSON Schemas, the broker's POM and logging template are package data. The commands run in
a scratch directory with the new virtualenv's interpreter, whose `streameval` is the wheel's
(checked first). The dependencies are not downloaded again: a ``.pth`` file puts the project
virtualenv's site-packages after the new one's, where the editable `streameval` is invisible
(its ``.pth`` hook only runs from a site directory).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.launcher

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 300):
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip
    assert done.returncode == 0, f"{args}:\n{done.stdout}\n{done.stderr}"
    return done


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str], Path]:
    """(the new virtualenv's bin/, the environment to run it in, a scratch directory)."""
    base = tmp_path_factory.mktemp("wheel")
    source = base / "source"  # a copy: an in-tree build would leave build/ in the checkout
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "pipeline", source / "pipeline",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))  # fmt: skip
    dist = base / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir",
          str(dist), str(source)], cwd=base, env=dict(os.environ))  # fmt: skip
    wheel = next(dist.glob("streameval-*.whl"))
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=base, env=dict(os.environ))
    python = venv / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = Path(subprocess.check_output([python, "-c", purelib], text=True).strip())
    (site / "project-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
          str(wheel)], cwd=base, env=dict(os.environ))  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "STREAMEVAL_"))}
    env["STREAMEVAL_CACHE"] = str(base / "cache")  # an empty cache: the POM is read again
    work = base / "work"
    work.mkdir()
    where = _run([str(python), "-c", "import streameval; print(streameval.__file__)"], work, env)
    assert where.stdout.strip().startswith(str(site)), where.stdout
    return venv / "bin", env, work


def test_the_installed_wheel_runs_every_command(installed):
    bin_dir, env, work = installed
    cli = str(bin_dir / "streameval")
    started = _run([cli, "kafka", "start", "--name", "wheel"], work, env, timeout=600)
    bootstrap = started.stdout.strip()
    try:
        assert bootstrap.startswith("127.0.0.1:"), started.stdout
        created = _run([cli, "topics", "create", "--bootstrap", bootstrap, "--partitions", "2"],
                       work, env)  # fmt: skip
        assert "created    streameval-join-changelog" in created.stdout, created.stdout
        described = _run([cli, "topics", "describe", "--bootstrap", bootstrap], work, env)
        assert "drift-alarms" in described.stdout, described.stdout

        port = _free_port()
        worker = subprocess.Popen(
            [cli, "worker", "--bootstrap", bootstrap, "--metrics-port", str(port)],
            cwd=work, env={**env, "STREAMEVAL_STATE_DIR": str(work / "state")},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            deadline, ready = time.monotonic() + 120, False
            while time.monotonic() < deadline and worker.poll() is None and not ready:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                        ready = json.loads(r.read())["ready"]
                except OSError:
                    pass
                time.sleep(0.5)
            assert ready, f"the installed worker did not become ready (exit {worker.poll()})"
        finally:
            worker.send_signal(signal.SIGTERM)
            out, _ = worker.communicate(timeout=60)
        assert worker.returncode == 0, out
    finally:
        _run([cli, "kafka", "stop", "--name", "wheel"], work, env)

    events = ROOT / "docs/examples/sample-events.jsonl"
    replayed = _run([cli, "replay", "--quiet", "--out", str(work / "records.jsonl"), str(events)],
                    work, env)  # fmt: skip
    kinds = {json.loads(line)["kind"] for line in (work / "records.jsonl").read_text().splitlines()}
    assert "metrics" in kinds, replayed.stderr
