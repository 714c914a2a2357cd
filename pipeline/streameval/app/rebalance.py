"""The worker's rebalance callbacks: partitions assigned (each stage restored from its latest
checkpoint, the router given the input partitions' committed progress), revoked (a
checkpoint, then dropped) and lost (dropped). Methods of
:class:`~streameval.app.runner.Pipeline`, whose attributes they use.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

from streameval.store import StoreError

from ..clients import consumer_settings, unpolled
from .changelog import ChangelogError
from .checkpoint import progress_from_metadata, restore_eval, restore_join
from .output import NoAnswer
from .transactions import (
    HANGING_MARGIN_S,
    HANGING_REPEAT_S,
    TransactionAborted,
    hanging_transactions,
)

__all__ = ["Rebalancing"]

log = logging.getLogger("streameval.worker")

#: a wait for other processes' transactions at assignment this long is logged (with whose
#: partitions), so that a pause of the group can be told from a slow restore
SLOW_WAIT_S = 2.0
WAITED_OFFSETS = (
    "waited %.1f s for the group's offsets to be stable before restoring (a transaction "
    "of another process had committed offsets and not ended)"
)
WAITING = (
    "waiting for the transactions open on %s to end before restoring (the broker ends them "
    "within %.0f s)"
)
WAITED_CHANGELOGS = "waited %.1f s for the transactions open on %s to end before restoring"
GROUP_HANGS = (
    ": a transaction that committed the group's offsets has not ended within "
    "transaction_timeout_ms; if the broker answers, it is a hanging transaction, and the "
    "input partitions wait for it: `kafka-transactions.sh --bootstrap-server <broker> "
    "find-hanging --topic __consumer_offsets --max-transaction-timeout 1` finds it "
    '(docs/operations.md, "A hanging transaction")'
)


class Rebalancing:
    """What :class:`~streameval.app.runner.Pipeline` does when Kafka moves its partitions."""

    def _guarded(self, handler: Any) -> Any:
        """A rebalance callback whose exception is raised again after ``consume`` returns.

        confluent-kafka (2.16) re-raises an exception from a rebalance callback out of
        ``consume()`` as a ``KafkaError`` object that no ``except`` clause matches, so the
        data-path thread would die unnoticed. The callback keeps its exception instead, and the
        loop raises it as it is (a ChangelogError stops the worker cleanly; anything else is a
        crash, reported by the exit status)."""

        def call(consumer: Any, partitions: list[Any]) -> None:
            try:
                handler(consumer, partitions)
            except BaseException as err:
                if self._callback_error is None:
                    self._callback_error = err

        return call

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self.restoring = True
        try:
            self._assign(consumer, partitions)
        finally:
            self.restoring = False

    def _assign(self, consumer: Any, partitions: list[Any]) -> None:
        from confluent_kafka import OFFSET_BEGINNING

        t, started = self.topics, time.monotonic()
        if self._hangs is not None:  # (exactly-once) what moved away is its new owner's
            self._hangs.keep({(tp.topic, tp.partition) for tp in partitions})
        if self.eo:
            self._await_stable(consumer, partitions)
            if self.unsettled:  # told to stop while it waited: nothing to restore it for
                log.info(
                    "stopping while waiting for the previous owner's transaction: %d "
                    "partitions neither restored nor assigned",
                    len(partitions),
                )
                # (confluent-kafka assigns what the callback leaves unassigned, and the
                # fetchers would start)
                consumer.assign([])
                return
        waited = time.monotonic() - started
        inputs = []
        for tp in partitions:
            if tp.topic == t.events:
                stage = self.joins[tp.partition] = restore_join(
                    self.join_changelog,
                    tp.partition,
                    self.settings,
                    self.config,
                    self.inputs,
                    self.fingerprint,
                    self.telemetry.restore_lag("join"),
                    rebuild=tp.partition in self._rebuild,
                )
                self.telemetry.restored_join(tp.partition, stage.join)
                if stage.behind:  # checkpointed between two steps: the rest comes first
                    self._queued[tp.partition] = deque()
            elif tp.topic == t.outcomes:
                stage = self.evals[tp.partition] = restore_eval(
                    self.eval_changelog,
                    tp.partition,
                    self.config,
                    self.join_partitions,
                    consumer,
                    t.outcomes,
                    self.telemetry.restore_lag("evaluate"),
                )
                self.telemetry.restored(tp.partition, stage.engine)
            else:
                inputs.append((tp.topic, tp.partition))
                continue
            tp.offset = stage.offset + 1 if stage.offset >= 0 else OFFSET_BEGINNING
        restored = [f"join {q}@{s.offset}" for q, s in self.joins.items() if s.offset >= 0]
        restored += [f"evaluation {r}@{s.offset}" for r, s in self.evals.items() if s.offset >= 0]
        if restored:
            log.info("restored from checkpoints: %s", ", ".join(restored))
        self.router.assign(inputs, self._committed_progress(consumer, inputs))
        consumer.assign(partitions)
        # librdkafka keeps a partition the application paused paused through unassign and
        # assign: one paused here before a rebalance (held, or its queue full) would never be
        # fetched again. A partition assigned is fetched (resuming one not paused does nothing).
        joins = [tp for tp in partitions if tp.topic == t.events]
        if joins:
            consumer.resume(joins)
        took = time.monotonic() - started
        log.info(
            "assigned: %d input partitions, join %s, evaluation %s (ready in %.2f s)",
            len(inputs),
            sorted(self.joins),
            sorted(self.evals),
            took,
        )
        limit = self.settings.max_poll_interval_ms / 1000.0
        if took > limit / 2:
            log.warning(
                "this assignment took %.0f s (%.0f s of it waiting for the previous owners' "
                "transactions, %.0f s restoring), over half of max_poll_interval_ms (%.0f s): "
                "the group goes on without a busy worker whose assignment takes longer, and "
                "gives its partitions to others, who restore them again. %s",
                took,
                waited,
                took - waited,
                limit,
                "End the hanging transaction (docs/operations.md, 'A hanging transaction')"
                if waited > took / 2
                else "Raise STREAMEVAL_MAX_POLL_INTERVAL_MS above the longest restore",
            )
        self.ready.set()

    def _await_stable(self, consumer: Any, partitions: list[Any]) -> None:
        """Exactly-once: before restoring, wait until every transaction that was open when
        the partitions came is over — the previous owner's last commit may still be under
        way (KIP-447 refuses a zombie's offsets, but not a commit validated just before the
        rebalance), and its checkpoint and records become visible when it is. First the
        group's offsets, fetched as stable (librdkafka waits out pending transactional
        offset commits for a read_committed consumer); then each changelog partition to
        restore, until its last stable offset reaches the end it had at assignment.

        Both share one deadline, ``transaction_timeout_ms`` and a margin: the broker ends
        every transaction by then. One still open on a changelog partition
        :data:`HANGING_MARGIN_S` after the timeout is a *hanging* transaction (the broker
        skipped its markers), which only an administrator's abort ends: the worker says
        how (an ERROR, again every :data:`HANGING_REPEAT_S`) and waits on, however long,
        for a partition read now would miss the transaction's records or what is
        checkpointed after them, and once it has ended rebuilds that partition's disk
        store from its changelog (:attr:`_rebuild`: the store may hold a checkpoint the
        abort took back). A worker told to stop meanwhile waits no longer, restores nothing
        and takes no final checkpoint (:attr:`unsettled`)."""
        from confluent_kafka import Consumer, TopicPartition

        from .changelog import watermarks

        t = self.topics
        limit = self.settings.transaction_timeout_ms / 1000.0 + 5.0
        began = time.monotonic()
        deadline = began + limit
        hang_after = began + self.settings.transaction_timeout_ms / 1000.0 + HANGING_MARGIN_S
        # one deadline for all of this assignment's waits: a restore does not wait again
        # (Changelog.read) for a transaction this one waited out
        self.join_changelog.wait_until = self.eval_changelog.wait_until = deadline
        self._rebuild = set()
        group_hangs = False
        try:
            consumer.committed(
                [TopicPartition(tp.topic, tp.partition) for tp in partitions], timeout=limit
            )
        except Exception as err:  # the coordinator is busy: the changelogs still wait
            group_hangs = time.monotonic() >= deadline - 1.0
            log.warning(
                "stable offsets not fetched before restoring (%s)%s",
                err,
                GROUP_HANGS if group_hangs else "",
            )
        offsets_s = time.monotonic() - began
        if offsets_s >= SLOW_WAIT_S:
            log.warning(WAITED_OFFSETS, offsets_s)
        wanted = [(self.join_changelog.topic, tp.partition) for tp in partitions
                  if tp.topic == t.events]  # fmt: skip
        wanted += [(self.eval_changelog.topic, tp.partition) for tp in partitions
                   if tp.topic == t.outcomes]  # fmt: skip
        if not wanted:
            return
        client = consumer_settings(unpolled(self.client))
        group = f"{self.settings.app_id}-stable"
        uncommitted = Consumer({**client, "group.id": group, "isolation.level": "read_uncommitted"})
        committed = Consumer({**client, "group.id": group})
        try:
            ends = {tp: watermarks(uncommitted, *tp)[1] for tp in wanted}
            waiting = held = dict(ends)  # held: the partitions that waited longest
            hanging: set[tuple[str, int]] = set()
            said, told = False, float("-inf")
            broker_away = False  # said that the broker does not answer
            while waiting and not self.stopping.is_set():  # checked once at least
                try:
                    stable = {tp: watermarks(committed, *tp)[1] for tp in waiting}
                except RuntimeError as err:  # the broker away for a minute: wait on for it
                    if not broker_away:
                        broker_away = True
                        log.warning("waiting for Kafka before restoring: %s", err)
                    continue
                waiting = {tp: end for tp, end in waiting.items() if stable[tp] < end}
                if not waiting:
                    break
                held = waiting
                now = time.monotonic()
                if now >= hang_after and now - told >= HANGING_REPEAT_S:
                    told = now
                    hanging |= set(waiting)
                    open_at = {tp: stable[tp] for tp in waiting}
                    bootstrap = client["bootstrap.servers"]
                    log.error(hanging_transactions(bootstrap, open_at, group_hangs))
                elif not said and now - began >= SLOW_WAIT_S:
                    said = True
                    log.info(
                        WAITING,
                        ", ".join(f"{topic}[{p}]" for topic, p in sorted(waiting)),
                        max(0.0, hang_after - now),
                    )
                time.sleep(0.1 if now < deadline else 1.0)
            if waiting:  # told to stop
                self.unsettled = True
                return
            took = time.monotonic() - began - offsets_s
            self._rebuild = {p for topic, p in hanging if topic == self.join_changelog.topic}
            if hanging:
                log.warning(
                    "the hanging transaction on %s has ended after %.0f s; restoring%s",
                    ", ".join(f"{topic}[{p}]" for topic, p in sorted(hanging)),
                    took,
                    f" join {sorted(self._rebuild)} from the changelog alone"
                    if self._rebuild
                    else "",
                )
            elif took >= SLOW_WAIT_S:
                log.warning(
                    WAITED_CHANGELOGS, took, ", ".join(f"{topic}[{p}]" for topic, p in sorted(held))
                )
        finally:
            uncommitted.close()
            committed.close()

    def _committed_progress(
        self, consumer: Any, inputs: list[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        """The progress each input partition had at its committed offset (kept in the commit's
        metadata), so that the router's time rules decide after a restart as before it."""
        from confluent_kafka import TopicPartition

        if not inputs:
            return {}
        try:
            committed = consumer.committed([TopicPartition(t, p) for t, p in inputs], timeout=10)
        except Exception as err:  # the coordinator is busy: the progress builds up again
            log.warning("could not read the committed offsets' progress (%s)", err)
            return {}
        progress = {}
        for tp in committed:
            ts = progress_from_metadata(tp.metadata)
            if ts is not None:
                progress[tp.topic, tp.partition] = ts
        return progress

    def _split(self, partitions: list[Any]) -> tuple[list[int], list[int], list[tuple[str, int]]]:
        """Join partitions, evaluation partitions, input partitions."""
        t = self.topics
        joins = [tp.partition for tp in partitions if tp.topic == t.events]
        evals = [tp.partition for tp in partitions if tp.topic == t.outcomes]
        return joins, evals, [(tp.topic, tp.partition) for tp in partitions if tp.topic in t.inputs]

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        joins, evals, inputs = self._split(partitions)
        started = time.monotonic()
        for r in evals:
            stage = self.evals.get(r)
            if stage is not None:
                self._evaluated(*stage.tick(), r)
        self._checkpoint(joins, evals, inputs)
        self._drop(joins, evals, inputs)
        consumer.unassign()
        log.info(
            "revoked %d partitions; checkpoint taken in %.2f s",
            len(partitions),
            time.monotonic() - started,
        )

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        """The group went on without this worker (a session timeout: the worker was cut off
        from Kafka or too slow). Whoever owns its partitions now restores them from their last
        checkpoints, so nothing this worker produced after those may reach Kafka late — least
        of all the records of a checkpoint still on its way, which would land in a changelog
        after the new owner read it. Every message not yet sent is purged, every checkpoint on
        its way forgotten with its offsets, and every stage dropped (its inputs re-read from
        the committed offsets when assigned again)."""
        if self.eo:  # nothing of the open transaction may ever be visible
            self.checkpoints.give_up("the partitions were lost")  # (a checkpoint being written)
            self._land_for_good("the partitions were lost")
            purged = len(self.output.producer)
            try:
                self.output.abort()
            except NoAnswer:  # stopping, Kafka away: the next start's first transaction
                self.output.purge()  # aborts it (the same transactional id)
            self._wrote.clear()
        else:
            purged = self.output.purge()
        self.checkpoints.abandon()
        joins, evals, inputs = self._split(partitions)
        joins = sorted(set(joins) | set(self.joins))
        evals = sorted(set(evals) | set(self.evals))
        inputs = sorted(set(inputs) | set(self._input_next) | set(self.router.owned))
        self._drop(joins, evals, inputs)
        try:  # every partition, not only those reported lost: none has a stage any more
            consumer.unassign()
        except Exception as err:  # already unassigned, or the consumer is closing
            log.debug("unassign after partitions lost: %s", err)
        log.warning(
            "partitions lost (this worker was cut off from Kafka or too slow): dropped "
            "%d join and %d evaluation partitions and %d unsent messages; whoever owns "
            "them next restores them from their last checkpoints",
            len(joins),
            len(evals),
            purged,
        )

    def _land_for_good(self, why: str) -> bool:
        """Exactly-once: wait for the commit on its way, if any, before the stages go (its
        stages are told of it: a disk store writes its batch). False if Kafka aborted it or
        did not answer before the deadline: the stages' last checkpoints stand (said in the
        log). A refusal (a record, a topic, the transactional id) raises, as from the loop:
        the worker stops."""
        try:
            self._land(wait=True, rewind=False)
            return True
        except (TransactionAborted, NoAnswer) as err:
            log.warning(
                "the commit on its way when %s failed (%s): the partitions' last checkpoints "
                "stand, and whoever takes them next computes the rest again",
                why,
                err,
            )
            return False

    def _drop(self, joins: list[int], evals: list[int], inputs: list[tuple[str, int]]) -> None:
        if self.eo:
            self._land_for_good("partitions were dropped")
        try:  # a committed checkpoint's store batch, before its store closes
            self.checkpoints.settle()
        except (StoreError, ChangelogError) as err:  # its changes are in the changelog
            log.warning(
                "the disk store's batch of the last committed checkpoint was not written (%s); "
                "the next start reads those changes from the changelog",
                err,
            )
        models: set[str] = set()
        for q in joins:
            self._held.discard(q)  # fetched again when assigned again (_on_assign)
            self._full.discard(q)
            self._queued.pop(q, None)  # re-read from the checkpoint's offset by its next owner
            stage = self.joins.pop(q, None)
            if stage is not None:
                try:
                    stage.join.state.close()  # a disk store: free it for whoever takes it next
                except Exception as err:  # one that failed to write fails to close: say so,
                    log.warning("join %d: closing its store failed: %s", q, err)  # go on
                self.telemetry.joined(q, stage.join)  # (what it dropped since its last step)
            self.join_changelog.forget(q)
        for r in evals:
            stage = self.evals.pop(r, None)
            self.eval_changelog.forget(r)
            if stage is not None:
                self.telemetry.refused(r, stage.engine)  # (since the last publish tick)
                models |= set(stage.engine.models)
        committed = self.telemetry.committed
        for tp in inputs:
            self._input_next.pop(tp, None)
            if committed is not None:
                committed.pop(tp, None)
        if committed is not None:  # and the internal partitions' (their lag's fallback)
            for q in joins:
                committed.pop((self.topics.events, q), None)
            for r in evals:
                committed.pop((self.topics.outcomes, r), None)
        self.router.revoke(inputs)
        self.telemetry.dropped(models)
