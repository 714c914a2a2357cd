"""Slices: every slice's records against evaluators fed that slice's outcomes plainly, for any
cut of the stream into calls and through a state round trip; the slices named on the model's
records; bounded memory whatever the number of distinct values."""

from __future__ import annotations

import io

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streameval.codec import (
    InstanceEvent,
    LabelEvent,
    PredictionEvent,
    decode_event,
    encode_record,
)
from streameval.config import load_config
from streameval.core.model import ModelEvaluator
from streameval.core.outcome import Outcome
from streameval.core.slices import OTHER, SliceTracker
from streameval.engine import Engine
from streameval.replay import replay
from streameval.simulate.scripted import ScriptedStream

from tests.streaming import outcomes_of, run_engine


def _config(top_k=3, window=150, every=40, **overrides):
    return load_config(
        publish_every=every,
        join={"label_grace_ms": 1_000},
        slices={"by": "attributes.country", "top_k": top_k, "window": window, "hysteresis": 0.2},
        maturity={"enabled": False},
        **overrides,
    )


def _stream(instances=1500, countries=8, seed=3):
    return ScriptedStream(
        instances=instances,
        countries=countries,
        scored=0.5,
        mean_delay_ms=800,
        max_transport_ms=300,
        seed=seed,
    )


def _events(stream):
    return [decode_event(line) for line in stream.lines()]


_run = run_engine


def _measures(evaluator: ModelEvaluator, config) -> bytes:
    """The final view's estimates as a record holds them (NaN as null)."""
    return orjson.dumps(
        orjson.loads(
            encode_record(
                Engine(config)._metrics_records("m", evaluator, 0)[1]  # the final record
            )
        )["estimators"],
        option=orjson.OPT_SORT_KEYS,
    )


def _slice_records(records):
    out = []
    for r in records:
        if r.kind == "metrics" and r.view == "final" and r.slice is not None:
            out.append((r.model_id, r.slice, r.n, r.ts, orjson.dumps(r.estimators, option=5)))
    return out


def test_each_slice_is_evaluated_on_its_outcomes_alone():
    """The reference: each model's outcomes routed by a tracker in one call, and a fresh
    evaluator per stay of a slice fed its outcomes one by one; a record of a slice is due at
    every publish_every of its outcomes, as the whole model's."""
    config = _config()
    events = _events(_stream())
    records, engine = _run(config, events)
    outcomes = outcomes_of([line for line in _stream().lines()], config)
    checked = 0
    for model in ("champion", "challenger", "baseline"):
        own = [o for o in outcomes if o.model_id == model]
        accepted = len(own)
        tracker = SliceTracker(3, 150, 0.2)
        routing = tracker.route([o.slice for o in own])
        live: dict[str, ModelEvaluator] = {}
        expected = []
        closing = {}
        for index, kind, name in routing.changes:
            closing.setdefault(index, []).append((kind, name))
        for i, outcome in enumerate(own):
            for kind, name in closing.get(i, []):
                if kind == "enter":
                    live[name] = engine._new_evaluator(model, detectors=False)
            name = routing.slices[i]
            if name not in live:
                live[name] = engine._new_evaluator(model, detectors=False)
            ev = live[name]
            ev.update([outcome])
            if ev.n % config.publish_every == 0:
                expected.append((model, name, ev.n, outcome.t_label, _measures(ev, config)))
            for kind, name in closing.get(i, []):
                if kind == "leave":
                    del live[name]
        got = [
            (m, s, n, ts, _measures_of(r))
            for r in records
            if r.kind == "metrics" and r.view == "final" and r.model_id == model and r.slice
            for m, s, n, ts in [(r.model_id, r.slice, r.n, r.ts)]
        ]
        periodic = [g for g in got if g[2] % config.publish_every == 0]
        assert periodic == expected
        # the end of the stream: every slice's latest numbers, as its evaluator has them
        finals = {(m, s): (n, x) for m, s, n, _, x in got}
        for name, ev in live.items():
            assert finals[model, name] == (ev.n, _measures(ev, config))
        checked += len(expected) + accepted
    assert checked > 1000


def _measures_of(record) -> bytes:
    return orjson.dumps(
        orjson.loads(encode_record(record))["estimators"], option=orjson.OPT_SORT_KEYS
    )


