"""Throughput of the streameval core against River, side by side, on the same streams.

Both sides evaluate the same 200k-outcome streams (binary and 5-class) and read every measure
at the end of each batch of 1000 outcomes:

* streameval: one ``Evaluator`` with its default estimators (cumulative, window:1000,
  fading:0.999), every measure of ``streameval.core.measures`` (including κ_M, κ_per, κ⁺, the
  baselines and the per-class values), fed with class labels batch by batch;
* River: its closest equivalents (Accuracy, BalancedAccuracy, CohenKappa, MCC, GeometricMean,
  MacroPrecision, MacroRecall, MacroF1, and Precision/Recall/F1 of the positive class in the
  binary case), cumulative and wrapped in ``utils.Rolling(window_size=1000)``, updated per
  event as River is used. River has no fading estimator and no κ_M/κ_per/κ⁺, so its set is the
  smaller one.

Run: ``make bench`` or ``.venv/bin/python benchmarks/core_vs_river.py [--outcomes N]``.
The ratio is what matters: both sides run in the same process, one after the other.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from river import metrics, utils
from streameval.core import Evaluator


def make_stream(n: int, k: int, seed: int) -> tuple[list, list]:
    """Labels with temporal dependence and a ~75 %-accurate model, as Python ints."""
    rng = np.random.default_rng(seed)
    change = rng.random(n) < 0.2
    y = np.cumsum(change * rng.integers(1, k, n)) % k
    noise = rng.integers(0, k, n)
    pred = np.where(rng.random(n) < 0.75, y, noise)
    return y.tolist(), pred.tolist()


def run_streameval(y_true: list, y_pred: list, batch: int, positive) -> tuple[float, dict]:
    ev = Evaluator(positive_label=positive)
    start = time.perf_counter()
    for lo in range(0, len(y_true), batch):
        ev.update(y_true[lo : lo + batch], y_pred[lo : lo + batch])
        result = ev.measures()
    return time.perf_counter() - start, result


def river_metrics(binary: bool) -> list:
    factories = [
        metrics.Accuracy,
        metrics.BalancedAccuracy,
        metrics.CohenKappa,
        metrics.MCC,
        metrics.GeometricMean,
        metrics.MacroPrecision,
        metrics.MacroRecall,
        metrics.MacroF1,
    ]
    if binary:
        factories += [metrics.Precision, metrics.Recall, metrics.F1]
    return [f() for f in factories] + [utils.Rolling(f, window_size=1000) for f in factories]


def run_river(y_true: list, y_pred: list, batch: int, binary: bool) -> tuple[float, list]:
    ms = river_metrics(binary)
    start = time.perf_counter()
    for lo in range(0, len(y_true), batch):
        for yt, yp in zip(y_true[lo : lo + batch], y_pred[lo : lo + batch], strict=True):
            for m in ms:
                m.update(yt, yp)
        result = [(m, m.get()) for m in ms]
    return time.perf_counter() - start, result


def check_agreement(ours: dict, river: list, binary: bool) -> None:
    """Where the two sides overlap they must agree: accuracy, κ (and MCC, binary in River)."""
    pairs = {metrics.Accuracy: "accuracy", metrics.CohenKappa: "kappa", metrics.MacroF1: "f1_macro"}
    if binary:
        pairs[metrics.MCC] = "mcc"
    for metric, value in river:
        inner = metric.obj if isinstance(metric, utils.Rolling) else metric
        if type(inner) in pairs:
            measure = pairs[type(inner)]
            estimator = "window:1000" if isinstance(metric, utils.Rolling) else "cumulative"
            mine = ours[estimator][measure]
            assert abs(mine - value) < 1e-9, (estimator, measure, mine, value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--outcomes", type=int, default=200_000, help="outcomes per stream")
    parser.add_argument("--batch", type=int, default=1000, help="outcomes per batch")
    parser.add_argument(
        "--river-outcomes",
        type=int,
        default=None,
        help="outcomes for River (default: the same); its rate is per outcome",
    )
    args = parser.parse_args()
    n_river = args.river_outcomes or args.outcomes
    print(f"{'stream':<10} {'streameval/s':>14} {'River/s':>12} {'ratio':>8}   target")
    for name, k, target in (("binary", 2, 100), ("5-class", 5, 50)):
        y_true, y_pred = make_stream(args.outcomes, k, seed=k)
        positive = 1 if k == 2 else None
        t_ours, ours = run_streameval(y_true, y_pred, args.batch, positive)
        t_river, river = run_river(y_true[:n_river], y_pred[:n_river], args.batch, k == 2)
        if n_river == args.outcomes:
            check_agreement(ours, river, k == 2)
        ours_rate, river_rate = args.outcomes / t_ours, n_river / t_river
        ratio = ours_rate / river_rate
        verdict = "met" if ratio >= target else "MISSED"
        print(
            f"{name:<10} {ours_rate:>14,.0f} {river_rate:>12,.0f} {ratio:>7.0f}x   "
            f">= {target}x {verdict}"
        )


if __name__ == "__main__":
    main()
