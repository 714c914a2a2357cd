"""More than one data-path process in one worker (``worker.processes``).

One :class:`~streameval.app.runner.Pipeline` runs in one thread and is bound by one core: its
Python work holds the GIL. A worker with ``processes = N`` runs the first pipeline in its own
process, as with one, and N − 1 more in child processes (started with ``spawn``: the parent
already runs Faust's threads, which ``fork`` would copy mid-flight). Every pipeline is a member
of the consumer group ``app_id`` like any other worker, so Kafka spreads the input, join and
evaluation partitions over them and everything that holds for a group of workers — ordering,
checkpoints, exactly-once by idempotence, rebalancing — holds unchanged.

What a child adds is plumbing to its parent:

* **Series.** A child's pipeline talks to an :class:`ExporterProxy`, which batches the calls
  it receives and sends them over a pipe a few times a second (at once when models are
  forgotten, during the revocation: the partitions reach another process only a group round
  trip later, so its series are not removed after it has shown them — an ordering that is
  likely, not enforced); the
  parent's :class:`Children` applies them to the one :class:`~streameval.exporter.Exporter`
  behind ``/metrics``, in order of arrival. Pending instances are summed over the processes.
* **Life.** A child dies with its parent (``PR_SET_PDEATHSIG``: a SIGKILL of the worker is a
  crash of all its processes, as the recovery design expects), stops cleanly — final records
  and a checkpoint — when the parent asks it to or gets SIGTERM, and ignores SIGINT (Ctrl-C
  reaches the whole process group; the parent stops the children itself). A child that exits
  on its own stops the whole worker with an error: the group would otherwise run with less
  capacity than it was given, without anyone being told.
"""

from __future__ import annotations

import ctypes
import logging
import logging.config
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

from streameval.config import EvaluationConfig
from streameval.exporter import Exporter
from streameval.logs import logging_config
from streameval.records import Record

from .settings import WorkerSettings

__all__ = ["Children", "ExporterProxy"]

log = logging.getLogger("streameval.worker")

#: How often a child sends the exporter calls it has collected
FLUSH_S = 0.2
#: How long the worker waits for its children to import and reach their consumer
START_TIMEOUT_S = 60.0
#: How much longer than ``shutdown_timeout_s`` (in which a child's pipeline stops, Kafka
#: answering or not) the parent waits for a stopping child before it kills it
STOP_MARGIN_S = 2.0

_PR_SET_PDEATHSIG = 1


class ExporterProxy:
    """Stands in for the :class:`Exporter` in a child: records the calls, sends them in
    batches. Only the methods :class:`~streameval.app.telemetry.Telemetry` calls exist."""

    def __init__(self, connection: Connection, source: int) -> None:
        self._connection = connection
        self._source = source
        self._calls: list[tuple[str, tuple]] = []
        self._lock = threading.Lock()

    def _call(self, name: str, *args: Any) -> None:
        with self._lock:
            self._calls.append((name, args))

    def flush(self) -> None:
        with self._lock:
            calls, self._calls = self._calls, []
            if calls:
                self._connection.send(("calls", calls))

    def send(self, *message: Any) -> None:
        with self._lock:
            self._connection.send(message)

    # -- the Exporter's interface -----------------------------------------------------------
    def observe(self, records: list[Record]) -> None:
        self._call("observe", list(records))

    def observe_outcomes(self, model_id: str, latencies_ms: Any) -> None:
        self._call("observe_outcomes", model_id, latencies_ms)

    def count_input(self, messages: int) -> None:
        self._call("count_input", messages)

    def count_dropped(self, reason: str, model_id: str = "", amount: int = 1) -> None:
        self._call("count_dropped", reason, model_id, amount)

    def count_dead_letters(self, reason: str, amount: int = 1) -> None:
        self._call("count_dead_letters", reason, amount)

    def count_skipped_batch(self, stage: str) -> None:
        self._call("count_skipped_batch", stage)

    def set_pending(self, instances: int, source: int = 0) -> None:
        self._call("set_pending", instances, self._source)

    def set_waiting(self, events: int, outcomes: int, source: int = 0) -> None:
        self._call("set_waiting", events, outcomes, self._source)

    def set_lag(self, topic: str, partition: str, lag: int) -> None:
        self._call("set_lag", topic, partition, lag)

    def set_store(self, size: int, hits: int, reads: int, debt: int = 0, source: int = 0) -> None:
        self._call("set_store", size, hits, reads, debt, self._source)

    def set_checkpoint(self, seconds: float, pause: float = 0.0) -> None:
        self._call("set_checkpoint", seconds, pause)

    def observe_transaction(self, seconds: float) -> None:
        self._call("observe_transaction", seconds)

    def set_changelog_lag(self, stage: str, records: int) -> None:
        self._call("set_changelog_lag", stage, records)
        self.flush()  # a restore blocks the data path: say so now

    def remove_lag(self, topic: str, partition: str) -> None:
        self._call("remove_lag", topic, partition)

    def set_internal_lag(self, stage: str, partition: str, lag: int) -> None:
        self._call("set_internal_lag", stage, partition, lag)

    def remove_internal_lag(self, stage: str, partition: str) -> None:
        self._call("remove_internal_lag", stage, partition)

    def forget_models(self, model_ids: Any) -> None:
        self._call("forget_models", list(model_ids))
        self.flush()  # before the partitions can reach another process (see the module doc)


