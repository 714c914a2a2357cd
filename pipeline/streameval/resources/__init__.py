"""What the commands read at run time, shipped inside the package: the topic definitions and
their JSON Schemas (``topics/``) and the local broker's Maven POM and logging template
(``kafka/``). Read through :mod:`importlib.resources`, so an installed wheel has them too."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

__all__ = ["resource"]


def resource(*parts: str) -> Path:
    """The file or folder ``parts`` under this package, e.g. ``resource("kafka", "pom.xml")``.

    A wheel installs as files on disk, so this is a real path (not a zip member)."""
    return Path(str(files(__name__).joinpath(*parts)))
