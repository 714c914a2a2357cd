"""Whether the evaluation core's compiled loops run.

The ``streameval_kernels`` extension (``pipeline/kernels``, Rust) holds the loops that numpy
does slowly: the held ROC AUC's merge and read (:mod:`~streameval.core.roc_auc`), the
Page-Hinkley scan (:mod:`~streameval.core.page_hinkley`) and the fading mean a detector
watches (:mod:`~streameval.core.forgetting`). Each keeps a numpy reference that gives the same
bits, which the tests check; :func:`use` chooses between them. :data:`active` is the extension
while it is in use, else None: callers test it on every call, so a switch takes effect at once.
An extension built from an older checkout, without every loop this version calls, is not used
(:data:`PROBLEM` says so, and the worker warns at start).
"""

from __future__ import annotations

from types import ModuleType

__all__ = ["NEEDED", "PROBLEM", "active", "in_use", "use"]

#: The compiled functions this version of the core calls.
NEEDED = (
    "counted_add",
    "fading_mean_advance",
    "held_mann_whitney",
    "mann_whitney",
    "ordered_advance",
    "page_hinkley_scan",
)


def _load() -> tuple[ModuleType | None, str | None]:
    try:
        import streameval_kernels as extension
    except ImportError:  # not built: the numpy references do the same, slower
        return None, "not installed"
    missing = [name for name in NEEDED if not hasattr(extension, name)]
    if missing:
        return None, f"built from an older checkout, without {', '.join(missing)}"
    return extension, None


_extension, PROBLEM = _load()

#: The compiled loops while they are in use (installed and not switched off), else None.
active: ModuleType | None = _extension


def use(on: bool) -> bool:
    """Run the loops compiled (``True``, when the extension is installed) or in numpy; returns
    whether the compiled ones are in use now."""
    global active
    active = _extension if on else None
    return active is not None


def in_use() -> bool:
    """Whether the compiled loops run (the extension is installed and not switched off)."""
    return active is not None
