"""The held ROC AUC per batch, compiled and in numpy, side by side on the same streams.

A ``HeldAUC`` (``pipeline/streameval/core/roc_auc.py``) of a window or a fading horizon takes
200 000 binary outcomes in batches of 1000 and is read after each batch, once with the loops
of ``streameval_kernels`` (``pipeline/kernels``) and once with their numpy references. Prints
the mean time per batch of the update and of the read (batches after the first 50 000
outcomes, when the horizon is full), and checks that both paths gave the same bits.

Run: ``.venv/bin/python benchmarks/held_auc.py [--outcomes N]``.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from streameval.core import kernels as loops
from streameval.core.roc_auc import HeldAUC, auc_horizon

BATCH = 1000


def run(y: np.ndarray, proba: np.ndarray, factor: float | None) -> tuple[float, float, list]:
    size = auc_horizon(factor) if factor is not None else 1000
    held = HeldAUC(size, factor)
    held.track([1])
    update = read = 0.0
    values = []
    for lo in range(0, y.size, BATCH):
        t0 = time.perf_counter()
        held.update(y[lo : lo + BATCH], proba[lo : lo + BATCH])
        t1 = time.perf_counter()
        values.append(held.auc(1))
        t2 = time.perf_counter()
        if lo >= 50_000:
            update, read = update + t1 - t0, read + t2 - t1
    batches = (y.size - 50_000) / BATCH
    return update / batches * 1e6, read / batches * 1e6, values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--outcomes", type=int, default=200_000)
    args = parser.parse_args()
    if not loops.use(True):
        sys.exit("streameval_kernels is not installed: pip install ./pipeline/kernels")
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, args.outcomes)
    rounded = np.clip(np.round(0.5 * y + 0.5 * rng.random(args.outcomes), 3), 0.001, 0.999)
    continuous = rng.random(args.outcomes)
    print(f"{'held outcomes, scores':<32} {'numpy µs/batch':>22} {'compiled µs/batch':>22}")
    for factor, name in ((0.999, "fading 0.999"), (None, "window 1000")):
        for p1, kind in ((rounded, "3 decimals"), (continuous, "continuous")):
            proba = np.column_stack([1.0 - p1, p1])
            loops.use(False)
            numpy_update, numpy_read, reference = run(y, proba, factor)
            loops.use(True)
            update, read, compiled = run(y, proba, factor)
            assert repr(reference) == repr(compiled), "the two paths gave different AUCs"
            print(
                f"{name + ', ' + kind:<32} {f'{numpy_update:.0f} + {numpy_read:.0f}':>22} "
                f"{f'{update:.0f} + {read:.0f}':>22}"
            )
    print(f"(update + read, per batch of {BATCH}; {args.outcomes:,} outcomes on each side)")


if __name__ == "__main__":
    main()
