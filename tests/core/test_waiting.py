"""The events waiting for the join's clock: few runs, however they come."""

import math
import random

from streameval.core.join import Join


def test_events_taken_one_at_a_time_wait_in_few_runs():
    """Replay gives the join one event per call; out of order within a long grace, those that
    wait must not each stay a run of their own, which every call would look at (a replay of
    10⁶ pending instances took hours that way)."""
    rng = random.Random(3)
    join, out = Join(label_grace=5000), []
    for i in range(20_000):
        ts = i + rng.randrange(500)  # delivered up to 500 ms out of order
        out += join.add_prediction(f"i{i}", "m", ts=ts, label="a", now=i)
        out += join.add_label(f"i{i}", ts=ts + 1, label="a", now=i)
        assert len(join._waiting.runs) <= 2 * math.log2(join.waiting + 2) + 2
    assert join.waiting > 5000
    out += join.flush()
    assert len(out) == 20_000 and join.waiting == 0
