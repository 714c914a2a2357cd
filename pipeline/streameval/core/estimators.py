"""Confusion-matrix estimators: cumulative, sliding window and fading factor.

Each estimator holds the k-class confusion state of one stream of outcomes (true class index,
predicted class index) plus the no-change (persistent) predictor's score under the same
estimator, and is updated by batch with numpy. Measures are read from a
:class:`~streameval.core.measures.ConfusionSnapshot` by
:func:`~streameval.core.measures.compute_measures`.

References
----------
Gama, Sebastião, Rodrigues (2013), *On evaluating stream learning algorithms*, Machine
Learning 90(3): Algorithm 1 (prequential, all history), Algorithm 2 (sliding window),
Algorithm 3 (fading factor, bias-free S_a/N_a). The project's choices: docs/measures.md.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from streameval.core.forgetting import BlockFading, EstimatorSpec, Ring, geometric_sum
from streameval.core.labels import DEFAULT_MAX_CLASSES
from streameval.core.measures import ConfusionSnapshot, compute_measures
from streameval.core.outcome_batches import persistence, validate_outcomes

__all__ = [
    "ConfusionEstimator",
    "CumulativeConfusion",
    "FadingConfusion",
    "WindowConfusion",
    "make_estimator",
    "parse_estimator",
]


def _cell_counts(y_true: np.ndarray, y_pred: np.ndarray, k: int, weights=None) -> np.ndarray:
    """k×k matrix of (weighted) counts of (true, predicted) pairs."""
    cells = y_true * k + y_pred
    if k * k <= 4 * cells.size + 64:
        flat = np.bincount(cells, weights=weights, minlength=k * k)
    else:  # many classes, small batch: do not allocate k*k bins per batch
        flat = np.zeros(k * k, dtype=np.float64 if weights is not None else np.int64)
        np.add.at(flat, cells, 1 if weights is None else weights)
    return flat.reshape(k, k)


def _matrix(rows: list, dtype) -> np.ndarray:
    """A square matrix from nested lists (possibly 0×0)."""
    return np.array(rows, dtype=dtype).reshape(len(rows), len(rows))


class ConfusionEstimator:
    """Common machinery of the three estimators (not used directly)."""

    kind: ClassVar[str]

    def __init__(self, max_classes: int = DEFAULT_MAX_CLASSES) -> None:
        if isinstance(max_classes, bool) or not isinstance(max_classes, int) or max_classes < 1:
            raise ValueError(f"max_classes={max_classes!r} is not allowed; use an integer >= 1")
        self.max_classes = max_classes
        self._last = -1  # true class of the previous outcome, -1 before the first
        self._counts = np.zeros((0, 0), dtype=self._dtype)

    _dtype: ClassVar[type] = np.int64

    @property
    def name(self) -> str:
        """The estimator's name on the wire: ``cumulative``, ``window:1000``, ``fading:0.999``."""
        return self.kind

    @property
    def n_classes(self) -> int:
        return self._counts.shape[0]

    def _grow(self, k: int) -> None:
        old = self._counts.shape[0]
        if k > old:
            grown = np.zeros((k, k), dtype=self._counts.dtype)
            grown[:old, :old] = self._counts
            self._counts = grown

    def update(self, y_true: Any, y_pred: Any) -> None:
        """Add a batch of outcomes (class indices), oldest first."""
        y_true, y_pred = validate_outcomes(y_true, y_pred, self.max_classes)
        if y_true.size:
            k = max(int(y_true.max()), int(y_pred.max())) + 1
            self.apply(y_true, y_pred, k, *persistence(y_true, self._last))

    def apply(self, y_true, y_pred, n_classes: int, scored, correct) -> None:
        """Add a non-empty batch that ``validate_outcomes`` accepted.

        For callers that feed several estimators the same stream (the
        :class:`~streameval.core.evaluator.Evaluator`): they validate once and compute the
        persistent-baseline flags once with ``persistence``
        (:mod:`streameval.core.outcome_batches`). ``n_classes`` bounds the indices.
        """
        self._grow(n_classes)
        self._update(y_true, y_pred, scored, correct)
        self._last = int(y_true[-1])

    @property
    def last_label(self) -> int:
        """True class index of the latest outcome (-1 before the first)."""
        return self._last

    @last_label.setter
    def last_label(self, label: int) -> None:
        # for a caller that passes an outcome by without counting it (the pairs of label
        # transitions skip the stream's first outcome: streameval.core.cost.Transitions)
        self._last = label

    def _update(self, y_true, y_pred, scored, correct) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def snapshot(self) -> ConfusionSnapshot:  # pragma: no cover - abstract
        raise NotImplementedError

    def measures(self, labels=None, positive=None) -> dict[str, float]:
        """All measures of :func:`~streameval.core.measures.compute_measures` for this estimate."""
        return compute_measures(self.snapshot(), labels=labels, positive=positive)

    def _common_state(self) -> dict[str, Any]:
        return {"kind": self.kind, "max_classes": self.max_classes, "last": self._last}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ConfusionEstimator:
        """Rebuild any estimator from its :meth:`state` (dispatching on ``state["kind"]``)."""
        kind = state.get("kind")
        for sub in (CumulativeConfusion, WindowConfusion, FadingConfusion):
            if sub.kind == kind:
                return sub._from_state(state)
        raise ValueError(
            f"estimator state has kind={kind!r}; expected cumulative, window or fading"
        )


