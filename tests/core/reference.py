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

#: z of the default 95 % intervals, to the digits printed in tables of the normal distribution
Z95 = 1.959963984540054


def kish_loop(weights) -> float:
    """(Σw)²/Σw², a plain loop over the weights (Kish 1965)."""
    total = squares = 0.0
    for weight in weights:
        total += weight
        squares += weight * weight
    return total * total / squares if squares else 0.0


def wilson_roots(p: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson's interval as Wilson (1927) defines it: the π with (p − π)² = z²·π(1 − π)/n,
    the two roots of (1 + z²/n)π² − (2p + z²/n)π + p² = 0."""
    if p != p or not n > 0:
        return NAN, NAN
    a, b, c = 1 + z * z / n, -(2 * p + z * z / n), p * p
    root = math.sqrt(max(0.0, b * b - 4 * a * c))
    return max(0.0, (-b - root) / (2 * a)), min(1.0, (-b + root) / (2 * a))


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
    out["p_per_lo"], out["p_per_hi"] = wilson_roots(
        out["p_per"], kish_loop(weight for j, weight in zip(idx, w, strict=True) if j > 0)
    )
    out["n_kish"] = kish_loop(w)
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
            out[f"precision_lo[{c}]"], out[f"precision_hi[{c}]"] = wilson_roots(
                pc, kish_loop(w[h == c])
            )
            out[f"recall_lo[{c}]"], out[f"recall_hi[{c}]"] = wilson_roots(rc, kish_loop(w[t == c]))
        out["accuracy_lo"], out["accuracy_hi"] = wilson_roots(p, out["n_kish"])
        out["error_lo"], out["error_hi"] = wilson_roots(1 - p, out["n_kish"])
        # balanced accuracy: Kish's size of an equal-weight mean of the per-class strata
        strata = [kish_loop(w[t == c]) for c in present]
        out["balanced_accuracy_lo"], out["balanced_accuracy_hi"] = wilson_roots(
            out["balanced_accuracy"], len(strata) ** 2 / sum(1 / size for size in strata)
        )
        if positive is not None:
            prec, rec, _, _ = metrics.precision_recall_fscore_support(
                t, h, labels=[positive], average=None, zero_division=np.nan, sample_weight=w
            )
            out["precision_positive"], out["recall_positive"] = prec[0], rec[0]
            for name, value, where in (
                ("precision_positive", prec[0], h == positive),
                ("recall_positive", rec[0], t == positive),
            ):
                out[f"{name}_lo"], out[f"{name}_hi"] = wilson_roots(value, kish_loop(w[where]))
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
    out["p_maj_lo"], out["p_maj_hi"] = wilson_roots(out["p_maj"], out["n_kish"])
    n_eff, p_ran = out["n_kish"], out["p_ran"]
    if not math.isnan(out["kappa"]):
        out["kappa_se"] = math.sqrt(p * (1 - p) / (n_eff * (1 - p_ran) ** 2))
        out["kappa_se0"] = math.sqrt(p_ran / (n_eff * (1 - p_ran)))
        out["kappa_z"] = out["kappa"] / out["kappa_se0"] if out["kappa_se0"] else NAN
    # κ, κ_M, κ_per ± z·(Cohen's standard error with their own baseline), where p ± z·s
    # stays within [0, 1]; κ⁺ of the bounds of κ and κ_per
    s = math.sqrt(p * (1 - p) / n_eff)
    for name, base in (
        ("kappa", p_ran),
        ("kappa_m", out["p_maj"]),
        ("kappa_temporal", out["p_per"]),
    ):
        if math.isnan(out[name]):
            out[f"{name}_lo"] = out[f"{name}_hi"] = NAN
            continue
        se = s / (1 - base)
        low = out[name] - Z95 * se if p - Z95 * s >= 0 else (0 - base) / (1 - base)
        high = out[name] + Z95 * se if p + Z95 * s <= 1 else 1.0
        out[f"{name}_lo"], out[f"{name}_hi"] = low, high
    for end in ("lo", "hi"):
        kk, kt = (
            0.0 if abs(x) < 1e-12 else x
            for x in (out[f"kappa_{end}"], out[f"kappa_temporal_{end}"])
        )
        out[f"kappa_plus_{end}"] = (
            NAN if kt != kt or kk != kk else math.sqrt(max(0, kk) * max(0, kt))
        )
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