def _die_with_parent() -> None:
    """Linux: the kernel kills this process when the parent dies, however it dies."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() == 1:  # the parent died before prctl took effect
            os._exit(1)


def child_main(
    index: int,
    settings: WorkerSettings,
    config: EvaluationConfig,
    client: dict[str, str],
    connection: Connection,
) -> None:
    """Entry point of a child process: one Pipeline until the parent says stop."""
    _die_with_parent()
    from .lifecycle import SAID
    from .runner import Pipeline

    logging.config.dictConfig(
        logging_config(settings.log_level, settings.log_format, prefix=f"process {index}: ")
    )
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    proxy = ExporterProxy(connection, index)
    pipeline = Pipeline(settings, config, client, proxy)  # type: ignore[arg-type]
    signal.signal(signal.SIGTERM, lambda *_: pipeline.stop())

    def run() -> None:
        try:
            pipeline.run()
        except SAID as err:  # in one line: the parent says it again as the worker's end
            pipeline.failure = err
            log.error("the data path stopped: %s", err)
        except BaseException as err:  # a defect: where it happened matters
            pipeline.failure = err
            log.exception("the data path stopped")

    thread = threading.Thread(target=run, name=f"streameval-pipeline-{index}", daemon=True)
    proxy.send("started")
    thread.start()
    ready = False  # the readiness the parent knows
    while thread.is_alive():
        try:
            if connection.poll(FLUSH_S) and connection.recv() == "stop":
                pipeline.stop()
        except (EOFError, OSError):  # the parent is gone (PDEATHSIG normally acts first)
            pipeline.stop()
        if pipeline.is_ready != ready:
            ready = not ready
            proxy.send("ready", ready)
        try:
            proxy.flush()
        except (BrokenPipeError, OSError):
            pipeline.stop()
    failure = pipeline.failure
    try:
        proxy.flush()
        proxy.send("exit", None if failure is None else f"{type(failure).__name__}: {failure}")
    except (BrokenPipeError, OSError):
        pass
    connection.close()
    sys.exit(0 if failure is None else 1)


class Children:
    """The parent's side: start the children, apply their exporter calls, watch them, stop
    them. ``on_failure`` is called (from a background thread) when a child exits on its own."""

    def __init__(
        self,
        count: int,
        settings: WorkerSettings,
        config: EvaluationConfig,
        client: dict[str, str],
        exporter: Exporter | None,
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.count = count
        self.settings = settings
        self.config = config
        self.client = client
        self.exporter = exporter
        self.on_failure = on_failure
        self.processes: list[Any] = []
        self._connections: dict[Connection, int] = {}
        self._started: set[int] = set()
        self._ready: set[int] = set()
        self._exited: dict[int, str | None] = {}
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def ready(self) -> bool:
        """Every child is ready (:attr:`Pipeline.is_ready`) and none has exited."""
        with self._lock:
            return len(self._ready) == self.count and not self._exited

    def live(self) -> bool:
        """No child has exited (one that fails exits, and stops the worker)."""
        with self._lock:
            return not self._exited

    def start(self) -> None:
        """Start the children and wait until each has imported everything and is about to
        join the group, so that the worker's pipelines join it at about the same time."""
        context = multiprocessing.get_context("spawn")
        for index in range(1, self.count + 1):
            ours, theirs = context.Pipe()
            process = context.Process(
                target=child_main,
                args=(index, self.settings, self.config, self.client, theirs),
                name=f"streameval-pipeline-{index}",
                daemon=True,
            )
            process.start()
            theirs.close()
            self.processes.append(process)
            self._connections[ours] = index
        deadline = time.monotonic() + START_TIMEOUT_S
        while len(self._started) < self.count and time.monotonic() < deadline:
            self._receive(timeout=0.5)
            if self._exited:
                break
        self._thread = threading.Thread(target=self._serve, name="streameval-children", daemon=True)
        self._thread.start()
        if len(self._started) < self.count:
            log.warning(
                "%d of %d data-path processes started within %.0f s; going on",
                len(self._started),
                self.count,
                START_TIMEOUT_S,
            )

    def _serve(self) -> None:
        while self._connections:
            self._receive(timeout=0.5)
            with self._lock:
                exited = dict(self._exited)
            if exited and not self._stopping.is_set():
                index, reason = next(iter(exited.items()))
                self._stopping.set()
                if self.on_failure is not None:
                    self.on_failure(
                        RuntimeError(
                            f"data-path process {index} exited on its own "
                            f"({reason or 'no reason given'})"
                        )
                    )

    def _receive(self, timeout: float) -> None:
        for connection in wait(list(self._connections), timeout=timeout):
            index = self._connections[connection]
            try:
                message = connection.recv()
            except (EOFError, OSError):  # the child is gone
                del self._connections[connection]
                with self._lock:
                    self._exited.setdefault(index, "its pipe closed")
                continue
            kind = message[0]
            if kind == "calls":
                self._apply(message[1])
            elif kind == "started":
                self._started.add(index)
            elif kind == "ready":
                with self._lock:
                    if message[1]:
                        self._ready.add(index)
                    else:
                        self._ready.discard(index)
            elif kind == "exit":
                with self._lock:
                    self._exited[index] = message[1]

    def _apply(self, calls: list[tuple[str, tuple]]) -> None:
        if self.exporter is None:
            return
        for name, args in calls:
            getattr(self.exporter, name)(*args)

    def stop(self) -> None:
        """Ask every child to stop (final records, checkpoint) and wait for it."""
        self._stopping.set()
        for connection in list(self._connections):
            try:
                connection.send("stop")
            except (BrokenPipeError, OSError):
                pass
        deadline = time.monotonic() + self.settings.shutdown_timeout_s + STOP_MARGIN_S
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                log.error("%s did not stop in time; killing it", process.name)
                process.kill()
                process.join()
        if self._thread is not None:
            self._thread.join(10)  # it drains the children's last calls, then ends
