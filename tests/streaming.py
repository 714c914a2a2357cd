"""Helpers shared by the streaming tests: the test stream, and how to compare results."""

from __future__ import annotations

import io
from typing import Any

import orjson
from streameval.codec import encode_record
from streameval.config import EvaluationConfig, load_config
from streameval.replay import replay
from streameval.simulate.scripted import ScriptedStream


def make_stream(instances: int = 3000, seed: int = 5) -> ScriptedStream:
    """≥ 3 models, re-predictions, delayed labels of varied latency (labels overtaking
    predictions by up to 500 ms), a drift of the champion, a few malformed records, scores on
    most predictions."""
    return ScriptedStream(
        instances=instances,
        drift_at=instances // 2,
        mean_delay_ms=1_500,
        min_delay_ms=20,
        max_transport_ms=500,
        malformed=7,
        scored=0.7,  # most predictions carry scores, some do not
        seed=seed,
    )


#: the champion's cost matrix in the streaming tests' configuration
COSTS = {"yes": {"no": 10}, "no": {"yes": 1}}


def make_config(**overrides: Any) -> EvaluationConfig:
    settings: dict[str, Any] = {
        "publish_every": 500,
        "join": {"label_grace_ms": 1_000},
        # the stream is 40 s long: a label-maturity record each second, cohorts of 5 s
        "maturity": {"cohort_ms": 5_000, "every_ms": 1_000, "cohorts": 4},
        "models": {m: {"positive_label": "yes"} for m in ("champion", "challenger", "baseline")}
        | {"champion": {"positive_label": "yes", "costs": COSTS}},  # as in test_worker.CONFIG
        "comparisons": [{"a": "champion", "b": "challenger"}],
    }
    settings.update(overrides)
    return load_config(**settings)


def replay_finals(
    stream: ScriptedStream, config: EvaluationConfig, join_partitions: int = 1
) -> dict[str, Any]:
    """Final metrics, comparisons, the alarms and every label-maturity record of ``streameval
    replay`` on the stream."""
    source = io.BytesIO(b"".join(line + b"\n" for line in stream.lines()))
    out = io.BytesIO()
    result = replay(source, config, out, join_partitions=join_partitions)
    maturity = [r for r in map(orjson.loads, out.getvalue().splitlines())]
    return {
        "metrics": {k: _canon(v) for k, v in result.final_metrics.items()},
        "comparisons": {k: _canon(v) for k, v in result.final_comparisons.items()},
        "alarms": sorted(_canon(a) for a in result.alarms),
        "maturity": sorted({_canon(r) for r in maturity if r["kind"] == "label_maturity"}),
        "slices": {k: _canon(v) for k, v in result.final_slices.items()},
    }


def finals(records: list[Any]) -> dict[str, Any]:
    """The same summary from a worker's published records (in publication order). Records
    re-published after a restart carry the same identity and values: alarms are compared as
    a set."""
    metrics, comparisons, alarms, maturity, slices = {}, {}, set(), set(), {}
    for record in map(_as_dict, records):
        kind = record["kind"]
        if kind == "label_maturity":  # every one: each is as of a time, not a latest value
            maturity.add(_canon(record))
        elif kind == "metrics" and "slice" in record:
            key = (record["model_id"], record["slice"], record["view"])
            if key not in slices or slices[key]["n"] <= record["n"]:
                slices[key] = record
        elif kind == "metrics":
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
        "maturity": sorted(maturity),
        "slices": {k: _canon(v) for k, v in slices.items()},
    }


def _as_dict(record: Any) -> dict[str, Any]:
    """A record as it reads on its topic (the worker's come decoded from Kafka)."""
    return record if isinstance(record, dict) else orjson.loads(encode_record(record))


def _canon(record: Any) -> bytes:
    return orjson.dumps(_as_dict(record), option=orjson.OPT_SORT_KEYS)


def outcomes_of(lines: list[bytes], config: EvaluationConfig) -> list[Any]:
    """Every outcome of ``streameval replay`` on the lines, in the order it evaluates them."""
    import time

    from streameval.engine import Engine
    from streameval.replay import ReplayResult, _events

    engine = Engine(config)
    now = int(time.time() * 1000)
    events = list(_events(iter(lines), ReplayResult(), False, config.time_rules(), now))
    rows = engine.resolve(events) + engine.join.flush()
    return [o for o in rows if o.times]  # not the join's notices of predicted instances