class CumulativeConfusion(ConfusionEstimator):
    """Confusion counts over all history (Gama et al. 2013, Algorithm 1).

    Examples
    --------
    >>> import numpy as np
    >>> est = CumulativeConfusion()
    >>> est.update(np.array([0, 0, 1, 1]), np.array([0, 1, 1, 1]))
    >>> est.measures()["accuracy"]
    0.75
    >>> est.snapshot().confusion.tolist()
    [[1, 1], [0, 2]]

    References
    ----------
    Gama, Sebastião, Rodrigues (2013), Machine Learning 90(3), §3 Algorithm 1.
    """

    kind = "cumulative"

    def __init__(self, max_classes: int = DEFAULT_MAX_CLASSES) -> None:
        super().__init__(max_classes)
        self._n = 0
        self._persistent_correct = 0
        self._persistent_total = 0

    def _update(self, y_true, y_pred, scored, correct) -> None:
        self._counts += _cell_counts(y_true, y_pred, self.n_classes)
        self._n += y_true.size
        self._persistent_total += int(np.count_nonzero(scored))
        self._persistent_correct += int(np.count_nonzero(correct))

    def snapshot(self) -> ConfusionSnapshot:
        return ConfusionSnapshot(
            confusion=self._counts.copy(),
            persistent_correct=self._persistent_correct,
            persistent_total=self._persistent_total,
            n=self._n,
            n_effective=float(self._n),
        )

    def state(self) -> dict[str, Any]:
        """A JSON-ready snapshot of the whole state."""
        return {
            **self._common_state(),
            "counts": self._counts.tolist(),
            "n": self._n,
            "persistent": [self._persistent_correct, self._persistent_total],
        }

    @classmethod
    def _from_state(cls, state: dict[str, Any]) -> CumulativeConfusion:
        est = cls(max_classes=state["max_classes"])
        est._last = state["last"]
        est._counts = _matrix(state["counts"], np.int64)
        est._n = state["n"]
        est._persistent_correct, est._persistent_total = state["persistent"]
        return est


