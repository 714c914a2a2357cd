"""The Kafka side of a changelog topic: write a stage partition's checkpoints with the worker's
producer, know which of them are sealed and acknowledged, and read a partition back — whole
(:meth:`Changelog.read`) or only its latest seal (:meth:`Changelog.latest`). The records and
how they fold back are :mod:`~streameval.app.changelog_format`'s.

A checkpoint is written once the outputs the stage produced before its cut are acknowledged
(:class:`~streameval.app.checkpoint.Checkpoints` waits for them); once all its records are
acknowledged the stage commits (a disk store writes its batch, with the changelog offset it
covers) and the input offsets are committed. Under exactly-once the records go into the
worker's transaction, without an intent (:meth:`Changelog.write`). Nothing here grows with the
state: a checkpoint costs what changed since the last one.
"""

from __future__ import annotations

import functools
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..clients import consumer_settings, refused_for_good
from .changelog_format import (
    CHECKPOINT_VERSION,
    INTENT,
    READABLE_VERSIONS,
    SEAL,
    Restorer,
    Sealed,
    checkpoint_records,
    decode_record,
    intent_number,
    rooted,
)
from .output import failed_transaction
from .transactions import TransactionAborted

__all__ = ["UNANSWERED", "Changelog", "ChangelogError", "Unreadable", "watermarks"]


#: How long a restore waits for a transaction left open in a changelog partition past the
#: offset a disk store is at (the broker aborts it after the writer's transaction_timeout_ms)
OPEN_WAIT_S = 60.0
#: How long :meth:`Changelog.latest` reads again a partition Kafka stops serving (a broker
#: restarting) before it says so (as :func:`watermarks` waits for its offsets)
LATEST_WAIT_S = 60.0


class ChangelogError(RuntimeError):
    """A changelog this worker cannot continue from (another version or configuration)."""


@dataclass
class _Partition:
    sealed: int = 0  # the latest checkpoint number known to be sealed
    chunks: int = 0  # its intent chunks
    sealed_lineage: str | None = None  # its lineage
    lineage: str | None = None  # of the checkpoints this worker writes (None: not named yet)
    roots: list[list[Any]] = field(default_factory=list)  # what they continue from
    carry: dict[bytes, bytes | None] = field(default_factory=dict)
    writing: Sealed | None = None  # written, not yet acknowledged
    failed: str | None = None  # the first delivery error of the checkpoint being written
    gone: bool = False  # ... says the topic or partition does not exist
    end: int = 0  # the offset after the latest record acknowledged
    unacked: int = 0  # records of the checkpoint being written not yet acknowledged
    recreated: bool = False  # the topic was deleted and created again under us
    hanging: bool = False  # the last read stopped at a transaction that outlived its timeout
    summary: dict[str, Any] | None = None  # what the next checkpoint's seal says it holds
    seal: dict[str, Any] | None = None  # the latest seal read


