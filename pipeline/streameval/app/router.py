"""Stage 0, ingest: decode a batch of input messages, dead-letter the malformed ones, and route
each event to the join partition of its instance, reporting every input partition's progress
(the largest ``ts`` read, and whether it is idle) with each batch. No Kafka, no threads, no
clock: :mod:`streameval.app.runner` feeds it messages and the wall time.

Why the progress matters — the join's watermark — is told in :mod:`streameval.app.join_stage`.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable, Iterable
from typing import Any

from streameval.codec import BatchDecoder, KafkaTimeDecoder, canonical_scores, slice_value
from streameval.config import EvaluationConfig
from streameval.event_time import NO_TS, TimeRules
from streameval.messages import DeadLetter, EventError, Message

from .wire import INSTANCE, LABEL, PREDICTION, EventRow, Source

__all__ = ["Router"]

log = logging.getLogger("streameval.worker")

TopicPartition = tuple[str, int]
#: How long, beyond ``idle_ms``, the worker's loop may go without running between two reads,
#: not counting the time a read may wait for messages, before it counts as away
#: (:meth:`Router.reading`): room for the scheduler and the loop's other waits (a disk's
#: write, Kafka taking its output), which are not pauses of the process.
AWAY_SLACK_MS = 100


class Router:
    """Stage 0: decode input messages, dead-letter the bad ones, route the rest to join
    partitions by ``instance_id``, and track each input partition's progress.

    Parameters
    ----------
    topics
        Input topic name → kind (``instance``, ``prediction``, ``label``).
    partitions
        Number of join partitions (partitions of the events topic).
    idle_ms
        An input partition read to its end and quiet this long no longer holds the
        watermark (:meth:`sources`); times when the worker could not see what was sent do
        not count (:meth:`away`).
    """

    def __init__(
        self,
        topics: dict[str, str],
        partitions: int,
        idle_ms: int = 1000,
        rules: TimeRules | None = None,
        slices: tuple[str, str] | None = None,
    ) -> None:
        """``slices``: the instance field a slice is named by (``slices.by``, as
        :attr:`~streameval.config.SlicesConfig.field` gives it), None without slices."""
        self.rules = EvaluationConfig().time_rules() if rules is None else rules
        self.slices = slices
        kafka_time = self.rules.ts_source == "kafka"
        self.decoder = (KafkaTimeDecoder if kafka_time else BatchDecoder)(
            topics, ts_unit=self.rules.ts_unit
        )
        self.partitions = partitions
        self.idle_ms = idle_ms
        self._progress: dict[TopicPartition, int] = {}
        self._eof_since: dict[TopicPartition, float | None] = {}
        #: the offset at which each partition was last read to its end (-1: not told)
        self._end_at: dict[TopicPartition, int] = {}
        #: wall and CPU time (ms) of the worker's last read
        self._last_read: tuple[float, float] | None = None
        self._index: dict[TopicPartition, int] = {}
        self._order: list[TopicPartition] = []
        self._kinds: list[str | None] = []
        self._decoders: list[Any] = []
        #: next offset to read of each input partition the last :meth:`route` read from
        self.consumed: dict[TopicPartition, int] = {}

    # -- ownership --------------------------------------------------------------------------
    def assign(
        self, tps: Iterable[TopicPartition], progress: dict[TopicPartition, int] | None = None
    ) -> None:
        """Own ``tps`` from now on. ``progress``: the largest ``ts`` accepted from a partition
        up to the offset its reading resumes at (saved with that offset when it was
        committed), so that the time rules decide after a restart as they did before it."""
        progress = progress or {}
        for tp in tps:
            self._progress.setdefault(tp, progress.get(tp, NO_TS))
            self._eof_since.setdefault(tp, None)
        self._reindex()

    def revoke(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self._progress.pop(tp, None)
            self._eof_since.pop(tp, None)
            self._end_at.pop(tp, None)
        self._reindex()

    def progress(self, tp: TopicPartition) -> int:
        """The largest ``ts`` accepted from input partition ``tp`` (:data:`NO_TS`: none yet)."""
        return self._progress.get(tp, NO_TS)

    @property
    def owned(self) -> list[TopicPartition]:
        return list(self._order)

    def _reindex(self) -> None:
        self._order = sorted(self._progress)
        self._index = {tp: i for i, tp in enumerate(self._order)}
        # per owned input partition, in that order: its kind and the decoder of its records
        # (none when event time is the Kafka timestamp: the decoder's own method reads it)
        kinds, decoders = self.decoder.topics, self.decoder.decoders
        if self.decoder.ts_source != "field":
            decoders = {}
        self._kinds = [kinds.get(topic) for topic, _ in self._order]
        self._decoders = [decoders.get(kind) for kind in self._kinds]

    def at_end(self, topic: str, partition: int, wall_ms: float, offset: int = -1) -> None:
        """The consumer read ``topic``/``partition`` to its end, at ``offset`` (the offset
        after its last record, as the end-of-partition event gives it; -1: not known)."""
        tp = (topic, partition)
        if tp in self._eof_since:
            if self._eof_since[tp] is None:
                self._eof_since[tp] = wall_ms
            self._end_at[tp] = offset

    def reading(self, wall_ms: float, cpu_ms: float, wait_ms: float = 0.0) -> None:
        """The worker has read its consumer at ``wall_ms``, its loop's thread having used
        ``cpu_ms`` of CPU time so far; that read could wait up to ``wait_ms`` for messages. If,
        since its last read, more than ``idle_ms`` (and :data:`AWAY_SLACK_MS`) of wall time
        passed in which that thread neither ran nor could wait in the read (the wall time
        less its CPU time and ``wait_ms``: the process paused, or starved of CPU), it was
        :meth:`away`: librdkafka's threads may not have run either, and what was sent
        meanwhile may not be fetched yet. A long turn of work is not such a time: librdkafka
        fetches meanwhile, and :meth:`sources` sees what waits unread. (The loop blocked that
        long, on a disk or on Kafka, counts too, though fetching goes on: that only delays
        idleness.)"""
        last, self._last_read = self._last_read, (wall_ms, cpu_ms)
        if last is None:
            return
        stopped = (wall_ms - last[0]) - (cpu_ms - last[1]) - wait_ms
        if stopped > self.idle_ms + AWAY_SLACK_MS:
            self.away(wall_ms)

    def away(self, wall_ms: float) -> None:
        """The worker could not see what was sent: Kafka does not answer, or its process did
        not run for longer than ``idle_ms`` (:meth:`reading`). A partition read to its end is
        then quiet because nothing could be fetched, not because nothing is sent. Its quiet
        time starts again from now, so it turns idle only ``idle_ms`` after the worker reads
        again (records sent meanwhile come first)."""
        eof = self._eof_since
        for tp, since in eof.items():
            if since is not None:
                eof[tp] = wall_ms

    # -- data -------------------------------------------------------------------------------
    def route(
        self, messages: Iterable[Message], now_ms: int | None = None
    ) -> tuple[list[list[EventRow]], list[DeadLetter]]:
        """Events per join partition (in input order) and the dead letters; afterwards
        :attr:`consumed` holds the next offset of every owned input partition read.

        Every message either becomes an event or a dead letter, whatever its bytes (and
        whatever goes wrong on it). A well-formed event must also pass the time rules
        (:class:`~streameval.event_time.TimeRules`) against its partition's progress; ``now_ms``
        (epoch ms, default: the clock) stands in for the Kafka timestamp of a message that has
        none.
        """
        if now_ms is None:
            now_ms = int(time.time() * 1000)
        out: list[list[EventRow]] = [[] for _ in range(self.partitions)]
        letters: list[DeadLetter] = []
        explain, max_bytes = self.decoder.decode_message, self.decoder.max_bytes
        max_future, max_age = self.rules.max_future_ms, self.rules.max_age_ms
        slices = self.slices
        index, src_kinds, src_decoders = self._index, self._kinds, self._decoders
        partitions = self.partitions
        crc32 = zlib.crc32
        order, progress = self._order, self._progress
        owned = len(order)
        last = [-1] * owned  # last offset read, per owned input partition
        accepted = [progress[tp] for tp in order]  # largest ts accepted, per owned partition
        for message in messages:
            src = index.get((message.topic(), message.partition()))
            if src is None:  # not (or no longer) ours: a message fetched before a revocation
                continue
            offset = last[src] = message.offset()
            try:
                # the common case inline; anything odd goes to the decoder, which says why
                value, decode, record = message.value(), src_decoders[src], None
                if decode is not None and value is not None and len(value) <= max_bytes:
                    try:
                        record = decode(value)
                    except Exception:
                        pass
                    else:
                        if record.type is not None and record.type != src_kinds[src]:
                            record = None
                if record is None:  # the decoder says why, or reads what the common case cannot
                    kind, record = explain(message)
                    if kind is None:
                        letters.append(record)
                        continue
                kind = src_kinds[src]
                scores = None
                if kind == "prediction" and record.scores is not None:
                    try:
                        scores = canonical_scores(record.scores, record.label)
                    except EventError as error:
                        letters.append(self.decoder.dead_letter(message, error))
                        continue
                ts = record.ts
                high = accepted[src]
                if ts > high:  # moves its partition's progress: not past when it was sent
                    stamped, sent = message.timestamp()
                    if not stamped or sent <= 0 or sent > now_ms:
                        sent = now_ms
                    if ts > sent + max_future:
                        letters.append(self._refuse(message, ts, high, now_ms))
                        continue
                    accepted[src] = ts
                elif ts < high - max_age:
                    letters.append(self._refuse(message, ts, high, now_ms))
                    continue
                iid = record.instance_id
                if kind == "prediction":
                    row = (PREDICTION, iid, record.model_id, ts, record.label, src, offset, scores)
                elif kind == "label":
                    row = (LABEL, iid, "", ts, record.label, src, offset, None)
                else:  # an instance row's label is its slice value
                    row = (INSTANCE, iid, "", ts, slice_value(record, slices), src, offset, None)
                out[crc32(iid.encode()) % partitions].append(row)
            except Exception as err:  # a defect, not the message's fault: it never stops us
                log.exception("input %s[%d]@%d", message.topic(), message.partition(), offset)
                error = EventError(
                    f"could not be routed ({type(err).__name__}: {err})", "undecodable"
                )
                letters.append(self.decoder.dead_letter(message, error))
        eof = self._eof_since
        consumed = {}
        for src, offset in enumerate(last):
            if offset >= 0:
                tp = order[src]
                consumed[tp] = offset + 1
                eof[tp] = None  # read from: not at its end (or idle) any more
                progress[tp] = accepted[src]
        self.consumed = consumed
        return out, letters

    def _refuse(self, message: Message, ts: int, progress: int, now_ms: int) -> DeadLetter:
        """The dead letter of an event the time rules refuse."""
        stamped, sent = message.timestamp()
        where = f"{message.topic()}[{message.partition()}]"
        error = self.rules.check(ts, progress, sent if stamped else None, now_ms, where)
        if error is None:  # the inline test above and TimeRules.check are the same rule
            raise AssertionError(f"TimeRules let through what the router refused: ts {ts}")
        return self.decoder.dead_letter(message, error)

    def sources(
        self, wall_ms: float, fetched: Callable[[TopicPartition], int] | None = None
    ) -> list[Source]:
        """Progress of every owned input partition, in the order events refer to them.

        An input partition read to its end and quiet for ``idle_ms`` is idle. ``fetched``
        (given when the consumer is behind: its last read filled the batch, so records may
        wait in its queue unread) tells how far the consumer has fetched a partition (its
        high watermark as last fetched; negative: not known). A partition fetched past the
        offset it was read to its end at has newer records waiting in the queue: it is not
        idle then, whatever its quiet time; the reads that follow reach them. Without
        ``fetched`` (the queue was emptied) there is no such check: a transaction open on a
        partition also raises its high watermark past what a ``read_committed`` consumer
        can read, and must not keep it from turning idle."""
        idle_ms, end_at = self.idle_ms, self._end_at
        result = []
        for tp in self._order:
            since = self._eof_since[tp]
            idle = since is not None and wall_ms - since >= idle_ms
            if idle and fetched is not None:
                end = end_at.get(tp, -1)
                idle = end < 0 or fetched(tp) <= end
            result.append(Source(tp[0], tp[1], self._progress[tp], idle))
        return result
