"""How the worker drives its join partitions: an event batch applied, the steps of what it
makes due (:data:`~streameval.app.join_stage.SLICE_EVENTS` at a time, a checkpoint possibly
cut between two steps), the outcome batches sent, and the partition's fetching paused and
resumed so that neither a checkpoint on its way nor the batches waiting for a join that is
behind grow without bound. Methods of :class:`~streameval.app.runner.Pipeline`, whose
attributes they use.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

from .changelog import Changelog
from .join_stage import JoinStage
from .wire import OutcomeBatch, WireError, decode_events, encode

__all__ = ["QUEUED_MAX", "QUEUED_RESUME", "JoinPacing"]

log = logging.getLogger("streameval.worker")

#: A join partition that is stepping through its events due keeps about this many of the
#: event batches that come meanwhile in RAM; then it stops fetching them until it has used all
#: but ``QUEUED_RESUME``: a join slower than its input waits in Kafka, not in the heap.
QUEUED_MAX = 16
QUEUED_RESUME = 4


class JoinPacing:
    """The join partitions' side of :class:`~streameval.app.runner.Pipeline`'s loop."""

    def _join(self, message: Any) -> None:
        q = message.partition()
        stage = self.joins.get(q)
        if stage is None:
            return  # fetched before a revocation
        queued = self._queued.get(q)
        if queued is not None:  # it is still applying an earlier batch's events: wait
            queued.append(message)
            if len(queued) >= QUEUED_MAX and q not in self._full:
                self._full.add(q)
                self._pause(q)
            return
        self._apply_join(q, stage, message)

    def _apply_join(self, q: int, stage: JoinStage, message: Any) -> None:
        try:
            batch = decode_events(message.value())
        except WireError as err:
            self._skip("join", message, err)
            stage.offset = max(stage.offset, message.offset())
            return
        before = (stage.frontier, stage.join.clock)
        try:
            outcomes = stage.apply(message.offset(), batch)
        except Exception as err:
            self._skip("join", message, err)
            stage.offset = max(stage.offset, message.offset())
            outcomes = None
        if outcomes is not None:
            self._emit(q, stage, self.topology.after_batch(stage, before, outcomes))
        if stage.behind:  # (also after a failure: its steps go on as after a restart)
            self._queued.setdefault(q, deque())

    def _catch_up(self) -> None:
        """The next steps of each join partition that has events due — until one cuts a
        checkpoint or the partition is held — and, once it has caught up, the event batches
        that waited, until one leaves it behind again."""
        for q, queued in list(self._queued.items()):
            stage = self.joins[q]
            while q not in self._held:
                if stage.behind:
                    clock = stage.join.clock
                    try:
                        outcomes = stage.proceed()
                    except Exception:  # a defect: as for an event batch, say so and go on
                        log.exception(
                            "join %d: a step of the events due failed; its outcomes are lost", q
                        )
                        self.telemetry.skipped("join")
                        break  # the next step in the next turn
                    self._emit(q, stage, self.topology.after_step(stage, clock, outcomes))
                    if self.checkpoints.stepped or self._commit_soon:  # a checkpoint was
                        break  # cut (or is due, exactly-once): the rest later
                    if self.eo and time.monotonic() >= self._next_commit:
                        break
                    continue
                if not queued:
                    del self._queued[q]
                    break
                self._apply_join(q, stage, queued.popleft())
                if len(queued) <= QUEUED_RESUME and q in self._full:
                    self._full.discard(q)
                    self._fetch(q)
                if stage.behind:  # its first step is taken: the next ones in the next turn
                    break

    def _emit(self, q: int, stage: JoinStage, batches: list[tuple[int, OutcomeBatch]]) -> None:
        """Send a join step's outcome batches; cut a checkpoint of the stage, or hold it, if
        it has changed enough."""
        for r, batch in batches:
            self.output.produce(self.topics.outcomes, encode(batch), partition=r)
        if batches:
            self._wrote.add(("join", q))
        self.stats.outcome_batches += len(batches)
        self.telemetry.joined(q, stage.join)
        most = self.settings.checkpoint_max_changes
        if stage.join.changed >= most:
            if not self.checkpoints.on_its_way(self.join_changelog, q):
                self._begin([q], [])  # a short pause now rather than a long one later
                # exactly-once: the commit that cuts it waits for the one on its way; past
                # twice the bound it waits too, until that commit cuts it (Pipeline._commit).
                # (Not at once: a pause drops what librdkafka had fetched of the partition,
                # and holding at the bound itself cost a busy worker about 9 % of its rate:
                # docs/performance.md, "The commit off the data path".)
                past = self.eo and stage.join.changed >= 2 * most and q not in self._held
                if past and self.checkpoints.committing:
                    self._hold(q)
            elif q not in self._held:  # its last checkpoint is still on its way (Kafka is
                self._hold(q)  # slow to answer): take no more of its events until it is

    def _hold(self, q: int) -> None:
        """Stop fetching join partition ``q``'s events until its checkpoint on its way is
        done: what changes in a stage between two checkpoints — and so the next one's pause —
        stays bounded however slow Kafka is to acknowledge."""
        self._held.add(q)
        self._pause(q)
        self.output.send_now()  # what its checkpoint waits for goes now, not after linger.ms
        now = time.monotonic()
        if now - self._held_said >= 60:  # once a minute at most
            self._held_said = now
            waits = (
                ("a checkpoint's commit is on its way", "the next commit cuts them")
                if self.eo
                else ("its last checkpoint is not acknowledged yet", "it is")
            )
            log.info(
                "join %d: %s, and it has %d changes since its last checkpoint: its events "
                "wait until %s",
                q,
                waits[0],
                self.joins[q].join.changed,
                waits[1],
            )

    def _durable(self, changelog: Changelog, q: int) -> None:
        # (exactly-once: a partition is held until the next commit cuts it, Pipeline._commit)
        if changelog is self.join_changelog and q in self._held and not self.eo:
            self._held.discard(q)
            self._fetch(q)

    def _pause(self, q: int) -> None:
        """Stop fetching join partition ``q``'s events (held, or its queue full). librdkafka
        drops what it had fetched of the partition and, on resume, fetches it again from the
        offset after the last message it gave the loop: nothing is lost or read twice."""
        from confluent_kafka import TopicPartition

        self.consumer.pause([TopicPartition(self.topics.events, q)])

    def _fetch(self, q: int) -> None:
        """Fetch ``q``'s events again, unless something else still holds it."""
        from confluent_kafka import TopicPartition

        if q not in self._held and q not in self._full:
            self.consumer.resume([TopicPartition(self.topics.events, q)])
