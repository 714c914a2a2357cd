"""The console script is installed and answers."""

import subprocess
import sys

import pytest
from click.testing import CliRunner

from pipeline import __version__
from pipeline.cli import main


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
    from pipeline.app.settings import SettingsError, load_settings

    config = tmp_path / "worker.toml"
    config.write_text("[worker]\nprocesses = 0\n")
    with pytest.raises(SettingsError, match=r"processes \(or \$STREAMEVAL_PROCESSES\) = 0"):
        load_settings(config)
    settings, _ = load_settings(config, processes=2)  # the command line wins
    assert settings.processes == 2
