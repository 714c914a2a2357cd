"""Classification measures and baselines from a (possibly faded) confusion matrix.

One function, :func:`compute_measures`, turns a :class:`ConfusionSnapshot` (what every
estimator of :mod:`streameval.core.estimators` reads out) into the flat mapping of every
measure the project publishes. Undefined values are NaN (docs/measures.md).

Measures (names on the wire)
----------------------------
``accuracy``, ``error``
    p = trace/total and 1 − p.
``balanced_accuracy``, ``g_mean``
    Arithmetic and geometric mean of the recalls of the classes present in the true labels
    (docs/measures.md).
``kappa``
    Cohen's κ = (p − p_ran)/(1 − p_ran) ([ZB] §4.2, [BS]).
``kappa_m``
    κ_M = (p − p_maj)/(1 − p_maj) (Bifet et al. 2015, as in MOA).
``kappa_temporal``
    κ_per = (p − p_per)/(1 − p_per), the Kappa-Temporal statistic ([ZB] §4.3).
``kappa_plus``
    κ⁺ = sqrt(max(0, κ)·max(0, κ_per)), the geometric combination of κ and κ_per of the
    journal version of [ZB].
``mcc``
    Gorodkin's R_K, the k-class Matthews correlation; the binary formula for k = 2.
``precision_macro``, ``recall_macro``, ``f1_macro``
    As scikit-learn's ``average="macro", zero_division=0`` over the classes seen in the true
    or predicted labels of the estimate.
``precision[c]``, ``recall[c]``, ``f1[c]``
    Per class c (one-vs-rest); NaN when undefined. F1 is 2·TP/(2·TP + FP + FN).
``precision_positive``, ``recall_positive``, ``f1_positive``
    Binary values for the configured positive class; F1 is NaN when precision or recall is.
``p_0``, ``p_maj``, ``p_per``, ``p_ran``
    Baselines: uniform random over the k known classes, majority class, persistent
    (no-change, first outcome not scored) and random with the model's prediction shares.
``kappa_se``, ``kappa_se0``, ``kappa_z``
    Cohen's standard error of κ, its standard error under H0: κ = 0, and z = κ/se0
    (one-sided 5 % test: z > 1.65), with N = ``n_effective`` ([ZB] §4.2).
``n``, ``n_effective``, ``n_kish``
    Outcomes the estimate covers, the sum of their weights (N_a under fading) and the
    effective sample size (Σw)²/Σw² (Kish; n under cumulative and window).
``<measure>_lo``, ``<measure>_hi``; ``precision_lo[c]`` …
    Interval bounds at the configured confidence (default 95 %): Wilson score intervals of
    the proportions (accuracy, error, balanced accuracy, p_maj, p_per, per-class and positive
    precision and recall), each with the effective size of its own denominator; κ, κ_M, κ_per
    ± z·(Cohen's standard error with the measure's baseline), κ⁺ from the bounds of κ and
    κ_per (docs/measures.md, "Intervals").

References
----------
Žliobaitė, Bifet, Read, Pfahringer, Holmes (2015), *Evaluation methods and decision theory
for classification of streaming data with temporal dependence*, Machine Learning 98(3):
baselines (§3), κ, κ_per and the combined κ⁺ (§4). Brzezinski, Stefanowski, Susmaga, Szczęch,
*On the dynamics of classification measures for imbalanced and streaming data*: the eight
confusion-matrix measures, eqs. (1)–(8). Gorodkin (2004) for R_K. The intervals' references:
:mod:`streameval.core.intervals`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from streameval.core.intervals import DEFAULT_CONFIDENCE, kish, normal_quantile, wilson

__all__ = [
    "INTERVAL_MEASURES",
    "ROUNDING_NOISE",
    "SCALAR_MEASURES",
    "ConfusionSnapshot",
    "chance_is_certain",
    "compute_measures",
    "kappa_plus",
    "skill",
]

NAN = math.nan


@dataclass(frozen=True)
class ConfusionSnapshot:
    """What every measure is computed from.

    ``confusion[i, j]`` is the (possibly faded) count of outcomes with true class ``i`` and
    predicted class ``j``. ``persistent_correct / persistent_total`` is the accuracy of the
    no-change predictor under the same estimator (the first outcome of a stream has no previous
    label and is not scored). ``n`` is the number of outcomes the estimate covers and
    ``n_effective`` the sum of their weights (equal to ``n`` except under fading).

    Under fading, ``squares`` holds the sums of the *squared* weights behind every denominator
    of a published proportion — per true class (k rows), per predicted class (k columns), and of
    the outcomes the persistent baseline scores (one) — for Kish's effective sample size
    (Σw)²/Σw² (docs/measures.md, "Intervals"). ``None`` means every weight is 1, Σw² = Σw.
    """

    confusion: np.ndarray
    persistent_correct: float
    persistent_total: float
    n: int
    n_effective: float
    squares: np.ndarray | None = None


#: Measures reported with interval bounds ``<name>_lo``, ``<name>_hi`` (per class, too:
#: ``precision_lo[c]``, and ``precision_positive_lo`` ...)
INTERVAL_MEASURES = (
    "accuracy",
    "error",
    "balanced_accuracy",
    "p_maj",
    "p_per",
    "kappa",
    "kappa_m",
    "kappa_temporal",
    "kappa_plus",
)

#: Names of the measures every estimate reports, in a stable order.
SCALAR_MEASURES = (
    "n",
    "n_effective",
    "accuracy",
    "error",
    "balanced_accuracy",
    "kappa",
    "kappa_m",
    "kappa_temporal",
    "kappa_plus",
    "g_mean",
    "mcc",
    "precision_macro",
    "recall_macro",
    "f1_macro",
    "p_0",
    "p_maj",
    "p_per",
    "p_ran",
    "kappa_se",
    "kappa_se0",
    "kappa_z",
    "n_kish",
    *(f"{name}_{end}" for name in INTERVAL_MEASURES for end in ("lo", "hi")),
)


def _ratio(num: float, den: float) -> float:
    return num / den if den != 0 else NAN


def skill(p: float, baseline: float, baseline_is_one: bool) -> float:
    """(p − baseline)/(1 − baseline): κ against p_ran, κ_M against p_maj, κ_per against p_per.

    NaN when the baseline is 1: exactly (``baseline_is_one``, decided from which classes hold
    mass, never from a rounded ratio of faded counts), or to within rounding noise — a class
    that faded to 1e-44 beside the others leaves 1 − baseline = 0 in floating point, as good as
    one class.

    >>> skill(0.7, 0.5, False), skill(1.0, 1.0, True), skill(1.0, 1.0, False)
    (0.3999999999999999, nan, nan)
    """
    if baseline_is_one or p != p or not 1.0 - baseline > ROUNDING_NOISE:
        return NAN
    return (p - baseline) / (1.0 - baseline)


def chance_is_certain(true: Sequence[float], pred: Sequence[float]) -> bool:
    """Whether p_ran = Σ P(i)·P_h(i) is exactly 1: every true and every predicted label is one
    and the same class. ``true`` and ``pred`` are the per-class counts (faded or not).

    >>> chance_is_certain([5.0, 0.0], [5.0, 0.0]), chance_is_certain([5.0, 0.0], [4.0, 1e-30])
    (True, False)
    """
    return sum(1 for t, h in zip(true, pred, strict=True) if t > 0 or h > 0) == 1


#: κ and κ_per closer to 0 than this are rounding noise of faded counts (a majority-class
#: model has κ = 0 exactly, but faded sums give ±1e-16); κ⁺ treats them as 0, because the
#: square root would turn 1e-16 into a visible 1e-8.
ROUNDING_NOISE = 1e-12


def _positive_part(x: float) -> float:
    # max(0, nan) is 0 in Python: keep NaN explicitly.
    return x if (x != x or x > ROUNDING_NOISE) else 0.0


def kappa_plus(kappa: float, kappa_temporal: float) -> float:
    """κ⁺ = sqrt(max(0, κ)·max(0, κ_per)) ([ZB], the journal version's combined measure);
    NaN when either is undefined.

    >>> kappa_plus(0.4, -0.5), kappa_plus(0.36, 0.25), kappa_plus(float("nan"), 0.5)
    (0.0, 0.3, nan)
    """
    if kappa != kappa or kappa_temporal != kappa_temporal:
        return NAN
    return math.sqrt(_positive_part(kappa) * _positive_part(kappa_temporal))


def _skill_bounds(kappa: float, baseline: float, low: float, high: float) -> tuple[float, float]:
    """κ's bounds at p's bounds with the baseline held: κ ± z·s/(1 − baseline), Cohen's
    standard error with that baseline (p's bounds truncated to [0, 1])."""
    if kappa != kappa:
        return NAN, NAN
    return (low - baseline) / (1 - baseline), (high - baseline) / (1 - baseline)


def compute_measures(
    snapshot: ConfusionSnapshot,
    labels: Sequence[Any] | None = None,
    positive: int | None = None,
    n_classes: int | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
) -> dict[str, float]:
    """Every measure of one estimate, as a flat ``{name: float}`` mapping.

    Parameters
    ----------
    snapshot
        The estimate (confusion matrix, persistent-baseline counts, n).
    labels
        Class names in index order, for the per-class keys ``precision[<label>]``; class
        indices are used when omitted.
    positive
        Index of the positive class, for ``precision_positive`` and friends. The index may be
        beyond the confusion matrix (a class not seen yet): its counts are then zero.
    n_classes
        Number of known classes k for ``p_0 = 1/k``; the size of the confusion matrix when
        omitted.
    confidence
        Confidence level of the ``_lo``/``_hi`` bounds (default 0.95).

    Examples
    --------
    The binary example E11 of docs/measures.md (TP=8, FN=2, FP=4, TN=86; class 1 is positive):

    >>> import numpy as np
    >>> from streameval.core.measures import ConfusionSnapshot
    >>> snap = ConfusionSnapshot(np.array([[86, 4], [2, 8]]), 0, 0, 100, 100.0)
    >>> m = compute_measures(snap, positive=1)
    >>> [round(m[k], 6) for k in ("accuracy", "kappa", "mcc", "g_mean", "f1_positive")]
    [0.94, 0.693878, 0.697518, 0.874325, 0.727273]
    >>> [round(m[k], 6) for k in ("accuracy_lo", "accuracy_hi", "recall_lo[1]", "recall_hi[1]")]
    [0.875232, 0.972214, 0.490162, 0.943318]
    """
    z = normal_quantile(confidence)
    counts = np.asarray(snapshot.confusion, dtype=np.float64)
    k = counts.shape[0]
    # Three numpy reductions, then one pass over the k classes in plain Python: for the class
    # counts of real models this is several times faster than a dozen tiny numpy calls.
    true = counts.sum(axis=1).tolist()
    pred = counts.sum(axis=0).tolist()
    diag = np.diagonal(counts).tolist()
    if snapshot.squares is None:  # every weight 1: Σw² = Σw
        true_sq, pred_sq, scored_sq = true, pred, snapshot.persistent_total
    else:
        squares = snapshot.squares.tolist()
        true_sq, pred_sq, scored_sq = squares[:k], squares[k : 2 * k], squares[2 * k]
    out: dict[str, float] = dict.fromkeys(SCALAR_MEASURES, NAN)
    out["n"] = snapshot.n
    out["n_effective"] = float(snapshot.n_effective)
    known = k if n_classes is None else max(n_classes, k)
    out["p_0"] = 1.0 / known if known else NAN
    out["p_per"] = p_per = _ratio(snapshot.persistent_correct, snapshot.persistent_total)
    out["p_per_lo"], out["p_per_hi"] = wilson(p_per, kish(snapshot.persistent_total, scored_sq), z)
    total = sum(true)
    n_eff = out["n_kish"] = kish(total, sum(true_sq)) if total > 0 else 0.0
    if total > 0:
        names = range(k) if labels is None else labels
        per_class: dict[str, float] = {}
        correct = agreement = true_sq_sum = pred_sq_sum = recall_sum = log_recall_sum = 0.0
        precision_sum = f1_sum = inverse_sizes = 0.0
        n_true = n_pred = n_seen = 0
        zero_recall = False
        for i in range(k):
            t, h, tp = true[i], pred[i], diag[i]
            if t == 0 and h == 0:
                continue
            n_seen += 1
            correct += tp
            agreement += t * h
            true_sq_sum += t * t
            pred_sq_sum += h * h
            f1 = 2 * tp / (t + h)
            f1_sum += f1
            name = names[i]
            if h > 0:
                n_pred += 1
                precision = tp / h
                precision_sum += precision
                precision_bounds = wilson(precision, kish(h, pred_sq[i]), z)
            else:
                precision = NAN
                precision_bounds = (NAN, NAN)
            if t > 0:
                n_true += 1
                recall = tp / t
                recall_sum += recall
                if recall > 0:
                    log_recall_sum += math.log(recall)
                else:
                    zero_recall = True
                row_size = kish(t, true_sq[i])
                inverse_sizes += 1 / row_size
                recall_bounds = wilson(recall, row_size, z)
            else:
                recall = NAN
                recall_bounds = (NAN, NAN)
            per_class[f"precision[{name}]"] = precision
            per_class[f"recall[{name}]"] = recall
            per_class[f"f1[{name}]"] = f1
            per_class[f"precision_lo[{name}]"], per_class[f"precision_hi[{name}]"] = (
                precision_bounds
            )
            per_class[f"recall_lo[{name}]"], per_class[f"recall_hi[{name}]"] = recall_bounds
        p = correct / total
        s2 = total * total
        p_ran = agreement / s2
        # p_ran and p_maj are exactly 1 only when all mass sits in one class: test that
        # exactly rather than trusting a rounded ratio of faded counts.
        single_true, single_pred = n_true == 1, n_pred == 1
        p_ran_is_one = chance_is_certain(true, pred)
        out["accuracy"] = p
        out["error"] = 1.0 - p
        out["p_ran"] = 1.0 if p_ran_is_one else p_ran
        out["p_maj"] = p_maj = 1.0 if single_true else max(true) / total
        out["kappa"] = kappa = skill(p, p_ran, p_ran_is_one)
        out["kappa_m"] = skill(p, p_maj, single_true)
        out["kappa_temporal"] = kappa_temporal = skill(
            p, p_per, snapshot.persistent_correct == snapshot.persistent_total
        )
        out["kappa_plus"] = kappa_plus(kappa, kappa_temporal)
        out["balanced_accuracy"] = recall_sum / n_true
        out["g_mean"] = 0.0 if zero_recall else math.exp(log_recall_sum / n_true)
        # Gorodkin's R_K: (c·s − Σ p_j t_j) / sqrt((s² − Σ p_j²)(s² − Σ t_j²)); undefined (NaN)
        # when all predictions or all true labels are one class. Faded counts never reach 0, so
        # a class that faded to 1e-14 leaves a denominator of rounding noise, or exactly 0:
        # that is one class too, not a correlation of ±1 (or a division by zero).
        pred_spread, true_spread = s2 - pred_sq_sum, s2 - true_sq_sum  # ≥ 2·s for integers
        noise = ROUNDING_NOISE * s2
        if not (single_true or single_pred) and pred_spread > noise and true_spread > noise:
            out["mcc"] = (correct * total - agreement) / math.sqrt(pred_spread * true_spread)
        # macro averages as scikit-learn's zero_division=0 over the classes seen
        out["precision_macro"] = precision_sum / n_seen
        out["recall_macro"] = recall_sum / n_seen
        out["f1_macro"] = f1_sum / n_seen
        # Intervals (docs/measures.md, "Intervals"): Wilson for proportions, each with the
        # effective size of its own denominator; the κ family at the Wald bounds of p
        out["accuracy_lo"], out["accuracy_hi"] = low, high = wilson(p, n_eff, z)
        out["error_lo"], out["error_hi"] = 1.0 - high, 1.0 - low
        # balanced accuracy, the mean of n_true recalls: Kish's size of an equally weighted
        # mean of strata, n_true² / Σ_c 1/n_c
        balanced_size = n_true * n_true / inverse_sizes
        out["balanced_accuracy_lo"], out["balanced_accuracy_hi"] = wilson(
            out["balanced_accuracy"], balanced_size, z
        )
        out["p_maj_lo"], out["p_maj_hi"] = wilson(p_maj, n_eff, z)
        if kappa == kappa and n_eff > 0:  # κ defined: 1 − p_ran is no rounding noise
            out["kappa_se"] = math.sqrt(p * (1 - p) / (n_eff * (1 - p_ran) ** 2))
            out["kappa_se0"] = se0 = math.sqrt(p_ran / (n_eff * (1 - p_ran)))
            out["kappa_z"] = _ratio(kappa, se0)
        if n_eff > 0:
            spread = z * math.sqrt(p * (1 - p) / n_eff)
            low, high = max(0.0, p - spread), min(1.0, p + spread)
            for name, baseline in (
                ("kappa", p_ran),
                ("kappa_m", p_maj),
                ("kappa_temporal", p_per),
            ):
                out[f"{name}_lo"], out[f"{name}_hi"] = _skill_bounds(out[name], baseline, low, high)
            # κ⁺ grows with κ and with κ_per: its bounds are κ⁺ of their bounds
            out["kappa_plus_lo"] = kappa_plus(out["kappa_lo"], out["kappa_temporal_lo"])
            out["kappa_plus_hi"] = kappa_plus(out["kappa_hi"], out["kappa_temporal_hi"])
        if positive is not None:
            out.update(_positive_measures(true, pred, diag, true_sq, pred_sq, positive, z))
        out.update(per_class)
    elif positive is not None:
        out.update(_positive_measures(true, pred, diag, true_sq, pred_sq, positive, z))
    return out


def _positive_measures(true, pred, diag, true_sq, pred_sq, positive: int, z: float):
    """Binary precision, recall and F1 of one class against all others ([BS] eqs. (1)–(8)),
    and the Wilson bounds of precision and recall."""
    if positive < len(true):
        tp, actual, predicted = diag[positive], true[positive], pred[positive]
        actual_sq, predicted_sq = true_sq[positive], pred_sq[positive]
    else:  # a class not seen yet
        tp = actual = predicted = actual_sq = predicted_sq = 0.0
    precision = _ratio(tp, predicted)
    recall = _ratio(tp, actual)
    if precision != precision or recall != recall:
        f1 = NAN
    else:
        f1 = 2 * tp / (actual + predicted)
    out = {"precision_positive": precision, "recall_positive": recall, "f1_positive": f1}
    out["precision_positive_lo"], out["precision_positive_hi"] = wilson(
        precision, kish(predicted, predicted_sq), z
    )
    out["recall_positive_lo"], out["recall_positive_hi"] = wilson(
        recall, kish(actual, actual_sq), z
    )
    return out
