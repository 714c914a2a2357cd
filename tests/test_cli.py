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


@pytest.mark.parametrize("option", ["--out", "--plot"])
def test_replay_names_a_missing_output_folder_before_it_runs(tmp_path, option):
    """Both used to be a traceback — the plot's after the whole replay had run."""
    events = tmp_path / "events.jsonl"
    events.write_text('{"type": "instance", "instance_id": "i", "ts": 1767225600000}\n')
    target = tmp_path / "missing" / "x.png"
    out = tmp_path / "records.jsonl"
    args = ["replay", str(events), option, str(target)]
    result = CliRunner().invoke(main, args + ([] if option == "--out" else ["--out", str(out)]))
    assert result.exit_code == 2, result.output
    assert f"the folder {tmp_path / 'missing'} does not exist" in result.output
    assert option in result.output and isinstance(result.exception, SystemExit)
    assert not out.exists()  # nothing ran


def test_replay_refuses_a_plot_it_cannot_write_before_it_runs_and_names_the_one_it_writes(
    tmp_path,
):
    """``--plot plot.txt`` was a traceback once the whole replay had run; ``--plot plot``
    wrote plot.png and said "plot written to plot"."""
    pytest.importorskip("matplotlib")
    events = tmp_path / "events.jsonl"
    events.write_text(
        '{"type": "prediction", "instance_id": "i", "model_id": "m", "ts": 1767225600000, '
        '"label": "a"}\n{"type": "label", "instance_id": "i", "ts": 1767225600001, '
        '"label": "a"}\n'
    )
    out = tmp_path / "records.jsonl"
    args = ["replay", str(events), "--out", str(out), "--plot"]
    refused = CliRunner().invoke(main, [*args, str(tmp_path / "plot.txt")])
    assert refused.exit_code == 2, refused.output
    assert "a picture cannot be written as .txt; end its name with .png" in refused.output
    latex = CliRunner().invoke(main, [*args, str(tmp_path / "plot.pgf")])  # (it needs LaTeX)
    assert latex.exit_code == 2 and "cannot be written as .pgf" in latex.output, latex.output
    assert not out.exists()  # nothing ran
    written = CliRunner().invoke(main, [*args, str(tmp_path / "plot")])
    assert written.exit_code == 0, written.output
    assert (tmp_path / "plot.png").is_file()
    assert f"plot written to {tmp_path / 'plot.png'}" in written.output.replace("\n", "")


def test_a_plot_named_with_a_trailing_dot_is_written_as_png(tmp_path):
    """``--plot a.`` wrote ``a..png``: the dot has no suffix after it, and was kept."""
    pytest.importorskip("matplotlib")
    from streameval.cli import _picture

    assert _picture(tmp_path / "a.") == tmp_path / "a.png"
    assert _picture(tmp_path / "a") == tmp_path / "a.png"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "is empty"),
        ("\n\n", "has no events"),
        ('{"type": "label"}\n[1]\n', "has no events: 2 lines, 2 of them malformed"),
    ],
)
def test_replay_of_a_file_without_events_fails_saying_so(tmp_path, text, says):
    """An empty export or the wrong file ran to an empty plot and exit status 0."""
    events = tmp_path / "events.jsonl"
    events.write_text(text)
    result = CliRunner().invoke(main, ["replay", str(events), "--out", str(tmp_path / "r")])
    assert result.exit_code == 1, result.output
    assert f"{events} {says}" in result.output
    assert "Traceback" not in result.output


def test_produce_names_a_missing_file_a_malformed_line_and_a_broker_that_does_not_answer(
    tmp_path,
):
    """Each a message and a non-zero exit, never a traceback; a malformed line stops it before
    it connects (nothing is sent), naming the line."""
    missing = CliRunner().invoke(main, ["produce", str(tmp_path / "nope.jsonl")])
    assert missing.exit_code == 2 and "does not exist" in missing.output
    events = tmp_path / "events.jsonl"
    label = '{"type": "label", "instance_id": "i", "ts": 1767225600000, "label": "a"}'
    events.write_text(f"{label}\n\n{label[:-1]}, 'x': 1}}\n")
    args = ["produce", str(events), "--bootstrap", "127.0.0.1:1"]
    malformed = CliRunner().invoke(main, args)
    assert malformed.exit_code == 1, malformed.output
    assert f"{events} line 3: not valid JSON" in malformed.output
    assert "nothing was sent" in malformed.output and "did not answer" not in malformed.output
    events.write_text(label + "\n")
    unreachable = CliRunner().invoke(main, args)
    assert unreachable.exit_code == 1, unreachable.output
    assert "Kafka at 127.0.0.1:1 did not answer" in unreachable.output
    for result in (missing, malformed, unreachable):
        assert isinstance(result.exception, SystemExit), result.exception


def test_produce_takes_the_users_settings_over_its_own(tmp_path, monkeypatch):
    """Its producer is idempotent and lingers 20 ms unless -X says otherwise: a cluster whose
    ACLs do not grant idempotent writes needs ``-X enable.idempotence=false``, which was
    replaced by true without a word. A consumer's setting does not reach it."""
    import confluent_kafka
    from streameval.produce import produce_config

    client = {"bootstrap.servers": "k:9092"}
    assert produce_config(client) == {**client, "linger.ms": 20, "enable.idempotence": True}
    mine = {**client, "enable.idempotence": "false", "linger.ms": "5", "fetch.min.bytes": "1"}
    assert produce_config(mine) == {**client, "enable.idempotence": "false", "linger.ms": "5"}

    built = []  # the command's producer, as built from -X (it stops at the metadata request)

    class Recorded:
        def __init__(self, config):
            built.append(config)

        def list_topics(self, timeout):
            raise confluent_kafka.KafkaException(
                confluent_kafka.KafkaError(confluent_kafka.KafkaError._TRANSPORT)
            )

    monkeypatch.setattr(confluent_kafka, "Producer", Recorded)
    events = tmp_path / "events.jsonl"
    events.write_text('{"type": "label", "instance_id": "i", "ts": 1767225600000, "label": "a"}\n')
    args = ["produce", str(events), "--bootstrap", "127.0.0.1:1", "-X", "enable.idempotence=false"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert len(built) == 1, result.output
    assert built[0]["enable.idempotence"] == "false" and built[0]["linger.ms"] == 20


def test_state_reset_asks_what_to_reset():
    result = CliRunner().invoke(main, ["state", "reset", "--app-id", "fraud"])
    assert result.exit_code == 2
    assert "name what to reset: --join, --model NAME, --all-models" in result.output
