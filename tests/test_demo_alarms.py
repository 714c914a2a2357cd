"""The demo tells the truth: with the default detectors, ten seeds of ``make demo``'s stream
replayed, every learning model is alarmed after the change and soon enough, and nothing alarms
before the change or on the same stream without one.

The streams are the demo's (:func:`streameval.demo.demo_stream`: Agrawal at 200 instances/s,
labels about 2 s late, the change at instance 10 800), cut some 4 000 instances after the
change, and go through ``streameval replay`` with the demo worker's configuration. Re-
predictions are off: the detectors see the final prediction of each instance, which
re-predictions never change (``tests/test_drift_benchmark.py``), and they triple the
simulation's cost. The first alarm must come within :data:`WITHIN` outcomes of the first
outcome of the new concept: the 90th percentile of the default detector's delays on the drift
benchmark's 720 changes (docs/measures.md, "How good the detectors are"). Measured on seeds
42–61: the largest delay 996 (logistic regression), and one alarm without a change (seed 54,
the no-change baseline), outside the seeds asserted here.
"""

from __future__ import annotations

import dataclasses
import io
import json
from concurrent.futures import ProcessPoolExecutor

import pytest
from streameval.config import load_config
from streameval.demo import WORKER_CONFIG, ChangeWatch, demo_stream
from streameval.replay import replay
from streameval.simulate.system import simulate

SEEDS = range(42, 52)  # 42 is make demo's
LEARNERS = ("hoeffding_tree", "naive_bayes", "logistic_regression")
#: outcomes from the first of the new concept to the first alarm, that outcome included
WITHIN = 1051
AFTER = 4000  # instances simulated after the change: WITHIN outcomes and the labels' lag


def _alarms(seed: int, drift: bool, config_path: str) -> tuple[int | None, list[tuple]]:
    """Replay the demo's stream for ``seed``; the outcome index of the first outcome of the
    new concept and every alarm as (model, detector, n)."""
    sim = demo_stream(None, 200.0, seed)
    change = sim.drifts[0]
    sim = dataclasses.replace(sim, instances=change + AFTER, repredict_every=0)
    if not drift:
        sim = dataclasses.replace(sim, drifts=[])
    watch = ChangeWatch(change, sim.start_ms, sim.rate)
    lines = b"".join(json.dumps(e).encode() + b"\n" for e in watch.watch(simulate(sim)))
    config = load_config(config_path)
    result = replay(io.BytesIO(lines), config, io.BytesIO(), now_ms=sim.start_ms + 10**9)
    assert not result.skipped, result.skipped_examples
    return watch.first_after, [(a.model_id, a.detector, a.n) for a in result.alarms]


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    path = tmp_path_factory.mktemp("demo") / "demo.toml"
    path.write_text(WORKER_CONFIG)
    jobs = [(seed, drift, str(path)) for seed in SEEDS for drift in (True, False)]
    with ProcessPoolExecutor(2) as pool:
        results = list(pool.map(_alarms, *zip(*jobs, strict=True)))
    return dict(zip([(seed, drift) for seed, drift, _ in jobs], results, strict=True))


@pytest.mark.parametrize("seed", SEEDS)
def test_every_learner_is_alarmed_after_the_change_and_within_the_benchmark_delay(replayed, seed):
    first, alarms = replayed[seed, True]
    assert first is not None
    early = [a for a in alarms if a[2] < first]
    assert not early, f"alarms before the first outcome of the new concept ({first}): {early}"
    for model in LEARNERS:
        delays = sorted(n - first + 1 for m, _, n in alarms if m == model)
        assert delays, f"{model}: no alarm after the change"
        assert delays[0] <= WITHIN, f"{model}: first alarm {delays[0]} outcomes after the change"


@pytest.mark.parametrize("seed", SEEDS)
def test_no_alarm_on_the_stream_without_a_change(replayed, seed):
    _, alarms = replayed[seed, False]
    assert alarms == []
