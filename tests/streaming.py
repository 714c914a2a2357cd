"""Helpers shared by the streaming tests: the test stream, and how to compare results."""

from __future__ import annotations

import io
from typing import Any

import orjson
from streameval.config import EvaluationConfig, load_config
from streameval.replay import replay
from streameval.schemas import encode_record
from streameval.simulate.scripted import ScriptedStream


def make_stream(instances: int = 3000, seed: int = 5) -> ScriptedStream:
    """≥ 3 models, re-predictions, delayed labels of varied latency (labels overtaking
    predictions by up to 500 ms), a drift of the champion, a few malformed records."""
    return ScriptedStream(
        instances=instances,
        drift_at=instances // 2,
        mean_delay_ms=1_500,
        min_delay_ms=20,
        max_transport_ms=500,
        malformed=7,
        seed=seed,
    )


def make_config(**overrides: Any) -> EvaluationConfig:
    settings: dict[str, Any] = {
        "publish_every": 500,
        "join": {"label_grace_ms": 1_000},
        "models": {m: {"positive_label": "yes"} for m in ("champion", "challenger", "baseline")},
        "comparisons": [{"a": "champion", "b": "challenger"}],
    }
    settings.update(overrides)
    return load_config(**settings)


def replay_finals(
    stream: ScriptedStream, config: EvaluationConfig, join_partitions: int = 1
) -> dict[str, Any]:
    """Final metrics, comparisons and the alarms of ``streameval replay`` on the stream."""
    source = io.BytesIO(b"".join(line + b"\n" for line in stream.lines()))
    result = replay(source, config, io.BytesIO(), join_partitions=join_partitions)
    return {
        "metrics": {k: _canon(v) for k, v in result.final_metrics.items()},
        "comparisons": {k: _canon(v) for k, v in result.final_comparisons.items()},
        "alarms": sorted(_canon(a) for a in result.alarms),
    }


def finals(records: list[Any]) -> dict[str, Any]:
    """The same summary from a worker's published records (in publication order). Records
    re-published after a restart carry the same identity and values: alarms are compared as
    a set."""
    metrics, comparisons, alarms = {}, {}, set()
    for record in map(_as_dict, records):
        kind = record["kind"]
        if kind == "metrics":
            key = (record["model_id"], record["view"])
            if key not in metrics or metrics[key]["n"] <= record["n"]:
                metrics[key] = record
        elif kind == "comparison":
            if record["pair"] not in comparisons or comparisons[record["pair"]]["n"] <= record["n"]:
                comparisons[record["pair"]] = record
        else:
            alarms.add(_canon(record))
    return {
        "metrics": {k: _canon(v) for k, v in metrics.items()},
        "comparisons": {k: _canon(v) for k, v in comparisons.items()},
        "alarms": sorted(alarms),
    }


def _as_dict(record: Any) -> dict[str, Any]:
    """A record as it reads on its topic (the worker's come decoded from Kafka)."""
    return record if isinstance(record, dict) else orjson.loads(encode_record(record))


def _canon(record: Any) -> bytes:
    return orjson.dumps(_as_dict(record), option=orjson.OPT_SORT_KEYS)