class WindowConfusion(ConfusionEstimator):
    """Confusion counts over the last ``window_size`` outcomes (Gama et al. 2013, Algorithm 2).

    A ring buffer holds the outcomes in the window; counts are kept exactly (integers). Before
    the window is full the estimate covers what it holds and ``n`` says how many.

    Parameters
    ----------
    window_size
        Number of most recent outcomes the estimate covers (W).

    Examples
    --------
    >>> import numpy as np
    >>> est = WindowConfusion(window_size=3)
    >>> est.update(np.array([1, 0, 0, 1, 0, 1]), np.array([0, 0, 0, 0, 0, 0]))
    >>> snap = est.snapshot()
    >>> snap.n, snap.confusion.tolist()
    (3, [[1, 0], [2, 0]])
    >>> round(est.measures()["error"], 4)
    0.6667

    References
    ----------
    Gama, Sebastião, Rodrigues (2013), Machine Learning 90(3), §3 Algorithm 2.
    """

    kind = "window"

    def __init__(self, window_size: int = 1000, max_classes: int = DEFAULT_MAX_CLASSES) -> None:
        self.window_size = EstimatorSpec("window", window=window_size).window
        super().__init__(max_classes)
        self._ring = Ring(window_size, true=np.int64, pred=np.int64, scored=bool, correct=bool)
        self._persistent_correct = 0
        self._persistent_total = 0

    @property
    def name(self) -> str:
        return f"window:{self.window_size}"

    def _count(self, rows: dict[str, np.ndarray], sign: int) -> None:
        if rows["true"].size:
            self._counts += sign * _cell_counts(rows["true"], rows["pred"], self.n_classes)
            self._persistent_total += sign * int(np.count_nonzero(rows["scored"]))
            self._persistent_correct += sign * int(np.count_nonzero(rows["correct"]))

    def _update(self, y_true, y_pred, scored, correct) -> None:
        entered, left = self._ring.push(true=y_true, pred=y_pred, scored=scored, correct=correct)
        self._count(left, -1)
        self._count(entered, +1)

    def snapshot(self) -> ConfusionSnapshot:
        n = self._ring.n
        return ConfusionSnapshot(
            confusion=self._counts.copy(),
            persistent_correct=self._persistent_correct,
            persistent_total=self._persistent_total,
            n=n,
            n_effective=float(n),
        )

    def state(self) -> dict[str, Any]:
        """A JSON-ready snapshot: the window's outcomes as its ring lies (:meth:`Ring.dump`);
        the counts are recomputed from them."""
        return {
            **self._common_state(),
            "window_size": self.window_size,
            "n_classes": self.n_classes,
            "ring": self._ring.dump(),
        }

    @classmethod
    def _from_state(cls, state: dict[str, Any]) -> WindowConfusion:
        est = cls(window_size=state["window_size"], max_classes=state["max_classes"])
        est._last = state["last"]
        if "ring" in state:
            est._ring.load(state["ring"])
        else:  # written before the ring was dumped as it lies: its outcomes oldest first
            est._ring.restore(
                state["seen"],
                true=state["true"],
                pred=state["pred"],
                scored=np.asarray(state["scored"], dtype=bool),
                correct=np.asarray(state["correct"], dtype=bool),
            )
        est._counts = np.zeros((state["n_classes"],) * 2, dtype=np.int64)
        est._count(est._ring.held(), +1)
        return est


