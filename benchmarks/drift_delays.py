"""Detection delays of the default drift detectors, as quoted in docs/replay.md.

A stream of 0-1 errors at rate 0.15 switches to 0.45 at outcome 20 000 (of 60 000); for each
seed the delay is the index of the first alarm after the change minus 20 000. Also counts the
alarms of each default detector on 100 000 stationary outcomes. Run:
``.venv/bin/python benchmarks/drift_delays.py [--seeds 30]``
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
from streameval.core.drift import DEFAULT_DETECTORS, make_detector

CHANGE, LENGTH = 20_000, 60_000


def delays(seed: int) -> dict[str, int | None]:
    rng = np.random.default_rng(seed)
    rates = np.where(np.arange(LENGTH) < CHANGE, 0.15, 0.45)
    errors = (rng.random(LENGTH) < rates).astype(np.float64)
    out = {}
    for spec in DEFAULT_DETECTORS:
        detector = make_detector(spec)
        after = [a.index for a in detector.update(errors) if a.index > CHANGE]
        out[detector.name] = after[0] - CHANGE if after else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=30)
    args = parser.parse_args()
    runs = [delays(seed) for seed in range(args.seeds)]
    print(f"seed 11: {delays(11)}")
    for name in runs[0]:
        values = [r[name] for r in runs if r[name] is not None]
        print(f"{name:<20} seeds 0-{args.seeds - 1}: delay {min(values)}-{max(values)}, "
              f"median {statistics.median(values)}, missed {args.seeds - len(values)}")  # fmt: skip
    rng = np.random.default_rng(7)
    stationary = (rng.random(100_000) < 0.15).astype(np.float64)
    fired = {
        spec["type"]: len(make_detector(spec).update(stationary)) for spec in DEFAULT_DETECTORS
    }
    print(f"alarms on 100 000 stationary outcomes (seed 7): {fired}")


if __name__ == "__main__":
    main()
