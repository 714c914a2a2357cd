"""The ``streameval`` command."""

from __future__ import annotations

import click

from pipeline import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="streameval")
def main() -> None:
    """Online evaluation of streaming classifiers on Kafka."""


if __name__ == "__main__":  # pragma: no cover
    main()