@settings(max_examples=12, deadline=None)
@given(cuts=st.integers(2, 40), seed=st.integers(0, 10_000), restore=st.floats(0.05, 0.95))
def test_records_do_not_depend_on_the_cuts_nor_on_a_restore(cuts, seed, restore):
    config = _config(top_k=2, window=90, every=25)
    events = _events(_stream(instances=700, countries=5, seed=seed % 7))
    whole, _ = _run(config, events)
    cut, _ = _run(config, events, cuts, seed)
    restored, _ = _run(config, events, cuts, seed, restore_at=int(restore * len(events)))
    for other in (cut, restored):
        assert [encode_record(r) for r in other if r.kind == "metrics"] == [
            encode_record(r) for r in whole if r.kind == "metrics"
        ]


def test_the_models_records_name_the_slices_that_have_records_of_their_own():
    config = _config()
    records, engine = _run(config, _events(_stream()))
    last = [r for r in records if r.kind == "metrics" and r.view == "final" and not r.slice]
    for record in last[-3:]:
        sliced = engine.slices[record.model_id]
        assert record.slices == [*sliced.tracker.tracked, OTHER]
        assert len(record.slices) <= 3 + 1
    # the top countries are tracked (c0 and c1 are the largest by far)
    assert {"c0", "c1"} <= set(last[-1].slices)
    # with slices off, no record has them
    plain, _ = _run(load_config(publish_every=40), _events(_stream(instances=300)))
    assert all(r.slice is None and getattr(r, "slices", None) is None
               for r in plain if r.kind == "metrics")  # fmt: skip


def test_replay_prints_and_keeps_the_slices(tmp_path):
    config = _config()
    source = io.BytesIO(b"".join(line + b"\n" for line in _stream().lines()))
    result = replay(source, config, io.BytesIO())
    slices = {(m, s) for m, s, view in result.final_slices if view == "final"}
    assert ("champion", "c0") in slices and ("champion", OTHER) in slices
    assert all(r.slice is None for r in result.final_metrics.values())


def _distinct(instances: int):
    """Instances each of a country of its own, predicted and labelled 50 ms later."""
    for i in range(instances):
        t = T0 + 10 * i
        yield InstanceEvent(f"i{i}", t, attributes={"country": f"v{i}"})
        yield PredictionEvent(f"i{i}", "m", t, "yes" if i % 3 else "no")
        yield LabelEvent(f"i{i}", t + 50, "yes" if i % 4 else "no")


T0 = 1_767_225_600_000


def test_a_hundred_thousand_distinct_values_keep_memory_bounded():
    """Every instance of a country of its own: at most top_k + 1 evaluators per model at any
    time, a summary of at most ``capacity`` values, and a state of the same size after 10⁴
    and 10⁵ distinct values."""
    config = _config(top_k=4, window=500, every=1000)
    sizes = []
    for instances in (10_000, 100_000):
        engine = Engine(config)
        chunk = []
        for event in _distinct(instances):
            chunk.append(event)
            if len(chunk) == 6000:
                engine.process(chunk)
                chunk = []
                sliced = engine.slices["m"]
                assert len(sliced.evaluators) <= 4 + 1
                assert len(sliced.tracker.state()["summary"]) <= sliced.tracker.capacity
                assert sum(map(len, sliced.buffers.values())) <= 5 * 1000
        engine.process(chunk)
        sliced = engine.slices["m"]
        rest = sliced.evaluators[OTHER].n + len(sliced.buffers[OTHER])
        assert rest > 0.9 * instances  # nearly all of it is the rest's
        sizes.append(len(orjson.dumps(sliced.state())))
    assert sizes[1] < 1.2 * sizes[0], sizes


def test_slices_that_left_keep_no_mark():
    """Values that take the seats in turn (each of 50 for two windows): the engine's marks of
    what each slice published go with the slice, so its scalars stay small."""
    config = _config(top_k=20, window=1000, every=100)
    engine = Engine(config)
    value = [f"u{i // 2000 * 50 + i % 50}" for i in range(60_000)]
    rows = [
        Outcome("m", f"i{i:07d}", "a", (i,), ("a",), i, i + 1, i + 1, (), value[i])
        for i in range(60_000)
    ]
    for lo in range(0, len(rows), 4096):
        engine.evaluate(rows[lo : lo + 4096])
    marks = [k for k in engine._published if "\x00" in k]
    assert len(marks) <= 21, len(marks)
    assert len(orjson.dumps(engine.scalars())) < 5_000


def test_settings_are_checked():
    from streameval.config import ConfigError

    with pytest.raises(ConfigError, match=r"slices.by = .country.: by=.country. is not allowed"):
        load_config(slices={"by": "country"})
    with pytest.raises(ConfigError, match=r"slices\.top_k"):
        load_config(slices={"by": "attributes.country", "top_k": 0})
