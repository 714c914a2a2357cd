"""What a restart under another configuration keeps, starts fresh, or refuses, part by part.

An application's checkpoints hold *parts*: the join (each join partition, under the join's
rules), each model and each compared pair. Every part records the settings that shape its
numbers, its *shape*: the join partitions in their scalars, a model and a pair in their state,
and each checkpoint's seal repeats those of the partition it covers (:func:`join_shape`,
:func:`model_shape`, :func:`pair_shape`). A worker compares every part's shape with its
configuration before it continues it (:func:`judge`):

* a setting outside every shape — how often records are published, ports, logging, batch
  sizes, ``normalize_max_count`` — changes freely;
* what only adds — an estimator, a detector, a comparison, the settings of a model that has
  no history yet — starts those parts fresh at the restart and leaves every other part as it
  was; a detector with other settings is another detector (it starts, the old one goes: its
  alarms are published already, it holds no numbers);
* what would make a part's numbers mean something else — an estimator gone or changed (a
  window size, a fading factor), a model's positive label, ``max_classes`` or delayed-label
  settings, a pair no longer configured, the join's grace, ttl or ``max_pending`` — is refused
  with a :class:`Refusal` that names the setting, the old and the new value and the
  ``streameval state reset`` options that start just that part over.

Models are not configured into existence: every model in the predictions is evaluated, so a
model whose predictions stop keeps its history as it is (dormant) until they resume or
``state reset --model`` drops it. A pair is configured: one that is no longer listed is
refused rather than dropped silently.

Pure (no Kafka): :mod:`streameval.app.stateops` reads the seals, and
:mod:`streameval.app.state_reset` writes resets; docs/worker.md has the table of settings.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from streameval.config import EvaluationConfig
from streameval.core.drift import canonical_spec, make_detector, saved_spec
from streameval.core.error_detector import OFF_IF_ABSENT

__all__ = [
    "JOIN_SETTINGS",
    "SETTINGS",
    "Refusal",
    "Refused",
    "Stored",
    "Verdict",
    "config_fingerprint",
    "join_shape",
    "join_shape_of_meta",
    "judge",
    "model_shape",
    "model_shape_of",
    "pair_shape",
]

#: How a restart meets a change of each evaluation setting (``*``: any model): ``free`` — it
#: takes effect at the restart, nothing stored depends on it; ``adds`` — what it adds starts
#: fresh, what it takes away is refused (an estimator, a pair) or dropped (a detector); ``shapes``
#: — a part with a history under another value is refused. docs/worker.md has the table, and a
#: test that every setting of :class:`~streameval.config.EvaluationConfig` is here.
SETTINGS = {
    "publish_every": "free",
    "normalize_max_count": "free",
    "confidence": "free",
    "min_n": "free",
    "join.max_future_ms": "free",
    "time.ts_unit": "free",  # how input is read: every stored time is milliseconds either way
    "time.ts_source": "free",
    # label maturity restarts its cohorts from the next one when it is turned on or their
    # width changes; how often it publishes and how many it lists decide only what is read
    "maturity.enabled": "free",
    "maturity.cohort_ms": "free",
    "maturity.every_ms": "free",
    "maturity.cohorts": "free",
    # the slices of every model start over when any of these changes (their tracker and
    # evaluators were made under the old values); the whole models go on
    "slices.by": "free",
    "slices.top_k": "free",
    "slices.window": "free",
    "slices.hysteresis": "free",
    "estimators": "adds",
    "detectors": "adds",
    "models.*.detectors": "adds",
    # only what is read: the no-change baseline's transitions of a model start with its costs
    "models.*.costs": "free",
    "comparisons": "adds",
    "models.*.positive_label": "shapes",
    "max_classes": "shapes",
    "delayed.bins": "shapes",
    "delayed.alpha": "shapes",
    "delayed.bin_rule": "shapes",
    "scores.ece_bins": "shapes",
    "scores.auc_max_values": "shapes",
    "join.label_grace_ms": "shapes",
    "join.label_ttl_ms": "shapes",
    "join.max_pending": "shapes",
}
#: The join's settings that shape its state (``max_future_ms`` only decides which events a
#: router lets in from now on: it shapes nothing stored)
JOIN_SETTINGS = ("label_grace_ms", "label_ttl_ms", "max_pending")
#: ... as the join's scalars (streameval.core.join.Join.meta) name them
_JOIN_META = {
    "label_grace_ms": "label_grace",
    "label_ttl_ms": "label_ttl",
    "max_pending": "max_pending",
}
#: A model's settings that shape its state, with the setting of the configuration that gives
#: each one and why another value would change what its numbers mean
_MODEL_SETTINGS = {
    "positive_label": (
        "models.{model}.positive_label",
        "its classes were numbered and its positive-class measures computed for the old one",
    ),
    "max_classes": ("max_classes", "its states were built for the old limit"),
    "bins": ("delayed.bins", "its delayed-label block was binned under the old value"),
    "alpha": ("delayed.alpha", "its Ψ weights were the old ones"),
    "bin_rule": ("delayed.bin_rule", "its delayed-label bins were filled by the old rule"),
    "ece_bins": ("scores.ece_bins", "its calibration was binned under the old value"),
    "auc_max_values": (
        "scores.auc_max_values",
        "its all-history AUC kept (or rounded) its scores under the old limit",
    ),
}


#: model settings that shape a model's state only once one of its predictions had scores
_SCORES_SETTINGS = ("ece_bins", "auc_max_values")


def config_fingerprint(config: EvaluationConfig) -> str:
    """A short hash of the whole evaluation configuration: what the build-info series shows,
    and what checkpoints of version 1 and disk stores of that time recorded. Not ``[time]``:
    it says how input is read, and every time a checkpoint holds is milliseconds."""
    data = orjson.dumps(config.model_dump(exclude={"time"}), option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(data).hexdigest()[:16]


def join_shape(config: EvaluationConfig) -> dict[str, int]:
    """The settings that shape a join partition's state, as configured."""
    return {name: getattr(config.join, name) for name in JOIN_SETTINGS}


