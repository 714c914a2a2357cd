"""A batch of outcomes as class indices, checked once and scored once by the no-change
predictor, for every estimator, the evaluator and the delayed-label block."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["persistence", "validate_outcomes", "within"]


def validate_outcomes(y_true: Any, y_pred: Any, max_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Check a batch of class indices and return them as ``int64`` arrays.

    Raises ``ValueError`` naming the argument, the value and what is allowed.
    """
    arrays = []
    for name, values in (("y_true", y_true), ("y_pred", y_pred)):
        array = np.asarray(values)
        if array.ndim != 1:
            raise ValueError(
                f"{name} has shape {array.shape}; a 1-D array of class indices is needed"
            )
        if array.size and array.dtype.kind not in "iu":
            if array.dtype.kind == "f":
                if not np.all(np.isfinite(array)):
                    bad = array[~np.isfinite(array)][0]
                    raise ValueError(
                        f"{name} contains {bad}; class indices must be finite integers"
                    )
                if not np.all(array == np.floor(array)):
                    bad = array[array != np.floor(array)][0]
                    raise ValueError(f"{name} contains {bad}; class indices must be integers")
            elif array.dtype.kind != "b":
                raise ValueError(
                    f"{name} has dtype {array.dtype}; class indices must be integers "
                    "(encode labels with LabelEncoder first)"
                )
        array = array.astype(np.int64, copy=False)
        if array.size:
            low, high = int(array.min()), int(array.max())
            if low < 0:
                raise ValueError(f"{name} contains {low}; class indices must be >= 0")
            if high >= max_classes:
                raise ValueError(
                    f"{name} contains {high}; class indices must be < max_classes={max_classes}"
                )
        arrays.append(array)
    if arrays[0].shape != arrays[1].shape:
        raise ValueError(
            f"y_true has {arrays[0].size} outcomes but y_pred has {arrays[1].size}; "
            "they must have the same length"
        )
    return arrays[0], arrays[1]


def persistence(y_true: np.ndarray, last: int) -> tuple[np.ndarray, np.ndarray]:
    """Per outcome: was the no-change predictor scored, and was it right.

    The no-change predictor predicts the previous outcome's true label; the very first
    outcome of a stream (``last == -1``) has none and is not scored.

    >>> scored, correct = persistence(np.array([1, 1, 0]), last=-1)
    >>> scored.tolist(), correct.tolist()
    ([False, True, True], [False, True, False])
    """
    previous = np.empty_like(y_true)
    previous[0] = last
    previous[1:] = y_true[:-1]
    scored = previous >= 0
    return scored, scored & (previous == y_true)


def within(lengths: np.ndarray) -> np.ndarray:
    """0, 1, …, n−1 for each n of ``lengths``, concatenated: each element's place in its
    group, for groups of these sizes laid end to end.

    >>> within(np.array([2, 0, 3])).tolist()
    [0, 1, 0, 1, 2]
    """
    ends = np.cumsum(lengths)
    return np.arange(int(ends[-1]) if ends.size else 0) - np.repeat(ends - lengths, lengths)
