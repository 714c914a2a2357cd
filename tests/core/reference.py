"""Independent reference values: scikit-learn on the covered outcomes, and slow loops.

The fading estimate of any ratio measure equals the same measure computed on all outcomes with
sample weights a^(n-1-j), so scikit-learn's ``sample_weight`` gives a reference for fading too.
The persistent baseline and κ_M have no scikit-learn counterpart: they are computed with plain
loops straight from their definitions (docs/measures.md).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from sklearn import metrics

NAN = math.nan


def covered(n_seen: int, estimator: str) -> tuple[np.ndarray, np.ndarray]:
    """Indices and weights of the outcomes an estimate covers after ``n_seen`` outcomes."""
    kind, _, arg = estimator.partition(":")
    idx = np.arange(n_seen)
    if kind == "cumulative":
        return idx, np.ones(n_seen)
    if kind == "window":
        start = max(0, n_seen - int(arg))
        return idx[start:], np.ones(n_seen - start)
    a = float(arg)
    return idx, np.array([a ** (n_seen - 1 - j) for j in range(n_seen)])


def _skill(p, base):
    if base != base or base == 1.0:
        return NAN
    return (p - base) / (1 - base)


def reference_measures(y_true, y_pred, estimator: str, positive: int | None = None) -> dict:
    """Reference values after all of ``y_true``/``y_pred`` have been seen."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    idx, w = covered(len(y_true), estimator)
    t, h = y_true[idx], y_pred[idx]
    out: dict[str, float] = {"n": len(idx), "n_effective": float(w.sum())}
    # persistent baseline: previous outcome in arrival order, first outcome of the stream excluded
    correct = scored = 0.0
    for j, weight in zip(idx, w, strict=True):
        if j == 0:
            continue
        scored += weight
        correct += weight * (y_true[j] == y_true[j - 1])
    out["p_per"] = correct / scored if scored else NAN
    if len(idx) == 0:
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = metrics.accuracy_score(t, h, sample_weight=w)
        out["accuracy"] = p
        out["error"] = 1 - p
        out["balanced_accuracy"] = metrics.balanced_accuracy_score(t, h, sample_weight=w)
        present = np.unique(t)
        union = np.unique(np.concatenate([t, h]))
        recalls = metrics.recall_score(t, h, labels=present, average=None, sample_weight=w)
        out["g_mean"] = float(np.prod(recalls) ** (1 / len(recalls)))
        single_true, single_pred = len(present) == 1, len(np.unique(h)) == 1
        # scikit-learn reports 0 where MCC is undefined; the project reports NaN
        out["mcc"] = (
            NAN if single_true or single_pred else metrics.matthews_corrcoef(t, h, sample_weight=w)
        )
        if single_true and single_pred and present[0] == h[0]:
            out["kappa"] = NAN
        else:
            out["kappa"] = metrics.cohen_kappa_score(t, h, sample_weight=w)
        for avg in ("macro",):
            prec, rec, f1, _ = metrics.precision_recall_fscore_support(
                t, h, labels=union, average=avg, zero_division=0, sample_weight=w
            )
            out["precision_macro"], out["recall_macro"], out["f1_macro"] = prec, rec, f1
        prec, rec, f1, _ = metrics.precision_recall_fscore_support(
            t, h, labels=union, average=None, zero_division=np.nan, sample_weight=w
        )
        for c, pc, rc, fc in zip(union, prec, rec, f1, strict=True):
            out[f"precision[{c}]"], out[f"recall[{c}]"], out[f"f1[{c}]"] = pc, rc, fc
        if positive is not None:
            prec, rec, _, _ = metrics.precision_recall_fscore_support(
                t, h, labels=[positive], average=None, zero_division=np.nan, sample_weight=w
            )
            out["precision_positive"], out["recall_positive"] = prec[0], rec[0]
            tp = w[(t == positive) & (h == positive)].sum()
            denominator = w[t == positive].sum() + w[h == positive].sum()
            out["f1_positive"] = (
                NAN if math.isnan(prec[0]) or math.isnan(rec[0]) else 2 * tp / denominator
            )
    # baselines and the kappa family, from their definitions
    k = int(max(y_true.max(), y_pred.max())) + 1
    prior = np.array([w[t == i].sum() for i in range(k)]) / w.sum()
    share = np.array([w[h == i].sum() for i in range(k)]) / w.sum()
    out["p_0"] = 1 / k
    out["p_maj"] = float(prior.max())
    out["p_ran"] = float(prior @ share)
    out["kappa_m"] = _skill(p, out["p_maj"])
    out["kappa_temporal"] = _skill(p, out["p_per"])
    # sqrt amplifies rounding noise near 0 (κ = 1e-17 vs 0 would differ by 1e-8): clamp it
    kt, kk = (0.0 if abs(x) < 1e-12 else x for x in (out["kappa_temporal"], out["kappa"]))
    out["kappa_plus"] = NAN if kt != kt or kk != kk else math.sqrt(max(0, kk) * max(0, kt))
    n_eff, p_ran = out["n_effective"], out["p_ran"]
    if not math.isnan(out["kappa"]):
        out["kappa_se"] = math.sqrt(p * (1 - p) / (n_eff * (1 - p_ran) ** 2))
        out["kappa_se0"] = math.sqrt(p_ran / (n_eff * (1 - p_ran)))
        out["kappa_z"] = out["kappa"] / out["kappa_se0"] if out["kappa_se0"] else NAN
    return out


def assert_measures_match(got: dict, want: dict, context: str = "", tol: float = 1e-9) -> None:
    """Every reference value is matched (NaN matches NaN only); no per-class key is extra."""
    for name, expected in want.items():
        assert name in got, f"{context}: {name} missing"
        actual = got[name]
        if isinstance(expected, float) and math.isnan(expected):
            assert math.isnan(actual), f"{context}: {name} = {actual}, expected NaN"
        else:
            assert math.isclose(actual, expected, rel_tol=tol, abs_tol=tol), (
                f"{context}: {name} = {actual!r}, expected {expected!r}"
            )
    extra = {k for k in got if "[" in k} - set(want)
    assert not extra, f"{context}: per-class keys without a reference: {sorted(extra)}"
