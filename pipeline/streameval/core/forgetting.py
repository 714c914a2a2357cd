"""How an estimate forgets: all history, a window of the last W outcomes, or a fading factor.

Every estimate of the core — the confusion estimators, the comparison tallies, the delayed-label
bins, the drift detectors' fading errors — forgets its past in one of three ways, named by an
:class:`EstimatorSpec` (``cumulative``, ``window:W``, ``fading:a``) that is parsed and validated
once, where the configuration is read, and passed on as a value. This module holds the two
mechanisms that are not a plain sum:

* :class:`Ring`, the last W outcomes in a ring whose slot for outcome i is i mod W, so that any
  batch split leaves the same buffer; a push says which outcomes entered and which left, and the
  caller moves its (exact, integer) sums by both. Its state (:meth:`Ring.dump`) is the buffer as
  it lies, each column packed into a string of its bytes, so that two states of a ring differ
  only in the bytes of the slots that changed between them (and where an integer column
  widened, at most three times in its life) — what lets a checkpoint write what moved in a
  window, not the window;
* :class:`BlockFading`, fading sums S_t = Σ_j a^(t−j)·s_j that are bit-identical whatever the
  batch boundaries. The service batches its input as Kafka delivers it, yet publishes exactly
  the numbers ``replay`` computes, and S ← a^m·S + Σ … rounds differently for different splits.
  So outcomes are grouped in blocks of L aligned on their count since the start of the stream;
  inside the block that started after outcome b, S_t = a^(t−b)·(S_b + P_t) with
  P_t = Σ_{j=b+1..t} a^(−(j−b))·s_j, each outcome's weight depending only on its position. P is
  accumulated with ``np.bincount`` (or ``np.cumsum``) whose first inputs are the carried values
  of P; both add strictly in order, so P goes through exactly the additions of a one-by-one
  update, for any split. At the end of a block S_{b+L} = a^L·(S_b + P), P = 0.

References
----------
Gama, Sebastião, Rodrigues (2013), *On evaluating stream learning algorithms*, Machine
Learning 90(3): Algorithm 1 (all history), Algorithm 2 (sliding window), Algorithm 3 (fading
factors).
"""

from __future__ import annotations

import base64
import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

import numpy as np

__all__ = [
    "BlockFading",
    "EstimatorSpec",
    "Ring",
    "block_size",
    "check_continued",
    "geometric_sum",
    "pack_column",
    "packing_of",
    "parse_estimators",
    "unpack_column",
]

#: Longest block; shorter for small fading factors so that a^(−L) stays ≤ 1e20.
LONGEST_BLOCK = 1024

Contribution = Callable[[slice, np.ndarray], tuple[np.ndarray, np.ndarray]]


def block_size(fading_factor: float) -> int:
    """Outcomes per block: at most 1024, and a^(−k) ≤ 1e20 inside a block."""
    decay = np.cumprod(np.full(LONGEST_BLOCK, fading_factor))
    return max(1, int(np.count_nonzero(decay >= 1e-20)))


def geometric_sum(ratio: float, count: int) -> float:
    """Σ_{i<count} ratio^i = (1 − ratio^count)/(1 − ratio), without cancellation near 1.

    With ratio = a it is Gama's N_a, the sum of the fading weights of ``count`` outcomes; with
    ratio = a² the sum of their squares.

    >>> geometric_sum(0.5, 3), geometric_sum(1.0, 7), geometric_sum(0.9, 0)
    (1.75, 7.0, 0.0)
    """
    if count <= 0:
        return 0.0
    if ratio == 1.0:
        return float(count)
    log = math.log(ratio)
    return math.expm1(count * log) / math.expm1(log)


_ALLOWED = "use 'cumulative', 'window:W' (W an integer >= 1) or 'fading:a' (a in (0, 1])"


