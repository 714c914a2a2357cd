"""How the worker's data path is seen and ended: the probes (:attr:`Lifecycle.is_ready`,
:attr:`Lifecycle.is_live`), :meth:`Lifecycle.stop`, and the shutdown that follows — the final
records, a checkpoint and leaving the consumer group, all within ``shutdown_timeout_s``
whether Kafka answers or not. Methods of :class:`~streameval.app.runner.Pipeline`, whose
attributes they use.
"""

from __future__ import annotations

import logging
import threading
import time

from streameval.config import ConfigError
from streameval.store import StoreError

from .changelog import ChangelogError
from .evolve import Refused
from .output import KafkaRefused, NoAnswer, OutputError
from .stateops import StateError
from .transactions import TransactionAborted

__all__ = ["CLOSE_RESERVE_S", "SAID", "Lifecycle", "defect"]

log = logging.getLogger("streameval.worker")

#: Of ``shutdown_timeout_s``, what is kept for leaving the consumer group after the final
#: checkpoint (at most): librdkafka's close waits out the session timeout when Kafka is away.
CLOSE_RESERVE_S = 5.0
#: The errors that stop a worker whose words say all a user needs (what, which value, what to
#: do): Kafka's refusals and silences, a transaction Kafka aborted, the state and a
#: configuration its state refuses, the store, the changelogs, the outputs, a setting. They
#: are logged in one line; any other error that stops it is a defect, logged with its traceback.
SAID = (
    KafkaRefused,
    NoAnswer,
    TransactionAborted,
    StateError,
    Refused,
    StoreError,
    ChangelogError,
    OutputError,
    ConfigError,
)


def defect(err: BaseException) -> bool:
    """Whether ``err``, which stops the worker, is logged with its traceback: raised, and not
    one of :data:`SAID` (a child process's end is said by the child, and never raised)."""
    return not isinstance(err, SAID) and err.__traceback__ is not None


class Lifecycle:
    """The probes, stopping and the shutdown of :class:`~streameval.app.runner.Pipeline`."""

    def stop(self) -> None:
        """End the data path: its loop ends after the current turn; the final records, a
        checkpoint and leaving the group follow — all within ``shutdown_timeout_s``, whether
        Kafka answers or not (without it, the last checkpoint stands)."""
        if self.stop_by is None:
            self.stop_by = time.monotonic() + self.settings.shutdown_timeout_s
            output = getattr(self, "output", None)
            if output is not None:  # a produce waiting for Kafka must not outlast it either
                output.deadline = self.stop_by - self._close_reserve()
        self.stopping.set()

    def _close_reserve(self) -> float:
        return min(CLOSE_RESERVE_S, self.settings.shutdown_timeout_s / 3)

    @property
    def is_ready(self) -> bool:
        """Whether the worker does its work now: in the group, its partitions restored, Kafka
        reachable, not stopping (the readiness probe)."""
        return (
            self.ready.is_set()
            and not self.restoring
            and self._kafka_errors.reachable
            and not self.stopping.is_set()
        )

    @property
    def is_live(self) -> bool:
        """Whether the data path is running or starting (the liveness probe): false once it
        has failed. Waiting for Kafka is live — a restart would not bring Kafka back."""
        return self.failure is None

    def _shutdown(self, checkpoint: bool = True) -> None:
        if self.stop_by is None:  # stopping by itself (an error): the same time limit
            self.stop_by = time.monotonic() + self.settings.shutdown_timeout_s
        self.output.deadline = self.stop_by - self._close_reserve()
        refused: BaseException | None = None
        if self.eo:  # the commit on its way first
            try:
                if not self._land_for_good("the worker stopped"):
                    checkpoint = False  # what the stages hold since their last checkpoint goes
            except (StoreError, ChangelogError, OutputError) as err:  # as in the loop: no
                log.critical("%s", err)  # checkpoint more; raised once the worker is out
                checkpoint, refused = False, err
            except BaseException as err:  # a defect, or librdkafka's: the same, said whole
                log.critical("the commit on its way failed", exc_info=True)
                checkpoint, refused = False, err
        if checkpoint and self.unsettled:
            log.info(
                "stopping while a restore waited for the previous owner's transaction to end: "
                "no final checkpoint over what may be behind it"
            )
            checkpoint = False
        if checkpoint:
            try:  # the last commit's disk store batch (exactly-once), before the final cut
                self.checkpoints.settle()
            except (StoreError, ChangelogError) as err:  # as in the loop: no checkpoint more,
                log.critical("%s", err)  # and what the open transaction holds is aborted
                checkpoint = False
        try:
            try:
                if checkpoint:
                    if self.joins or self.evals or self._input_next:  # (else it owns nothing)
                        log.info("shutting down: final records and a checkpoint")
                    else:
                        log.info("shutting down")
                    for r, stage in list(self.evals.items()):
                        self._evaluated(*stage.tick(), r)
                    self._checkpoint(list(self.joins), list(self.evals), list(self._input_next))
                else:  # nothing more is written: the last checkpoint stands, and is resumed from
                    log.info("shutting down without a checkpoint")
                    self.no_checkpoints = True  # not even by the revocation when leaving
                    if self.eo:  # (a restart's first transaction would abort it anyway)
                        try:
                            self.output.abort()
                        except Exception as err:  # fenced for good, or Kafka away
                            log.warning("the open transaction was not aborted: %s", err)
                    else:
                        self.output.flush()
            except NoAnswer as err:
                self.checkpoints.rounds.clear()  # never to be completed: the last one stands
                self.checkpoints.busy.clear()
                log.warning(
                    "Kafka did not answer within shutdown_timeout_s (%g s; %s): stopping "
                    "without a final checkpoint. Nothing is lost: the last checkpoint stands, "
                    "and a restart reads on from it and computes the rest again, exactly",
                    self.settings.shutdown_timeout_s,
                    err,
                )
            self._drop(list(self.joins), list(self.evals), list(self._input_next))
        finally:
            self.no_checkpoints = True  # the final one is taken or failed: leaving takes none
            self._close_consumer()
            if self._callback_error is not None and checkpoint:
                log.error("leaving the group failed: %s", self._callback_error)
        if refused is not None:  # the worker failed: it says so (its exit status too)
            raise refused

    def _close_consumer(self) -> None:
        """Leave the group (the partitions move on at once) — or, with Kafka away, give up at
        the time limit: librdkafka's close then waits out the session timeout, and the group
        notices the worker's absence after that timeout anyway."""
        closing = threading.Thread(target=self.consumer.close, name="streameval-close", daemon=True)
        closing.start()
        closing.join(max(0.0, self.stop_by - time.monotonic()))
        if closing.is_alive():
            log.warning(
                "Kafka did not answer the worker's leaving the group; the group will "
                "notice within session_timeout_ms"
            )