def join_shape_of_meta(meta: Mapping[str, Any]) -> dict[str, int] | None:
    """The same, from a join's scalars (None: reset, to take the configured ones)."""
    if meta.get("label_grace") is None:
        return None
    return {name: meta[key] for name, key in _JOIN_META.items()}


def model_shape(config: EvaluationConfig, model_id: str) -> dict[str, Any]:
    """The settings that shape a model's state, as configured."""
    delayed = config.delayed
    return model_shape_of(
        {
            "estimators": [spec.name for spec in config.estimator_specs],
            "positive_label": config.model(model_id).positive_label,
            "max_classes": config.max_classes,
            "bins": delayed.bins,
            "alpha": delayed.alpha,
            "bin_rule": delayed.bin_rule,
            # as configured: what a detector leaves out is the service's default, not a seal's
            "detectors": [make_detector(spec).spec() for spec in config.detectors_of(model_id)],
            "ece_bins": config.scores.ece_bins,
            "auc_max_values": config.scores.auc_max_values,
        }
    )


def model_shape_of(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The same, from a model's settings (``ModelEvaluator.state()["config"]``)."""
    return {
        "estimators": list(settings["estimators"]),
        "positive_label": settings["positive_label"],
        "max_classes": settings["max_classes"],
        "bins": settings["bins"],
        "alpha": float(settings["alpha"]),
        "bin_rule": settings["bin_rule"],
        # as the state ran them: a detector setting added since was off there
        "detectors": [canonical_spec(saved_spec(spec)) for spec in settings["detectors"]],
        # None: the model has had no scores (or its state predates them), so they shape nothing
        "ece_bins": settings.get("ece_bins"),
        "auc_max_values": settings.get("auc_max_values"),
    }


def pair_shape(config: EvaluationConfig) -> dict[str, Any]:
    """The settings that shape a pair's state, as configured."""
    return {"estimators": [spec.name for spec in config.estimator_specs]}


@dataclass
class Stored:
    """The shapes of the parts some checkpoints hold (all of an application's, or one
    partition's). ``joins``: join partition -> shape (None: reset, takes the configured one);
    ``pairs``: key ``a|b`` -> (a, b, shape)."""

    joins: dict[int, dict[str, int] | None] = field(default_factory=dict)
    models: dict[str, dict[str, Any]] = field(default_factory=dict)
    pairs: dict[str, tuple[str, str, dict[str, Any]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Refusal:
    """A change that would make stored numbers mean something else."""

    setting: str  # as the configuration names it
    old: Any
    new: Any
    why: str
    parts: tuple[str, ...]  # the parts whose numbers it concerns
    reset: tuple[str, ...]  # the `streameval state reset` options that start them over

    def describe(self) -> str:
        return (
            f"{self.setting} was {_show(self.old)} and is now {_show(self.new)}: {self.why} "
            f"({_listing(self.parts)})"
        )


@dataclass
class Verdict:
    """What a restart under a configuration does with some checkpoints."""

    refusals: list[Refusal] = field(default_factory=list)
    added: list[str] = field(default_factory=list)  # estimators, detectors added to histories
    dropped: list[str] = field(default_factory=list)  # detectors no longer configured
    new: list[str] = field(default_factory=list)  # configured parts without a history

    @property
    def changes(self) -> bool:
        """Whether the configuration changes a part with a history (what the checkpoints
        show of parts without one cannot tell one configuration from another)."""
        return bool(self.refusals or self.added or self.dropped)

    def reset_options(self) -> list[str]:
        """The `streameval state reset` options of every refusal, each once."""
        seen: set[tuple[str, ...]] = set()
        out: list[str] = []
        for refusal in self.refusals:
            for option in _options(refusal.reset):
                if option not in seen:
                    seen.add(option)
                    out += option
        return out

    def message(self, app: str, reset: str, show: str) -> str:
        """One paragraph: what the configuration changes, and the two ways on. ``reset`` and
        ``show`` are the commands, with the options that name the application."""
        problems = "; ".join(refusal.describe() for refusal in self.refusals)
        options = shlex.join(self.reset_options())
        return (
            f"the checkpoints of {app} cannot continue under this configuration, and nothing "
            f"has been changed: {problems}. Either put the old values back, or start just "
            f"those parts over — their history goes, every other part keeps its own — with "
            f"`{reset} {options}` and start the worker again (`{show}` shows what the "
            "checkpoints hold)"
        )


class Refused(ValueError):
    """Checkpoints that cannot continue under the configuration (:attr:`verdict` says why)."""

    def __init__(self, verdict: Verdict, where: str) -> None:
        self.verdict = verdict
        app = "--app-id APP [--prefix PREFIX]"
        super().__init__(
            verdict.message(where, f"streameval state reset {app}", f"streameval state show {app}")
        )


def judge(stored: Stored, config: EvaluationConfig) -> Verdict:
    """Compare every stored part with the configuration (the module docstring has the rules).

    >>> from streameval.config import load_config
    >>> old = load_config(estimators=["cumulative", "window:1000"])
    >>> stored = Stored(models={"m": model_shape(old, "m")})
    >>> judge(stored, load_config(estimators=["cumulative", "window:1000", "window:50"])).added
    ['estimator window:50 of model m']
    >>> verdict = judge(stored, load_config(estimators=["cumulative", "window:2000"]))
    >>> verdict.refusals[0].setting, verdict.reset_options()
    ('estimators', ['--estimator', 'window:1000'])
    """
    verdict = Verdict()
    _judge_join(stored, config, verdict)
    gone: dict[str, list[str]] = {}  # estimator -> parts holding it that would lose it
    olds: dict[str, list[str]] = {}  # ... and the estimators of the first of them
    estimators = [spec.name for spec in config.estimator_specs]
    # (setting, old, new) -> the models it concerns
    changed: dict[tuple[str, str, str], list[str]] = {}
    for model_id, shape in sorted(stored.models.items()):
        part = f"model {model_id}"
        _estimators(part, shape["estimators"], estimators, gone, olds, verdict)
        now = model_shape(config, model_id)
        for key, (setting, _) in _MODEL_SETTINGS.items():
            if key in _SCORES_SETTINGS and shape[key] is None:
                continue  # no scores yet: the configured values will apply
            if shape[key] != now[key]:
                group = (setting.format(model=model_id), repr(shape[key]), repr(now[key]))
                changed.setdefault(group, []).append(model_id)
        _detectors(part, shape["detectors"], config.detectors_of(model_id), verdict)
    listed = [f"{p.a}:{p.b}" for p in config.comparisons]
    had = sorted(f"{a}:{b}" for a, b, _ in stored.pairs.values())
    for key, (a, b, shape) in sorted(stored.pairs.items()):
        part = f"pair {key}"
        if f"{a}:{b}" not in listed:
            verdict.refusals.append(
                Refusal(
                    "comparisons",
                    had,
                    listed,
                    f"pair {a}:{b} would lose its history",
                    (part,),
                    ("--pair", f"{a}:{b}"),
                )
            )
            continue
        _estimators(part, shape["estimators"], estimators, gone, olds, verdict)
    for name, parts in gone.items():
        verdict.refusals.append(
            Refusal(
                "estimators",
                olds[name],
                estimators,
                f"estimator {name} would lose its history",
                tuple(parts),
                ("--estimator", name),
            )
        )
    for (setting, _, _), models in changed.items():
        key = setting.rpartition(".")[2]
        old, new = stored.models[models[0]][key], model_shape(config, models[0])[key]
        if len(models) > 1 and len(models) == len(stored.models):
            reset: tuple[str, ...] = ("--all-models",)
        else:
            reset = tuple(option for m in models for option in ("--model", m))
        verdict.refusals.append(
            Refusal(
                setting,
                old,
                new,
                _MODEL_SETTINGS[key][1],
                tuple(f"model {m}" for m in models),
                reset,
            )
        )
    for pair in config.comparisons:
        key = f"{pair.a}|{pair.b}"
        if key not in stored.pairs:
            verdict.new.append(f"pair {key}")
    for model_id in sorted(config.models):
        if model_id not in stored.models:
            verdict.new.append(f"model {model_id}")
    return verdict


def _judge_join(stored: Stored, config: EvaluationConfig, verdict: Verdict) -> None:
    new = join_shape(config)
    for name in JOIN_SETTINGS:
        differ = sorted(
            q for q, shape in stored.joins.items() if shape is not None and shape[name] != new[name]
        )
        if differ:
            old = stored.joins[differ[0]][name]  # type: ignore[index]
            verdict.refusals.append(
                Refusal(
                    f"join.{name}",
                    old,
                    new[name],
                    "the instances waiting for labels were joined under the old value",
                    tuple(f"join partition {q}" for q in differ),
                    ("--join",),
                )
            )
    reset = sorted(q for q, shape in stored.joins.items() if shape is None)
    if reset:
        verdict.new.append(f"join partitions {_listing(tuple(map(str, reset)))} (reset)")


def _estimators(
    part: str,
    saved: list[str],
    configured: list[str],
    gone: dict[str, list[str]],
    olds: dict[str, list[str]],
    verdict: Verdict,
) -> None:
    for name in saved:
        if name not in configured:
            gone.setdefault(name, []).append(part)
            olds.setdefault(name, list(saved))
    verdict.added += [f"estimator {name} of {part}" for name in configured if name not in saved]


def _detectors(
    part: str, saved: list[dict[str, Any]], configured: Iterable[dict[str, Any]], verdict: Verdict
) -> None:
    # a shape sealed before a setting existed lacks it: it ran with that setting off
    left = [{**_off_since(spec), **spec} for spec in saved]
    for spec in map(canonical_spec, configured):
        if spec in left:
            left.remove(spec)
        else:
            verdict.added.append(f"detector {_detector(spec)} of {part}")
    verdict.dropped += [f"detector {_detector(spec)} of {part}" for spec in left]


def _off_since(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of a sealed detector's type added since its seal, off, as
    :func:`~streameval.core.drift.canonical_spec` writes them (numbers as floats)."""
    present = canonical_spec(saved_spec({"type": spec["type"]}))
    return {key: present[key] for key in OFF_IF_ABSENT if key in present and key not in spec}


def _detector(spec: Mapping[str, Any]) -> str:
    settings = ", ".join(
        f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in spec.items() if k != "type"
    )
    return f"{spec['type']}({settings})"


def _options(flat: tuple[str, ...]) -> list[tuple[str, ...]]:
    """``("--model", "a", "--join")`` as ``[("--model", "a"), ("--join",)]``."""
    options: list[tuple[str, ...]] = []
    for item in flat:
        if item.startswith("--") or not options:
            options.append((item,))
        else:
            options[-1] += (item,)
    return options


def _show(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"
    return repr(value) if isinstance(value, str) else str(value)


def _listing(parts: tuple[str, ...]) -> str:
    if len(parts) > 4:
        return ", ".join(parts[:4]) + f" and {len(parts) - 4} more"
    return ", ".join(parts)
