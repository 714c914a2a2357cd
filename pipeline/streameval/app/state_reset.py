"""``streameval state reset``: parts of an application's checkpoints start over — every join
partition's instances and rules, a model, a pair, an estimator everywhere — each as one more
checkpoint of the partitions concerned (streameval.app.edits), all in one Kafka transaction
(:class:`~streameval.app.stateops.ChangelogTransaction`). Refused while a worker of the
application runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from streameval.core.state import MEMORY, RECORD
from streameval.topics import Topics

from . import edits
from .stateops import ChangelogTransaction, StateError, Survey, survey

__all__ = ["Resets", "reset"]


@dataclass
class Resets:
    """What `streameval state reset` is asked to start over."""

    join: bool = False
    models: list[str] = field(default_factory=list)
    all_models: bool = False
    pairs: list[str] = field(default_factory=list)  # "a:b" or "a|b"
    estimators: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.join or self.models or self.all_models or self.pairs or self.estimators)


def reset(
    client: dict[str, str], topics: Topics, app_id: str, asked: Resets, say: Callable[[str], None]
) -> Survey:
    """Reset the parts ``asked`` names, in one transaction; say what was done. StateError if a
    worker of the application runs, or a part named is not in the checkpoints."""
    found = survey(client, topics, app_id)
    if found.absent:  # before the members: they may be of the app id under another prefix
        raise StateError(found.unknown())
    if found.members:
        raise StateError(
            f"{len(found.members)} worker(s) of app {app_id!r} run "
            f"({', '.join(found.members[:3])}); a reset must not change checkpoints under a "
            "running worker, and nothing has been changed. Stop every worker of the app "
            "(SIGTERM), then reset"
        )
    if found.empty:
        raise StateError(
            f"app {app_id!r} has no checkpoints ({topics.eval_changelog} and "
            f"{topics.join_changelog} hold none): there is nothing to reset"
        )
    holders = found.holders()
    targets: dict[int, list[tuple[str, str]]] = {}  # eval partition -> (kind, name)
    models = (
        sorted(m.removeprefix("model ") for m in holders if m.startswith("model "))
        if asked.all_models
        else list(asked.models)
    )
    for name in models:
        if f"model {name}" not in holders:
            raise StateError(_unknown("model", name, holders, app_id))
        targets.setdefault(holders[f"model {name}"], []).append(("model", name))
    for text in asked.pairs:
        key = next(
            (
                k.removeprefix("pair ")
                for k in holders
                if k.startswith("pair ") and text in (k[5:], k[5:].replace("|", ":", 1))
            ),
            None,
        )
        if key is None:
            raise StateError(_unknown("pair", text, holders, app_id))
        targets.setdefault(holders[f"pair {key}"], []).append(("pair", key))
    if asked.estimators:
        for r, _ in found.eval_summaries():
            targets.setdefault(r, [])
    if targets:
        with ChangelogTransaction(client, topics.eval_changelog, app_id) as writer:
            summaries = {}
            for r, names in sorted(targets.items()):
                items = writer.read(r)
                for kind, name in names:
                    changes = (edits.reset_model if kind == "model" else edits.reset_pair)(
                        items, name
                    )
                    items = edits.apply(items, writer.change(r, changes))
                    say(
                        f"reset {kind} {name} (evaluation partition {r}): it starts over at "
                        "its next outcome"
                    )
                for estimator in asked.estimators:
                    changes, touched = edits.reset_estimator(items, estimator)
                    items = edits.apply(items, writer.change(r, changes))
                    for part in touched:
                        say(f"reset estimator {estimator} of {part} (evaluation partition {r})")
                summaries[r] = edits.summarize_eval(items)
            writer.commit(summaries)
    if asked.join:
        _reset_join(client, topics, app_id, found, say)
    return found


def _unknown(kind: str, name: str, holders: dict[str, int], app_id: str) -> str:
    known = sorted(h.removeprefix(f"{kind} ") for h in holders if h.startswith(f"{kind} "))
    return (
        f"app {app_id!r} has no {kind} {name!r} in its checkpoints (it has: "
        f"{', '.join(known) or 'none'}); nothing has been changed"
    )


def _reset_join(
    client: dict[str, str],
    topics: Topics,
    app_id: str,
    found: Survey,
    say: Callable[[str], None],
) -> None:
    """Every join partition forgets its instances and rules (streameval.app.edits.reset_join).
    Their records are deleted as they stream by, never all held."""
    with ChangelogTransaction(client, topics.join_changelog, app_id) as writer:
        summaries = {}
        for q, seal in sorted(found.joins.items()):
            if seal is None:
                continue
            sink = _Forget(writer, q)
            intent = writer.fold(q, sink, sink.lookup)
            items = {k: v for k, v in {**sink.kept, **intent}.items() if v is not None}
            changes = edits.reset_join(items)
            changes.update({k: None for k in intent if k[:1] in (RECORD, MEMORY)})
            writer.change(q, changes)
            summaries[q] = edits.summarize_join(edits.apply(items, changes))
            pending = seal["summary"]["pending"]
            held = "all its" if pending is None else f"{pending:,}"
            say(
                f"reset join partition {q}: {held} pending instances and its memory of "
                "resolved ones dropped; it takes the configured rules at its next start"
            )
        writer.commit(summaries)


class _Forget:
    """A join partition's changelog read through: instance records deleted as they come,
    the rest kept (its scalars and waiting events: small)."""

    def __init__(self, writer: ChangelogTransaction, partition: int) -> None:
        self.writer, self.partition = writer, partition
        self.kept: dict[bytes, bytes | None] = {}

    def __call__(self, batch: list[tuple[bytes, bytes | None]]) -> None:
        self.writer.delete(self.partition, {k for k, _ in batch if k[:1] in (RECORD, MEMORY)})
        self.kept.update((k, v) for k, v in batch if k[:1] not in (RECORD, MEMORY))

    def lookup(self, keys: list[bytes]) -> list[bytes | None]:
        return [self.kept.get(key) for key in keys]
