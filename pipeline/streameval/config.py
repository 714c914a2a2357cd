"""Evaluation configuration: defaults that need no file, a TOML file to change them.

Every value is checked before any work starts; an error names the key, the value and what is
allowed. ``replay`` reads this directly; the streaming worker reads the same file.

Example file (every key optional)::

    estimators = ["cumulative", "window:1000", "fading:0.999"]
    publish_every = 1000          # outcomes of a model between two metrics records
    max_classes = 1000
    normalize_max_count = 50000   # largest estimate (outcomes) that gets normalized_* values
    confidence = 0.95             # of the interval bounds (<measure>_lo, <measure>_hi)
    min_n = 100                   # effective sample size below which an estimate is warming_up
    detectors = [                 # drift detectors of every model (here: the default)
      { type = "page_hinkley", fading_factor = 0.995, delta = 0.05, threshold = 60 },
    ]                             # (and restart_threshold = 10, standardize = true)

    [join]
    label_grace_ms = 5000
    label_ttl_ms = 604800000      # 7 days
    max_pending = 100000000       # per join partition: a guard, on disk about 5-10 GB
    max_future_ms = 3600000       # ts at most 1 hour after the message was sent

    [time]
    ts_unit = "ms"                # unit of the ts field: "ms", "s", "us" or "ns"
    ts_source = "field"           # event time: the ts field, or "kafka" (the record timestamp)

    [delayed]
    bins = 100
    alpha = 2.0
    bin_rule = "vote"             # or "last"

    [models.fraud-v2]             # per model (optional)
    positive_label = "fraud"
    detectors = [ { type = "page_hinkley", threshold = 80, standardize = true } ]

    [models.fraud-v2.costs]       # cost of predicting <column> when the truth is <row>
    fraud = { ok = 100 }          # a missed fraud
    ok = { fraud = 1 }            # a false alarm (a right decision costs 0 unless given)

    [[comparisons]]
    a = "fraud-v1"
    b = "fraud-v2"
"""

from __future__ import annotations

import functools
import json
import math
import tomllib
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from streameval.advice import closest, closest_key, list_words, meant_number, number_words
from streameval.core.cost import CostMatrix
from streameval.core.drift import DEFAULT_DETECTORS, make_detector
from streameval.core.evaluator import DEFAULT_ESTIMATORS
from streameval.core.forgetting import EstimatorSpec, parse_estimators
from streameval.core.intervals import DEFAULT_CONFIDENCE, DEFAULT_MIN_N, check_confidence
from streameval.core.probabilistic import DEFAULT_ECE_BINS
from streameval.core.roc_auc import DEFAULT_AUC_MAX_VALUES
from streameval.decode_errors import utf16
from streameval.event_time import TimeRules
from streameval.messages import BOM

__all__ = ["ConfigError", "EvaluationConfig", "key_place", "load_config", "read_toml"]


class ConfigError(ValueError):
    """A configuration value is not allowed; the message says which, and what is."""


