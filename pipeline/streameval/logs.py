"""The worker's logging: one format for every line (its own, Faust's, the Kafka clients'), as
text or as JSON for log pipelines, at the configured level.

The Kafka clients (librdkafka) write to stderr by themselves, bypassing logging, and repeat a
problem many times a second while it lasts (a broker that is away: ~20 lines a second). Given
:data:`KAFKA_LOG` as their ``logger`` they log through Python instead, where
:class:`RateLimit` lets each distinct problem through once per :data:`REPEAT_S`.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from datetime import UTC, datetime
from typing import Any, Literal

import orjson

__all__ = [
    "KAFKA_LOG",
    "REPEAT_S",
    "JsonFormatter",
    "NoEmptyException",
    "RateLimit",
    "logging_config",
]

#: The logger the worker's Kafka clients log through (their ``logger`` setting).
KAFKA_LOG = logging.getLogger("streameval.kafka")
#: How often one distinct Kafka client problem is said again while it lasts.
REPEAT_S = 60.0
TEXT_FORMAT = "[%(asctime)s] [%(process)d] [%(levelname)s] %(message)s"

_VARYING = re.compile(r"\[thrd:[^\]]*\]:?\s*|\d+")


class RateLimit(logging.Filter):
    """Lets a record through unless one saying the same thing (numbers aside: ports, counts,
    milliseconds vary) passed less than ``every`` seconds ago.

    >>> limit = RateLimit(every=60.0)
    >>> def record(text):
    ...     return logging.LogRecord("k", logging.ERROR, "", 0, "%s", (text,), None)
    >>> limit.filter(record("Connect to 127.0.0.1:9092 failed (after 0ms)"))
    True
    >>> limit.filter(record("Connect to 127.0.0.1:9092 failed (after 3ms)"))
    False
    >>> limit.filter(record("Broker transport failure"))
    True
    """

    def __init__(self, every: float = REPEAT_S, clock=time.monotonic) -> None:
        super().__init__()
        self.every = every
        self.clock = clock
        self._said: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = _VARYING.sub("#", record.getMessage())
        now = self.clock()
        if now - self._said.get(key, -1e18) < self.every:
            return False
        if len(self._said) > 10_000:  # a problem that never says the same thing twice
            self._said.clear()
        self._said[key] = now
        return True


class NoEmptyException(logging.Filter):
    """Takes the exception off a record logged with one outside any ``except`` block, which
    logging would print as the line ``NoneType: None``: Faust's service framework logs a
    crash's reason so (``Crashed reason=...``), after the worker has said why it stops.

    >>> record = logging.LogRecord("mode", logging.ERROR, "", 0, "Crashed", (), (None, None, None))
    >>> NoEmptyException().filter(record), record.exc_info
    (True, None)
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[0] is None:
            record.exc_info = None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``pid``,
    ``message`` and, with an exception, ``exception`` (its traceback as text).

    >>> record = logging.LogRecord("streameval.worker", logging.INFO, "", 0, "a %s", ("b",), None)
    >>> line = orjson.loads(JsonFormatter().format(record))
    >>> line["level"], line["logger"], line["message"]
    ('info', 'streameval.worker', 'a b')
    """

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line).decode()


def logging_config(
    level: str = "info", log_format: Literal["text", "json"] = "text", prefix: str = ""
) -> dict[str, Any]:
    """A :func:`logging.config.dictConfig` for a worker process: every line to stderr in
    ``log_format``, plain text (no terminal colours), at ``level``; Faust's and its service
    framework's start-up chatter only at ``debug``; the Kafka clients' lines rate-limited.
    ``prefix`` starts each text line's message (a child process says which it is)."""
    level = level.upper()
    quiet = "DEBUG" if level == "DEBUG" else "WARNING"
    formatter: dict[str, Any] = (
        {"()": JsonFormatter}
        if log_format == "json"
        else {"format": TEXT_FORMAT.replace("%(message)s", prefix + "%(message)s")}
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter},
        "filters": {"repeats": {"()": RateLimit}, "no_empty": {"()": NoEmptyException}},
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "formatter": "default",
                "filters": ["no_empty"],
                "stream": sys.__stderr__,
            }
        },
        "loggers": {
            "faust": {"level": quiet},
            "mode": {"level": quiet},
            "aiohttp": {"level": quiet},
            # the worker's Faust app and service log "Starting..." under their module's name
            "streameval.app.faust_app": {"level": quiet},
            KAFKA_LOG.name: {"filters": ["repeats"]},
        },
        "root": {"level": level, "handlers": ["default"]},
    }
