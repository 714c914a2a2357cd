"""The topics streameval uses, from ``topics/topics.toml``: load, create, check, describe."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streameval.resources import resource

__all__ = [
    "INPUT_KINDS",
    "NAME_CHARS",
    "TopicReport",
    "TopicSpec",
    "Topics",
    "create_topics",
    "describe_topics",
    "load_topics",
]

ROLES = ("input", "output", "internal")
#: The characters of a Kafka topic name (Kafka refuses any other), and so of a topic prefix
#: and an app id, which topic names are made of: a regular expression's class.
NAME_CHARS = "[A-Za-z0-9._-]"
#: The event each input topic carries, by its name in topics.toml.
INPUT_KINDS = {"instances": "instance", "predictions": "prediction", "labels": "label"}


def topics_dir() -> Path:
    """The folder of ``topics.toml`` and ``schemas/``: the package's own, or
    ``$STREAMEVAL_TOPICS_DIR`` where an operator keeps edited copies."""
    if os.environ.get("STREAMEVAL_TOPICS_DIR"):
        return Path(os.environ["STREAMEVAL_TOPICS_DIR"])
    return resource("topics")


@dataclass(frozen=True)
class TopicSpec:
    """One topic as declared: its base name, prefixed name, role, key and configs."""

    base: str
    name: str
    role: str
    key: str
    schema: str
    partitions: int
    replication: int
    configs: dict[str, str] = field(default_factory=dict)


def load_topics(
    prefix: str = "",
    path: Path | None = None,
    partitions: int | None = None,
    app_id: str = "streameval",
    changelog_configs: dict[str, str] | None = None,
) -> list[TopicSpec]:
    """The declared topics with ``prefix`` prepended to every name.

    ``partitions`` overrides the declared partition count (e.g. 1 for a laptop). Internal
    topics belong to one worker group: their leading ``streameval`` becomes ``app_id``.
    ``changelog_configs`` go over the declared configs of the changelog topics.
    """
    path = path or topics_dir() / "topics.toml"
    data = tomllib.loads(path.read_text())
    defaults = data.get("defaults", {})
    specs = []
    for entry in data["topic"]:
        role = entry["role"]
        if role not in ROLES:
            raise ValueError(f"{path}: topic {entry['name']!r} has role={role!r}; use {ROLES}")
        specs.append(
            TopicSpec(
                base=entry["name"],
                name=prefix + _name(entry["name"], role, app_id),
                role=role,
                key=entry["key"],
                schema=entry.get("schema", ""),
                partitions=partitions or entry.get("partitions", defaults.get("partitions", 1)),
                replication=entry.get("replication", defaults.get("replication", 1)),
                configs={k: str(v) for k, v in entry.get("configs", {}).items()},
            )
        )
        if changelog_configs and entry["name"].endswith("-changelog"):
            specs[-1].configs.update({k: str(v) for k, v in changelog_configs.items()})
    return specs


def _name(base: str, role: str, app_id: str) -> str:
    return base.replace("streameval", app_id, 1) if role == "internal" else base


@dataclass(frozen=True)
class Topics:
    """Every topic the worker reads or writes, named as topics.toml declares them (with the
    prefix, and the app id in the internal ones)."""

    inputs: dict[str, str]  # name -> kind of event
    events: str
    outcomes: str
    join_changelog: str
    eval_changelog: str
    metrics: str
    alarms: str
    comparisons: str
    maturity: str
    dead_letters: str

    @classmethod
    def with_prefix(cls, prefix: str = "", app_id: str = "streameval") -> Topics:
        names = {spec.base: spec.name for spec in load_topics(prefix=prefix, app_id=app_id)}

        def name(base: str) -> str:
            if base not in names:
                raise ValueError(
                    f"{topics_dir() / 'topics.toml'} declares no topic {base!r}; the worker "
                    "needs it (compare with the topics.toml of the installed package)"
                )
            return names[base]

        return cls(
            inputs={name(base): kind for base, kind in INPUT_KINDS.items()},
            events=name("streameval-events"),
            outcomes=name("streameval-outcomes"),
            join_changelog=name("streameval-join-changelog"),
            eval_changelog=name("streameval-eval-changelog"),
            metrics=name("metrics"),
            alarms=name("drift-alarms"),
            comparisons=name("comparisons"),
            maturity=name("label-maturity"),
            dead_letters=name("dead-letters"),
        )


@dataclass
class TopicReport:
    """What ``create_topics`` did: created, already right, and differences it left alone."""

    created: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    mismatched: dict[str, list[str]] = field(default_factory=dict)


def _actual(admin: Any, names: list[str]) -> dict[str, tuple[int, dict[str, str]]]:
    """Partition count and configs of the existing topics among ``names``."""
    from confluent_kafka.admin import ConfigResource

    metadata = admin.list_topics(timeout=15)
    existing = [n for n in names if n in metadata.topics]
    if not existing:
        return {}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in existing]
    futures = admin.describe_configs(resources, request_timeout=15)
    out = {}
    for config_resource, future in futures.items():
        entries = future.result()
        configs = {k: v.value for k, v in entries.items()}
        name = config_resource.name
        out[name] = (len(metadata.topics[name].partitions), configs)
    return out


def create_topics(admin: Any, specs: list[TopicSpec]) -> TopicReport:
    """Create the missing topics; report (never alter) existing ones that differ.

    Idempotent: a second call creates nothing and reports the same differences.
    """
    from confluent_kafka.admin import NewTopic

    report = TopicReport()
    actual = _actual(admin, [s.name for s in specs])
    missing = [s for s in specs if s.name not in actual]
    if missing:
        futures = admin.create_topics(
            [NewTopic(s.name, s.partitions, s.replication, config=s.configs) for s in missing],
            request_timeout=30,
        )
        for name, future in futures.items():
            try:
                future.result()
                report.created.append(name)
            except Exception as err:  # a concurrent creator won the race: check it below
                if "TOPIC_ALREADY_EXISTS" not in str(err):
                    raise
        actual.update(_actual(admin, [s.name for s in missing if s.name not in report.created]))
    for spec in specs:
        if spec.name in report.created:
            continue
        partitions, configs = actual[spec.name]
        differences = []
        if partitions != spec.partitions:
            differences.append(f"partitions: {partitions}, declared {spec.partitions}")
        for key, value in spec.configs.items():
            if configs.get(key) != value:
                differences.append(f"{key}: {configs.get(key)}, declared {value}")
        if differences:
            report.mismatched[spec.name] = differences
        else:
            report.unchanged.append(spec.name)
    return report


def describe_topics(admin: Any, specs: list[TopicSpec]) -> list[dict[str, Any]]:
    """One row per declared topic: declared and actual partitions and configs."""
    actual = _actual(admin, [s.name for s in specs])
    rows = []
    for spec in specs:
        partitions, configs = actual.get(spec.name, (None, {}))
        rows.append(
            {
                "name": spec.name,
                "role": spec.role,
                "key": spec.key,
                "schema": spec.schema,
                "exists": spec.name in actual,
                "partitions": partitions,
                "declared_partitions": spec.partitions,
                "configs": {k: configs.get(k) for k in spec.configs},
                "declared_configs": spec.configs,
            }
        )
    return rows
