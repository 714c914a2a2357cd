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

A third stream, ``binary+scores``, adds each prediction's probabilities:

* streameval: the same ``Evaluator`` and, per estimator, a ``ScoreEstimator`` (log-loss,
  Brier, ECE with its reliability bins, ROC AUC of the positive class — exact under every
  estimator), fed batch by batch and read at the end of each batch;
* River: the same label metrics plus ``LogLoss`` (cumulative and ``Rolling``) and ``ROCAUC``
  (cumulative, approximated on 10 thresholds, River's default) and ``RollingROCAUC`` (exact,
  the window of 1000), updated per event. River has no Brier score, no ECE and no fading AUC.

The ``b+scores`` stream runs streameval twice, first with the compiled loops of the ROC AUC
(``pipeline/kernels``, when installed), then with their numpy references (the same bits), and
prints both rates.

Run: ``make bench`` or ``.venv/bin/python benchmarks/core_vs_river.py [--outcomes N]``.
The ratio is what matters: both sides run in the same process, one after the other.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from river import metrics, utils
from streameval.core import Evaluator
from streameval.core import kernels as loops
from streameval.core.forgetting import parse_estimators
from streameval.core.probabilistic import ScoredBatch, ScoreEstimator


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


def make_scores(y_pred: list, seed: int) -> np.ndarray:
    """The probability of class 1 of each prediction: above 0.5 when it predicts 1, to three
    decimals (as many models send them), never 0 or 1 (River clips at 1e-15, scikit-learn and
    streameval at 2.2e-16: their log-losses differ only there)."""
    rng = np.random.default_rng(seed)
    pred = np.array(y_pred)
    half = 0.5 * rng.random(pred.size)
    return np.clip(np.round(np.where(pred == 1, 0.5 + half, half), 3), 0.001, 0.999)


def run_streameval_scores(y_true, y_pred, p1, batch) -> tuple[float, dict, list]:
    ev = Evaluator(positive_label=1)
    specs = parse_estimators(["cumulative", "window:1000", "fading:0.999"])
    scored = [ScoreEstimator(spec) for spec in specs]
    y = np.array(y_true, dtype=np.int64)
    proba = np.column_stack([1.0 - p1, p1])
    start = time.perf_counter()
    for lo in range(0, len(y_true), batch):
        ev.update(y_true[lo : lo + batch], y_pred[lo : lo + batch])
        chunk = ScoredBatch.of(y[lo : lo + batch], proba[lo : lo + batch], 10)
        for estimator in scored:
            estimator.update(chunk, [1])
        result = ev.measures()
        probabilistic = [estimator.measures(1) for estimator in scored]
    return time.perf_counter() - start, result, probabilistic


def run_river_scores(y_true, y_pred, p1, batch) -> tuple[float, list]:
    labels = river_metrics(True)
    scored = [
        metrics.LogLoss(),
        utils.Rolling(metrics.LogLoss, window_size=1000),
        metrics.ROCAUC(),
        metrics.RollingROCAUC(window_size=1000),
    ]
    truth = [bool(t) for t in y_true]
    probabilities = [{True: p, False: 1.0 - p} for p in p1.tolist()]
    start = time.perf_counter()
    for lo in range(0, len(y_true), batch):
        for i in range(lo, min(lo + batch, len(y_true))):
            for m in labels:
                m.update(y_true[i], y_pred[i])
            for m in scored:
                m.update(truth[i], probabilities[i])
        result = [(m, m.get()) for m in labels + scored]
    return time.perf_counter() - start, result


def check_scores(ours: list, river: list, y_true: list, p1: np.ndarray) -> str:
    """Log-loss must agree with River's (cumulative, window); the window's AUC must be
    scikit-learn's. River's RollingROCAUC counts a tie as 0, not one half (checked by hand:
    scores 0.5/0.5, 0.7, 0.2 give it 0.75, scikit-learn 0.875), so on scores to three decimals
    it differs: the difference is returned for the report."""
    from sklearn.metrics import roc_auc_score

    values = {}
    for m, v in river:
        rolling = isinstance(m, utils.Rolling)
        values[type(m.obj if rolling else m).__name__ + ("/rolling" if rolling else "")] = v
    cumulative, window = ours[0], ours[1]
    assert abs(cumulative["log_loss"] - values["LogLoss"]) < 1e-9
    assert abs(window["log_loss"] - values["LogLoss/rolling"]) < 1e-9
    exact = roc_auc_score(np.array(y_true[-1000:]) == 1, p1[-1000:])
    assert abs(window["roc_auc"] - exact) < 1e-12
    return (
        f"window AUC: streameval {window['roc_auc']:.6f} (= scikit-learn), River RollingROCAUC "
        f"{values['RollingROCAUC']:.6f} (ties counted 0); cumulative AUC: streameval "
        f"{cumulative['roc_auc']:.6f} exact, River ROCAUC {values['ROCAUC']:.6f} (10 thresholds)"
    )


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
    print(f"{'stream':<21} {'streameval/s':>14} {'River/s':>12} {'ratio':>8}   target")
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
            f"{name:<21} {ours_rate:>14,.0f} {river_rate:>12,.0f} {ratio:>7.0f}x   "
            f">= {target}x {verdict}"
        )
    y_true, y_pred = make_stream(args.outcomes, 2, seed=2)
    p1 = make_scores(y_pred, seed=2)
    compiled = loops.use(True)
    t_ours, _, probabilistic = run_streameval_scores(y_true, y_pred, p1, args.batch)
    loops.use(False)
    t_numpy, _, in_numpy = run_streameval_scores(y_true, y_pred, p1, args.batch)
    loops.use(True)
    assert repr(in_numpy) == repr(probabilistic), "the compiled loops and numpy differ"
    t_river, river = run_river_scores(y_true[:n_river], y_pred[:n_river], p1[:n_river], args.batch)
    agreement = ""
    if n_river == args.outcomes:
        agreement = check_scores(probabilistic, river, y_true, p1)
    river_rate = n_river / t_river
    if compiled:
        rows = [("b+scores", t_ours, None), ("b+scores, numpy AUC", t_numpy, "same bits")]
    else:
        rows = [("b+scores (no kernels)", t_numpy, None)]
    for name, seconds, note in rows:
        ours_rate = args.outcomes / seconds
        ratio = ours_rate / river_rate
        target = note or (">= 30x " + ("met" if ratio >= 30 else "MISSED"))
        print(f"{name:<21} {ours_rate:>14,.0f} {river_rate:>12,.0f} {ratio:>7.0f}x   {target}")
    if not compiled:
        print("(streameval_kernels is not installed: pip install ./pipeline/kernels)")
    print(f"outcomes evaluated per stream: streameval {args.outcomes:,}, River {n_river:,}")
    if agreement:
        print(agreement)


if __name__ == "__main__":
    main()
