"""Worker settings: command line, then ``STREAMEVAL_…`` environment variables, then the
``[worker]`` table of the TOML file replay also reads, then defaults. Validated at start-up.

The TOML file holds both what shapes the numbers (the evaluation configuration: estimators,
join, delayed labels, detectors, models, comparisons — see ``docs/replay.md``) and, in its
``[worker]`` table, where the worker reads and writes::

    publish_every = 1000

    [join]
    label_grace_ms = 2000

    [worker]
    bootstrap = "kafka-1:9092,kafka-2:9092"
    app_id = "fraud-eval"
    metrics_port = 9464

    [worker.kafka]  # librdkafka settings, passed through
    "security.protocol" = "SASL_SSL"
    "sasl.mechanism" = "SCRAM-SHA-512"
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Literal, get_origin

from pydantic import Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings import SettingsError as PydanticSettingsError

from streameval.advice import closest, closest_key, list_words, meant_number, number_words
from streameval.clients import bootstrap_problem
from streameval.config import ConfigError, EvaluationConfig, key_place, load_config, read_toml
from streameval.series import (
    ALL,
    DEFAULT_BINS,
    DEFAULT_CLASSES,
    DEFAULT_INITIAL_MEASURES,
    DEFAULT_MEASURES,
    DEFAULT_SLICE_MEASURES,
    EXPORTABLE_MEASURES,
    Selection,
)
from streameval.topics import NAME_CHARS

__all__ = [
    "ASSIGNMENT_SLACK_MS",
    "KAFKA_SETTINGS",
    "OWNED_KAFKA",
    "SettingsError",
    "WorkerSettings",
    "load_settings",
    "stray_variables",
]

#: exactly-once: what ``max_poll_interval_ms`` must leave beyond ``transaction_timeout_ms``
#: for a rebalance's assignment: the 5 s its wait for the previous owner's transaction may
#: add, and a minute for the restore
ASSIGNMENT_SLACK_MS = 65_000

#: librdkafka settings that are worker settings (the group's and the transactions' timing): one
#: place to set each, refused in ``kafka``
KAFKA_SETTINGS = {
    "session.timeout.ms": "session_timeout_ms",
    "max.poll.interval.ms": "max_poll_interval_ms",
    "transaction.timeout.ms": "transaction_timeout_ms",
}


#: librdkafka settings the worker's guarantees rest on, and why: refused in ``kafka``. The other
#: settings the worker gives its clients (``linger.ms``, ``compression.type``, the fetch sizes and
#: waits ...) are defaults that ``kafka`` changes.
OWNED_KAFKA = {
    "group.id": "its group is app_id",
    "enable.auto.commit": "it commits its offsets with its checkpoints",
    "enable.partition.eof": "idle_ms counts from a partition's end",
    "isolation.level": "it reads only what transactions committed",
    "transactional.id": "it names its own from app_id",
    "auto.offset.reset": "a partition without a committed offset is read from its start, "
    "or events written before the worker first read it would be lost",
    "heartbeat.interval.ms": "it follows session_timeout_ms",
    "statistics.interval.ms": "its telemetry reads the statistics",
}
#: settings that ``kafka`` may give only the values the worker works with: (those values as
#: librdkafka reads them, what to say, why)
FIXED_KAFKA = {
    "enable.idempotence": (
        {"true", "t", "1"},
        "the worker sets it to true",
        "its producers never write a retried record twice",
    ),
    "group.protocol": (
        {"classic"},
        "the worker's group uses the classic protocol",
        "its rebalances and session_timeout_ms are that protocol's",
    ),
    "partition.assignment.strategy": (
        {"range", "roundrobin", "range,roundrobin", "roundrobin,range"},
        "the worker takes an eager strategy: range, roundrobin or both (the default)",
        "it takes each assignment whole; cooperative-sticky hands out parts of one",
    ),
}


#: the ``STREAMEVAL_`` environment variables that are not worker settings: the file, and the
#: folders of the topic plan and of the local Kafka's downloads
OTHER_VARIABLES = frozenset({"STREAMEVAL_CONFIG", "STREAMEVAL_TOPICS_DIR", "STREAMEVAL_CACHE"})


class SettingsError(ConfigError):
    """A worker setting that makes no sense (the message names it, its value and the rule)."""


class _TomlWorkerTable(PydanticBaseSettingsSource):
    def __init__(self, settings_cls: type[BaseSettings], data: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self._data = data

    def get_field_value(self, field, field_name):  # pragma: no cover - __call__ is used
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)


#: a librdkafka or topic setting's value: TOML's numbers and switches are taken as they read
_ClientValue = str | bool | int | float


def _client_string(value: _ClientValue) -> str:
    """A librdkafka or topic setting's value as the string Kafka takes: ``true``, ``5`` (also
    for ``5.0`` or ``1e6``, which an integer property would refuse), ``0.5``."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class WorkerSettings(BaseSettings):
    """Where the worker reads and writes, and how often it publishes and checkpoints."""

    model_config = SettingsConfigDict(env_prefix="STREAMEVAL_", extra="forbid")

    bootstrap: str | None = Field(
        None, description="Kafka bootstrap servers (else the local `streameval kafka start` one)"
    )
    kafka: dict[str, _ClientValue] = Field(
        default_factory=dict,
        description="librdkafka settings passed through (SASL/SSL, client.id ...); "
        'as JSON in STREAMEVAL_KAFKA, e.g. {"security.protocol": "SSL"}',
    )
    app_id: str = Field(
        "streameval",
        min_length=1,
        pattern=f"^{NAME_CHARS}+$",
        description="consumer group of the worker group",
    )
    topic_prefix: str = Field(
        "", pattern=f"^{NAME_CHARS}*$", description="prepended to every topic name"
    )
    metrics_host: str = Field("0.0.0.0", description="address /metrics listens on")
    metrics_port: int = Field(9464, ge=0, le=65535, description="port of /metrics (0: off)")
    publish_interval_s: float = Field(1.0, gt=0, le=3600, allow_inf_nan=False)
    snapshot_interval_s: float = Field(5.0, gt=0, le=3600, allow_inf_nan=False)
    checkpoint_max_changes: int = Field(
        10_000,
        ge=100,
        le=10_000_000,
        description="a join partition with this many changes "
        "since its last checkpoint takes one at once, between the periodic ones: bounds how "
        "long a checkpoint pauses the data path (a few microseconds per change)",
    )
    idle_ms: int = Field(
        1000,
        ge=1,
        description="an input partition read to its end and quiet this long no "
        "longer holds back the watermark",
    )
    heartbeat_ms: int = Field(100, ge=1, description="progress to idle join partitions, at most")
    max_batch: int = Field(
        20_000, ge=1, le=1_000_000, description="the most messages a turn of the loop reads"
    )
    processes: int = Field(
        1,
        ge=1,
        le=64,
        description="data-path processes in this worker, each a member of the "
        "consumer group (one per core the worker may use)",
    )
    session_timeout_ms: int = Field(
        10_000, ge=1_000, description="how soon the group notices a dead worker"
    )
    max_poll_interval_ms: int = Field(
        1_800_000,
        ge=1_000,
        le=86_400_000,
        description="the longest the worker may go between two reads of Kafka, a "
        "rebalance's restore included, before the group goes on without it (and the longest "
        "a rebalance waits for a worker still restoring): keep it above the longest restore "
        "of the partitions a worker may take over from the changelog",
    )
    processing_guarantee: Literal["exactly_once", "at_least_once"] = Field(
        "exactly_once",
        description="exactly_once: every output and checkpoint commits in one Kafka "
        "transaction with the input offsets, so read_committed consumers see each record "
        "once; at_least_once: for clusters without transactions (records re-sent after a "
        "crash are identical copies)",
    )
    commit_interval_ms: int = Field(
        100,
        ge=10,
        le=60_000,
        description="exactly_once: how often the worker commits its transaction; what it "
        "wrote becomes visible to read_committed consumers then (each stage adds up to this "
        "to the label-to-metric latency)",
    )
    transaction_timeout_ms: int = Field(
        60_000,
        ge=1_000,
        le=900_000,
        description="exactly_once: the broker aborts a transaction left open this long (a "
        "worker killed and not restarted on its state_dir): until then read_committed "
        "consumers of the partitions it wrote wait. Keep it above the broker outages the "
        "worker should ride through: a commit waiting longer is fenced",
    )
    log_level: str = Field("info", pattern=r"^(?i:debug|info|warning|error)$")
    log_format: Literal["text", "json"] = Field(
        "text", description="log lines as plain text, or one JSON object each (log pipelines)"
    )
    shutdown_timeout_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        allow_inf_nan=False,
        description="SIGTERM or Ctrl-C stops the worker within this long: with a final "
        "checkpoint if Kafka answers in time, else without (a restart recomputes the rest)",
    )
    store: Literal["disk", "memory"] = Field(
        "disk",
        description="where a join partition keeps its pending instances: RocksDB on "
        "disk with a bounded cache in RAM, or all in RAM (tests, small deployments)",
    )
    state_dir: Path = Field(
        default_factory=lambda: _default_state_dir(),
        description="directory of the disk store (one subdirectory per application and join "
        "partition)",
    )
    cache_mb: int = Field(
        64,
        ge=1,
        le=65_536,
        description="RAM per join partition for records read from disk "
        "(as much again for RocksDB: its block cache and write buffers)",
    )
    changelog_configs: dict[str, _ClientValue] = Field(
        default_factory=dict,
        description="topic configs of the changelog topics, over those "
        "of topics/topics.toml (used when the worker or `topics create` creates them)",
    )

    # What /metrics exports of the published numbers (the topics keep all of them): worker
    # settings, not evaluation ones, so that changing them changes no config fingerprint and
    # keeps the checkpoints (docs/operations.md, "Cardinality")
    export_measures: list[str] = Field(
        default_factory=lambda: list(DEFAULT_MEASURES),
        description="measures of the final view exported to Prometheus; n and n_effective "
        'select the counts, precision, recall and f1 the per-class measures; ["all"]: all',
    )
    export_initial_measures: list[str] = Field(
        default_factory=lambda: list(DEFAULT_INITIAL_MEASURES),
        description="measures of the initial view exported to Prometheus",
    )
    export_estimators: list[str] | None = Field(
        None,
        min_length=1,
        description="estimators exported to Prometheus, as named in `estimators` (default: all)",
    )
    export_classes: int = Field(
        DEFAULT_CLASSES,
        ge=0,
        le=100_000,
        description="per-class measures are exported for this many classes of a model, the "
        "first it saw",
    )
    export_bins: int = Field(
        DEFAULT_BINS,
        ge=0,
        le=100_000,
        description="bins of the latency period exported per delayed estimate, evenly spread",
    )
    export_slice_measures: list[str] = Field(
        default_factory=lambda: list(DEFAULT_SLICE_MEASURES),
        description="measures of the final view of each slice of a model (slices.by) exported "
        'to Prometheus, n its count; ["all"]: every one',
    )

    @field_validator("export_measures", "export_initial_measures", "export_slice_measures")
    @classmethod
    def _measures(cls, value: list[str]) -> list[str]:
        if ALL in value and value != [ALL]:
            raise ValueError(f'"{ALL}" stands alone: ["{ALL}"] exports every measure')
        for name in value:
            if name not in EXPORTABLE_MEASURES and name != ALL:
                raise ValueError(
                    f"{name!r} is not a measure; allowed: {', '.join(EXPORTABLE_MEASURES)}, "
                    f'or ["{ALL}"]'
                )
        return value

    @property
    def uses_state_dir(self) -> bool:
        """Whether the worker writes under ``state_dir``: its disk stores, or exactly-once's
        transactional ids."""
        return self.store == "disk" or self.processing_guarantee == "exactly_once"

    def state_home(self) -> Path:
        """``state_dir/app_id``, created if missing: where this application's disk stores and
        transactional ids live. Raises :class:`SettingsError`, naming ``state_dir``, if the
        worker cannot write there."""
        home = self.state_dir / self.app_id
        try:
            home.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise self.state_dir_refused(f"{err.strerror}: {err.filename}") from None
        if not os.access(home, os.W_OK | os.X_OK):
            raise self.state_dir_refused(f"{home} is not writable")
        return home

    def state_dir_refused(self, why: str) -> SettingsError:
        """The error of a ``state_dir`` the worker cannot use, for ``why``."""
        return SettingsError(
            f"state_dir = {str(self.state_dir)!r}: the worker keeps its disk stores and "
            f"transactional ids there and cannot ({why}). Point state_dir (or "
            "STREAMEVAL_STATE_DIR) at a directory the worker may write"
        )

    def export_selection(self) -> Selection:
        """What the exporter turns into series (streameval.series)."""
        return Selection.of(
            self.export_measures,
            self.export_initial_measures,
            self.export_estimators,
            self.export_classes,
            self.export_bins,
            self.export_slice_measures,
        )

    @field_validator("transaction_timeout_ms")
    @classmethod
    def _commit_within_timeout(cls, value: int, info: ValidationInfo) -> int:
        interval = info.data.get("commit_interval_ms")
        if interval is not None and interval * 4 > value:
            raise ValueError(
                f"below 4 × commit_interval_ms ({interval}): the broker would abort "
                "transactions before they commit; raise it, or lower commit_interval_ms"
            )
        poll = info.data.get("max_poll_interval_ms")
        eo = info.data.get("processing_guarantee") == "exactly_once"
        if eo and poll is not None and poll < value + ASSIGNMENT_SLACK_MS:
            raise ValueError(
                f"max_poll_interval_ms ({poll}) is below it plus {ASSIGNMENT_SLACK_MS}: a "
                "worker given partitions in a rebalance waits up to transaction_timeout_ms "
                "and 5 s for their previous owner's transaction before it restores them, and "
                "the group goes on without a busy worker that takes longer than "
                "max_poll_interval_ms; raise max_poll_interval_ms, or lower this"
            )
        return value

    @field_validator("max_poll_interval_ms")
    @classmethod
    def _poll_within_session(cls, value: int, info: ValidationInfo) -> int:
        session = info.data.get("session_timeout_ms")
        if session is not None and value < session:
            raise ValueError(
                f"below session_timeout_ms ({session}), which Kafka's client does not allow; "
                "raise it, or lower session_timeout_ms"
            )
        return value

    @field_validator("changelog_configs")
    @classmethod
    def _strings(cls, value: dict[str, _ClientValue]) -> dict[str, str]:
        return {k: _client_string(v) for k, v in value.items()}

    @field_validator("kafka")
    @classmethod
    def _no_owned_keys(cls, value: dict[str, _ClientValue]) -> dict[str, str]:
        clash = sorted(set(OWNED_KAFKA) & set(value))
        if clash:
            why = OWNED_KAFKA[clash[0]]
            raise ValueError(f"{clash[0]!r} is set by the worker itself ({why}); remove it")
        for key, (allowed, said, why) in FIXED_KAFKA.items():
            given = _client_string(value[key]) if key in value else None
            if given is not None and given.lower().replace(" ", "") not in allowed:
                raise ValueError(f"{key!r} = {given!r}: {said} ({why}); remove it")
        named = sorted(set(value) & set(KAFKA_SETTINGS))
        if named:
            setting = KAFKA_SETTINGS[named[0]]
            raise ValueError(
                f"{named[0]!r} is the worker setting {setting}: set that instead "
                f"(STREAMEVAL_{setting.upper()}, or {setting} in [worker])"
            )
        return {k: _client_string(v) for k, v in value.items()}

    @field_validator("state_dir", mode="before")
    @classmethod
    def _named(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():  # Path("") is the working directory
            raise ValueError(
                "empty; name a directory, or leave it unset for the default "
                f"({_default_state_dir()})"
            )
        return value

    @field_validator("bootstrap")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        problem = None if value is None else bootstrap_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @classmethod
    def settings_customise_sources(
        cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings
    ):
        return (init_settings, env_settings, _TomlWorkerTable(settings_cls, _FILE_TABLE.get()))


def _default_state_dir() -> Path:
    """``$XDG_STATE_HOME/streameval`` (``~/.local/state/streameval``)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "streameval"


class _Holder:
    """The [worker] table being loaded (pydantic-settings sources are built per class)."""

    def __init__(self) -> None:
        self.value: dict[str, Any] = {}

    def get(self) -> dict[str, Any]:
        return self.value


_FILE_TABLE = _Holder()


#: pydantic's errors of a string from the environment that is not the number it should be
_PARSING = {"int_parsing": int, "int_from_float": int, "float_parsing": float, "bool_parsing": bool}
#: an example of each table-valued setting, as JSON for the environment
_TABLE_EXAMPLES = {
    "kafka": {"security.protocol": "SSL"},
    "changelog_configs": {"min.insync.replicas": "2"},
}


#: the first line of every message of refused worker settings
_INVALID = "invalid worker settings:\n"


def _env(name: str) -> str:
    return "STREAMEVAL_" + name.upper()


def _unknown(name: str) -> str:
    """What to say of an unknown worker setting: where an evaluation setting of that name
    belongs, else the closest worker setting."""
    place = key_place(name)
    if place is not None:
        return f"an evaluation setting, not a worker one: it belongs {place}, outside [worker]"
    if _env(name) in OTHER_VARIABLES:
        return f"not a setting of the file: set ${_env(name)} in the environment"
    near = closest_key(name, WorkerSettings.model_fields)
    if near is not None:
        return f"unknown setting; did you mean {near!r}?"
    return "unknown setting; the settings are listed in docs/worker.md, 'Settings'"


def _variable(env: str) -> str | None:
    """The value of environment variable ``env``, named in any case (as pydantic-settings
    reads it)."""
    return next((v for k, v in os.environ.items() if k.upper() == env), None)


def _as_list(value: str, name: str) -> str:
    """``value`` (a string where list setting ``name`` belongs) as the JSON list it most likely
    means (its words), or the setting's default when it has none."""
    words = list_words(value)
    if not words:
        field = WorkerSettings.model_fields.get(name)
        words = list(field.default_factory() or []) if field and field.default_factory else []
    return json.dumps(words or ["..."])


def _lines(err: ValidationError, skip: set[str] = frozenset()) -> list[str]:
    """A line for each problem of ``err``, but those of the keys in ``skip`` (said otherwise)."""
    lines = []
    for problem in err.errors():
        key = ".".join(str(part) for part in problem["loc"]) or "(top level)"
        if key.split(".")[0] in skip:
            continue
        name, env = key.split(".")[0], _env(key.split(".")[0])
        value = problem.get("input")
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "extra_forbidden":
            message = _unknown(name)
        elif problem["type"] in _PARSING and isinstance(value, str):
            kind = _PARSING[problem["type"]]
            message = f"{number_words(name, kind)} belongs here"
            meant = meant_number(name, value, kind)
            if meant is not None and meant != value:
                message += f" ({name} = {meant}, or {env}={meant})"
        elif problem["type"] == "list_type" and isinstance(value, str):
            example = _as_list(value, name)
            message = (
                f"a list belongs here: {name} = {example} in [worker], and from the "
                f"environment as JSON: {env}='{example}'"
            )
        shown = "<hidden>" if _SECRET.search(key) else _redacted(value)
        # an unknown key has no variable (the environment's unknown ones are only warned of)
        variable = "" if problem["type"] == "extra_forbidden" else f" (or ${env})"
        lines.append(f"  {key}{variable} = {shown!r}: {message}")
    return lines


def _not_json(err: PydanticSettingsError) -> str:
    """What to say of a variable that is not JSON where a table or a list belongs."""
    name = str(err).split('"')[1] if '"' in str(err) else "?"
    env = _env(name)
    field = WorkerSettings.model_fields.get(name)
    if field is not None and get_origin(field.annotation) is dict:
        example = json.dumps(_TABLE_EXAMPLES.get(name, {"key": "value"}))
        holds = "a table of settings"
    else:  # a list: what was given, as one
        example, holds = _as_list(_variable(env) or "", name), "a list"
    return f"{_INVALID}  ${env} is not valid JSON; it holds {holds}, e.g. {env}='{example}'"


def stray_variables(environ: dict[str, str] | None = None) -> list[str]:
    """What to say of each ``STREAMEVAL_`` environment variable that names no setting (a
    misspelt one is ignored, as for any program, so the worker says so at start-up): its
    name, and the closest setting's variable.

    >>> stray_variables({"STREAMEVAL_PROCESES": "2", "STREAMEVAL_APP_ID": "fraud"})
    ['$STREAMEVAL_PROCESES names no setting and is ignored; did you mean $STREAMEVAL_PROCESSES?']
    """
    environ = os.environ if environ is None else environ
    settings = {_env(name) for name in WorkerSettings.model_fields}
    known = settings | OTHER_VARIABLES
    said = []
    for name in sorted(environ):
        upper = name.upper()  # the settings' variables are read whatever their case; the
        if not upper.startswith("STREAMEVAL_") or upper in settings or name in OTHER_VARIABLES:
            continue  # others are not
        if upper.startswith("STREAMEVAL_TEST_"):  # the test suite's own
            continue
        line = f"${name} names no setting and is ignored"
        setting = upper.removeprefix("STREAMEVAL_").lower()
        place = key_place(setting)
        if place is not None:  # the file's alone
            line += f"; {setting} is an evaluation setting, read from --config: it belongs {place}"
        elif upper in OTHER_VARIABLES:
            line += f" (in this case: ${upper})"
        elif near := closest(setting, [v.removeprefix("STREAMEVAL_").lower() for v in known]):
            line += f"; did you mean ${_env(near)}?"
        else:
            line += " (the settings are listed in docs/worker.md, 'Settings')"
        said.append(line)
    return said


#: client settings whose values are secrets: never shown in a message
_SECRET = re.compile(r"password|secret|jaas|token|credential|private|key\.pem", re.IGNORECASE)


def _redacted(value: Any) -> Any:
    """``value`` with the values of secret-looking keys hidden, however deep."""
    if isinstance(value, dict):
        return {
            k: "<hidden>" if isinstance(k, str) and _SECRET.search(k) else _redacted(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return value


def _mistyped(table: dict[str, Any]) -> dict[str, str]:
    """Values of the [worker] table whose TOML type is not the setting's, and what to say of
    each: a string where a number or a switch belongs (``metrics_port = "9464"``) is refused
    rather than converted — the environment's values are strings by nature, the file's need
    not be — and so is a switch where a number belongs (``metrics_port = false``, which
    pydantic would take for 0)."""
    problems = {}
    for key, value in table.items():
        field = WorkerSettings.model_fields.get(key)
        if field is None:
            continue
        if isinstance(value, bool) and field.annotation in (int, float):  # (pydantic: 0 or 1)
            words = number_words(key, field.annotation)
            problems[key] = f"  {key} = {str(value).lower()}: true or false; write {words}"
            continue
        if not isinstance(value, str):
            continue
        if field.annotation in (int, float, bool):
            line = (
                f"  {key} = {value!r}: a string; write {number_words(key, field.annotation)} "
                "without quotes"
            )
            meant = meant_number(key, value, field.annotation)
            problems[key] = line + (f" ({key} = {meant})" if meant is not None else "")
    return problems


def load_settings(
    path: str | Path | None = None, **overrides: Any
) -> tuple[WorkerSettings, EvaluationConfig]:
    """Worker settings and evaluation configuration from one TOML file (optional; default
    ``$STREAMEVAL_CONFIG``), the environment and ``overrides`` (the command line)."""
    path = path or os.environ.get("STREAMEVAL_CONFIG") or None
    data: dict[str, Any] = {}
    if path is not None:
        data = read_toml(path, SettingsError)
    table = data.pop("worker", {})
    if not isinstance(table, dict):
        raise SettingsError(f"`worker` in {str(path)!r} must be a table ([worker])")
    mistyped = _mistyped(table)
    _FILE_TABLE.value = table
    try:
        settings = WorkerSettings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as err:  # (a variable's value is validated, not the file's)
        lines = _lines(err, {key for key in mistyped if _variable(_env(key)) is None})
        raise SettingsError(_INVALID + "\n".join([*lines, *mistyped.values()])) from None
    except PydanticSettingsError as err:  # a variable that is not JSON where JSON belongs
        raise SettingsError(_not_json(err)) from None
    finally:
        _FILE_TABLE.value = {}
    if mistyped:
        raise SettingsError(_INVALID + "\n".join(mistyped.values()))
    try:
        config = load_config(None, **data)
    except ConfigError as err:
        raise SettingsError(f"{err} (in {str(path)!r})" if path else str(err)) from None
    unknown = [e for e in settings.export_estimators or () if e not in config.estimators]
    if unknown:
        raise SettingsError(
            f"{_INVALID}  export_estimators (or $STREAMEVAL_EXPORT_ESTIMATORS) = "
            f"{settings.export_estimators!r}: {unknown[0]!r} is not one of the configured "
            f"estimators; allowed: {', '.join(config.estimators)}"
        )
    return settings, config
