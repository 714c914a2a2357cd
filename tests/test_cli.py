"""The console script is installed and answers."""

import subprocess
import sys

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
