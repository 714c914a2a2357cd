"""An Alertmanager webhook receiver that prints each notification: the example receiver of
``deploy/alertmanager/alertmanager.yml`` (``streameval alert-log``), and the tests' witness that
an alert got all the way through.

Alertmanager POSTs a JSON document (version "4") with ``status`` and a list of ``alerts``, each
with ``status``, ``labels``, ``annotations`` and ``startsAt``.

Examples
--------
>>> line({"status": "firing", "labels": {"alertname": "StreamevalDriftAlarm", "model": "nb",
...       "severity": "warning"}, "annotations": {"summary": "Drift alarm for model nb"}})
'firing StreamevalDriftAlarm model=nb severity=warning: Drift alarm for model nb'
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["AlertLog", "line"]


def line(alert: dict[str, Any]) -> str:
    """One line for one alert of a notification."""
    labels = dict(alert.get("labels", {}))
    name = labels.pop("alertname", "?")
    shown = " ".join(f"{key}={value}" for key, value in sorted(labels.items()))
    summary = alert.get("annotations", {}).get("summary", "")
    text = " ".join(part for part in (alert.get("status", "?"), name, shown) if part)
    return f"{text}: {summary}" if summary else text


class AlertLog:
    """Serve the webhook on ``host:port`` in a thread; keep the last ``keep`` alerts received.

    ``port=0`` takes a free port (read it back from ``port``).
    """

    def __init__(
        self,
        host: str = "0.0.0.0",
        port: int = 9095,
        echo: Callable[[str], None] | None = print,
        keep: int = 1000,
    ) -> None:
        self.alerts: deque[dict[str, Any]] = deque(maxlen=keep)  # the latest, for tests
        self._lock = threading.Lock()
        log = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(size) or b"{}")
                    alerts = list(body["alerts"])
                    if not all(
                        isinstance(a, dict) and isinstance(a.get("labels"), dict) for a in alerts
                    ):
                        raise ValueError("every alert must be an object with labels")
                except (ValueError, KeyError, TypeError) as err:
                    self.send_error(400, f"not an Alertmanager webhook notification: {err}")
                    return
                with log._lock:
                    log.alerts.extend(alerts)
                if echo is not None:
                    for alert in alerts:
                        echo(line(alert))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass  # one line per alert is printed above; no access log

        self._server = ThreadingHTTPServer((host, port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> AlertLog:
        self._thread.start()
        return self

    def received(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.alerts)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
