"""The console script is installed and answers."""

import subprocess
import sys

import pytest
from click.testing import CliRunner
from streameval import __version__
from streameval.cli import main


def test_version():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.output


def test_console_script_is_installed():
    bin_dir = __import__("pathlib").Path(sys.executable).parent
    out = subprocess.run([bin_dir / "streameval", "--help"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "Online evaluation of streaming classifiers" in out.stdout


def test_a_worker_setting_that_makes_no_sense_is_named_at_start_up(tmp_path):
    from streameval.app.settings import SettingsError, load_settings

    config = tmp_path / "worker.toml"
    config.write_text("[worker]\nprocesses = 0\n")
    with pytest.raises(SettingsError, match=r"processes \(or \$STREAMEVAL_PROCESSES\) = 0"):
        load_settings(config)
    settings, _ = load_settings(config, processes=2)  # the command line wins
    assert settings.processes == 2


def _hide(monkeypatch, module: str) -> None:
    """As if ``module`` were not installed, for the CLI's check of optional dependencies."""
    import importlib.util

    find_spec = importlib.util.find_spec

    def hidden(name, *args):
        return None if name == module else find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", hidden)


@pytest.mark.parametrize(
    ("args", "extra"),
    [(["simulate", "--out", "x.jsonl"], "simulate"), (["demo", "--duration", "1"], "simulate")],
)
def test_a_missing_extra_is_named_with_its_install_line(monkeypatch, args, extra):
    _hide(monkeypatch, "river")
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert f"pip install 'streameval[{extra}]'" in result.output


def test_plot_without_matplotlib_says_which_extra(monkeypatch, tmp_path):
    _hide(monkeypatch, "matplotlib")
    events = tmp_path / "e.jsonl"
    events.write_text("")
    result = CliRunner().invoke(main, ["replay", "--plot", str(tmp_path / "p.png"), str(events)])
    assert result.exit_code == 1
    assert "pip install 'streameval[plot]'" in result.output


def test_a_broker_that_does_not_answer_is_named_not_a_traceback():
    """`topics describe` against a wrong address (nothing listens on port 1)."""
    result = CliRunner().invoke(main, ["topics", "describe", "--bootstrap", "127.0.0.1:1"])
    assert result.exit_code == 1
    assert "Kafka at 127.0.0.1:1 did not answer" in result.output
    assert "streameval kafka start" in result.output
    assert isinstance(result.exception, SystemExit)  # a clean exit, not an exception


def test_a_topics_dir_without_topics_toml_is_named_at_start(monkeypatch, tmp_path):
    monkeypatch.setenv("STREAMEVAL_TOPICS_DIR", str(tmp_path))
    for args in (["topics", "describe"], ["worker"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, result.output
        assert f"STREAMEVAL_TOPICS_DIR={tmp_path} has no topics.toml" in result.output


def test_state_reset_asks_what_to_reset():
    result = CliRunner().invoke(main, ["state", "reset", "--app-id", "fraud"])
    assert result.exit_code == 2
    assert "name what to reset: --join, --model NAME, --all-models" in result.output
