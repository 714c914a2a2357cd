"""Dense class indices for labels discovered as they arrive."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

__all__ = ["DEFAULT_MAX_CLASSES", "LabelClash", "LabelEncoder"]

#: Default cap on the number of distinct classes of one model (docs/measures.md).
DEFAULT_MAX_CLASSES = 1000

Label = str | int


class LabelClash(ValueError):
    """A label refused because a known class of another type has the same name on the wire
    (``1`` and ``"1"``), not because of ``max_classes``."""


def _check_label(value: Any) -> Label:
    # bool is an int subclass, but a class named True is almost certainly a producer bug.
    if isinstance(value, bool) or not isinstance(value, str | int | np.integer):
        raise ValueError(
            f"label {value!r} has type {type(value).__name__}; "
            "a class label must be a str or an int"
        )
    return str(value) if isinstance(value, str) else int(value)


class LabelEncoder:
    """Map class labels (strings or integers) to dense indices ``0, 1, 2, ...``.

    Classes get indices in the order they are first seen. A new class must be a ``str`` or an
    ``int``, and ``1`` and ``"1"`` cannot both be classes (their names on the wire would be the
    same): the second one is refused. Known classes are looked up as Python dict keys, so
    ``np.int64(1)`` (and, as in any dict, ``True`` or ``1.0``) finds the class ``1``.

    Parameters
    ----------
    max_classes
        Cap on the number of distinct classes. A label field that is really an identifier
        would otherwise grow every confusion matrix without bound; passing the cap raises a
        ``ValueError`` and leaves the encoder unchanged.

    Examples
    --------
    >>> enc = LabelEncoder()
    >>> enc.encode(["spam", "ham", "spam"]).tolist()
    [0, 1, 0]
    >>> enc.encode(["eggs", "ham"]).tolist()
    [2, 1]
    >>> enc.classes
    ['spam', 'ham', 'eggs']
    >>> enc.decode([2, 0])
    ['eggs', 'spam']
    """

    def __init__(self, max_classes: int = DEFAULT_MAX_CLASSES) -> None:
        if isinstance(max_classes, bool) or not isinstance(max_classes, int) or max_classes < 1:
            raise ValueError(f"max_classes={max_classes!r} is not allowed; use an integer >= 1")
        self.max_classes = max_classes
        self._classes: list[Label] = []
        self._index: dict[Label, int] = {}

    @property
    def classes(self) -> list[Label]:
        """The known classes, in index order."""
        return list(self._classes)

    def __len__(self) -> int:
        return len(self._classes)

    def __contains__(self, label: object) -> bool:
        return label in self._index

    def index(self, label: Label) -> int:
        """Index of a known class; ``KeyError`` for an unknown one (nothing is added)."""
        return self._index[label]

    def lookup(self, labels: Sequence[Label]) -> np.ndarray | None:
        """Indices of ``labels`` if every one is a known class, else ``None`` (adds nothing)."""
        try:
            return np.fromiter(map(self._index.get, labels), dtype=np.int64, count=len(labels))
        except TypeError:  # an unknown label (None from .get) or an unhashable one
            return None

    def encode(self, labels: Iterable[Label]) -> np.ndarray:
        """Indices of ``labels`` as an ``int64`` array, adding unseen classes in order.

        All-or-nothing: if the batch holds an invalid label or would pass ``max_classes``,
        a ``ValueError`` is raised and no class is added.
        """
        index = self._index
        values = labels if isinstance(labels, list) else list(labels)
        known = self.lookup(values)  # fast path, at C speed
        if known is not None:
            return known
        new: dict[Label, int] = {}
        out = np.empty(len(values), dtype=np.int64)
        size = len(self._classes)
        for position, value in enumerate(values):
            code = index.get(value)
            if code is None:
                code = new.get(value)
                if code is None:
                    value = _check_label(value)
                    code = index.get(value, new.get(value))
                    if code is None:
                        self._check_distinct(value, new)
                        code = size + len(new)
                        if code >= self.max_classes:
                            raise ValueError(
                                f"label {value!r} would be class number {code + 1}, over "
                                f"max_classes={self.max_classes}; is the label field really an "
                                "identifier? Raise max_classes if the model has that many classes"
                            )
                        new[value] = code
            out[position] = code
        for value, code in new.items():
            index[value] = code
            self._classes.append(value)
        return out

    def _check_distinct(self, value: Label, new: dict[Label, int]) -> None:
        """Class names are strings on the wire (per-class keys, Prometheus labels), so 1 and "1"
        cannot both be classes of one model."""
        text = str(value)
        for other in (*self._classes, *new):
            if str(other) == text:
                raise LabelClash(
                    f"label {value!r} and the known class {other!r} would be the same class "
                    f"name {text!r} on the wire; send labels of one type (all strings or all "
                    "integers)"
                )

    def decode(self, indices: Sequence[int] | np.ndarray) -> list[Label]:
        """Labels of ``indices``."""
        classes = self._classes
        return [classes[int(i)] for i in indices]

    def state(self) -> dict[str, Any]:
        """A JSON-ready snapshot."""
        return {"max_classes": self.max_classes, "classes": list(self._classes)}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> LabelEncoder:
        """Rebuild an encoder from :meth:`state`."""
        encoder = cls(max_classes=state["max_classes"])
        encoder.encode(state["classes"])
        return encoder
