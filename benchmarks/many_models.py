"""What the number of models costs the evaluation: ``Engine.evaluate`` per outcome with 3 models
and with 100, the same outcomes in all (issue: "100 models cost ≤ 1.5× the evaluation time per
outcome of 3 models").

The same N binary outcomes (80 % right, one prediction each, labels 2 s late) are spread round
robin over M models and handed to the engine ``--chunk`` at a time, as an evaluation stage hands
over what it releases (``RELEASE_MIN`` = 2 048 outcomes): with M models a model gets about
chunk/M outcomes per call, so its numpy work is done on smaller batches. Every model publishes
every ``publish_every`` (1 000) of its outcomes, so both runs publish the same number of
records. With ``--costs`` every model has a cost matrix. Prints min / median / max over
``--rounds`` runs, the outcomes each evaluated, and the ratio. ``--profile N`` instead runs
each number of models once under cProfile and prints the N functions with the most cumulative
time (where a model's per-call cost goes).

    .venv/bin/python benchmarks/many_models.py
    .venv/bin/python benchmarks/many_models.py --outcomes 300000 --models 3 100 1000 --rounds 3
    .venv/bin/python benchmarks/many_models.py --models 100 --profile 25
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streameval.app.eval_stage import RELEASE_MIN
from streameval.config import load_config
from streameval.core.outcome import Outcome
from streameval.engine import Engine

COSTS = {"1": {"0": 5}, "0": {"1": 1}}


def outcomes_for(models: int, n: int) -> list[Outcome]:
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 2, n).tolist()
    right = (rng.random(n) < 0.8).tolist()
    rows = enumerate(zip(truth, right, strict=True))
    return [
        Outcome(
            f"model-{i % models:04d}",
            f"i{i}",
            y,
            (i,),
            (y if ok else 1 - y,),
            i,
            i + 2000,
            i + 2000,
        )
        for i, (y, ok) in rows
    ]


def one_run(models: int, outcomes: list[Outcome], chunk: int, costs: bool) -> tuple[float, int]:
    names = {o.model_id for o in outcomes}
    config = load_config(models={m: {"costs": COSTS} for m in names} if costs else {})
    engine = Engine(config)
    started = time.perf_counter()
    for start in range(0, len(outcomes), chunk):
        engine.evaluate(outcomes[start : start + chunk])
    seconds = time.perf_counter() - started
    return seconds, sum(model.n for model in engine.models.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outcomes", type=int, default=300_000)
    parser.add_argument("--models", type=int, nargs="+", default=[3, 100])
    parser.add_argument("--chunk", type=int, default=RELEASE_MIN)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--costs", action="store_true", help="every model with a cost matrix")
    parser.add_argument(
        "--profile", type=int, metavar="N", help="one run per number of models under cProfile"
    )
    args = parser.parse_args()
    base = None
    for models in args.models:
        outcomes = outcomes_for(models, args.outcomes)
        if args.profile:
            profile = cProfile.Profile()
            profile.runcall(one_run, models, outcomes, args.chunk, args.costs)
            print(f"{models} models, one run under cProfile:")
            pstats.Stats(profile).sort_stats("cumulative").print_stats(args.profile)
            continue
        runs = [one_run(models, outcomes, args.chunk, args.costs) for _ in range(args.rounds)]
        per = sorted(seconds / count * 1e6 for seconds, count in runs)
        median = statistics.median(per)
        base = base or median
        print(
            f"{models:>5} models: {per[0]:.2f} / {median:.2f} / {per[-1]:.2f} µs per outcome "
            f"(min / median / max of {args.rounds}; {runs[0][1]:,} outcomes evaluated; "
            f"{median / base:.2f}× the first)"
        )


if __name__ == "__main__":
    main()