@dataclass(frozen=True)
class EstimatorSpec:
    """How one estimate forgets; its :attr:`name` is the estimator's name on the wire.

    Build it with :meth:`parse` (from a configured name) or directly; either way it is
    validated here and nowhere else.

    Examples
    --------
    >>> EstimatorSpec.parse("window:500")
    EstimatorSpec(kind='window', window=500, factor=1.0)
    >>> EstimatorSpec.parse(" fading:0.999 ").name
    'fading:0.999'
    >>> EstimatorSpec("window", window=0)
    Traceback (most recent call last):
    ...
    ValueError: window_size=0 is not allowed; use an integer >= 1
    """

    kind: Literal["cumulative", "window", "fading"]
    window: int = 0  # W, for kind "window"
    factor: float = 1.0  # a, for kind "fading"

    def __post_init__(self) -> None:
        if self.kind == "window":
            size = self.window
            if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
                raise ValueError(f"window_size={size!r} is not allowed; use an integer >= 1")
        elif self.kind == "fading":
            a = self.factor
            if isinstance(a, bool) or not isinstance(a, int | float) or not (0.0 < a <= 1.0):
                raise ValueError(
                    f"fading_factor={a!r} is not allowed; use a number in (0, 1] "
                    "(e.g. 0.999; 1 keeps all history)"
                )
            object.__setattr__(self, "factor", float(a))
        elif self.kind != "cumulative":
            raise ValueError(f"estimator kind {self.kind!r} is not known; {_ALLOWED}")

    @property
    def name(self) -> str:
        """``cumulative``, ``window:1000`` or ``fading:0.999``."""
        if self.kind == "window":
            return f"window:{self.window}"
        if self.kind == "fading":
            return f"fading:{self.factor!r}"
        return "cumulative"

    @classmethod
    def parse(cls, spec: str | EstimatorSpec) -> EstimatorSpec:
        """The spec a name stands for (a spec is returned as it is)."""
        if isinstance(spec, EstimatorSpec):
            return spec
        if not isinstance(spec, str):
            raise ValueError(f"estimator {spec!r} is not a string; {_ALLOWED}")
        kind, _, arg = spec.strip().partition(":")
        try:
            if kind == "cumulative" and not arg:
                return cls("cumulative")
            if kind == "window" and arg:
                return cls("window", window=int(arg))
            if kind == "fading" and arg:
                factor = float(arg)
                if not math.isfinite(factor):
                    raise ValueError(arg)
                return cls("fading", factor=factor)
        except ValueError as err:
            raise ValueError(f"estimator {spec!r} is not allowed: {err}; {_ALLOWED}") from None
        raise ValueError(f"estimator {spec!r} is not known; {_ALLOWED}")


def parse_estimators(specs: Iterable[str | EstimatorSpec]) -> tuple[EstimatorSpec, ...]:
    """A configured list of estimators, validated: each known, none twice, at least one.

    >>> [spec.name for spec in parse_estimators(["cumulative", "window:500", "fading:0.99"])]
    ['cumulative', 'window:500', 'fading:0.99']
    >>> parse_estimators(["window:10", "window:10"])
    Traceback (most recent call last):
    ...
    ValueError: estimator 'window:10' is configured twice; list each one once
    """
    if isinstance(specs, str):
        raise ValueError(f"estimators={specs!r} is a single string; pass a list of estimator names")
    parsed: list[EstimatorSpec] = []
    for spec in specs:
        value = EstimatorSpec.parse(spec)
        if value in parsed:
            raise ValueError(f"estimator {spec!r} is configured twice; list each one once")
        parsed.append(value)
    if not parsed:
        raise ValueError("estimators=() is empty; configure at least one estimator")
    return tuple(parsed)


