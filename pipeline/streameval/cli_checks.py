"""What a command checks before it does any work: an optional dependency installed, a
folder to write in, a port to listen on. Each stops the command with a message that says
what to do (never a traceback, and never after the work has run)."""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["need_extra", "port_free", "writable"]


def need_extra(module: str, extra: str, what: str) -> None:
    """Stop with the install line when an optional dependency is missing."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise click.ClickException(
            f"{what} needs {module}, an optional dependency: pip install 'streameval[{extra}]'"
        )


def writable(path: Path | None, option: str) -> None:
    """Stop before any work when ``path`` cannot be written: its folder is missing, or no
    folder, or not ours to write in."""
    import os

    folder = path.parent if path is not None else None
    if folder is None or (folder.is_dir() and os.access(folder, os.W_OK)):
        return
    problem = "cannot be written to" if folder.is_dir() else "is not a folder"
    if not folder.exists():
        problem = "does not exist"
    raise click.BadParameter(
        f"{path}: the folder {folder} {problem}; create it or choose another path",
        param_hint=option,
    )


#: what a worker whose metrics port is taken is told to do
WORKER_PORTS = (
    "another worker (or program) on this machine has it. Give each worker on a machine its own "
    "port with --metrics-port or STREAMEVAL_METRICS_PORT, or 0 for no web server"
)


def port_free(host: str, port: int, taken: str = WORKER_PORTS) -> None:
    """The worker's web server can listen on ``host``:``port`` (port 0: none), else a message
    (Faust would say it with a traceback, after starting everything else)."""
    import socket

    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        raise click.UsageError(
            f"metrics_host {host!r} is not an address of this machine ({err.strerror}); use "
            "0.0.0.0 (every interface), 127.0.0.1, or a name that resolves here"
        ) from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as err:
            raise click.UsageError(
                f"metrics_port {port} on {host} cannot be used ({err.strerror}): {taken}"
            ) from None
