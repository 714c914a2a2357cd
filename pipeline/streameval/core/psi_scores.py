"""Ψ_α of the scores: log-loss and Brier score weighted over the latency bins.

Grzenda et al.'s Ψ_α weighs a measure of the prediction that represents each latency bin
b = 0..B of an outcome by ŵ_b ∝ (1/α)^(b/B) (:mod:`streameval.core.delayed`). Log-loss and
the Brier score are means of per-outcome losses, so their Ψ_α is, as accuracy's (the
per-instance form of Ψ^A in docs/measures.md), the mean under the estimator's weights of each
outcome's weighted sum of its bins' losses:

    s_k = Σ_{b=0..B} ŵ_b · L(p_k^b, y_k),    Ψ_α(L) = Σ_k w_k s_k / Σ_k w_k,

with L the log-loss −ln p_y (p clipped to [ε, 1 − ε], ε the float64 machine epsilon, as for
the views' log-loss) or the multi-class Brier score Σ_c (p_c − 1[y = c])². The probability
vector p_k^b of bin b is that of the prediction the bin's class rule takes: the one in force
at the bin's start when no re-prediction falls in it, the only one when one does, the one in
force at its end under ``bin_rule = "last"``. Under ``"vote"``, a bin with several
re-predictions takes the mixture of the vectors in force during the bin, each weighing the
time it was in force there (in exact units of 1/B ms, as the vote) — the probabilistic
counterpart of the time-weighted vote, which the paper defines for classes only. So under the
vote a crowded bin's vector need not be that of the class the bin counts for Ψ^A: with one-hot
scores Ψ of the Brier score is 2(1 − Ψ^A) under "last", not always under the vote.

Only outcomes every prediction of which has scores enter (``n_psi_scored``): an outcome with
one scored prediction and one without has no probability vector for some bins. An outcome
predicted once has s_k = L(p_k, y_k), its only prediction's loss.

References
----------
Grzenda, Gomes, Bifet (2020), *Performance measures for evolving predictions under delayed
labelling classification*, IJCNN: latency bins and Ψ_α. Brier (1950), eq. 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from streameval.core.delayed import BIN_RULES, DelayedBatch, bin_predictions, psi_weights
from streameval.core.forgetting import EstimatorSpec
from streameval.core.outcome_batches import within
from streameval.core.paired_mean import PairedMean
from streameval.core.probabilistic import EPSILON, prediction_losses

__all__ = ["PSI_SCORE_MEASURES", "PsiScores", "bin_losses"]

#: What :meth:`PsiScores.measures` gives per estimator, in the order published.
PSI_SCORE_MEASURES = ("n_psi_scored", "psi_log_loss", "psi_brier")


def bin_losses(
    y_true: np.ndarray,
    proba: np.ndarray,
    lengths: np.ndarray,
    times: np.ndarray,
    t_instance: np.ndarray,
    t_label: np.ndarray,
    bins: int,
    alpha: float,
    rule: str = "vote",
) -> tuple[np.ndarray, np.ndarray]:
    """Per outcome, s_k of the log-loss and of the Brier score (see the module docstring).

    ``proba`` holds one row per prediction of every outcome, the outcomes' timelines one
    after the other (``lengths`` predictions each, at ``times``, sorted within an outcome).

    Examples
    --------
    E13's instance 1 (docs/measures.md) with scores: B = 4, α = 2, y = 1, predictions at
    t = 0, 3, 5, 7, 8 with P(y) = 0.2, 0.9, 0.8, 0.4, 0.7. Bins 0..3 hold the predictions of
    t = 0, 0 (carried), 3 and 5; bin 4 = [6, 8] holds two re-predictions (t = 7 and 8), so
    under the vote it takes the mixture of t = 5's vector (in force over [6, 7)) and t = 7's
    (over [7, 8)), P(y) = 0.6; under "last" the one in force at its end, t = 8's:

    >>> proba = np.array([[0.8, 0.2], [0.1, 0.9], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]])
    >>> e13 = (np.array([1]), proba, np.array([5]), np.array([0, 3, 5, 7, 8]), np.array([0]),
    ...        np.array([8]), 4, 2.0)
    >>> w = psi_weights(4, 2.0)
    >>> for rule, p in (("vote", [0.2, 0.2, 0.9, 0.8, 0.6]), ("last", [0.2, 0.2, 0.9, 0.8, 0.7])):
    ...     log_loss, brier = bin_losses(*e13, rule=rule)
    ...     p = np.array(p)
    ...     want = [-w @ np.log(p), w @ (2 * (1 - p) ** 2)]
    ...     print(rule, np.allclose([log_loss[0], brier[0]], want))
    vote True
    last True
    """
    n = lengths.size
    ends = np.cumsum(lengths)
    starts = ends - lengths
    owner = np.repeat(np.arange(n), lengths)
    log_loss, brier = prediction_losses(y_true[owner], proba)
    out_log, out_brier = log_loss[starts].copy(), brier[starts].copy()
    several = np.flatnonzero(lengths > 1)
    if several.size == 0:
        return out_log, out_brier
    # the outcomes predicted more than once, through the class rule's binning applied to the
    # predictions' positions: the grid says which prediction represents each bin
    sub_lengths = lengths[several]
    rows = np.repeat(starts[several], sub_lengths) + within(sub_lengths)
    sub_owner = np.repeat(np.arange(several.size), sub_lengths)
    later = np.ones(rows.size, dtype=bool)
    later[np.cumsum(sub_lengths) - sub_lengths] = False
    batch = DelayedBatch(
        y_true[several],
        starts[several],
        ends[several] - 1,
        t_instance[several],
        t_label[several],
        sub_owner[later],
        times[rows][later],
        rows[later],
    )
    grid = bin_predictions(batch, bins, "last")[:, : bins + 1]
    per_bin_log, per_bin_brier = log_loss[grid], brier[grid]
    if rule == "vote":
        for o, b, mixed_log, mixed_brier in _mixtures(batch, grid, proba, bins):
            per_bin_log[o, b], per_bin_brier[o, b] = mixed_log, mixed_brier
    weights = psi_weights(bins, alpha)
    out_log[several] = _columns_summed(per_bin_log * weights)
    out_brier[several] = _columns_summed(per_bin_brier * weights)
    return out_log, out_brier


def _mixtures(batch: DelayedBatch, grid: np.ndarray, proba: np.ndarray, bins: int):
    """(outcome, bin, log-loss, Brier) of every bin holding two or more re-predictions: the
    mixture of the vectors in force during the bin, each weighing its time there."""
    t0 = batch.t_instance[batch.owner]
    span = batch.t_label[batch.owner] - t0
    usable = span > 0
    owner, times, rows, t0, span = (
        a[usable] for a in (batch.owner, batch.times, batch.labels, t0, span)
    )
    if owner.size < 2:
        return
    b = np.minimum(bins, 1 + (bins * np.maximum(times - t0, 0)) // np.maximum(span, 1))
    key = owner * (bins + 1) + b
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    sizes = np.diff(np.r_[starts, key.size])
    for start, size in zip(starts[sizes >= 2].tolist(), sizes[sizes >= 2].tolist(), strict=True):
        stop = start + size
        o, bin_ = int(owner[start]), int(b[start])
        begin = int(t0[start]) * bins + int(span[start]) * (bin_ - 1)
        end = int(t0[start]) * bins + int(span[start]) * bin_
        points = np.clip(times[start:stop] * bins, begin, end)
        durations = np.diff(np.r_[begin, points, end]).astype(np.float64)
        held = np.r_[grid[o, bin_ - 1], rows[start:stop]]
        mixture = _columns_summed(proba[held].T * durations) / durations.sum()
        y = int(batch.y_true[o])
        p = float(mixture[y])
        mixed_log = -math.log(min(max(p, EPSILON), 1.0 - EPSILON))
        mixed_brier = math.fsum((mixture * mixture).tolist()) - 2.0 * p + 1.0
        yield o, bin_, mixed_log, mixed_brier


def _columns_summed(values: np.ndarray) -> np.ndarray:
    """Each row's sum, column after column: the same bits for a row whatever the other rows
    (a matrix product's may depend on the batch's shape) and whatever zero columns follow
    (classes the model learnt later)."""
    total = values[:, 0].copy()
    for column in range(1, values.shape[1]):
        total += values[:, column]
    return total


class PsiScores:
    """Ψ_α of the log-loss and of the Brier score of one model, under every estimator.

    Starts at the model's first outcome every prediction of which has scores, and takes only
    such outcomes; the estimate of each is a weighted mean with its interval
    (:class:`~streameval.core.paired_mean.PairedMean`).
    """

    def __init__(
        self, specs: Sequence[EstimatorSpec], bins: int, alpha: float, rule: str = "vote"
    ) -> None:
        if rule not in BIN_RULES:
            raise ValueError(f"bin_rule={rule!r} is not allowed; use one of {BIN_RULES}")
        self.specs = tuple(specs)
        self.bins, self.alpha, self.rule = bins, float(alpha), rule
        #: per estimator, the means of s_k of the log-loss and of the Brier score
        self._means: dict[str, tuple[PairedMean, PairedMean]] = {}

    def update(
        self,
        y_true: np.ndarray,
        proba: np.ndarray,
        lengths: np.ndarray,
        times: np.ndarray,
        t_instance: np.ndarray,
        t_label: np.ndarray,
    ) -> None:
        """Add a batch of fully scored outcomes (arguments as for :func:`bin_losses`)."""
        if y_true.size == 0:
            return
        log_loss, brier = bin_losses(
            y_true, proba, lengths, times, t_instance, t_label, self.bins, self.alpha, self.rule
        )
        self.add(log_loss, brier)

    def add(self, log_loss: np.ndarray, brier: np.ndarray) -> None:
        """Add the outcomes' s_k (of outcomes predicted once: their one prediction's losses)."""
        if not self._means:
            self._means = {s.name: (PairedMean(s), PairedMean(s)) for s in self.specs}
        for log_mean, brier_mean in self._means.values():
            log_mean.update(log_loss)
            brier_mean.update(brier)

    def measures(self) -> dict[str, dict[str, Any]]:
        """``{estimator: {"n_psi_scored", "psi_log_loss", "psi_brier"}}`` ({} before the
        first fully scored outcome)."""
        out = {}
        for name, (log_mean, brier_mean) in self._means.items():
            log_sums, brier_sums = log_mean.sums(), brier_mean.sums()
            out[name] = {
                "n_psi_scored": log_mean.n,
                "psi_log_loss": _mean(log_sums),
                "psi_brier": _mean(brier_sums),
            }
        return out

    def state(self) -> dict[str, Any]:
        return {
            name: {"log_loss": log_mean.state(), "brier": brier_mean.state()}
            for name, (log_mean, brier_mean) in self._means.items()
        }

    @classmethod
    def from_state(
        cls,
        state: dict[str, Any],
        specs: Sequence[EstimatorSpec],
        bins: int,
        alpha: float,
        rule: str = "vote",
    ) -> PsiScores:
        """Rebuild from :meth:`state`; an estimator of ``specs`` the state lacks starts at the
        next fully scored outcome."""
        psi = cls(specs, bins, alpha, rule)
        if state:
            psi._means = {
                spec.name: (
                    (
                        PairedMean.from_state(spec, state[spec.name]["log_loss"]),
                        PairedMean.from_state(spec, state[spec.name]["brier"]),
                    )
                    if spec.name in state
                    else (PairedMean(spec), PairedMean(spec))
                )
                for spec in psi.specs
            }
        return psi


def _mean(sums: tuple[float, float, float, float]) -> float:
    weight, _, total, _ = sums
    return total / weight if weight > 0 else float("nan")
