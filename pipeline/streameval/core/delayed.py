"""Delayed labels and evolving predictions: latency bins, Λ(T, b) and Ψ_α.

While an instance waits for its label its model may re-predict it. Grzenda et al. split each
latency period [t_instance, t_label] into B equal bins and score, for every bin, the prediction
that represents it: bin 0 is the initial prediction, bins 1..B the re-predictions, bin B+1 the
final (test-then-train) prediction. Λ(T, b) is a measure over the bin-b predictions of all
instances labelled by T; Ψ_α weights bins 0..B by (1/α)^(b/B), so early predictions count more.

References
----------
Grzenda, Gomes, Bifet (2020), *Performance measures for evolving predictions under delayed
labelling classification*, IJCNN: latency bins, Λ(T, b) and the prioritised measure Ψ_α;
the choices where it is silent are in docs/measures.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from streameval.core.binned import BinnedRows, BinnedState
from streameval.core.forgetting import EstimatorSpec, check_continued, parse_estimators
from streameval.core.labels import DEFAULT_MAX_CLASSES
from streameval.core.outcome_batches import persistence

__all__ = [
    "BIN_RULES",
    "DelayedBatch",
    "DelayedEvaluator",
    "bin_predictions",
    "check_latency",
    "psi_weights",
]

BIN_RULES = ("vote", "last")


@dataclass(frozen=True)
class DelayedBatch:
    """Prediction timelines of a batch of outcomes, flattened for numpy.

    ``initial[i]`` and ``final[i]`` are the first and last predicted class index of outcome i;
    its re-predictions (every prediction after the first, the final one included) are the
    entries of ``owner == i`` in ``times``/``labels``, sorted by (owner, time).
    """

    y_true: np.ndarray
    initial: np.ndarray
    final: np.ndarray
    t_instance: np.ndarray
    t_label: np.ndarray
    owner: np.ndarray
    times: np.ndarray
    labels: np.ndarray

    @classmethod
    def from_timelines(cls, y_true, timelines, t_instance, t_label) -> DelayedBatch:
        """Build from per-outcome ``(times, class_indices)`` pairs (each sorted by time)."""
        owner, times, labels = [], [], []
        initial, final = [], []
        for i, (ts, ys) in enumerate(timelines):
            initial.append(ys[0])
            final.append(ys[-1])
            owner.extend([i] * (len(ts) - 1))
            times.extend(ts[1:])
            labels.extend(ys[1:])
        as_int = lambda values: np.asarray(values, dtype=np.int64)  # noqa: E731
        return cls(
            as_int(y_true),
            as_int(initial),
            as_int(final),
            as_int(t_instance),
            as_int(t_label),
            as_int(owner),
            as_int(times),
            as_int(labels),
        )


def bin_predictions(batch: DelayedBatch, bins: int = 100, rule: str = "vote") -> np.ndarray:
    """The prediction representing each bin 0..B+1 of every outcome: an (n, B+2) array.

    A re-prediction at time τ belongs to bin ``b(τ) = min(B, 1 + floor(B·(τ − t_k)/Δt_k))``
    (half-open bins; one at exactly t_label goes to bin B), computed in exact integer
    arithmetic. A bin with no re-prediction carries the prediction in force at its start; with
    exactly one, that one; with several, ``rule="vote"`` takes the time-weighted vote of the
    predictions in force during the bin (ties to the smallest class index) and ``rule="last"``
    the one in force at the bin's end. With Δt = 0 every bin gets the initial prediction.

    Examples
    --------
    E13 (docs/measures.md), instance 1: t = 0, label at t = 8, B = 4, initial 0, re-predictions
    t = 3 → 1, t = 5 → 1, t = 7 → 0, final 1 (at t = 8):

    >>> batch = DelayedBatch.from_timelines(
    ...     [1], [([0, 3, 5, 7, 8], [0, 1, 1, 0, 1])], t_instance=[0], t_label=[8])
    >>> bin_predictions(batch, bins=4).tolist()
    [[0, 0, 1, 1, 0, 1]]
    """
    if rule not in BIN_RULES:
        raise ValueError(f"bin_rule={rule!r} is not allowed; use one of {BIN_RULES}")
    check_latency(batch.t_instance, batch.t_label)
    n = batch.initial.size
    grid = np.full((n, bins + 1), -1, dtype=np.int64)
    grid[:, 0] = batch.initial
    owner = batch.owner
    if owner.size:
        t0 = batch.t_instance[owner]
        span = batch.t_label[owner] - t0
        usable = span > 0  # Δt = 0: all bins keep the initial prediction
        owner, times, labels, t0, span = (
            a[usable] for a in (owner, batch.times, batch.labels, t0, span)
        )
        offset = np.maximum(times - t0, 0)  # a re-prediction before t_instance: bin 1
        b = np.minimum(bins, 1 + (bins * offset) // np.maximum(span, 1))
        key = owner * (bins + 1) + b
        last = np.ones(key.size, dtype=bool)
        last[:-1] = key[1:] != key[:-1]
        grid[owner[last], b[last]] = labels[last]
    # carry forward: a bin without a re-prediction keeps the prediction in force at its start
    filled = np.where(grid >= 0, np.arange(bins + 1), 0)
    np.maximum.accumulate(filled, axis=1, out=filled)
    result = np.empty((n, bins + 2), dtype=np.int64)
    result[:, : bins + 1] = np.take_along_axis(grid, filled, axis=1)
    result[:, bins + 1] = batch.final
    if rule == "vote" and owner.size:
        # bins holding several re-predictions (rare): a time-weighted vote, one bin at a time
        in_force = result.copy()  # the prediction in force at each bin's end
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        sizes = np.diff(np.r_[starts, key.size])
        crowded = sizes >= 2
        for start, size in zip(starts[crowded].tolist(), sizes[crowded].tolist(), strict=True):
            stop = start + size
            o, bin_ = int(owner[start]), int(b[start])
            result[o, bin_] = _vote(
                carried=int(in_force[o, bin_ - 1]),
                times=times[start:stop],
                labels=labels[start:stop],
                t0=int(batch.t_instance[o]),
                span=int(batch.t_label[o] - batch.t_instance[o]),
                bin_=bin_,
                bins=bins,
            )
    return result


def check_latency(t_instance: Any, t_label: Any) -> None:
    """Refuse a label before its instance: ``ValueError`` naming the first such outcome.

    >>> check_latency([0, 5], [3, 4])
    Traceback (most recent call last):
    ValueError: outcome 1 has t_label=4 before t_instance=5; a latency period cannot be negative
    """
    early = np.flatnonzero(np.less(t_label, t_instance))
    if early.size:
        i = int(early[0])
        raise ValueError(
            f"outcome {i} has t_label={int(t_label[i])} before "
            f"t_instance={int(t_instance[i])}; a latency period cannot be negative"
        )


def _vote(carried, times, labels, t0, span, bin_, bins) -> int:
    """Time-weighted vote inside one bin, in units of 1/B ms so that ties are exact."""
    start = t0 * bins + span * (bin_ - 1)
    end = t0 * bins + span * bin_
    points = np.clip(times * bins, start, end)
    edges = np.r_[start, points, end]
    durations = np.diff(edges)
    held = np.r_[carried, labels]
    tally = np.bincount(held, weights=durations.astype(np.float64))
    return int(np.argmax(tally))  # first maximum: ties go to the smallest class index


def psi_weights(bins: int, alpha: float) -> np.ndarray:
    """Normalised weights (1/α)^(b/B) of bins b = 0..B for Ψ_α.

    >>> [round(w, 6) for w in (psi_weights(4, 2.0) * 3.642607).tolist()]
    [1.0, 0.840896, 0.707107, 0.594604, 0.5]
    """
    raw = np.power(1.0 / alpha, np.arange(bins + 1) / bins)
    return raw / raw.sum()


class DelayedEvaluator:
    """Initial, binned and final performance and Ψ_α of one model, under every estimator.

    Fed batches of outcomes as :class:`DelayedBatch` (class indices); keeps, per estimator,
    the statistics of accuracy and Cohen's κ for each of the B+2 bins (O(B·k) numbers, never a
    k×k matrix per bin) and the persistent baseline they share, so κ⁺ is available per bin too.

    Parameters
    ----------
    estimators
        Estimator names as for :class:`~streameval.core.evaluator.Evaluator`.
    bins
        B, the number of sub-periods of each latency period (default 100).
    alpha
        α ≥ 1 of Ψ_α (default 2): bin b weighs (1/α)^(b/B).
    bin_rule
        ``"vote"`` (time-weighted vote, default) or ``"last"`` (prediction in force at the end
        of the bin) for bins with several re-predictions.

    Examples
    --------
    E13 (docs/measures.md): instance 1 as in :func:`bin_predictions`, instance 2 correct in
    every bin.

    >>> ev = DelayedEvaluator(estimators=["cumulative"], bins=4, alpha=2.0)
    >>> ev.update(DelayedBatch.from_timelines(
    ...     [1, 1], [([0, 3, 5, 7, 8], [0, 1, 1, 0, 1]), ([0], [1])],
    ...     t_instance=[0, 0], t_label=[8, 8]))
    >>> m = ev.measures()["cumulative"]
    >>> m["accuracy_initial"], m["binned_accuracy"], m["accuracy_final"]
    (0.5, [0.5, 1.0, 1.0, 0.5], 1.0)
    >>> round(m["psi_accuracy"], 6)
    0.678678

    References
    ----------
    Grzenda, Gomes, Bifet (2020), IJCNN, Λ(T, b) and Ψ_α.
    """

    def __init__(
        self,
        estimators=("cumulative", "window:1000", "fading:0.999"),
        bins: int = 100,
        alpha: float = 2.0,
        bin_rule: str = "vote",
        max_classes: int = DEFAULT_MAX_CLASSES,
    ) -> None:
        if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
            raise ValueError(f"bins={bins!r} is not allowed; use an integer >= 1 (default 100)")
        if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not alpha >= 1:
            raise ValueError(
                f"alpha={alpha!r} is not allowed; use a number >= 1 (1 = plain mean of the bins)"
            )
        if not math.isfinite(alpha):
            raise ValueError(f"alpha={alpha!r} is not allowed; use a finite number >= 1")
        if bin_rule not in BIN_RULES:
            raise ValueError(f"bin_rule={bin_rule!r} is not allowed; use one of {BIN_RULES}")
        self.bins, self.alpha, self.bin_rule, self.max_classes = (
            bins,
            float(alpha),
            bin_rule,
            max_classes,
        )
        specs = parse_estimators(estimators)
        self.estimators = tuple(spec.name for spec in specs)
        self._states = {spec.name: BinnedState(spec, bins + 2) for spec in specs}
        self._weights = psi_weights(bins, self.alpha)
        self._last = -1
        self._n = 0
        #: estimators added to a history (:meth:`from_state`) that have seen no outcome yet:
        #: their persistent baseline scores none before their second outcome
        self._fresh: set[str] = set()

    #: Outcomes whose bins all hold one prediction (every outcome with a single prediction)
    #: skip the (n, B+2) grid and update every view at once; False sends every outcome
    #: through the grid, the general path the tests compare the fast one with.
    _uniform_fast_path = True

    def update(self, batch: DelayedBatch) -> None:
        """Add a batch of outcomes (oldest first)."""
        y_true = batch.y_true
        n = y_true.size
        if n == 0:
            return
        check_latency(batch.t_instance, batch.t_label)
        initial, bins = batch.initial, self.bins
        if self._uniform_fast_path:
            # an outcome without re-predictions holds its only prediction in every bin
            binned = batch.final != initial
            binned[batch.owner] = True
        else:
            binned = np.ones(n, dtype=bool)
        at = np.flatnonzero(binned)
        if at.size == n:
            grid = bin_predictions(batch, bins, self.bin_rule)
        elif at.size:
            position = np.cumsum(binned) - 1
            only = DelayedBatch(
                y_true[at],
                initial[at],
                batch.final[at],
                batch.t_instance[at],
                batch.t_label[at],
                position[batch.owner],
                batch.times,
                batch.labels,
            )
            grid = bin_predictions(only, bins, self.bin_rule)
        else:
            grid = np.empty((0, bins + 2), dtype=np.int64)
        uniform = ~binned
        if self._uniform_fast_path and at.size:
            same = (grid == grid[:, :1]).all(axis=1)  # re-predictions that changed no bin
            uniform[at[same]] = True
            grid = grid[~same]
        classes = (y_true, initial[uniform], grid)
        low = min(int(c.min()) for c in classes if c.size)
        k = max(int(c.max()) for c in classes if c.size) + 1
        if k > self.max_classes or low < 0:
            raise ValueError(
                f"class indices must lie in [0, max_classes={self.max_classes}); got {low}..{k - 1}"
            )
        rows = BinnedRows(y_true, initial, uniform, grid, _persistent(y_true, self._last))
        first_rows = None
        for name, state in self._states.items():
            state.grow(k)
            if name in self._fresh:
                if first_rows is None:
                    first_rows = BinnedRows(y_true, initial, uniform, grid, _persistent(y_true, -1))
                state.update(first_rows)
            else:
                state.update(rows)
        self._fresh.clear()
        self._last = int(y_true[-1])
        self._n += n

    def measures(self) -> dict[str, dict[str, Any]]:
        """Per estimator: ``{measure}_initial``, ``binned_{measure}`` (B values),
        ``{measure}_final`` and ``psi_{measure}`` for accuracy, kappa and kappa_plus."""
        out = {}
        bins = self.bins
        for name, state in self._states.items():
            values = state.measures()
            block: dict[str, Any] = {
                "n": min(state.seen, state.window) if state.window else state.seen
            }
            for measure, per_bin in values.items():
                block[f"{measure}_initial"] = float(per_bin[0])
                block[f"{measure}_final"] = float(per_bin[bins + 1])
                block[f"psi_{measure}"] = float(self._weights @ per_bin[: bins + 1])
                block[f"binned_{measure}"] = per_bin[1 : bins + 1].tolist()
            out[name] = block
        return out

    def state(self) -> dict[str, Any]:
        out = {
            "estimators": list(self.estimators),
            "bins": self.bins,
            "alpha": self.alpha,
            "bin_rule": self.bin_rule,
            "max_classes": self.max_classes,
            "last": self._last,
            "n": self._n,
            "states": {name: s.state() for name, s in self._states.items()},
        }
        if self._fresh:
            out["fresh"] = sorted(self._fresh)
        return out

    @classmethod
    def from_state(
        cls, state: dict[str, Any], estimators: Sequence[str | EstimatorSpec] | None = None
    ) -> DelayedEvaluator:
        """Rebuild from :meth:`state`; with ``estimators``, continue under them: those of the
        state go on, the others start empty at the next outcome (every estimator of the state
        must be among them: ValueError otherwise)."""
        specs = parse_estimators(state["estimators"] if estimators is None else estimators)
        check_continued(state["estimators"], specs)
        ev = cls(specs, state["bins"], state["alpha"], state["bin_rule"], state["max_classes"])
        ev._last, ev._n = state["last"], state["n"]
        saved = state["states"]
        for name, s in saved.items():
            ev._states[name].load(s)
        ev._fresh = set(state.get("fresh", ()))
        if ev._n:
            ev._fresh |= {spec.name for spec in specs if spec.name not in saved}
        return ev


def _persistent(y_true: np.ndarray, last: int) -> np.ndarray:
    """Per outcome: the persistent predictor's (correct, scored), after ``last``."""
    scored, correct = persistence(y_true, last)
    return np.stack([correct, scored], axis=1).astype(np.float64)
