"""The ``streameval`` command."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from pipeline import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="streameval")
def main() -> None:
    """Online evaluation of streaming classifiers on Kafka."""


@main.command()
@click.argument("events", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="TOML file with the evaluation settings (defaults need none).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where the records go (JSON lines); default: standard output.",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Draw the main measures of every model over outcomes to this PNG.",
)
@click.option("--strict", is_flag=True, help="Stop at the first malformed line.")
@click.option(
    "--publish-every",
    type=click.IntRange(min=1),
    default=None,
    help="Outcomes of a model between two metrics records (overrides the file).",
)
@click.option(
    "--estimator",
    "summary_estimator",
    default=None,
    help="Estimator shown in the summary and the plot (default: the second "
    "configured one, e.g. window:1000).",
)
@click.option("--quiet", is_flag=True, help="No summary table and no progress bar.")
def replay(events, config_path, out, plot, strict, publish_every, summary_estimator, quiet):
    """Evaluate an events file (one JSON event per line) offline.

    Runs the events in file order through the same join and evaluators as the streaming
    service and writes the records it would publish: metrics, drift alarms, comparisons.
    """
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    from pipeline.config import ConfigError, load_config
    from pipeline.core.estimators import parse_estimator
    from pipeline.replay import MalformedLine
    from pipeline.replay import replay as run
    from pipeline.report import MeasureHistory, plot_history, print_summary

    # a terminal sets its own width; logs and pipes get room for the whole table
    console = Console(stderr=True, width=None if sys.stderr.isatty() else 120)
    try:
        config = load_config(config_path, publish_every=publish_every)
    except ConfigError as err:
        raise click.UsageError(str(err)) from None
    names = [parse_estimator(e).name for e in config.estimators]
    shown = summary_estimator or (names[1] if len(names) > 1 else names[0])
    if shown not in names:
        raise click.UsageError(f"--estimator {shown!r} is not configured; use one of {names}")
    history = MeasureHistory(shown) if plot else None
    size = events.stat().st_size
    sink = out.open("wb") if out else sys.stdout.buffer
    progress = Progress(
        "[progress.description]{task.description}", BarColumn(), DownloadColumn(),
        TimeRemainingColumn(), console=console, transient=True,
        disable=quiet or size < 4_000_000,
    )  # fmt: skip
    try:
        with progress:
            task = progress.add_task(f"replaying {events.name}", total=size)
            result = run(
                events, config, sink, strict=strict, on_records=history,
                progress=lambda done: progress.update(task, completed=done),
            )  # fmt: skip
    except MalformedLine as err:
        raise click.ClickException(
            f"{events}: {err} (without --strict it would be skipped)"
        ) from None
    finally:
        if out:
            sink.close()
        else:
            sink.flush()
    if not quiet:
        print_summary(result, console, shown)
    if plot:
        plot_history(history, plot)
        if not quiet:
            console.print(f"plot written to {plot}")


if __name__ == "__main__":  # pragma: no cover
    main()
