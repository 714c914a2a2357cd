"""An application's checkpoints as a whole, on Kafka: what they hold, whether a worker of the
application runs, and a worker's check of them at its start.

* :func:`survey` reads the latest seal of every changelog partition (each says what its
  checkpoint holds) and the consumer group's members;
* :func:`preflight` is a worker's start: it judges the checkpoints under the worker's
  configuration (streameval.app.evolve) and stops it, before anything is changed, with one
  paragraph saying what would change the meaning of which numbers and how to go on; it moves
  the models a comparison added or removed sends to another evaluation partition;
* :class:`ChangelogTransaction` writes such changes (streameval.app.edits), and those of
  ``streameval state reset`` (streameval.app.state_reset): one more checkpoint of each
  partition concerned, all of them in one Kafka transaction — a crash or a second writer
  leaves every partition as it was (readers of changelogs read committed records only; a
  second writer with the same transactional id fences the first).

They refuse while any worker of the application runs.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from streameval.clients import consumer_settings, kafka_code, producer_settings
from streameval.config import EvaluationConfig
from streameval.core.outcome import Outcome
from streameval.core.state import decode_value
from streameval.topics import Topics

from . import edits
from .changelog import Changelog, ChangelogError, watermarks
from .changelog_format import live
from .evolve import Stored, Verdict, judge
from .statekeys import STAGE, WHOLE
from .topology import model_partitioner

__all__ = ["ChangelogTransaction", "StateError", "Survey", "group_members", "preflight", "survey"]


class StateError(RuntimeError):
    """The checkpoints cannot be used or changed as asked; the message says why and what to do."""


@dataclass
class Survey:
    """What an application's checkpoints hold: each changelog partition's latest seal (None:
    no checkpoint yet), and who is in its consumer group."""

    app_id: str
    topics: Topics
    joins: dict[int, dict[str, Any] | None] = field(default_factory=dict)
    evals: dict[int, dict[str, Any] | None] = field(default_factory=dict)
    members: list[str] = field(default_factory=list)
    eval_partitions: int = 0  # of the outcomes topic: where models are evaluated
    #: neither changelog topic exists: no worker of this app id and prefix started here
    absent: bool = False
    #: when absent: the join changelogs the cluster has (of other apps or prefixes), those
    #: whose names are close to this app's first
    others: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not any(self.joins.values()) and not any(self.evals.values())

    def unknown(self) -> str:
        """What to say of an application none of whose changelogs exists (:attr:`absent`):
        most likely a mistyped app id or topic prefix, or another cluster."""
        t = self.topics
        more = len(self.others) - 5
        shown = ", ".join(self.others[:5]) + (f" and {more} more" if more > 0 else "")
        here = (
            f"The cluster's join changelogs: {shown}"
            if self.others
            else "The cluster has no join changelog"
        )
        group = (
            f" (workers of the consumer group {self.app_id!r} run: of another topic prefix?)"
            if self.members
            else ""
        )
        return (
            f"app {self.app_id!r} has no changelog here ({t.join_changelog} and "
            f"{t.eval_changelog} do not exist, or this client may not describe them): no "
            f"worker of this app id and topic prefix has started on this cluster{group}. "
            f"{here}. Check --app-id and --prefix ($STREAMEVAL_APP_ID, "
            "$STREAMEVAL_TOPIC_PREFIX, or the [worker] table of --config) and --bootstrap"
        )

    def earlier(self) -> list[tuple[str, int]]:
        """Partitions whose latest checkpoint an earlier release wrote (its seal says nothing
        of what it holds: the survey read it from the state)."""
        seals = [("join", q, seal) for q, seal in self.joins.items()]
        seals += [("evaluation", r, seal) for r, seal in self.evals.items()]
        return [(kind, q) for kind, q, seal in seals if seal and seal.get("earlier")]

    def stored(self) -> Stored:
        """The parts the checkpoints hold, with their shapes (streameval.app.evolve)."""
        stored = Stored()
        for q, seal in self.joins.items():
            if seal is not None:
                stored.joins[q] = seal["summary"]["join"]
        for _, summary in self.eval_summaries():
            for name, (_, shape) in summary["models"].items():
                stored.models[name] = summary["shapes"][shape]
            for key, (_, a, b, estimators) in summary["pairs"].items():
                stored.pairs[key] = (a, b, {"estimators": estimators})
        return stored

    def holders(self) -> dict[str, int]:
        """Where each model (``model NAME``) and pair (``pair A|B``) with a history is."""
        out = {}
        for r, summary in self.eval_summaries():
            out.update({f"model {name}": r for name in summary["models"]})
            out.update({f"pair {key}": r for key in summary["pairs"]})
        return out

    def eval_summaries(self) -> Iterable[tuple[int, dict[str, Any]]]:
        """(partition, summary) of every evaluation partition with a checkpoint, in order."""
        for r, seal in sorted(self.evals.items()):
            if seal is not None:
                yield r, seal["summary"]


def survey(client: dict[str, str], topics: Topics, app_id: str) -> Survey:
    """Read the latest seal of every changelog partition and the group's members."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(producer_settings(client))
    metadata = admin.list_topics(timeout=15).topics
    found = Survey(app_id, topics, members=group_members(admin, app_id))
    if topics.outcomes in metadata:
        found.eval_partitions = len(metadata[topics.outcomes].partitions)
    if topics.join_changelog not in metadata and topics.eval_changelog not in metadata:
        found.absent = True
        others = sorted(n for n in metadata if n.endswith("-join-changelog"))
        close = difflib.get_close_matches(topics.join_changelog, others, n=5, cutoff=0.6)
        found.others = close + [n for n in others if n not in close]
    reader = Consumer(
        {
            **consumer_settings(client),
            "group.id": f"{app_id}-state-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        for topic, seals in (
            (topics.join_changelog, found.joins),
            (topics.eval_changelog, found.evals),
        ):
            if topic not in metadata or metadata[topic].error is not None:
                continue
            changelog = Changelog(topic, None, client)
            for q in sorted(metadata[topic].partitions):
                seal, intent = changelog.latest(q, reader)
                if seal is not None and "summary" not in seal:  # of an earlier release
                    if topic == topics.join_changelog:
                        summary = edits.summarize_join(dict(live(intent)))
                        summary.update(pending=None, remembered=None, waiting=None)
                    else:  # its models' settings are in their state: read it
                        summary = edits.summarize_eval(dict(live(changelog.read(q)[0])))
                    seal = {**seal, "summary": summary, "earlier": True}
                seals[q] = seal
    finally:
        reader.close()
    return found


def group_members(admin: Any, group: str) -> list[str]:
    """The members of a consumer group, as ``client-id@host`` (none: no worker runs)."""
    try:
        description = admin.describe_consumer_groups([group])[group].result(timeout=15)
    except Exception as err:  # KafkaException: GROUP_ID_NOT_FOUND (never used), or a broker
        if "GROUP_ID_NOT_FOUND" in str(err) or "not found" in str(err).lower():
            return []
        raise
    return [f"{m.client_id}@{m.host.lstrip('/')}" for m in description.members]


# -- a worker's start -------------------------------------------------------------------------
def preflight(
    client: dict[str, str],
    topics: Topics,
    app_id: str,
    config: EvaluationConfig,
    commands: tuple[str, str],
    say: Callable[[str], None],
) -> Verdict:
    """Judge the application's checkpoints under ``config``; move what the configured pairs
    place elsewhere now. StateError (one paragraph: what, which values, what to do) where
    they cannot continue, before anything is changed. ``commands``: the `state reset` and
    `state show` command lines that name this application."""
    found = survey(client, topics, app_id)
    verdict = judge(found.stored(), config)
    if verdict.refusals:
        raise StateError(verdict.message(f"app {app_id!r}", *commands))
    moves = _plan_moves(found, config)
    if (verdict.changes or moves) and found.members:
        raise StateError(
            f"this configuration changes what the checkpoints of app {app_id!r} hold "
            f"({_first(verdict, moves)}), and {len(found.members)} worker(s) of the app run "
            f"({', '.join(found.members[:3])}): workers of one application must share one "
            "configuration, and nothing has been changed. Stop every worker of the app, then "
            "start them with the new configuration (once the first one has taken a "
            "checkpoint — snapshot_interval_s — the others may join it)"
        )
    if moves:
        _move(client, topics, app_id, found, moves, say)
    for what in verdict.added:
        say(f"starts fresh at this restart: {what}")
    for what in verdict.dropped:
        say(f"no longer configured, dropped: {what}")
    return verdict


def _first(verdict: Verdict, moves: dict) -> str:
    if verdict.added or verdict.dropped:
        return (verdict.added + verdict.dropped)[0]
    (source, target), (models, pairs) = next(iter(moves.items()))
    return (
        f"{', '.join(sorted(models | pairs))} move from evaluation partition {source} to {target}"
    )


def _plan_moves(
    found: Survey, config: EvaluationConfig
) -> dict[tuple[int, int], tuple[set[str], set[str]]]:
    """(source, target) -> (models, pairs) the configured pairs place in another partition."""
    if not found.eval_partitions:
        return {}
    partition_of = model_partitioner(config, found.eval_partitions)
    moves: dict[tuple[int, int], tuple[set[str], set[str]]] = {}
    for r, summary in found.eval_summaries():
        for name in [*summary["models"], *summary.get("pending_models", ())]:
            if partition_of(name) != r:
                moves.setdefault((r, partition_of(name)), (set(), set()))[0].add(name)
        for key, (_, a, _, _) in summary["pairs"].items():
            if partition_of(a) != r:
                moves.setdefault((r, partition_of(a)), (set(), set()))[1].add(key)
    return moves


def _move(
    client: dict[str, str],
    topics: Topics,
    app_id: str,
    found: Survey,
    moves: dict[tuple[int, int], tuple[set[str], set[str]]],
    say: Callable[[str], None],
) -> None:
    """Move models and pairs between evaluation partitions, exactly (streameval.app.edits):
    possible when no partition is ahead of the join checkpoints it was fed from, as after a
    worker's SIGTERM; else StateError."""
    joins = {
        q: (seal["summary"]["offset"], seal["summary"]["part"]) if seal else (-1, 0)
        for q, seal in found.joins.items()
    }
    for r in {r for pair in moves for r in pair}:
        seal = found.evals.get(r)
        if seal is None:
            raise StateError(
                f"evaluation partition {r} of app {app_id!r} has no checkpoint, and this "
                "configuration moves models into it; nothing has been changed. Start the "
                "workers once with the configuration they ran with and stop them with SIGTERM "
                "(every partition then has a checkpoint), then start them with this one"
            )
        for q, offset, *part in seal["summary"]["applied"]:  # (no step: the whole batch)
            if (offset, part[0] if part else WHOLE) > joins.get(q, (-1, 0)):
                raise StateError(
                    f"this configuration moves models to another evaluation partition, but "
                    f"evaluation partition {r} of app {app_id!r} is ahead of join partition "
                    f"{q}'s checkpoint: the last worker did not stop cleanly, and outcomes it "
                    "would send again could count twice. Nothing has been changed. Start the "
                    "workers with the configuration they ran with, let them catch up, stop "
                    "them with SIGTERM, then start them with this one"
                )
    with ChangelogTransaction(client, topics.eval_changelog, app_id) as writer:
        items = {r: writer.read(r) for pair in moves for r in pair}
        for (source, target), (models, pairs) in sorted(moves.items()):
            unread, until = _unread(client, topics.outcomes, source, items[source], models)
            out_source, out_target = edits.move(
                items[source], items[target], models, pairs, unread, until
            )
            writer.change(source, out_source)
            writer.change(target, out_target)
            items[source] = edits.apply(items[source], out_source)
            items[target] = edits.apply(items[target], out_target)
            moving = ", ".join(sorted(models | pairs))
            say(
                f"moved {moving} from evaluation partition {source} to {target} (with "
                f"{len(unread)} of their outcomes it had not read yet)"
            )
        writer.commit({r: edits.summarize_eval(items[r]) for r in items})


def _unread(
    client: dict[str, str], topic: str, r: int, items: dict[bytes, bytes], models: set[str]
) -> tuple[list[Outcome], int]:
    """The outcomes of ``models`` in the outcome batches evaluation partition ``r`` has yet
    to apply (edits.unread), and the offset the outcomes topic's partition ends at."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    reader = Consumer(
        {
            **consumer_settings(client),
            "group.id": f"{topic}-state-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    batches: list[bytes] = []
    try:
        low, high = watermarks(reader, topic, r)
        position = max(low, decode_value(items[STAGE])["offset"] + 1)
        if position < high:
            reader.assign([TopicPartition(topic, r, position)])
        while position < high:
            for message in reader.consume(10_000, timeout=1.0):
                error = message.error()
                if error is None:
                    position = message.offset() + 1
                    batches.append(message.value())
                elif error.code() == KafkaError._PARTITION_EOF:
                    position = high
    finally:
        reader.close()
    return edits.unread(batches, items, models), high


class ChangelogTransaction:
    """One Kafka transaction over a changelog topic: read partitions, stage each one's
    changes, write them as one checkpoint per partition at :meth:`commit` — all or nothing."""

    def __init__(self, client: dict[str, str], topic: str, app_id: str) -> None:
        self.client, self.topic, self.app_id = client, topic, app_id
        self.changes: dict[int, dict[bytes, bytes | None]] = {}

    def __enter__(self) -> ChangelogTransaction:
        from confluent_kafka import KafkaError, Producer

        transactional_id = f"{self.topic}-state"
        self.producer = Producer(
            {
                "linger.ms": 20,
                **producer_settings(self.client),
                "transactional.id": transactional_id,
                "transaction.timeout.ms": 900_000,
            }
        )
        try:
            self.producer.init_transactions(60)
        except Exception as err:  # KafkaException
            error = err.args[0] if err.args else None
            if kafka_code(err) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                start = self.topic.removesuffix("-join-changelog").removesuffix("-eval-changelog")
                raise StateError(
                    f"Kafka refused the transactional id {transactional_id} ({error.str()}): "
                    "grant the principal WRITE and DESCRIBE on the TransactionalId resources "
                    f"with the prefix {start} (the topic prefix, then app_id: "
                    "docs/operations.md, 'Security'); nothing has been changed"
                ) from None
            raise StateError(
                f"cannot write to {self.topic} in a transaction ({err}): the brokers must allow "
                "transactions (on a single broker: transaction.state.log.replication.factor=1 "
                "and transaction.state.log.min.isr=1); nothing has been changed"
            ) from None
        self.producer.begin_transaction()
        self.changelog = Changelog(self.topic, self.producer, self.client, None)
        return self

    def read(self, partition: int) -> dict[bytes, bytes]:
        """A partition's state (the latest value of each key)."""
        return dict(live(self.changelog.read(partition)[0]))

    def fold(self, partition: int, sink: Any, lookup: Any) -> dict[bytes, bytes | None]:
        """Read a partition through ``sink`` (Changelog.read); the latest checkpoint's intent."""
        return self.changelog.read(partition, sink=sink, lookup=lookup)[0]

    def change(self, partition: int, changes: dict[bytes, bytes | None]) -> dict:
        self.changes.setdefault(partition, {}).update(changes)
        return changes

    def delete(self, partition: int, keys: Iterable[bytes]) -> None:
        """Tombstones under the keys themselves, ahead of the checkpoint (in the transaction)."""
        for key in keys:
            self._produce(b"s" + key, None, partition)

    def _produce(self, key: bytes, value: bytes | None, partition: int) -> None:
        while True:
            try:
                self.producer.produce(self.topic, value, key, partition)
                return
            except BufferError:
                self.producer.poll(0.05)

    def commit(self, summaries: dict[int, dict[str, Any]]) -> None:
        for partition, changes in sorted(self.changes.items()):
            self.changelog.describe(partition, summaries[partition])
            for _ in self.changelog.write(partition, changes, 500):
                self.producer.poll(0)
        try:
            self.producer.commit_transaction(120)
        except Exception as err:  # KafkaException: fenced by another writer, or a broker
            raise StateError(
                f"the checkpoints could not be written ({err}); nothing has been changed. If "
                "another `streameval state reset` or a worker's start ran at the same time, "
                "run it again"
            ) from None
        for partition in self.changes:
            error = self.changelog.confirm(partition)
            if error is not None:
                raise ChangelogError(f"{self.topic}[{partition}]: {error}")

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        if kind is not None:
            try:
                self.producer.abort_transaction(30)
            except Exception:  # nothing was committed either way
                pass
        self.producer.flush(30)
