"""What an evaluation stage's grouping costs: ``Engine.evaluate`` on the same outcomes handed
over in chunks of different sizes (the default measures, three models, one prediction each).
Why an evaluation stage gathers ``RELEASE_MIN`` outcomes before it evaluates them.

    .venv/bin/python benchmarks/evaluate_chunks.py
    .venv/bin/python benchmarks/evaluate_chunks.py --instances 100000 --chunks 4096 500 100 30
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streameval.config import EvaluationConfig
from streameval.core.outcome import Outcome
from streameval.engine import Engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=100_000)
    parser.add_argument("--chunks", type=int, nargs="+", default=[4096, 500, 100, 30])
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 2, args.instances)
    outcomes = []
    for i, y in enumerate(truth.tolist()):
        for model in ("champion", "challenger", "baseline"):
            p = y if rng.random() < 0.8 else 1 - y
            outcomes.append(Outcome(model, f"i{i}", str(y), (i,), (str(p),), i, i + 2000,
                                    i + 2000))  # fmt: skip
    for chunk in args.chunks:
        engine = Engine(EvaluationConfig())
        started = time.perf_counter()
        for start in range(0, len(outcomes), chunk):
            engine.evaluate(outcomes[start : start + chunk])
        seconds = time.perf_counter() - started
        evaluated = sum(model.n for model in engine.models.values())
        print(f"chunks of {chunk:>5}: {seconds:6.2f} s for {evaluated:,} outcomes")


if __name__ == "__main__":
    main()
