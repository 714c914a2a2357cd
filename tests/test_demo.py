"""The demo's account of drift: the change and the alarms on one axis (no Kafka needed)."""

import json

from streameval.codec import decode_event
from streameval.config import load_config
from streameval.demo import WORKER_CONFIG, ChangeWatch
from streameval.engine import Engine
from streameval.records import DriftAlarmRecord
from streameval.simulate.system import SimulationConfig, simulate


def test_the_watch_counts_outcomes_as_the_worker_resolves_them(tmp_path):
    """Under exponential label delays the first outcome of the new concept comes before the
    change's instance index; the watch's count of it is the worker's outcome index."""
    drift_at = 600
    sim = SimulationConfig(instances=1200, drifts=[drift_at], models=["no_change", "majority"],
                           rate=200.0, delay_value=2000.0, seed=3)  # fmt: skip
    watch = ChangeWatch(drift_at, sim.start_ms, sim.rate)
    events = [decode_event(json.dumps(e)) for e in watch.watch(simulate(sim))]
    (tmp_path / "demo.toml").write_text(WORKER_CONFIG)  # the demo worker's join settings
    engine = Engine(load_config(tmp_path / "demo.toml"))
    outcomes = [o for o in engine.resolve(events) + engine.join.flush() if o.times]
    for model in ("no_change", "majority"):
        positions = [int(o.instance_id.rsplit("-", 1)[1]) for o in outcomes
                     if o.model_id == model]  # fmt: skip
        first = next(n for n, p in enumerate(positions, start=1) if p >= drift_at)
        assert first == watch.first_after
    assert watch.first_after < drift_at  # labels ~400 instances late: outcomes lag instances


def test_an_alarm_is_told_on_the_changes_axis():
    watch = ChangeWatch(drift_at=10_800, start_ms=1_000_000, rate=200.0)
    assert watch.describe_change() == "concept change at instance 10 800 (t=54.0 s)"
    watch.first_after = 10_448

    def alarm(n, instance, change=None):
        fields = (None,) * 6
        if change is not None:
            fields = (n - 50, 1_000_000 + 5 * change + 900, f"sim-42-{change:08d}",
                      1_000_000 + 5 * change, 0.44, 2.72)  # fmt: skip
        return DriftAlarmRecord("drift_alarm", "hoeffding_tree", 1_055_300, "final",
                                "ratio_page_hinkley", 101.0, 100.0, n, 1.5,
                                f"sim-42-{instance:08d}", 1_000_000 + 5 * instance, *fields,
                                {"type": "ratio_page_hinkley"})  # fmt: skip

    # a correct detection whose outcome is an old instance's late label reads as what it is
    line = watch.describe(alarm(10_509, 10_247, change=10_755))
    assert line == (
        "hoeffding_tree: ratio_page_hinkley alarm at t=55.3 s (the label of instance 10 247), "
        "61 outcomes after the first post-change outcome; change estimated to begin after "
        "instance 10 755 (t=53.8 s); monitored estimate 0.440 → 2.720"
    )
    assert watch.describe(alarm(10_000, 9_900)).endswith(
        "before any outcome of the new concept: a false alarm"
    )
