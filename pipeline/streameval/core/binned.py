"""The delayed-label block's statistics under one estimator: accuracy, κ and κ⁺ of every
latency bin, the bins being V prediction views of the same outcomes.

:class:`~streameval.core.delayed.DelayedEvaluator` keeps one :class:`BinnedState` per
estimator and feeds it :class:`BinnedRows`; which prediction represents each bin, and Ψ_α,
are decided there.

References
----------
Grzenda, Gomes, Bifet (2020), IJCNN: Λ(T, b) of every bin b.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from streameval.core.forgetting import BlockFading, EstimatorSpec, Ring
from streameval.core.measures import chance_is_certain, kappa_plus, skill

__all__ = ["BinnedRows", "BinnedState"]

NAN = math.nan


class BinnedRows:
    """A batch as :class:`BinnedState` takes it: outcomes whose B+2 bins all hold the same
    prediction (*uniform*: every outcome with a single prediction) as that one prediction, and
    the bins of the others as rows of a grid."""

    __slots__ = ("grid", "per", "pred", "uniform", "varied", "y_true")

    def __init__(self, y_true, pred, uniform, grid, per) -> None:
        self.y_true = y_true  # (n,) true class
        self.pred = pred  # (n,) bin-0 prediction: every bin's for a uniform outcome
        self.uniform = uniform  # (n,) bool
        self.varied = np.flatnonzero(~uniform)  # positions of the grid's rows
        self.grid = grid  # (len(varied), V) bins of the other outcomes, in order
        self.per = per  # (n, 2) persistent baseline: correct, scored

    def __len__(self) -> int:
        return self.y_true.size

    def tail(self, start: int) -> BinnedRows:
        """Outcomes ``start:``."""
        cut = int(np.searchsorted(self.varied, start))
        return BinnedRows(
            self.y_true[start:],
            self.pred[start:],
            self.uniform[start:],
            self.grid[cut:],
            self.per[start:],
        )


class BinnedState:
    """Sufficient statistics of accuracy and κ for V prediction views sharing true labels,
    under one estimator (cumulative, window of W outcomes, or fading factor a).

    The per-view statistics (hits, predicted-class counts) are kept in V + 1 columns: column 0
    holds the uniform outcomes (:class:`BinnedRows`), which count the same in every view, and
    column 1 + v the other outcomes' contributions to view v; view v is column 0 plus column
    1 + v. A uniform outcome thus costs O(1), not O(V). Cumulative and window counts are
    integers, exact in any order; the fading sums of a stream whose outcomes are all uniform
    are bit-identical to keeping every view apart.
    """

    def __init__(self, spec: EstimatorSpec, views: int) -> None:
        self.kind, self.views = spec.kind, views
        self.window = spec.window
        columns = views + 1
        self.k = 0
        self.total = 0.0
        self.correct = np.zeros(columns)
        self.pred = np.zeros((columns, 0))
        self.true = np.zeros(0)
        self.per = np.zeros(2)  # persistent baseline: correct, scored
        self.seen = 0
        if self.kind == "fading":
            # bins: total | correct per column | predicted class per column (C·k) | true class
            # (k) | persistent predictor correct, scored
            self._fading = BlockFading(spec.factor, 1 + columns + 2)
        if self.window:  # pred: every view's prediction; a uniform outcome's in column 0 only
            self._ring = Ring(
                self.window,
                true=np.int64,
                pred=(np.int64, (views,)),
                uniform=bool,
                per=(np.int64, (2,)),
            )

    def grow(self, k: int) -> None:
        if k > self.k:
            extra, old, c = k - self.k, self.k, self.views + 1
            self.pred = np.pad(self.pred, ((0, 0), (0, extra)))
            self.true = np.pad(self.true, (0, extra))
            if self.kind == "fading":

                def relayout(flat: np.ndarray) -> np.ndarray:
                    head, pred = flat[: 1 + c], flat[1 + c : 1 + c + c * old].reshape(c, old)
                    true, per = flat[1 + c + c * old : 1 + c + c * old + old], flat[-2:]
                    padded = np.pad(pred, ((0, 0), (0, extra))).ravel()
                    return np.concatenate([head, padded, np.pad(true, (0, extra)), per])

                self._fading.relayout(relayout)
            self.k = k

    def _fading_update(self, rows: BinnedRows | None) -> None:
        c, k = self.views + 1, self.k
        pred_at, true_at, per_at = 1 + c, 1 + c + c * k, 1 + c + c * k + k
        if rows is not None and len(rows):
            y_true, pred, uniform = rows.y_true, rows.pred, rows.uniform
            varied, per = rows.varied, rows.per
            hits = pred == y_true
            shared_hit = uniform & hits
            grid_hits = rows.grid == y_true[varied][:, None]
            grid_bins = pred_at + (1 + np.arange(c - 1)) * k + rows.grid
            shared_bins = pred_at + pred
            true_bins = true_at + y_true
            correct, scored = per[:, 0] > 0, per[:, 1] > 0

            def contribute(part: slice, weights: np.ndarray):
                # each bin receives its values in outcome order (nonzero of the transposed
                # hits walks views, then rows; ravel of the row-major bins walks rows)
                lo = int(np.searchsorted(varied, part.start))
                hi = int(np.searchsorted(varied, part.stop))
                varied_weights = weights[varied[lo:hi] - part.start]
                hit_views, hit_rows = np.nonzero(grid_hits[lo:hi].T)
                same = uniform[part]
                index = np.concatenate(
                    [
                        np.zeros(weights.size, dtype=np.intp),
                        np.ones(int(shared_hit[part].sum()), dtype=np.intp),
                        2 + hit_views,
                        shared_bins[part][same],
                        grid_bins[lo:hi].ravel(),
                        true_bins[part],
                        np.full(int(correct[part].sum()), per_at),
                        np.full(int(scored[part].sum()), per_at + 1),
                    ]
                )
                values = np.concatenate(
                    [
                        weights,
                        weights[shared_hit[part]],
                        varied_weights[hit_rows],
                        weights[same],
                        np.repeat(varied_weights, c - 1),
                        weights,
                        weights[correct[part]],
                        weights[scored[part]],
                    ]
                )
                return index, values

            self._fading.update(len(rows), contribute)
        flat = self._fading.value()
        self.total = float(flat[0])
        self.correct = flat[1:pred_at]
        self.pred = flat[pred_at:true_at].reshape(c, k)
        self.true = flat[true_at:per_at]
        self.per = flat[per_at:]

    def _stats(self, rows: BinnedRows):
        """Counts of a batch (cumulative and window estimates: integers, exact in any order)."""
        k, c = self.k, self.views + 1
        y_true, pred, uniform, varied = rows.y_true, rows.pred, rows.uniform, rows.varied
        correct = np.empty(c)
        correct[0] = np.count_nonzero(uniform & (pred == y_true))
        correct[1:] = (rows.grid == y_true[varied][:, None]).sum(axis=0)
        cells = (np.arange(1, c) * k)[None, :] + rows.grid
        pred_counts = np.bincount(
            np.concatenate([pred[uniform], cells.ravel()]), minlength=c * k
        ).reshape(c, k)
        true = np.bincount(y_true, minlength=k)
        return float(y_true.size), correct, pred_counts, true, rows.per.sum(axis=0)

    def _add(self, stats, sign=1.0) -> None:
        total, correct, pred, true, per = stats
        self.total += sign * total
        self.correct += sign * correct
        self.pred += sign * pred
        self.true += sign * true
        self.per += sign * per

    def update(self, rows: BinnedRows) -> None:
        m = len(rows)
        if self.kind == "fading":
            self._fading_update(rows)
        elif self.kind == "window":
            pred = np.zeros((m, self.views), dtype=np.int64)
            pred[rows.uniform, 0] = rows.pred[rows.uniform]
            pred[rows.varied] = rows.grid
            entered, left = self._ring.push(
                true=rows.y_true, pred=pred, uniform=rows.uniform, per=rows.per
            )
            if left["true"].size:
                self._add(self._stats(self._ring_rows(left)), sign=-1.0)
            self._add(self._stats(rows.tail(m - entered["true"].size)))
        else:
            self._add(self._stats(rows))
        self.seen += m

    @staticmethod
    def _ring_rows(held: dict[str, np.ndarray]) -> BinnedRows:
        uniform, pred = held["uniform"], held["pred"]
        return BinnedRows(held["true"], pred[:, 0], uniform, pred[~uniform], held["per"])

    def view_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """Hits (V,) and predicted-class counts (V, k) of every view."""
        return self.correct[1:] + self.correct[0], self.pred[1:] + self.pred[0]

    def measures(self) -> dict[str, np.ndarray]:
        """Accuracy, κ and κ⁺ of every view (NaN where undefined)."""
        views = self.views
        nan = np.full(views, NAN)
        if self.total <= 0:
            return {"accuracy": nan, "kappa": nan, "kappa_plus": nan}
        total = self.total
        correct, pred = self.view_counts()
        p = correct / total
        p_ran = (pred @ self.true) / (total * total)
        true = self.true.tolist()
        views_of = zip(p.tolist(), p_ran.tolist(), pred.tolist(), strict=True)
        kappa = [skill(a, r, chance_is_certain(true, h)) for a, r, h in views_of]
        correct_per, scored_per = self.per
        if scored_per > 0:
            p_per = correct_per / scored_per
            per_is_one = correct_per == scored_per
            plus = [
                kappa_plus(k, skill(a, p_per, per_is_one))
                for k, a in zip(kappa, p.tolist(), strict=True)
            ]
        else:
            plus = nan
        return {"accuracy": p, "kappa": np.array(kappa), "kappa_plus": np.asarray(plus)}

    def state(self) -> dict[str, Any]:
        if self.kind == "fading":
            return {"k": self.k, "seen": self.seen, "fading": self._fading.state()}
        out = {
            "k": self.k,
            "total": self.total,
            "correct": self.correct.tolist(),
            "pred": self.pred.tolist(),
            "true": self.true.tolist(),
            "per": self.per.tolist(),
            "seen": self.seen,
        }
        if self.window:
            out["ring"] = self._ring.dump()  # as it lies: a checkpoint writes what moved
        return out

    def load(self, state: dict[str, Any]) -> None:
        if self.kind == "fading":
            self.k, self.seen = state["k"], state["seen"]
            self._fading.load(state["fading"])
            self._fading_update(None)
            return
        self.k, self.total, self.seen = state["k"], state["total"], state["seen"]
        self.correct = np.array(state["correct"], dtype=np.float64)
        self.pred = np.array(state["pred"], dtype=np.float64).reshape(self.views + 1, self.k)
        self.true = np.array(state["true"], dtype=np.float64)
        self.per = np.array(state["per"], dtype=np.float64)
        if self.window and isinstance(state["ring"], dict):
            self._ring.load(state["ring"])
        elif self.window:  # written oldest first, every bin of a uniform outcome filled
            true, pred, per = state["ring"]
            n = min(self.seen, self.window)
            pred = np.array(pred, dtype=np.int64).reshape(n, self.views)
            uniform = (pred == pred[:, :1]).all(axis=1)
            pred[uniform, 1:] = 0  # as a push leaves a uniform outcome: its bin 0 only
            self._ring.restore(self.seen, true=true, pred=pred, uniform=uniform, per=per)