def check_continued(saved: Iterable[str], specs: Iterable[EstimatorSpec]) -> None:
    """Whether a state whose estimators are ``saved`` (names) may continue under ``specs``:
    every one of them must still be there (one that is not would lose its history; new ones
    start empty). The configuration's rules (streameval.app.evolve) refuse such a change with
    a message before any state is restored; this guards the core.

    >>> check_continued(["cumulative"], parse_estimators(["window:10", "cumulative"]))
    >>> check_continued(["window:10"], parse_estimators(["window:20"]))
    Traceback (most recent call last):
    ...
    ValueError: estimator(s) ['window:10'] of the state are not configured: their history would go
    """
    names = {spec.name for spec in specs}
    gone = [name for name in saved if name not in names]
    if gone:
        raise ValueError(
            f"estimator(s) {gone} of the state are not configured: their history would go"
        )


class Ring:
    """The columns of the last ``size`` outcomes, in slots i mod ``size`` (Algorithm 2).

    ``columns`` maps a column's name to its dtype, or to (dtype, shape of one row).

    Examples
    --------
    >>> ring = Ring(3, label=np.int64)
    >>> entered, left = ring.push(label=np.array([1, 2]))
    >>> entered["label"].tolist(), left["label"].tolist()
    ([1, 2], [])
    >>> entered, left = ring.push(label=np.array([3, 4]))
    >>> left["label"].tolist(), ring.held()["label"].tolist()
    ([1], [2, 3, 4])
    >>> entered, left = ring.push(label=np.arange(5, 10))  # more than the ring holds
    >>> entered["label"].tolist(), left["label"].tolist()
    ([7, 8, 9], [2, 3, 4])
    """

    def __init__(self, size: int, **columns: Any) -> None:
        self.size = size
        self.seen = 0  # outcomes ever pushed
        self._columns: dict[str, np.ndarray] = {}
        for name, kind in columns.items():
            dtype, shape = kind if isinstance(kind, tuple) else (kind, ())
            self._columns[name] = np.zeros((size, *shape), dtype=dtype)
        # how each integer column is packed (:meth:`dump`): wide enough for every value ever
        # pushed, never narrower again, so that a column keeps its length in a checkpoint
        self._packing = {
            name: "i1" for name, column in self._columns.items() if column.dtype.kind in "iu"
        }

    @property
    def n(self) -> int:
        """Outcomes held: min(seen, size)."""
        return min(self.seen, self.size)

    def _held_slots(self) -> np.ndarray:
        return np.arange(self.seen - self.n, self.seen) % self.size

    def push(self, **rows: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Add a batch, oldest first; return (the rows that entered, the rows that left).

        A batch longer than the ring enters with its last ``size`` rows only, and everything
        held before leaves; a caller's sums therefore move by exactly ``+ entered − left``.
        """
        m = len(next(iter(rows.values())))
        if any(len(column) != m for column in rows.values()):
            raise ValueError(
                f"a ring's columns are pushed the same number of rows, got "
                f"{ {name: len(column) for name, column in rows.items()} }"
            )
        size = self.size
        for name, code in self._packing.items():
            if code != "i8" and m:  # every row, also those a long batch pushes past
                self._packing[name] = max(code, packing_of(np.asarray(rows[name])))
        if m >= size:
            entered = {name: column[m - size :] for name, column in rows.items()}
            leaving = self._held_slots()
            slots = (self.seen + np.arange(m - size, m)) % size
            left = {name: column[leaving] for name, column in self._columns.items()}
            for name, column in self._columns.items():
                column[slots] = entered[name]
            self.seen += m
            return entered, left
        # the m slots from seen % size on, as at most two runs (the ring wraps once at most);
        # those already filled hold the rows that leave, oldest first
        start = self.seen % size
        runs = [(start, min(start + m, size))]
        if start + m > size:
            runs.append((0, start + m - size))
        if self.seen >= size:
            filled = runs
        elif self.seen + m > size:  # the first run was empty, the second held the oldest
            filled = runs[1:]
        else:
            filled = []
        left = {name: _copy_runs(column, filled) for name, column in self._columns.items()}
        done = 0
        for lo, hi in runs:
            for name, column in self._columns.items():
                column[lo:hi] = rows[name][done : done + hi - lo]
            done += hi - lo
        self.seen += m
        return rows, left

    def held(self) -> dict[str, np.ndarray]:
        """The rows held, oldest first (copies)."""
        slots = self._held_slots()
        return {name: column[slots] for name, column in self._columns.items()}

    def restore(self, seen: int, **held: Any) -> None:
        """Refill from :meth:`held` rows (oldest first) of a ring that had seen ``seen``."""
        self.seen = seen
        slots = self._held_slots()
        for name, column in self._columns.items():
            column[slots] = np.asarray(held[name]).reshape(slots.size, *column.shape[1:])
        for name in self._packing:
            self._packing[name] = packing_of(self._columns[name][: self.n])

    def pack_as_wide_as(self, other: Ring) -> None:
        """Pack each integer column at least as wide as ``other`` packs it: a ring rebuilt
        from another (:meth:`restore` sets the widths from the values held) keeps the widths
        of every value the other was ever pushed, so its dump is the one any split gives."""
        for name, code in self._packing.items():
            self._packing[name] = max(code, other._packing.get(name, code))

    def dump(self) -> dict[str, Any]:
        """JSON-ready: ``seen`` and each column's filled slots in slot order (not oldest
        first), packed by :func:`pack_column`; a push of m rows changes the bytes of m slots.

        An integer column is packed as wide as the widest value the ring was ever pushed
        (one of 300 widens it to two bytes for good), so that its length changes at most
        three times in the ring's life, not with what it holds.

        >>> ring = Ring(3, label=np.int64)
        >>> _ = ring.push(label=np.array([5, 6, 7, 8]))
        >>> ring.dump()
        {'seen': 4, 'label': 'i1:CAYH'}
        >>> again = Ring(3, label=np.int64)
        >>> again.load(ring.dump())
        >>> again.held()["label"].tolist()
        [6, 7, 8]
        >>> _ = ring.push(label=np.array([300, 1, 2, 3]))  # 300 entered, then left
        >>> ring.dump()
        {'seen': 8, 'label': 'i2:AgADAAEA'}
        """
        filled = self.n
        return {
            "seen": self.seen,
            **{
                name: pack_column(column[:filled], self._packing.get(name))
                for name, column in self._columns.items()
            },
        }

    def load(self, state: dict[str, Any]) -> None:
        """Refill from a :meth:`dump` of a ring of the same size and columns."""
        self.seen = state["seen"]
        filled = self.n
        for name, column in self._columns.items():
            column[:filled] = unpack_column(state[name]).reshape(filled, *column.shape[1:])
            if name in self._packing:
                self._packing[name] = state[name].partition(":")[0]


def _copy_runs(column: np.ndarray, runs: list[tuple[int, int]]) -> np.ndarray:
    """The rows of ``column`` in the slot ranges ``runs``, one after the other (a copy)."""
    if len(runs) == 1:
        return column[runs[0][0] : runs[0][1]].copy()
    if not runs:
        return column[:0].copy()
    return np.concatenate([column[lo:hi] for lo, hi in runs])


#: how :func:`pack_column` names a column's dtype
_PACKED = {"i1": np.int8, "i2": np.int16, "i4": np.int32, "i8": np.int64, "f8": np.float64}
#: each integer packing with the least and the most it holds, narrowest first
_RANGES = [
    (code, int(np.iinfo(_PACKED[code]).min), int(np.iinfo(_PACKED[code]).max))
    for code in ("i1", "i2", "i4", "i8")
]


def packing_of(values: np.ndarray) -> str:
    """The narrowest signed integer packing that holds every value (``"i1"`` … ``"i8"``;
    the codes sort by width)."""
    if values.size == 0:
        return "i1"
    low, high = int(values.min()), int(values.max())
    return next(code for code, least, most in _RANGES if least <= low and high <= most)


def pack_column(values: np.ndarray, code: str | None = None) -> str:
    """A column as ``"<dtype>:<base64 of its little-endian bytes>"``: float64 as they are,
    integers and booleans as ``code`` says, by default the narrowest signed integer that holds
    them. Base64 maps each 3 bytes to 4 characters, so a changed element changes only the
    characters over its bytes.

    >>> pack_column(np.array([1, -2, 300])), pack_column(np.array([0.5, 2.0]))
    ('i2:AQD+/ywB', 'f8:AAAAAAAA4D8AAAAAAAAAQA==')
    >>> pack_column(np.array([1, 2]), "i4")
    'i4:AQAAAAIAAAA='
    """
    if values.dtype.kind == "f":
        code = "f8"
    elif code is None:
        code = packing_of(values)
    data = np.ascontiguousarray(values, dtype=np.dtype(_PACKED[code]).newbyteorder("<"))
    return f"{code}:{base64.b64encode(data.tobytes()).decode('ascii')}"


def unpack_column(text: str) -> np.ndarray:
    """The 1-D array :func:`pack_column` packed (integers as int64, floats as float64)."""
    code, _, data = text.partition(":")
    values = np.frombuffer(base64.b64decode(data), dtype=np.dtype(_PACKED[code]).newbyteorder("<"))
    return values.astype(np.float64 if code == "f8" else np.int64)


@functools.lru_cache(maxsize=64)
def _tables(fading_factor: float, length: int) -> tuple[np.ndarray, np.ndarray]:
    """a^k and a^(−k) for k = 0..L as sequential products (the same bits everywhere)."""
    decay = np.cumprod(np.concatenate(([1.0], np.full(length, fading_factor))))
    growth = 1.0 / decay
    for table in (decay, growth):
        table.flags.writeable = False
    return decay, growth


class BlockFading:
    """Split-invariant fading sums of a vector of ``size`` bins (see the module docstring).

    Parameters
    ----------
    fading_factor
        Gama's a in (0, 1].
    size
        Number of bins of the statistics vector.
    block
        Outcomes per block; :func:`block_size` by default. A restored state keeps the block it
        was written with.

    Examples
    --------
    Sum of the values 0..2999 faded with a = 0.5, in one batch or in batches of 7:

    >>> def contribute(rows, x):
    ...     return lambda where, weights: (np.zeros(where.stop - where.start, dtype=np.intp),
    ...                                    weights * x[where])
    >>> x = np.arange(3000, dtype=np.float64)
    >>> one, two = BlockFading(0.5, size=1), BlockFading(0.5, size=1)
    >>> a = one.update(3000, contribute(None, x))
    >>> for lo in range(0, 3000, 7):
    ...     b = two.update(min(7, 3000 - lo), contribute(None, x[lo:]))
    >>> a.tolist() == b.tolist(), round(float(a[0]), 6)
    (True, 5996.0)
    """

    def __init__(self, fading_factor: float, size: int, block: int | None = None) -> None:
        self.fading_factor = fading_factor
        self._block = block_size(fading_factor) if block is None else block
        self._decay, self._growth = _tables(fading_factor, self._block)
        self._base = np.zeros(size)  # S at the start of the current block
        self._partial = np.zeros(size)  # P, in the growth scale of the current block
        self._bins = np.arange(size)
        self._n = 0

    @property
    def n(self) -> int:
        """Outcomes seen."""
        return self._n

    def relayout(self, fn: Callable[[np.ndarray], np.ndarray]) -> None:
        """Map both stored vectors to a new layout (e.g. padded for a new class)."""
        self._base = fn(self._base)
        self._partial = fn(self._partial)
        self._bins = np.arange(self._base.size)

    def update(self, count: int, contribute: Contribution) -> np.ndarray:
        """Add ``count`` outcomes; return the current sums.

        ``contribute(rows, weights)`` gets a slice of the batch's outcomes and their weights
        and returns (bin index, value) pairs: every outcome adds ``value`` to its bins.
        Contributions must come in outcome order.
        """
        start, block = 0, self._block
        while start < count:
            position = self._n % block
            take = min(block - position, count - start)
            weights = self._growth[position + 1 : position + take + 1]
            index, values = contribute(slice(start, start + take), weights)
            size = self._base.size
            if size <= 4 * index.size + 64:
                # carried values first, then the contributions in order: sequential sums
                self._partial = np.bincount(
                    np.concatenate([self._bins, index]),
                    np.concatenate([self._partial, values]),
                    minlength=size,
                )
            else:  # many bins, few touched: the same additions on the touched bins only
                touched, inverse = np.unique(index, return_inverse=True)
                self._partial[touched] = np.bincount(
                    np.concatenate([np.arange(touched.size), inverse]),
                    np.concatenate([self._partial[touched], values]),
                    minlength=touched.size,
                )
            self._n += take
            start += take
            if self._n % block == 0:
                self._base = self._decay[block] * (self._base + self._partial)
                self._partial = np.zeros(self._base.size)
        return self.value()

    def running(self, values: np.ndarray) -> np.ndarray:
        """Add one outcome per row of ``values`` (m × size); return S_b + P_t after each.

        These are the sums of every outcome t in the growth scale of its block: S_t is the row
        times a^(t−b), a factor a ratio of two bins does not need.
        """
        out = np.empty_like(values, dtype=np.float64)
        start, block, count = 0, self._block, values.shape[0]
        while start < count:
            position = self._n % block
            take = min(block - position, count - start)
            weights = self._growth[position + 1 : position + take + 1, None]
            weighted = weights * values[start : start + take]
            partial = np.add.accumulate(np.concatenate([self._partial[None, :], weighted]))[1:]
            out[start : start + take] = self._base + partial
            self._partial = partial[-1].copy()
            self._n += take
            start += take
            if self._n % block == 0:
                self._base = self._decay[block] * (self._base + self._partial)
                self._partial = np.zeros(self._base.size)
        return out

    def running_ratio(self, compiled: ModuleType, losses: np.ndarray) -> np.ndarray:
        """:meth:`running` of the rows (loss, 1) of two bins, compiled: the first running sum
        over the second after each loss (:class:`~streameval.core.fading_mean.FadingMean`),
        the same bits as the ratio of :meth:`running`'s columns."""
        if self._base.size != 2:
            raise ValueError(f"running_ratio needs two bins; these sums have {self._base.size}")
        base, partial = self._base, self._partial
        means, self._n, base, partial = compiled.fading_mean_advance(
            losses if losses.flags.c_contiguous else np.ascontiguousarray(losses),
            self._growth,
            float(self._decay[self._block]),
            self._n,
            (float(base[0]), float(base[1])),
            (float(partial[0]), float(partial[1])),
        )
        self._base, self._partial = np.array(base), np.array(partial)
        return means

    def start_at(self, count: int, values: np.ndarray) -> None:
        """Set the sums to ``values`` after ``count`` outcomes (for a state that predates
        these sums: its caller estimates them once; later outcomes add to them exactly)."""
        self._n = count
        self._base = np.asarray(values, dtype=np.float64) / self._decay[count % self._block]
        self._partial = np.zeros(self._base.size)
        self._bins = np.arange(self._base.size)

    def value(self) -> np.ndarray:
        """S_t = a^(t−b)·(S_b + P_t)."""
        return self._decay[self._n % self._block] * (self._base + self._partial)

    def state(self) -> dict[str, Any]:
        state = {"n": self._n, "base": self._base.tolist(), "partial": self._partial.tolist()}
        if self._block != block_size(self.fading_factor):
            state["block"] = self._block
        return state

    def load(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`state` (into an object built with the same fading factor)."""
        self._block = state.get("block", block_size(self.fading_factor))
        self._decay, self._growth = _tables(self.fading_factor, self._block)
        self._n = state["n"]
        self._base = np.array(state["base"], dtype=np.float64)
        self._partial = np.array(state["partial"], dtype=np.float64)
        self._bins = np.arange(self._base.size)