def evolved_finals(
    lines: list[bytes],
    phases: list[tuple[EvaluationConfig, dict[str, dict[str, int]] | None]],
    resets: dict[int, list[str]] | None = None,
) -> dict[str, Any]:
    """The final metrics and comparisons of a worker whose configuration changed at restarts,
    as docs/worker.md defines them: each model and pair continued under each phase's
    configuration from where the restart found it (what it adds from that point on, a pair
    new in a phase from the first outcomes both of its models count after the restart).

    ``phases``: (configuration, where the phase ended: ``{"models": {name: n}, "pairs":
    {key: n}}`` as the checkpoints' seals say, None for the last phase); ``resets``: phase ->
    estimators `state reset --estimator` dropped before it."""
    from streameval.app.edits import without_estimator
    from streameval.core.model import ModelEvaluator
    from streameval.core.pair import PairEvaluator
    from streameval.engine import Engine

    outcomes = outcomes_of(lines, phases[0][0])
    per_model: dict[str, list[Any]] = {}
    index = {}
    for outcome in outcomes:
        own = per_model.setdefault(outcome.model_id, [])
        index[id(outcome)] = len(own)
        own.append(outcome)
    models: dict[str, ModelEvaluator] = {}
    pairs: dict[str, tuple[PairEvaluator, list]] = {}
    model_at: dict[str, int] = {}
    pair_at: dict[str, int] = {}
    for k, (config, ended) in enumerate(phases):
        engine = Engine(config)  # (its settings of each model)
        for name in (resets or {}).get(k, []):
            for evaluator in [*models.values(), *(p for p, _ in pairs.values())]:
                state = evaluator.state()
                if without_estimator(state, name):
                    evaluator.__dict__.update(type(evaluator).from_state(state).__dict__)
        start_of_phase = dict(model_at)
        for model_id, own in per_model.items():
            end = len(own) if ended is None else ended["models"].get(model_id, 0)
            start = model_at.get(model_id, 0)
            evaluator = models.get(model_id)
            if evaluator is not None and k:
                evaluator = ModelEvaluator.from_state(evaluator.state(),
                                                      **engine._continued(model_id))  # fmt: skip
            elif evaluator is None and end > start:
                evaluator = engine._model(model_id)
            if evaluator is not None:
                evaluator.update(own[start:end])
                models[model_id] = evaluator
            model_at[model_id] = end
        for pair in config.comparisons:
            key = f"{pair.a}|{pair.b}"
            if key not in pairs:  # new: the pairs of outcomes both counted after the restart
                a0, b0 = start_of_phase.get(pair.a, 0), start_of_phase.get(pair.b, 0)
                found = [(x, y) for x, y in PairEvaluator(pair.a, pair.b).pairs(outcomes)
                         if index[id(x)] >= a0 and index[id(y)] >= b0]  # fmt: skip
                pairs[key] = (engine.pairs[key], found)
            evaluator, found = pairs[key]
            if k and evaluator.n:
                evaluator = PairEvaluator.from_state(evaluator.state(), config.estimator_specs)
            start = pair_at.get(key, 0)
            end = len(found) if ended is None else ended["pairs"].get(key, 0)
            evaluator.update_pairs(found[start:end])
            pairs[key] = (evaluator, found)
            pair_at[key] = end
    last = Engine(phases[-1][0])
    last.models = {m: ev for m, ev in models.items() if ev.n}
    last._model_last_ts = {m: per_model[m][model_at[m] - 1].t_label for m in last.models}
    last.pairs = {key: ev for key, (ev, _) in pairs.items() if ev.n}
    last._pair_last_ts = {key: found[pair_at[key] - 1][1].t_label
                          for key, (ev, found) in pairs.items() if ev.n}  # fmt: skip
    result = finals(last.latest_records())
    # (the caller's: they do not depend on estimators; slices are off in these tests)
    del result["alarms"], result["maturity"], result["slices"]
    return result


def run_engine(config, events, cuts: int = 1, seed: int = 0, restore_at: int | None = None):
    """Every record of an Engine on ``events`` given in ``cuts`` random pieces — its state,
    and its join's, round-tripped through JSON before event ``restore_at`` — and the engine."""
    import json
    import random

    from streameval.core.join import Join
    from streameval.engine import Engine

    rng = random.Random(seed)
    bounds = sorted(rng.sample(range(1, len(events)), min(cuts - 1, max(len(events) - 1, 0))))
    engine, records = Engine(config), []
    for lo, hi in zip([0, *bounds], [*bounds, len(events)], strict=True):
        if restore_at is not None and lo <= restore_at < hi:
            records += engine.process(events[lo:restore_at])
            join = Join.restore(engine.join.changes().items())
            engine = Engine.from_state(config, json.loads(json.dumps(engine.state())), join)
            lo = restore_at
        records += engine.process(events[lo:hi])
    return records + engine.finish(), engine
