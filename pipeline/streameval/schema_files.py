"""The JSON Schemas of ``topics/schemas/``, generated from the types of :mod:`streameval.records`.

A test fails when the committed files differ from what this module generates;
``python -m streameval.schema_files --write`` writes them again after a change of a type.
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from streameval.records import (
    SCHEMA_DEFS,
    ComparisonRecord,
    DeadLetterHeaders,
    DriftAlarmRecord,
    InstanceMessage,
    LabelMaturityRecord,
    LabelMessage,
    MetricsRecord,
    PredictionMessage,
)

__all__ = ["SCHEMA_FILES", "generated_schemas", "main"]

#: topics/schemas/<file>: (type, title)
SCHEMA_FILES: dict[str, tuple[Any, str]] = {
    "instance.schema.json": (InstanceMessage, "instance"),
    "prediction.schema.json": (PredictionMessage, "prediction"),
    "label.schema.json": (LabelMessage, "label"),
    "metrics.schema.json": (MetricsRecord, "metrics"),
    "drift-alarm.schema.json": (DriftAlarmRecord, "drift alarm"),
    "comparison.schema.json": (ComparisonRecord, "comparison"),
    "label-maturity.schema.json": (LabelMaturityRecord, "label maturity"),
    "dead-letter.schema.json": (DeadLetterHeaders, "dead letter"),
}
_METRICS = (
    "Every measure of one model and one view under every estimator; null where a "
    "measure is undefined. Key: model_id."
)


def _dedented(node: Any) -> Any:
    """``node`` with each description a docstring gives (that of a struct, which has a
    ``title``) cleaned as :func:`inspect.cleandoc` does: msgspec 0.23 does so itself, earlier
    versions kept the indentation of a docstring's later lines, and the files must not depend
    on which one is installed.

    >>> _dedented({"a": {"title": "A", "description": "One\\n    two."}})
    {'a': {'title': 'A', 'description': 'One\\ntwo.'}}
    """
    if isinstance(node, dict):
        docstring = "title" in node and isinstance(node.get("description"), str)
        return {
            key: inspect.cleandoc(value) if docstring and key == "description" else _dedented(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_dedented(value) for value in node]
    return node


def _schema(name: str, kind: Any, title: str) -> dict[str, Any]:
    generated = _dedented(msgspec.json.schema(kind))
    defs = generated.pop("$defs", {})
    if "$ref" in generated:  # one struct: its definition is the schema
        generated = defs.pop(generated.pop("$ref").rsplit("/", 1)[1])
    generated.pop("title", None)
    if kind is MetricsRecord:
        generated = {"description": _METRICS, **generated}
    if kind is PredictionMessage:  # an integer label's classes are named by their digits
        generated["allOf"] = [
            {
                "if": {"properties": {"label": {"type": "integer"}}},
                "then": {
                    "properties": {"scores": {"propertyNames": {"pattern": "^(0|-?[1-9][0-9]*)$"}}}
                },
            }
        ]
    if kind is DeadLetterHeaders:  # Kafka headers: every value is a string
        generated["additionalProperties"] = {"type": "string"}
    used = json.dumps([generated, defs])
    defs |= {key: value for key, value in SCHEMA_DEFS.items() if f"#/$defs/{key}" in used}
    head = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"streameval/{name}",
        "title": title,
    }
    return {**head, **generated, **({"$defs": defs} if defs else {})}


def generated_schemas() -> dict[str, str]:
    """File name → the JSON Schema text this module generates for it."""
    return {
        name: json.dumps(_schema(name, kind, title), indent=2, ensure_ascii=False) + "\n"
        for name, (kind, title) in SCHEMA_FILES.items()
    }


def main(argv: list[str]) -> int:
    """``python -m streameval.schema_files [--write] [DIR]``: check (or write) the schema files."""
    write = "--write" in argv
    rest = [arg for arg in argv if arg != "--write"]
    folder = Path(rest[0]) if rest else Path(__file__).parent / "resources" / "topics" / "schemas"
    if not folder.is_dir():
        print(
            f"{folder} is not a folder; give the folder of the schema files (default: the "
            "package's topics/schemas)",
            file=sys.stderr,
        )
        return 2
    stale = []
    for name, text in generated_schemas().items():
        path = folder / name
        if not path.exists() or path.read_text() != text:
            stale.append(name)
            if write:
                path.write_text(text)
    verb = "wrote" if write else "differ from the types (python -m streameval.schema_files --write)"
    print(f"{verb}: {', '.join(stale)}" if stale else "every schema is up to date")
    return 1 if stale and not write else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
