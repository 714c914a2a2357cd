"""benchmarks/pipeline_throughput.py's comparisons: with --compare-code the worker of another
commit runs that commit's package, and a commit it cannot compare fairly is refused with a
reason; --compare-broker-jvm says what it needs and leaves the launcher as it was; the variants
of a comparison take turns at running first."""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_PATH = ROOT / "benchmarks" / "pipeline_throughput.py"
_SPEC = importlib.util.spec_from_file_location("pipeline_throughput", _PATH)
bench = sys.modules.setdefault("pipeline_throughput", importlib.util.module_from_spec(_SPEC))
_SPEC.loader.exec_module(bench)


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_the_worker_of_a_commit_imports_that_commits_package(tmp_path):
    """The parent of the last commit that changed the package: its files, not the working
    tree's, are what a worker started with its environment imports."""
    changed = _git("log", "--format=%H", "-1", "--", "pipeline/streameval")
    found = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet",
                            f"{changed}~1^{{commit}}"], capture_output=True)  # fmt: skip
    if found.returncode:
        pytest.skip("the clone does not hold the commit before the package's last change")
    touched = _git("diff", "--name-only", f"{changed}~1", changed, "--", "pipeline/streameval")
    name = next((f for f in touched.splitlines()
                 if (ROOT / f).exists() and _git("ls-tree", f"{changed}~1", "--", f)),
                None)  # fmt: skip
    if name is None:
        pytest.skip("the package's last change only added or removed files")
    if _git("diff", f"{changed}~1", "HEAD", "--", "pipeline/kernels"):
        pytest.skip("the commit before the package's last change has other kernels")
    commit, env = bench.code_of(f"{changed}~1", tmp_path)
    assert commit == _git("rev-parse", f"{changed}~1")
    imported = bench._imports(env)
    assert imported == str(tmp_path / f"code-{commit[:12]}" / "pipeline/streameval/__init__.py")
    copied = (tmp_path / f"code-{commit[:12]}" / name).read_text()
    assert copied.strip() == _git("show", f"{commit}:{name}")
    assert copied != (ROOT / name).read_text()  # (the working tree's is another)


def test_a_name_that_is_no_commit_is_refused_with_what_to_give(tmp_path):
    with pytest.raises(SystemExit, match=r"--compare-code no-such-rev: not a commit of .*HEAD~3"):
        bench.code_of("no-such-rev", tmp_path)


def test_a_commit_with_other_kernels_is_refused(tmp_path):
    # the parent of the last commit that changed the kernels has other kernels than HEAD
    if _git("rev-parse", "--is-shallow-repository") == "true":
        pytest.skip("a shallow clone may not hold the commit before the kernels' last change")
    changed = _git("log", "--format=%H", "-1", "--", "pipeline/kernels")
    with pytest.raises(SystemExit, match=r"the Rust kernels \(pipeline/kernels\) of .* differ"):
        bench.code_of(changed + "~1", tmp_path)
    assert not list(tmp_path.iterdir())  # nothing copied


def test_the_broker_jvm_comparison_says_what_it_needs(tmp_path, monkeypatch):
    args = argparse.Namespace(skip=[], latency_rate=None, compare_broker_jvm=1)
    monkeypatch.setenv("STREAMEVAL_BOOTSTRAP", "kafka-1:9092")
    with pytest.raises(SystemExit, match="starts local brokers of its own: unset STREAMEVAL_BOO"):
        bench.compare_broker_jvm(args, tmp_path)
    monkeypatch.delenv("STREAMEVAL_BOOTSTRAP")
    with pytest.raises(SystemExit, match=r"needs --latency-rate \(events/s\), or --skip latency"):
        bench.compare_broker_jvm(args, tmp_path)


def test_a_broker_of_other_jvm_options_leaves_the_launcher_as_it_was(tmp_path, monkeypatch):
    from streameval import devkafka

    kept, seen = devkafka.JVM_OPTIONS, []

    class Started:
        pid, bootstrap = 4321, "127.0.0.1:1"

        def stop(self):
            seen.append("stopped")

    def start(directory, log):
        seen.append(devkafka.JVM_OPTIONS)  # the options the JVM is started with
        (Path(directory) / "data").mkdir(parents=True)
        return Started()

    monkeypatch.setattr(devkafka.KafkaInstance, "start", staticmethod(start))
    monkeypatch.setattr(bench, "BROKER_PID", 99)
    with bench.broker_with_jvm(("-Xmx1G",), tmp_path / "kafka") as boot:
        assert (boot, bench.BROKER_PID, devkafka.JVM_OPTIONS) == ("127.0.0.1:1", 4321, kept)
    assert seen == [("-Xmx1G",), "stopped"]
    assert bench.BROKER_PID == 99  # the benchmark's own broker is measured again
    assert not (tmp_path / "kafka").exists()  # its events do not fill the disk


def test_the_variants_of_a_comparison_take_turns_at_running_first(capsys):
    order: list[str] = []

    def run(env):
        order.append(env["X"])
        return len(order)

    found = bench._alternated(3, {"a": {"X": "1"}, "b": {"X": "2"}}, run, lambda n: f"run {n}")
    assert order == ["1", "2", "2", "1", "1", "2"]
    assert found == {"a": [1, 4, 5], "b": [2, 3, 6]}
    assert "  round 2, b: run 3\n" in capsys.readouterr().out
