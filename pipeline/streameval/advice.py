"""What a user most likely meant by a setting that is refused: the name closest to a
misspelt one, and the number a value written with its unit stands for (``"5s"`` for a
setting in milliseconds). The messages of the evaluation configuration
(:mod:`streameval.config`) and of the worker's settings (:mod:`streameval.app.settings`) use
these to say what to write instead.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

__all__ = ["UNITS", "closest", "closest_key", "list_words", "meant_number", "number_words"]

#: the suffixes that name a setting's unit
UNITS = ("_ms", "_s", "_mb")

#: a number and an optional unit, as people write a duration or a size
_AMOUNT = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*")
#: milliseconds per unit of time
_MS = {"ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
#: megabytes per unit of size
_MB = {"kb": 1 / 1024, "mb": 1, "m": 1, "gb": 1024, "g": 1024}
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def closest(word: str, names: Iterable[str]) -> str | None:
    """The name of ``names`` most like ``word``, or None when none is close.

    >>> closest("label_ttl", ["label_grace_ms", "label_ttl_ms", "max_pending"])
    'label_ttl_ms'
    >>> closest("bootstrap", ["app_id", "processes"]) is None
    True
    """
    if len(word) < 3:  # one or two letters are like too many names
        return None
    found = difflib.get_close_matches(word, list(names), n=1, cutoff=0.6)
    return found[0] if found else None


def closest_key(name: str, keys: Iterable[str]) -> str | None:
    """The setting of ``keys`` that a misspelt ``name`` most likely means: ``name`` with its
    unit forgotten first (``label_ttl`` for ``label_ttl_ms``), else the closest, else None.

    >>> closest_key("label_ttl", ["label_ttl_s", "label_ttl_ms"])
    'label_ttl_ms'
    >>> closest_key("procesess", ["processes", "app_id"])
    'processes'
    """
    keys = list(keys)
    return next((name + s for s in UNITS if name + s in keys), None) or closest(name, keys)


def list_words(text: str) -> list[str]:
    """The items a string most likely lists, where a list belongs: its words, split at commas
    and blanks, without the brackets and quotes of a list written as text.

    >>> list_words("accuracy, kappa"), list_words("['accuracy' 'kappa']"), list_words(" ")
    (['accuracy', 'kappa'], ['accuracy', 'kappa'], [])
    """
    words = (w.strip("'\"") for w in text.replace(",", " ").strip().strip("[]").split())
    return [w for w in words if w]


def _scale(key: str, unit: str) -> float | None:
    """What one ``unit`` is in the unit of setting ``key`` (named by its suffix)."""
    if key.endswith("_ms") and unit in _MS:
        return _MS[unit]
    if key.endswith("_s") and unit in _MS:
        return _MS[unit] / 1000
    if key.endswith("_mb") and unit in _MB:
        return _MB[unit]
    return None


def number_words(key: str, kind: type) -> str:
    """What belongs in setting ``key`` of type ``kind``, in words, with its unit.

    >>> number_words("commit_interval_ms", int)
    'an integer number of milliseconds'
    >>> number_words("hysteresis", float)
    'a number'
    """
    if kind is bool:
        return "true or false"
    words = "an integer" if kind is int else "a number"
    for suffix, unit in zip(UNITS, ("milliseconds", "seconds", "megabytes"), strict=True):
        if key.endswith(suffix):
            return f"{words} number of {unit}" if kind is int else f"{words} of {unit}"
    return words


def meant_number(key: str, text: str, kind: type) -> str | None:
    """The TOML value that ``text`` — a string given where setting ``key`` takes a ``kind``
    (int, float or bool) — most likely stands for, or None when it is no such value.

    >>> meant_number("publish_every", " 100 ", int)
    '100'
    >>> meant_number("commit_interval_ms", "5s", int), meant_number("label_ttl_ms", "7d", int)
    ('5000', '604800000')
    >>> meant_number("shutdown_timeout_s", "2min", float), meant_number("cache_mb", "1GB", int)
    ('120', '1024')
    >>> meant_number("processes", "all", int) is None, meant_number("idle_ms", "0.5ms", int)
    (True, None)
    """
    if kind is bool:
        word = text.strip().lower()
        return "true" if word in _TRUE else "false" if word in _FALSE else None
    found = _AMOUNT.fullmatch(text)
    if found is None:
        return None
    amount, unit = found[1], found[2].lower()
    value = float(amount)
    if unit:
        scale = _scale(key, unit)
        if scale is None:
            return None
        value *= scale
    if value == int(value):
        return str(int(value))
    return None if kind is int else repr(value)
