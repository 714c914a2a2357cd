"""topics/schemas/ is what the types generate, and the command that checks and writes it."""

from streameval.schema_files import generated_schemas, main
from streameval.topics import topics_dir


def test_the_committed_schemas_are_the_ones_the_types_generate():
    """topics/schemas/ is generated from streameval.records' types: `python -m
    streameval.schema_files --write` after a change of a type, and this test holds the files
    to it."""
    for name, text in generated_schemas().items():
        assert (topics_dir() / "schemas" / name).read_text() == text, (
            f"{name} differs from what streameval.schema_files generates; run "
            "`python -m streameval.schema_files --write`"
        )


def test_the_schema_command_checks_writes_and_names_a_wrong_folder(tmp_path, capsys):
    assert main([]) == 0  # the package's files are up to date
    assert main([str(tmp_path)]) == 1 and "differ from the types" in capsys.readouterr().out
    assert main(["--write", str(tmp_path)]) == 0
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == generated_schemas()
    assert main([str(tmp_path / "missing")]) == 2
    assert "is not a folder" in capsys.readouterr().err
