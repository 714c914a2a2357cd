"""The Faust application that hosts the worker: ``create_app(settings, config)``.

Faust provides the process — start-up and shutdown of its services, signal handling (SIGTERM and
Ctrl-C stop the worker cleanly, with a final checkpoint), logging — and the web server that
serves ``/metrics``. The data path itself is :class:`~streameval.app.runner.Pipeline`, a
confluent-kafka consumer and producer in one thread (and, with ``processes`` > 1, more of them
in child processes: :mod:`streameval.app.processes`), because it must pay per-message costs once
per micro-batch and must control its own offsets: a partition's state snapshot and the offset it
covers are one unit, which Faust's agents (offsets acknowledged per message, committed on their
own schedule) cannot give. Faust's own Kafka clients are therefore switched off
(``BootStrategy.enable_kafka = False``); the worker group and rebalancing are the Kafka consumer
group of ``app_id``. docs/architecture.md has the measurements behind this.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import faust
from mode import Service
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    ProcessCollector,
)

from streameval.clients import client_config, first_address
from streameval.config import EvaluationConfig
from streameval.core.drift import make_detector
from streameval.exporter import Exporter
from streameval.logs import logging_config

from .lifecycle import defect
from .processes import Children
from .runner import Pipeline
from .settings import WorkerSettings
from .telemetry import build_info

__all__ = ["create_app", "run_worker"]

log = logging.getLogger("streameval.worker")

#: How much longer than ``shutdown_timeout_s`` the worker waits for its data path to end
STOP_MARGIN_S = 2.0


class _Boot(faust.App.BootStrategy):
    enable_kafka = False  # the data path has its own clients (see the module docstring)
    enable_sensors = False


class StreamevalApp(faust.App):
    BootStrategy = _Boot


class PipelineService(Service):
    """Runs :class:`Pipeline` in a thread for as long as the Faust worker runs, and the
    worker's other data-path processes (``processes`` > 1, :mod:`streameval.app.processes`)."""

    def __init__(self, pipeline: Pipeline, children: Children | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.children = children
        self._thread: threading.Thread | None = None

    async def on_start(self) -> None:
        loop = asyncio.get_running_loop()

        def fail(err: BaseException) -> None:  # surfaced by the worker as its exit status
            self.pipeline.failure = err
            log.error("the worker stopped: %s", err, exc_info=err if defect(err) else None)
            asyncio.run_coroutine_threadsafe(self.crash(err), loop)

        def run() -> None:
            try:
                self.pipeline.run()
            except BaseException as err:
                fail(err)

        if self.children is not None:
            self.children.on_failure = fail
            await loop.run_in_executor(None, self.children.start)
        self._thread = threading.Thread(target=run, name="streameval-pipeline", daemon=True)
        self._thread.start()

    async def on_stop(self) -> None:
        self.pipeline.stop()  # it ends within shutdown_timeout_s, Kafka answering or not
        loop = asyncio.get_running_loop()
        if self.children is not None:
            await loop.run_in_executor(None, self.children.stop)
        if self._thread is not None:
            limit = max(0.0, self.pipeline.stop_by - time.monotonic()) + STOP_MARGIN_S
            await loop.run_in_executor(None, self._thread.join, limit)
            if self._thread.is_alive():  # a defect: say so, and stop anyway
                log.error("the data path did not stop within shutdown_timeout_s; exiting")


def _faust_datadir(app_id: str) -> Path:
    """Faust wants a directory for table files; the worker has no tables, so not the cwd."""
    user = os.getuid() if hasattr(os, "getuid") else "user"  # one tree per user: /tmp is shared
    path = Path(tempfile.gettempdir()) / f"streameval-faust-{user}" / app_id
    path.mkdir(parents=True, exist_ok=True)
    return path


def create_app(settings: WorkerSettings, config: EvaluationConfig) -> faust.App:
    """The worker as a Faust application (start it with :func:`run_worker`)."""
    client = client_config(settings.bootstrap, [f"{k}={v}" for k, v in settings.kafka.items()])
    client.setdefault("client.id", f"{settings.app_id}-worker")
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    exporter = Exporter(
        registry,
        detectors_of=lambda model_id: [
            make_detector(spec).name for spec in config.detectors_of(model_id)
        ],
        selection=settings.export_selection(),
    )
    pipeline = Pipeline(settings, config, client, exporter)
    exporter.set_build_info(build_info(settings.app_id, pipeline.fingerprint))
    children = None
    if settings.processes > 1:
        # the service sets on_failure: it is the one that can stop the worker
        children = Children(settings.processes - 1, settings, config, client, exporter)
    app = StreamevalApp(
        f"{settings.app_id}-host",
        # a name only: Faust's own Kafka clients are off (the module docstring)
        broker=f"kafka://{first_address(client['bootstrap.servers'])}",
        web_enabled=settings.metrics_port != 0,
        web_host=settings.metrics_host,
        web_bind=settings.metrics_host,
        web_port=settings.metrics_port or 6066,
        web_in_thread=False,
        datadir=_faust_datadir(settings.app_id),
    )
    app.pipeline = pipeline
    app.children = children
    app.exporter = exporter
    app.registry = registry

    @app.service
    class _Service(PipelineService):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(pipeline, children, **kwargs)
            app.pipeline_service = self

    @app.page("/metrics")
    async def metrics(web: Any, request: Any) -> Any:
        body = exporter.scrape()
        return web.bytes(body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def ready() -> Any:
        ok = pipeline.is_ready and (children is None or children.ready())
        return {"ready": ok}, 200 if ok else 503

    @app.page("/readyz")
    async def readiness(web: Any, request: Any) -> Any:
        """In the group, partitions restored, Kafka reachable, not stopping."""
        body, status = ready()
        return web.json(body, status=status)

    @app.page("/healthz")
    async def health(web: Any, request: Any) -> Any:
        """/readyz under its earlier name."""
        body, status = ready()
        return web.json(body, status=status)

    @app.page("/livez")
    async def liveness(web: Any, request: Any) -> Any:
        """The data path (every process of it) runs, or waits for Kafka: no restart needed."""
        ok = pipeline.is_live and (children is None or children.live())
        return web.json({"live": ok}, status=200 if ok else 503)

    return app


def run_worker(app: faust.App, loglevel: str = "info", log_format: str = "text") -> int:
    """Run the Faust worker until SIGTERM/SIGINT; return the exit status."""
    worker = faust.Worker(
        app,
        loglevel=loglevel.upper(),
        quiet=True,
        logging_config=logging_config(loglevel, log_format),  # type: ignore[arg-type]
    )
    try:
        worker.execute_from_commandline()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 0
    else:
        code = 0
    if app.pipeline.failure is not None:
        return 1
    return code
