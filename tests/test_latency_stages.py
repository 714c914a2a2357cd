"""benchmarks/pipeline_throughput.py's latency phase says where a record's delay went: the
oldest label a record counts for the first time is followed through the worker's internal
topics, and its four parts add up to the delay from that label's time to the read."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from streameval.app.wire import LABEL, PREDICTION, WIRE_VERSION, EventBatch, OutcomeBatch, encode
from streameval.core.outcome import Outcome, notice

ROOT = Path(__file__).resolve().parents[1]
_PATH = ROOT / "benchmarks" / "pipeline_throughput.py"
_SPEC = importlib.util.spec_from_file_location("pipeline_throughput", _PATH)
bench = sys.modules.setdefault("pipeline_throughput", importlib.util.module_from_spec(_SPEC))
_SPEC.loader.exec_module(bench)


def _outcomes(at: int, *resolved: tuple[str, str, int]) -> tuple[int, bytes]:
    """An outcome batch produced at ``at`` (ms) of (model, instance, label time) outcomes."""
    outcomes = [
        Outcome(model, iid, "yes", (t - 10,), ("yes",), t - 10, t, t, (), None)
        for model, iid, t in resolved
    ]
    batch = OutcomeBatch(v=WIRE_VERSION, partition=0, offset=0, frontier=0, outcomes=outcomes)
    return at, encode(batch)


def _events(at: int, *rows: tuple) -> tuple[int, bytes]:
    return at, encode(EventBatch(v=WIRE_VERSION, sources=[], events=list(rows)))


def test_a_records_oldest_new_label_is_followed_through_the_stages():
    # champion's previous record counted labels up to 1000; this one, produced at 2600 and
    # read at 2650, counts those of 1500 and 1800. Of the two labels of 1500, "b" was resolved
    # last (2200); its label reached the events topic at 1550 (and again at 1700, a resend)
    # ("y", at 1000, was the previous record's; a label-maturity notice due at 1200 is no label)
    maturity = notice("champion", 1000, 3, 1200)
    outcomes = [
        _outcomes(2100, ("champion", "a", 1500), ("champion", "z", 900), ("champion", "y", 1000)),
        _outcomes(2150, ("champion", "c", 1800), ("challenger", "b", 1500)),
        _outcomes(2200, ("champion", "b", 1500)),
        (2120, encode(OutcomeBatch(WIRE_VERSION, 0, 1, 0, [maturity]))),
    ]
    events = [
        _events(1520, (LABEL, "a", "", 1500, "yes", 0, 1, None)),
        _events(1700, (LABEL, "b", "", 1500, "yes", 0, 2, None)),
        _events(1550, (LABEL, "b", "", 1500, "yes", 1, 2, None)),
        _events(1510, (PREDICTION, "b", "champion", 1400, "yes", 2, 3, None)),  # not its label
    ]
    covered = [
        ("champion", 1000, 1800, 2600, 2650.0),
        ("champion", 1800, 1800, 2700, 2750.0),  # no label after its previous record's
        ("baseline", 1000, 1800, 2600, 2650.0),  # no outcome of that model
    ]
    parts = bench.stage_parts(covered, iter(outcomes), iter(events))
    assert list(parts) == list(bench.STAGES)
    assert {name: v.tolist() for name, v in parts.items()} == {
        "ingest": [0.05],  # 1500 -> 1550
        "join": [0.65],  # -> 2200
        "evaluation and publish": [0.4],  # -> 2600
        "commit and read": [0.05],  # -> 2650
    }
    assert sum(parts.values())[0] == pytest.approx((2650 - 1500) / 1000)


def test_a_record_whose_label_was_not_carried_is_left_out_and_the_line_says_so():
    outcomes = [_outcomes(2200, ("champion", "b", 1500))]
    parts = bench.stage_parts([("champion", 1000, 1800, 2600, 2650.0)], outcomes, [])
    assert all(len(v) == 0 for v in parts.values())
    assert bench._stages_line({"stages": parts}) == ""
    delays = np.arange(1, 41) / 100  # 0.01 ... 0.39 s, then 1.01: the slowest 5 % are the
    delays[-1] = 1.01  # last two, whose mean is 0.70; p50 0.205, p99 0.39 + 0.61 * 0.62
    line = bench._stages_line({"stages": {name: delays for name in bench.STAGES}})
    assert "40 records followed" in line and "ingest 0.21 / 0.77 / 0.70" in line
    line = bench._stages_line({"stages": {name: delays[::-1].copy() for name in bench.STAGES}})
    assert "join 0.21 / 0.77 / 0.70" in line


def test_transaction_times_read_the_workers_histogram():
    """The latency phase says how long the worker's transactions took, from the histogram a
    worker exports (none under at-least-once)."""
    from prometheus_client import CollectorRegistry
    from streameval.exporter import Exporter

    exporter = Exporter(CollectorRegistry())
    assert bench.transaction_times(exporter.scrape().decode()) is None
    for seconds in [0.04] * 60 + [0.12] * 39 + [0.7]:
        exporter.observe_transaction(seconds)
    took = bench.transaction_times(exporter.scrape().decode())
    assert took["count"] == 100
    assert took["mean"] == pytest.approx((60 * 0.04 + 39 * 0.12 + 0.7) / 100)
    assert (took["p50"], took["p99"]) == (0.05, 0.15)
    line = bench._transactions_line({"transactions": took})
    assert "100, mean 0.078 s, half ≤ 0.05 s, 99 % ≤ 0.15 s" in line


def test_histogram_reads_cumulative_buckets_summed_over_label_sets():
    """The one bucket reader of the benchmarks (the soak's checkpoint pauses, the latency
    phase's transactions): cumulative counts per upper bound, label sets added up."""
    text = "\n".join(
        [
            "# TYPE streameval_checkpoint_pause_seconds histogram",
            'streameval_checkpoint_pause_seconds_bucket{process="0",le="0.1"} 3.0',
            'streameval_checkpoint_pause_seconds_bucket{process="0",le="+Inf"} 4.0',
            'streameval_checkpoint_pause_seconds_bucket{process="1",le="0.1"} 2.0',
            'streameval_checkpoint_pause_seconds_bucket{process="1",le="+Inf"} 2.0',
            'streameval_checkpoint_pause_seconds_count{process="0"} 4.0',
        ]
    )
    hist = bench.histogram(text, "streameval_checkpoint_pause_seconds")
    assert hist == {0.1: 5.0, float("inf"): 6.0}
    assert bench.histogram(text, "streameval_transaction_seconds") == {}


def test_a_latency_run_says_what_it_had_of_the_machine_and_what_the_worker_wrote():
    """The tail of a latency run depends on what else the machine did: the run says the cores
    each party used while the traffic ran, and the records per input event the worker wrote
    to its own topics (its internal batches and changelogs)."""
    run = {
        "sent": 1000,
        "machine": {"busy": 1.9, "worker": 1.05, "broker": 0.6, "benchmark": 0.2, "steal": 0.0},
        "internal": {"events": 10, "outcomes": 25, "join-changelog": 600, "eval-changelog": 12},
    }
    line = bench._machine_line(run)
    assert "1.90 of" in line and "the worker 1.05, the broker 0.60" in line
    assert "events 0.010, outcomes 0.025, join-changelog 0.600, eval-changelog 0.012" in line
    assert bench._machine_line({"sent": 1}) == ""


def test_the_slowest_records_seconds_read_as_spans_and_a_metric_sums_its_label_sets():
    assert bench.spans([12, 13, 14, 15, 16, 56, 57, 95]) == "12–16, 56–57, 95"
    assert bench.spans([]) == ""
    text = 'x_count{process="0"} 3.0\nx_count{process="1"} 4.0\nx_count_other 9.0\n'
    assert bench.total(text, "x_count") == 7.0
