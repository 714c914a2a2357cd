"""Per-message cost of decoding and validating input messages, side by side.

streameval's BatchDecoder (msgspec structs with constraints, malformed messages turned into
dead letters) against what a user would otherwise write: ``json.loads`` and a JSON Schema
validation of each message with the ``jsonschema`` package, using the same schemas from
``topics/schemas/``. Both get the same 100k prediction messages, 1 % of them malformed.

Run: ``.venv/bin/python benchmarks/decode.py``
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import jsonschema
from streameval.codec import BatchDecoder
from streameval.topics import topics_dir

ROOT = Path(__file__).resolve().parents[1]


class Message:
    __slots__ = ("_offset", "_value")

    def __init__(self, value: bytes, offset: int) -> None:
        self._value, self._offset = value, offset

    def topic(self):
        return "predictions"

    def partition(self):
        return 0

    def offset(self):
        return self._offset

    def key(self):
        return None

    def value(self):
        return self._value


def messages(n: int) -> list[Message]:
    out = []
    for i in range(n):
        if i % 100 == 99:
            value = b'{"instance_id": "inst", "model_id": "m", "ts": "late"}'
        else:
            value = json.dumps({"instance_id": f"inst-{i:08d}", "model_id": "fraud-v2",
                               "ts": 1767225600000 + i, "label": "yes" if i % 3 else "no",
                               "model_version": "2.1"}).encode()  # fmt: skip
        out.append(Message(value, i))
    return out


def main() -> None:
    batch = messages(100_000)
    decoder = BatchDecoder({"predictions": "prediction"})
    decode, decoded = decoder.decode_message, 0
    start = time.perf_counter()
    for message in batch:
        kind, _ = decode(message)
        decoded += kind is not None
    ours = (time.perf_counter() - start) / len(batch)
    assert sum(decoder.counters.values()) == 1000 and decoded == 99_000

    schema = json.loads((topics_dir() / "schemas/prediction.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    start = time.perf_counter()
    bad = 0
    for message in batch:
        try:
            validator.validate(json.loads(message.value()))
        except (ValueError, jsonschema.ValidationError):
            bad += 1
    peer = (time.perf_counter() - start) / len(batch)
    assert bad == 1000
    print(
        f"streameval BatchDecoder      {ours * 1e6:6.2f} µs/message  {1 / ours:12,.0f} messages/s"
    )
    print(
        f"json.loads + jsonschema      {peer * 1e6:6.2f} µs/message  {1 / peer:12,.0f} messages/s"
    )
    print(f"ratio                        {peer / ours:6.0f}x")


if __name__ == "__main__":
    main()