class FadingConfusion(ConfusionEstimator):
    """Confusion counts with exponential forgetting (Gama et al. 2013, Algorithm 3).

    Each outcome enters with weight 1 and every later outcome multiplies the weight of all
    earlier ones by ``fading_factor``. The measures use the normalised (bias-free) estimate
    S_a/N_a: every measure is a ratio of faded counts, and ``n_effective`` is
    N_a = (1 − a^n)/(1 − a), the effective sample size. A batch of m outcomes is applied in
    closed form over blocks of outcomes aligned on their count.

    Parameters
    ----------
    fading_factor
        Gama's a in (0, 1]: the weight kept by the old sum at each new outcome. 1 means no
        forgetting (all history). Žliobaitė's η converts as a = 1 − η.

    Examples
    --------
    >>> import numpy as np
    >>> est = FadingConfusion(fading_factor=0.5)
    >>> est.update(np.array([1, 1]), np.array([1, 0]))
    >>> round(est.measures()["accuracy"], 3)
    0.333

    References
    ----------
    Gama, Sebastião, Rodrigues (2013), Machine Learning 90(3), §3 Algorithm 3, the fading
    factor and the fading increment N_a ([GSR] Algorithm 3).

    The sums are kept with :class:`~streameval.core.forgetting.BlockFading`, so that any split of
    the same outcomes into batches gives bit-identical numbers. A second one, with factor a²,
    keeps the sums of the squared weights per true class, per predicted class and of the
    scored persistent outcomes (2k + 1 sums, :attr:`ConfusionSnapshot.squares`): the
    denominators of every published proportion, for their effective sample sizes.
    """

    kind = "fading"

    def __init__(
        self, fading_factor: float = 0.999, max_classes: int = DEFAULT_MAX_CLASSES
    ) -> None:
        self.fading_factor = EstimatorSpec("fading", factor=fading_factor).factor
        super().__init__(max_classes)
        self._k = 0
        # bins: faded counts of (true, predicted, flag), flag 0 = the no-change predictor not
        # scored, 1 = scored and wrong, 2 = scored and right
        self._fading = BlockFading(self.fading_factor, 0)
        # Σw² with w = a^i: a fading sum with factor a²; bins [rows k, columns k, scored 1]
        self._squares = BlockFading(self.fading_factor * self.fading_factor, 1)

    @property
    def name(self) -> str:
        return f"fading:{self.fading_factor!r}"

    @property
    def n_classes(self) -> int:
        return self._k

    def _grow(self, k: int) -> None:
        old = self._k
        if k > old:
            pad = ((0, k - old), (0, k - old), (0, 0))
            self._fading.relayout(lambda v: np.pad(v.reshape(old, old, 3), pad).ravel())
            more = np.zeros(k - old)
            self._squares.relayout(
                lambda v: np.concatenate([v[:old], more, v[old : 2 * old], more, v[2 * old :]])
            )
            self._k = k

    def _update(self, y_true, y_pred, scored, correct) -> None:
        k = self._k
        code = (y_true * k + y_pred) * 3 + scored + correct
        self._fading.update(code.size, lambda rows, weights: (code[rows], weights))

        def squares(rows: slice, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            # each bin gets its outcomes in order: a row's from y_true, a column's from y_pred
            flags = scored[rows]
            index = np.concatenate(
                [y_true[rows], k + y_pred[rows], np.full(int(np.count_nonzero(flags)), 2 * k)]
            )
            return index, np.concatenate([weights, weights, weights[flags]])

        self._squares.update(code.size, squares)

    def snapshot(self) -> ConfusionSnapshot:
        k = self._k
        by_flag = self._fading.value().reshape(k * k, 3)
        per_flag = by_flag.sum(axis=0)
        return ConfusionSnapshot(
            confusion=by_flag.sum(axis=1).reshape(k, k),
            persistent_correct=float(per_flag[2]),
            persistent_total=float(per_flag[1] + per_flag[2]),
            n=self._fading.n,
            n_effective=float(per_flag.sum()),
            squares=self._squares.value(),
        )

    def state(self) -> dict[str, Any]:
        """A JSON-ready snapshot: the sums at the last block boundary and inside the block."""
        return {
            **self._common_state(),
            "fading_factor": self.fading_factor,
            "n_classes": self._k,
            "fading": self._fading.state(),
            "squares": self._squares.state(),
        }

    @classmethod
    def _from_state(cls, state: dict[str, Any]) -> FadingConfusion:
        est = cls(fading_factor=state["fading_factor"], max_classes=state["max_classes"])
        est._last = state["last"]
        est._k = state["n_classes"]
        est._fading.load(state["fading"])
        if "squares" in state:
            est._squares.load(state["squares"])
        else:  # a state written before the squared weights were kept
            est._squares.start_at(est._fading.n, est._estimated_squares())
        return est

    def _estimated_squares(self) -> np.ndarray:
        """Squared-weight sums for a state that lacks them (written before they were kept).

        The total is exact: Σ_{i<n} a^(2i) depends on n only. Each denominator is given the
        share of it that its weight sum has of the total, i.e. its outcomes are assumed to be
        spread over time like all outcomes. The outcomes added from then on are exact, and the
        assumed part fades by a² per outcome (docs/measures.md, "Intervals").
        """
        k, n = self._k, self._fading.n
        by_flag = self._fading.value().reshape(k * k, 3)
        per_flag = by_flag.sum(axis=0)
        cells = by_flag.sum(axis=1).reshape(k, k)
        weights = np.concatenate(
            [cells.sum(axis=1), cells.sum(axis=0), [per_flag[1] + per_flag[2]]]
        )
        total = float(per_flag.sum())
        exact = geometric_sum(self.fading_factor * self.fading_factor, n)
        return weights * (exact / total) if total > 0 else np.zeros(2 * k + 1)


def make_estimator(
    spec: EstimatorSpec, max_classes: int = DEFAULT_MAX_CLASSES
) -> ConfusionEstimator:
    """The confusion estimator of a spec."""
    if spec.kind == "window":
        return WindowConfusion(window_size=spec.window, max_classes=max_classes)
    if spec.kind == "fading":
        return FadingConfusion(fading_factor=spec.factor, max_classes=max_classes)
    return CumulativeConfusion(max_classes=max_classes)


def parse_estimator(
    spec: str | EstimatorSpec, max_classes: int = DEFAULT_MAX_CLASSES
) -> ConfusionEstimator:
    """Build an estimator from its name: ``cumulative``, ``window:W`` or ``fading:a``.

    Examples
    --------
    >>> parse_estimator("window:500").name
    'window:500'
    >>> parse_estimator("fading:0.999").fading_factor
    0.999
    >>> parse_estimator("sliding")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: estimator 'sliding' is not known; use 'cumulative', 'window:W' ...
    """
    return make_estimator(EstimatorSpec.parse(spec), max_classes)
