"""What a checkpoint of an evaluation partition writes for a model once its windows are full.

One evaluation stage (no broker) takes ``--outcomes`` binary outcomes of one model, with or
without scores, and checkpoints; then ``--more`` outcomes, and checkpoints again. Printed per
estimator setting: the model's encoded state (its chunks of 16 KiB, and their bytes), what the
second checkpoint writes of it (chunks, bytes) and how long the stage's ``cut`` took — the part
of a checkpoint that runs on the data path (each model's ``state()``, encoded, cut in chunks and
compared with what was written). Min / median / max of the cut over ``--rounds``.

    .venv/bin/python benchmarks/checkpoint_writes.py
    .venv/bin/python benchmarks/checkpoint_writes.py --outcomes 200000 --more 1000 --rounds 5

A model with scores tracks the AUC of its positive class, or of every class without a
``positive_label``: the third row shows what that costs.

The script uses only what an evaluation stage offered before rings were written as they lie, so
it runs as is on an older commit (``PYTHONPATH=<worktree>/pipeline``) for a before/after.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from streameval.app.eval_stage import EvalStage
from streameval.app.statekeys import MODEL
from streameval.app.wire import WIRE_VERSION, OutcomeBatch
from streameval.config import load_config
from streameval.core.outcome import Outcome

# (printed name, estimators or None for the defaults, scores on every prediction, the
# model's positive_label: with one the AUC tracks that class, without one every class)
SETTINGS = [
    ("defaults (cumulative, window:1000, fading:0.999)", None, False, "yes"),
    ("defaults, scores", None, True, "yes"),
    ("defaults, scores, no positive_label", None, True, None),
    ("cumulative, window:20000", ["cumulative", "window:20000"], False, "yes"),
    ("cumulative, window:100000", ["cumulative", "window:100000"], False, "yes"),
]


def outcomes(lo: int, hi: int, scored: bool) -> list[Outcome]:
    """Binary outcomes, 80 % right, continuous scores on every prediction if ``scored``."""
    rng = np.random.default_rng(lo)
    truth = rng.random(hi - lo) < 0.3
    right = rng.random(hi - lo) < 0.8
    p = rng.random(hi - lo).clip(1e-6, 1 - 1e-6)
    result = []
    for k, i in enumerate(range(lo, hi)):
        y = "yes" if truth[k] else "no"
        predicted = y if right[k] else ("no" if truth[k] else "yes")
        score = (("no", 1 - p[k], "yes", p[k]),) if scored else ()
        result.append(
            Outcome("m", f"i{i:07}", y, (i,), (predicted,), i, 1_000 + i, 1_000 + i, score)
        )
    return result


def one(
    estimators, scored: bool, positive: str | None, n: int, more: int
) -> tuple[int, int, int, int, float]:
    model_settings = {"positive_label": positive} if positive else {}
    settings = {"models": {"m": model_settings}, "publish_every": 10_000}
    if estimators:
        settings["estimators"] = estimators
    config = load_config(**settings)
    stage = EvalStage(0, config, join_partitions=1)
    stage.apply(0, OutcomeBatch(WIRE_VERSION, 0, 0, 1_000 + n, outcomes(0, n, scored)))
    stage.tick()
    first = stage.cut()
    stage.written(first)
    model = {k: v for k, v in first.changes.items() if k[:1] == MODEL}
    frontier = 2_000 + n + more
    stage.apply(1, OutcomeBatch(WIRE_VERSION, 0, 1, frontier, outcomes(n, n + more, scored)))
    stage.tick()
    start = time.perf_counter()
    second = stage.cut()
    seconds = time.perf_counter() - start
    stage.written(second)
    written = {k: v for k, v in second.changes.items() if k[:1] == MODEL and v is not None}
    size = sum(len(v) for v in model.values())
    return len(model), size, len(written), sum(len(v) for v in written.values()), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--outcomes", type=int, default=120_000, help="outcomes before")
    parser.add_argument("--more", type=int, default=100, help="outcomes between checkpoints")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"{args.outcomes:,} outcomes of one model, then {args.more:,} more: the 2nd checkpoint")
    print(f"{'estimators':<50} {'state':>22} {'written':>20} {'cut ms min/med/max':>20}")
    for name, estimators, scored, positive in SETTINGS:
        runs = [
            one(estimators, scored, positive, args.outcomes, args.more) for _ in range(args.rounds)
        ]
        chunks, size, n_written, written, _ = runs[0]
        cuts = sorted(r[4] * 1e3 for r in runs)
        cut = f"{cuts[0]:.0f}/{statistics.median(cuts):.0f}/{cuts[-1]:.0f}"
        print(
            f"{name:<50} {chunks:>5} chunks {size / 1e6:>6.2f} MB "
            f"{n_written:>5} chunks {written / 1e3:>6.0f} KB {cut:>20}"
        )


if __name__ == "__main__":
    main()