class _Strict(BaseModel):
    # strict: a TOML string where a number belongs (publish_every = "100") is refused, not
    # converted; an integer where a number belongs is fine
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _check_detectors(value: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for spec in value:
        make_detector(spec)  # raises ValueError naming the setting
    return value


class JoinConfig(_Strict):
    label_grace_ms: int = Field(5_000, ge=0, description="how long a label waits for predictions")
    label_ttl_ms: int = Field(7 * 86_400_000, ge=1, description="how long an instance waits")
    max_pending: int = Field(
        100_000_000, ge=1, description="instances held at most, per join partition"
    )
    max_future_ms: int = Field(
        3_600_000, ge=0, description="how far an event's ts may run ahead of when it was sent"
    )


class TimeConfig(_Strict):
    ts_unit: Literal["ms", "s", "us", "ns"] = Field("ms", description="unit of the ts field")
    ts_source: Literal["field", "kafka"] = Field(
        "field", description="event time: the ts field, or the Kafka record timestamp"
    )


class DelayedConfig(_Strict):
    bins: int = Field(100, ge=1)
    alpha: float = Field(2.0, ge=1.0, allow_inf_nan=False)
    bin_rule: Literal["vote", "last"] = "vote"


class ScoresConfig(_Strict):
    ece_bins: int = Field(
        DEFAULT_ECE_BINS, ge=1, le=1000, description="equal-width confidence bins of the ECE"
    )
    auc_max_values: int = Field(
        DEFAULT_AUC_MAX_VALUES,
        ge=2,
        description="distinct scores per class the all-history AUC keeps exactly",
    )


def _whole_seconds(name: str, value: int) -> int:
    if value % 1000:
        raise ValueError(
            f"{name}={value!r} is not allowed; use a whole number of seconds in ms (a multiple "
            "of 1000)"
        )
    return value


class MaturityConfig(_Strict):
    """Label maturity (docs/measures.md, "Label maturity"): prediction-time cohorts."""

    enabled: bool = Field(True, description="count each model's cohorts and publish them")
    cohort_ms: int = Field(
        3_600_000, ge=1000, description="width of a cohort by first-prediction time (ms)"
    )
    every_ms: int = Field(
        60_000, ge=1000, description="a label-maturity record per model each this much event time"
    )
    cohorts: int = Field(24, ge=1, le=10_000, description="the latest cohorts a record lists")

    @field_validator("cohort_ms")
    @classmethod
    def _cohort(cls, value: int) -> int:
        return _whole_seconds("cohort_ms", value)

    @field_validator("every_ms")
    @classmethod
    def _every(cls, value: int) -> int:
        return _whole_seconds("every_ms", value)


class SlicesConfig(_Strict):
    """Per-slice evaluation (docs/measures.md, "Slices"): the top-K values of an attribute of
    the instance by volume, each model evaluated per value."""

    by: str | None = Field(
        None,
        description='the instance field a slice is named by: "attributes.<name>" or '
        '"features.<name>" (none: no slices)',
    )
    top_k: int = Field(20, ge=1, le=1000, description="slices evaluated apart, per model")
    window: int = Field(
        10_000, ge=1, description="outcomes of a model between two choices of its top slices"
    )
    hysteresis: float = Field(
        0.2,
        ge=0,
        le=100,
        allow_inf_nan=False,
        description="how much larger than the smallest tracked slice a new one must be",
    )

    @field_validator("by")
    @classmethod
    def _by(cls, value: str | None) -> str | None:
        if value is not None:
            source, _, name = value.partition(".")
            if source not in ("attributes", "features") or not name:
                raise ValueError(
                    f"by={value!r} is not allowed; name a field of the instance record: "
                    '"attributes.<name>" (e.g. "attributes.country") or "features.<name>"'
                )
        return value

    @property
    def field(self) -> tuple[str, str] | None:
        """(``attributes`` or ``features``, the name), or None without slices."""
        if self.by is None:
            return None
        source, _, name = self.by.partition(".")
        return source, name


class ModelConfig(_Strict):
    positive_label: str | int | None = None
    detectors: list[dict[str, Any]] | None = None
    costs: dict[str, dict[str, float]] | None = Field(
        None, description="cost of predicting a class (inner key) when the truth is another"
    )

    _check = field_validator("detectors")(lambda cls, v: v if v is None else _check_detectors(v))

    @field_validator("costs")
    @classmethod
    def _costs(cls, value: dict[str, dict[str, float]] | None) -> dict | None:
        if value is not None:
            CostMatrix(value)  # raises ValueError naming what is wrong
        return value

    @functools.cached_property
    def cost_matrix(self) -> CostMatrix | None:
        """The costs as the core takes them (validated on load)."""
        return None if self.costs is None else CostMatrix(self.costs)


class ComparisonConfig(_Strict):
    a: str = Field(min_length=1)
    b: str = Field(min_length=1)


class EvaluationConfig(_Strict):
    """Everything that shapes the numbers (not where they come from or go to)."""

    estimators: list[str] = Field(default_factory=lambda: list(DEFAULT_ESTIMATORS), min_length=1)
    publish_every: int = Field(1000, ge=1)
    max_classes: int = Field(1000, ge=1)
    normalize_max_count: int = Field(50_000, ge=0)
    confidence: float = DEFAULT_CONFIDENCE
    min_n: float = DEFAULT_MIN_N
    detectors: list[dict[str, Any]] = Field(
        default_factory=lambda: [dict(d) for d in DEFAULT_DETECTORS]
    )
    join: JoinConfig = Field(default_factory=JoinConfig)
    time: TimeConfig = Field(default_factory=TimeConfig)
    delayed: DelayedConfig = Field(default_factory=DelayedConfig)
    scores: ScoresConfig = Field(default_factory=ScoresConfig)
    maturity: MaturityConfig = Field(default_factory=MaturityConfig)
    slices: SlicesConfig = Field(default_factory=SlicesConfig)
    models: dict[str, ModelConfig] = Field(default_factory=dict)
    comparisons: list[ComparisonConfig] = Field(default_factory=list)

    @field_validator("estimators")
    @classmethod
    def _estimators(cls, value: list[str]) -> list[str]:
        problems = []
        for spec in value:  # every bad one at once, not the first
            try:
                EstimatorSpec.parse(spec)
            except ValueError as err:
                problems.append(str(err))
        if problems:
            allowed = "; use 'cumulative'"  # each reason ends with the forms allowed: once
            forms = next((p[p.index(allowed) :] for p in problems if allowed in p), "")
            reasons = [p[: p.index(allowed)] if allowed in p else p for p in problems]
            raise ValueError("; ".join(reasons) + forms)
        parse_estimators(value)  # the list as a whole: none twice
        return value

    @functools.cached_property
    def estimator_specs(self) -> tuple[EstimatorSpec, ...]:
        """The estimators as the values the core takes (the list was validated on load)."""
        return parse_estimators(self.estimators)

    _check = field_validator("detectors")(lambda cls, v: _check_detectors(v))

    @field_validator("confidence", mode="before")
    @classmethod
    def _confidence(cls, value: Any) -> float:
        return check_confidence(value)

    @field_validator("min_n", mode="before")
    @classmethod
    def _min_n(cls, value: Any) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise ValueError(
                f"min_n={value!r} is not allowed; use a number >= 0: the effective sample size "
                "below which an estimate is marked warming_up (0: never)"
            )
        return float(value)

    @field_validator("comparisons")
    @classmethod
    def _pairs(cls, value: list[ComparisonConfig]) -> list[ComparisonConfig]:
        for pair in value:
            if pair.a == pair.b:
                raise ValueError(f"a comparison of {pair.a!r} with itself; use two models")
        return value

    def model(self, model_id: str) -> ModelConfig:
        """The settings of one model (defaults when it is not listed)."""
        return self.models.get(model_id, ModelConfig())

    def time_rules(self) -> TimeRules:
        """How event time is read, and which events may enter the join by it (the worker
        and replay)."""
        j, t = self.join, self.time
        return TimeRules(j.max_future_ms, j.label_ttl_ms, t.ts_unit, t.ts_source)

    def detectors_of(self, model_id: str) -> list[dict[str, Any]]:
        own = self.model(model_id).detectors
        return self.detectors if own is None else own


_KINDS = {"int_type": int, "float_type": float, "bool_type": bool}


def _model_at(path: tuple) -> type[BaseModel] | None:
    """The table (model) at ``path`` of the configuration, None if there is none."""
    model: type[BaseModel] = EvaluationConfig
    parts = [str(part) for part in path]
    while parts:
        field = model.model_fields.get(parts.pop(0))
        if field is None:
            return None
        kind, args = field.annotation, get_args(field.annotation)
        if get_origin(kind) in (dict, list):  # models.<id>, comparisons.<index>
            kind = args[-1]
            if not parts:
                return None
            parts.pop(0)
        if not _is_table(kind):
            return None
        model = kind
    return model


def _is_table(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def _keys() -> list[str]:
    """Every key of the configuration, with its table (``join.label_ttl_ms``, and
    ``models.<id>.costs`` for the tables named by the user)."""
    keys = []
    for name, field in EvaluationConfig.model_fields.items():
        kind = field.annotation
        if get_origin(kind) is dict and _is_table(get_args(kind)[-1]):
            keys += [f"{name}.<id>.{sub}" for sub in get_args(kind)[-1].model_fields]
        elif _is_table(kind):
            keys += [f"{name}.{sub}" for sub in kind.model_fields]
        elif get_origin(kind) is not list or not _is_table(get_args(kind)[0]):
            keys.append(name)
    return keys


def key_place(name: str) -> str | None:
    """Where the configuration file holds a key (or table) called ``name``, as the words
    that follow "it belongs"; None if it has none.

    >>> key_place("label_grace_ms"), key_place("join"), key_place("costs")
    ('in the [join] table', 'in a [join] table of its own', 'in a [models.<id>] table')
    """
    field = EvaluationConfig.model_fields.get(name)
    if field is not None:
        kind, args = field.annotation, get_args(field.annotation)
        if get_origin(kind) is dict and _is_table(args[-1]):
            return f"in a [{name}.<id>] table of its own"
        if get_origin(kind) is list and _is_table(args[0]):
            return f"in [[{name}]] tables of their own"
        return f"in a [{name}] table of its own" if _is_table(kind) else "at the top of the file"
    for key in _keys():
        table, _, leaf = key.rpartition(".")
        if leaf == name:
            return f"in a [{table}] table" if "<id>" in table else f"in the [{table}] table"
    return None


def _unknown(path: tuple) -> str:
    """What to say of the unknown key at ``path``: where a key of that name belongs (this
    file's other tables, or the worker's), else the closest key of its table, else the closest
    key of another table, else where to look."""
    name, table = str(path[-1]), _model_at(path[:-1])
    place = key_place(name)
    if place is not None:
        return f"not a key of this table; it belongs {place}"
    if len(path) == 1:
        from streameval.app.settings import WorkerSettings  # (it imports this module)

        if name in WorkerSettings.model_fields:
            return "a worker setting; it belongs in the [worker] table"
    if table is not None:  # (at the top, the worker's table is one of the file's too)
        near = closest_key(name, [*table.model_fields, *(["worker"] if len(path) == 1 else [])])
        if near is not None:
            return f"unknown key; did you mean {near!r}?"
    near = closest(name, {key.rsplit(".", 1)[-1] for key in _keys()})
    if near is not None:
        return f"unknown key; did you mean {near!r} ({key_place(near)})?"
    return "unknown key; check the spelling against docs/replay.md"


def _list_example(name: str, value: Any) -> str:
    """What to write for ``value`` where list ``name`` belongs."""
    field = EvaluationConfig.model_fields.get(name)
    kind = get_args(field.annotation)[0] if field is not None else str
    if _is_table(kind):
        return f"write each as a table of its own ([[{name}]])"
    if kind is not str:  # the detectors: a list of tables, each naming its type at least
        kinds = [{"type": d["type"]} for d in field.default_factory()[:1]]  # type: ignore[misc]
        return f"write it as one ({name} = {_inline(kinds)})"
    words = list_words(value) if isinstance(value, str) else []
    if not words:
        words = list(field.default_factory()) if field is not None and field.default_factory else []
    return f"write it as one ({name} = {json.dumps(words)})"


def _inline(tables: list[dict[str, Any]]) -> str:
    """A list of tables as TOML inline tables."""
    return (
        "["
        + ", ".join(
            "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in t.items()) + " }" for t in tables
        )
        + "]"
    )


def _format(err: ValidationError) -> str:
    lines = []
    for problem in err.errors():
        key = ".".join(str(part) for part in problem["loc"]) or "(top level)"
        name = key.rsplit(".", 1)[-1]
        value = problem.get("input")
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "extra_forbidden":
            message = _unknown(problem["loc"])
        elif problem["type"] == "dict_type":
            message = f"a table belongs here; write it as one ({name} = {{ key = value, ... }})"
        elif problem["type"] == "list_type":
            message = f"a list belongs here; {_list_example(name, value)}"
        elif problem["type"] in _KINDS and isinstance(value, str):
            kind = _KINDS[problem["type"]]
            meant = meant_number(name, value, kind)
            message = f"a string where {number_words(name, kind)} belongs; write it without quotes"
            if meant is not None:
                message += f" ({name} = {meant})"
        lines.append(f"  {key} = {value!r}: {message}")
    return "invalid configuration:\n" + "\n".join(lines)


def read_toml(path: str | Path, error: type[Exception]) -> dict[str, Any]:
    """The TOML file at ``path``, or ``error`` saying what to do if it does not exist, is not
    UTF-8 text or not TOML. A UTF-8 byte order mark before it (Notepad writes one) is read
    past; TOML itself does not allow one."""
    where = f"configuration file {str(path)!r}"
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise error(f"{where} does not exist") from None
    if utf16(raw) is not None:  # PowerShell 5's `>` and Out-File write UTF-16
        raise error(
            f"{where} is UTF-16 text, not UTF-8: save it as UTF-8 (e.g. `iconv -f UTF-16 -t UTF-8`)"
        )
    try:
        text = raw.removeprefix(BOM).decode("utf-8")
    except UnicodeDecodeError as err:
        raise error(f"{where} is not UTF-8 text ({err}): save it as UTF-8") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise error(f"{where} is not valid TOML: {err}") from None


def load_config(path: str | Path | None = None, **overrides: Any) -> EvaluationConfig:
    """The defaults, updated from a TOML file and then from keyword overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        data = read_toml(path, ConfigError)
    data.pop("worker", None)  # the streaming worker's own table (streameval/app/settings.py)
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return EvaluationConfig(**data)
    except ValidationError as err:
        raise ConfigError(_format(err)) from None