class Changelog:
    """The Kafka side of one changelog topic (one partition per stage partition): write
    checkpoints with a producer, read a partition back into a state.

    Parameters
    ----------
    topic
        The changelog topic.
    producer
        The worker's producer (confluent_kafka.Producer); the caller flushes it (under
        exactly-once, the thread that commits the transaction).
    client
        librdkafka settings for the consumers that read a partition back.
    fingerprint
        Not used: the parts of a changelog of any version are judged one by one, by their own
        settings (streameval.app.evolve).
    make_room
        Called while the producer's queue is full (default: wait for deliveries a moment).
    """

    def __init__(
        self,
        topic: str,
        producer: Any,
        client: dict[str, str],
        fingerprint: str | None = None,
        make_room: Callable[[], None] | None = None,
    ) -> None:
        self.topic = topic
        self.producer = producer
        self.client = client
        self.make_room = make_room or (lambda: producer.poll(0.05))
        #: the producer is transactional (exactly-once): a refusal may be its failed
        #: transaction rather than the topic gone, and a checkpoint needs no intent (its
        #: records are seen whole or not at all: streameval.app.changelog_format)
        self.transactional = False
        #: the monotonic time until which a restore waits for a transaction open on a
        #: partition (None: ``OPEN_WAIT_S``); the worker sets it once per assignment, so that
        #: the assignment's waits share one deadline
        self.wait_until: float | None = None
        self._partitions: dict[int, _Partition] = {}

    def write(
        self, partition: int, changes: dict[bytes, bytes | None], piece: int = 0
    ) -> Iterator[int]:
        """Produce the checkpoint records of ``partition`` (acknowledged by the caller's
        flush), ``piece`` at a time (0: all): a generator that stops between two pieces,
        saying how many it produced, so that the caller can go on with other work in between;
        the records are all produced once it is exhausted (the last piece with it). Pieces
        change nothing a reader sees: the partition's records keep their order, and the
        checkpoint exists at its seal."""
        part = self._partitions.setdefault(partition, _Partition())
        if part.carry:
            changes = {**part.carry, **changes}
        number = part.sealed + 1
        if part.lineage is None:  # the first checkpoint since a restore
            part.lineage = secrets.token_hex(8)
        seal: dict[str, Any] = {"v": CHECKPOINT_VERSION, "lineage": part.lineage}
        if part.roots:
            seal["roots"] = part.roots
        if part.summary is not None:
            seal["summary"] = part.summary
        records, chunks = checkpoint_records(
            number, changes, part.chunks, seal, intent=not self.transactional
        )
        part.writing, part.failed, part.gone = Sealed(number, chunks, part.lineage), None, False
        missing = _missing_codes()
        known_end = part.end

        def delivered(err: Any, message: Any) -> None:
            part.unacked -= 1
            if err is not None:
                if part.failed is None:
                    part.failed = str(err)
                    part.gone = err.code() in missing
            elif message.offset() < known_end:  # offsets went back: a new topic of that name
                part.recreated = True
            elif message.offset() >= part.end:
                part.end = message.offset() + 1

        produce, make_room = self.producer.produce, self.make_room
        piece = piece or len(records)
        for i, (key, value) in enumerate(records, 1):
            while True:
                try:
                    produce(self.topic, value, key, partition, on_delivery=delivered)
                    part.unacked += 1
                    break
                except BufferError:  # the local queue is full: let deliveries drain
                    make_room()
                except Exception as err:  # KafkaException: the topic is gone
                    if self.transactional and failed_transaction(err):  # exactly-once: the
                        raise TransactionAborted(f"{self.topic}: {err}") from None  # txn failed
                    raise self.gone(partition, err) from None
            if i % piece == 0 and i < len(records):
                yield piece

    def gone(self, partition: int, err: Any) -> ChangelogError:
        """What to say when the changelog topic (or partition) is gone."""
        return ChangelogError(
            f"the changelog {self.topic} (partition {partition}) is gone from Kafka ({err}): "
            "was it deleted? No checkpoint can be written, so the worker stops without "
            "writing more; its last checkpoint stands and nothing is lost. Start the worker "
            "again: it creates the topic, writes the join partitions it has on disk into it "
            "whole, and stops with a message if a partition cannot be recovered exactly"
        )

    def describe(self, partition: int, summary: dict[str, Any]) -> None:
        """What the partition's next checkpoint holds, for its seal (the stage's summary at
        its cut)."""
        self._partitions.setdefault(partition, _Partition()).summary = summary

    def seal(self, partition: int) -> dict[str, Any] | None:
        """The latest seal :meth:`read` found in the partition."""
        part = self._partitions.get(partition)
        return None if part is None else part.seal

    def acknowledged(self, partition: int) -> bool:
        """Whether Kafka has answered for every record of the checkpoint being written."""
        part = self._partitions.get(partition)
        return part is None or part.unacked <= 0

    def confirm(self, partition: int) -> str | None:
        """After the producer's flush: None if the checkpoint being written is sealed and
        whole (the stage may commit), else the error (the next checkpoint writes it all again
        under the same number)."""
        part = self._partitions[partition]
        if part.recreated:
            raise ChangelogError(
                f"the changelog {self.topic} was deleted and created again while this worker "
                f"wrote to it (partition {partition}'s offsets started again below "
                f"{part.end}): the checkpoints it held are gone, and continuing would leave "
                "state that no checkpoint holds. The worker stops without writing more; join "
                "partitions on disk are written into the new changelog whole when it restarts, "
                "evaluation partitions cannot be: start over with a new app_id"
            )
        if part.writing is None:
            return "nothing was written"
        if part.failed is not None:
            part.writing = None
            if part.gone:
                raise self.gone(partition, part.failed)
            return part.failed
        part.sealed, part.chunks, part.sealed_lineage = part.writing
        part.writing = None
        part.carry = {}
        return None

    def sealed(self, partition: int) -> Sealed | None:
        """Number, intent chunks and lineage of the partition's latest checkpoint (None:
        none)."""
        part = self._partitions.get(partition)
        if part is None or not part.sealed:
            return None
        return Sealed(part.sealed, part.chunks, part.sealed_lineage)

    def position(self, partition: int) -> int:
        """The offset after the latest checkpoint record of ``partition`` acknowledged."""
        return self._partitions[partition].end

    def carried(self, partition: int) -> dict[bytes, bytes | None]:
        """What the partition's next checkpoint writes again (see :meth:`carry`)."""
        part = self._partitions.get(partition)
        return part.carry if part is not None else {}

    def carry(self, partition: int, items: dict[bytes, bytes | None]) -> None:
        """Write ``items`` with the partition's next checkpoint: its latest checkpoint holds
        them only in its intent (a crash cut its materialization short), which the next one
        deletes."""
        part = self._partitions.setdefault(partition, _Partition())
        part.carry.update(items)

    def carry_all(self, partition: int, items: Iterable[tuple[bytes, bytes]]) -> None:
        """Write ``items`` (a whole state) with the partition's next checkpoint: its changelog
        lost what it held."""
        part = self._partitions.setdefault(partition, _Partition())
        part.carry.update(items)
        part.sealed, part.chunks, part.end, part.sealed_lineage = 0, 0, 0, None
        part.lineage, part.roots = None, []

    def forget(self, partition: int) -> None:
        """The partition moved away."""
        self._partitions.pop(partition, None)

    def read(
        self,
        partition: int,
        start: int | None = None,
        sink: Callable[[list[tuple[bytes, bytes | None]]], None] | None = None,
        lookup: Callable[[list[bytes]], list[bytes | None]] | None = None,
        lag: Callable[[int], None] | None = None,
    ) -> tuple[dict[bytes, bytes | None], bool, int]:
        """Read ``partition`` from ``start`` (default: its beginning) to its end and fold it
        (:class:`Restorer`, with ``sink`` and ``lookup`` if given): the state's changes up to
        the latest seal (None: deleted), whether a seal was read, and the next offset. ``lag``
        hears how many records are left to read, now and then."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

        reader = Consumer(
            {
                **consumer_settings(self.client),
                "group.id": f"{self.topic}-reader",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                # a restore's own: it runs in a rebalance, whatever the main consumer's tuning
                "fetch.queue.backoff.ms": 10,
                "fetch.wait.max.ms": 50,
            }
        )
        restorer = Restorer(sink=sink, lookup=lookup)
        if partition in self._partitions:
            self._partitions[partition].hanging = False
        try:
            low, high = watermarks(reader, self.topic, partition)
            if start is not None and start > high:  # deleted and created again, or a
                high = self._settled(reader, partition, start, high)  # transaction is open
            position = max(low, start if start is not None else low)
            if start is not None and start > high:  # not the topic ``start`` was read from
                position = high  # (it was deleted and created again): the caller sees it
            elif position < high:
                reader.assign(
                    [
                        TopicPartition(
                            self.topic, partition, OFFSET_BEGINNING if start is None else position
                        )
                    ]
                )
                add, quiet = restorer.add, 0
                while position < high:
                    if lag is not None:
                        lag(high - position)
                    # consume() waits its whole timeout unless the batch fills: keep it short
                    messages = reader.consume(10_000, timeout=0.05)
                    quiet = 0 if messages else quiet + 1
                    for message in messages:
                        error = message.error()
                        if error is None:
                            add(message.key(), message.value())
                            position = message.offset() + 1
                        elif error.code() == KafkaError._PARTITION_EOF:
                            # at the end: the offsets between here and ``high`` are gone
                            # (compacted away, or control records)
                            position = max(position, message.offset(), high)
                    if quiet >= 100:  # no end reported for 5 s: ask where the end is now
                        low, now_high = watermarks(reader, self.topic, partition)
                        if position >= now_high or position < low:
                            break
                        quiet = 0
        finally:
            reader.close()
            if lag is not None:
                lag(0)
        seal = restorer.seal
        if seal is not None:
            self.check(partition, seal)
        changes = restorer.finish()
        part = self._partitions.setdefault(partition, _Partition())
        part.end = position
        part.seal = seal
        part.lineage, part.roots = None, []  # a restore: what it writes is a lineage of its own
        if seal is not None:
            part.sealed, part.chunks = seal["n"], seal["chunks"]
            part.sealed_lineage = seal.get("lineage")
            part.roots = rooted(seal, time.time())
            part.carry = dict(restorer.carry)
        return changes, seal is not None, position

    def _settled(self, reader: Any, partition: int, start: int, high: int) -> int:
        """The partition's committed end, once it is past ``start`` — when it is only behind
        because a transaction of another worker process is still open (it ends by its
        commit, abort, or ``transaction_timeout_ms``; at most ``OPEN_WAIT_S`` is waited, and
        not past :attr:`wait_until`) — or ``high`` if the partition really ends before
        ``start`` (the topic was deleted and created again), or if the transaction is still
        open then (:meth:`hanging` says so)."""
        from confluent_kafka import Consumer

        uncommitted = {"isolation.level": "read_uncommitted"}
        client = consumer_settings(self.client)
        probe = Consumer({**client, "group.id": f"{self.topic}-probe", **uncommitted})
        try:
            if watermarks(probe, self.topic, partition)[1] < start:
                return high
        finally:
            probe.close()
        deadline = time.monotonic() + OPEN_WAIT_S
        if self.wait_until is not None:
            deadline = min(deadline, self.wait_until)
        while high < start and time.monotonic() < deadline:
            time.sleep(0.2)
            high = watermarks(reader, self.topic, partition)[1]
        if high < start:  # the records are there, and the transaction that holds them hangs
            self._partitions.setdefault(partition, _Partition()).hanging = True
        return high

    def hanging(self, partition: int) -> bool:
        """Whether the last read of ``partition`` stopped before the offset it was asked to
        start from because a transaction there stayed open past every deadline (a hanging
        transaction: streameval.app.transactions.hanging_transactions), rather than because
        the topic was deleted and created again."""
        part = self._partitions.get(partition)
        return part is not None and part.hanging

    def check(self, partition: int, seal: dict[str, Any]) -> None:
        """Refuse a seal of a version this release cannot continue (ChangelogError)."""
        version = seal.get("v")
        if version not in READABLE_VERSIONS:
            raise ChangelogError(
                f"{self.topic}[{partition}] holds checkpoints of version {version}; this "
                f"worker writes version {CHECKPOINT_VERSION}: stop every worker of the "
                "application and start one version (or use a new app_id to start over)"
            )

    def latest(
        self, partition: int, reader: Any = None
    ) -> tuple[dict[str, Any] | None, dict[bytes, bytes | None]]:
        """The latest seal of ``partition`` (None: no checkpoint) and, for a seal of version 1
        (which says nothing of what it holds), that checkpoint's intent — read from the end:
        the last records first, more only if they do not hold them, never the whole state
        unless one checkpoint is that large. ``reader``: a consumer to use. A read Kafka stops
        short of the end is read again, for up to :data:`LATEST_WAIT_S`, then
        :class:`Unreadable`; Kafka's refusal (a right missing) raises its KafkaException."""
        from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

        own = reader is None
        if own:
            reader = Consumer(
                {
                    **consumer_settings(self.client),
                    "group.id": f"{self.topic}-reader",
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    "fetch.wait.max.ms": 50,  # a restore's own, as in read()
                }
            )
        try:
            low, high = watermarks(reader, self.topic, partition)
            span, deadline = 2_000, None
            while True:
                start = max(low, high - span)
                seal, intents = None, {}
                reader.assign([TopicPartition(self.topic, partition, start)])
                position, quiet, failed = start, 0, None
                while position < high and quiet < 100:
                    messages = reader.consume(10_000, timeout=0.05)
                    quiet += 1
                    for message in messages:
                        error = message.error()
                        if error is None:
                            position, quiet = message.offset() + 1, 0
                            key, value = message.key(), message.value()
                            if key == SEAL and value is not None:
                                seal = decode_record(value)
                            elif key[:1] == INTENT and value is not None:
                                intents[intent_number(key)] = value
                        elif error.code() == KafkaError._PARTITION_EOF:
                            position = high  # the rest is compacted away or uncommitted
                        elif refused_for_good(KafkaException(error)):
                            raise KafkaException(error)
                        else:  # the broker gone or not ready: said if it stops the read
                            failed = error.str()
                reader.unassign()
                if position < high:  # no end (it comes at the last stable offset) in 5 s
                    low, now_high = watermarks(reader, self.topic, partition)
                    if position < now_high or position < low:  # not at the end: read again
                        deadline = deadline or time.monotonic() + LATEST_WAIT_S
                        if time.monotonic() >= deadline:
                            raise Unreadable(
                                f"cannot read {self.topic}[{partition}] from offset {position} "
                                f"to {now_high}: {failed or 'no record for 5 s'}"
                            )
                        high = now_high
                        time.sleep(1.0)
                        continue  # (the same records again: not "no checkpoint")
                if seal is None:
                    if start <= low:
                        return None, {}
                elif "summary" in seal:
                    return seal, {}
                else:
                    chunks = [intents.get((seal["n"], c)) for c in range(seal["chunks"])]
                    if all(chunk is not None for chunk in chunks) or start <= low:
                        return seal, {
                            k: v for chunk in chunks if chunk for k, v in decode_record(chunk)
                        }
                span *= 8
        finally:
            if own:
                reader.close()

    def resume(
        self, partition: int, sealed: Sealed, end: int, seal: dict[str, Any] | None = None
    ) -> None:
        """The partition's latest checkpoint is known without reading it: ``sealed``, the
        one a disk store that is up to date with the changelog holds, whose seal is ``seal``
        (if it was read: what its roots come from)."""
        part = self._partitions.setdefault(partition, _Partition())
        part.sealed, part.chunks, part.sealed_lineage = sealed
        part.end, part.lineage = end, None
        if seal is None:
            seal = {"n": sealed.number, "lineage": sealed.lineage}
        part.roots = rooted(seal, time.time())


@functools.cache
def _missing_codes() -> frozenset[int]:
    """librdkafka's error codes for a topic or partition that does not exist."""
    from confluent_kafka import KafkaError

    return frozenset(
        (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION)
    )


class Unreadable(RuntimeError):
    """Kafka did not give a partition's offsets (:func:`watermarks`) or records
    (:meth:`Changelog.latest`) for a minute."""


#: what a read or a request Kafka stopped answering raises besides a KafkaException: a
#: partition unreadable for a minute, or a request's future that timed out (TimeoutError)
UNANSWERED = (Unreadable, TimeoutError)


def watermarks(reader: Any, topic: str, partition: int) -> tuple[int, int]:
    """The low and high offsets of a partition (a topic just created may have no leader yet);
    :class:`Unreadable` after a minute without them."""
    import time

    from confluent_kafka import TopicPartition

    deadline = time.monotonic() + 60
    while True:
        try:
            return reader.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        except Exception as err:  # KafkaException: not ready yet
            if refused_for_good(err):
                raise
            if time.monotonic() > deadline:
                raise Unreadable(f"cannot read {topic}[{partition}]: {err}") from err
            time.sleep(0.5)
