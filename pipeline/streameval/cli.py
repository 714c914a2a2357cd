"""The ``streameval`` command."""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path
from typing import Any

import click

from streameval import __version__
from streameval.cli_checks import need_extra, port_free, writable
from streameval.cli_kafka import kafka, kafka_settings, produce, topics
from streameval.cli_simulate import demo, simulate
from streameval.cli_state import check_before_start, state


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="streameval")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Online evaluation of streaming classifiers on Kafka."""
    if ctx.invoked_subcommand in ("worker", "topics", "demo", "state"):
        from streameval.topics import topics_dir

        folder = topics_dir()
        if not (folder / "topics.toml").is_file():  # only $STREAMEVAL_TOPICS_DIR can miss it
            raise click.UsageError(
                f"STREAMEVAL_TOPICS_DIR={folder} has no topics.toml: point it at a folder with "
                "topics.toml and schemas/ (copies of the package's, edited), or unset it"
            )


main.add_command(kafka)
main.add_command(topics)
main.add_command(produce)
main.add_command(state)
main.add_command(simulate)
main.add_command(demo)


def _picture(path: Path) -> Path:
    """``path`` as the picture matplotlib will write: a name without a suffix gets ``.png``
    (matplotlib's own choice, said as such); a suffix it cannot write is refused before any
    work (it came as a traceback once the whole replay had run)."""
    from matplotlib.backend_bases import FigureCanvasBase

    if path.suffix in ("", "."):  # (Python 3.14 calls a trailing dot a suffix)
        return path.with_name(path.name.rstrip(".") + ".png")
    formats = set(FigureCanvasBase.get_supported_filetypes()) - {"pgf"}  # (pgf: LaTeX's)
    if path.suffix[1:].lower() not in formats:
        raise click.BadParameter(
            f"{path}: a picture cannot be written as {path.suffix}; end its name with .png, "
            f".svg or .pdf (any of {', '.join('.' + f for f in sorted(formats))})",
            param_hint="--plot",
        )
    return path


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
    help="Draw the main measures of every model over outcomes to this picture: PNG, or the "
    "format its name ends in (.svg, .pdf, ...).",
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
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Hold pending instances in disk stores in this directory (emptied first), not in "
    "RAM: a file with any number of pending instances replays in bounded memory.",
)
@click.option(
    "--join-partitions",
    type=click.IntRange(min=1, max=10_000),
    default=1,
    show_default=True,
    help="Split the join as the worker does (the partitions of its events topic), so that "
    "join.max_pending binds per partition as it does there.",
)
def replay(
    events,
    config_path,
    out,
    plot,
    strict,
    publish_every,
    summary_estimator,
    quiet,
    state_dir,
    join_partitions,
):
    """Evaluate an events file (one JSON event per line) offline.

    Runs the events in file order through the same join and evaluators as the streaming
    service and writes the records it would publish: metrics, drift alarms, comparisons.
    """
    if plot:
        need_extra("matplotlib", "plot", "--plot")
        plot = _picture(plot)
    writable(out, "--out")
    writable(plot, "--plot")
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    from streameval.config import ConfigError, load_config
    from streameval.replay import MalformedLine, NotUtf8
    from streameval.replay import replay as run
    from streameval.report import MeasureHistory, plot_history, print_summary

    # a terminal sets its own width; logs and pipes get room for the whole table
    console = Console(stderr=True, width=None if sys.stderr.isatty() else 120)
    try:
        config = load_config(config_path, publish_every=publish_every)
    except ConfigError as err:
        raise click.UsageError(str(err)) from None
    names = [spec.name for spec in config.estimator_specs]
    shown = summary_estimator or (names[1] if len(names) > 1 else names[0])
    if shown not in names:
        raise click.UsageError(f"--estimator {shown!r} is not configured; use one of {names}")
    history = MeasureHistory(shown) if plot else None
    size = events.stat().st_size
    if size == 0:
        raise click.ClickException(
            f"{events} is empty: nothing to evaluate (an events file has one JSON event per "
            "line; see docs/replay.md)"
        )
    try:
        sink = out.open("wb") if out else sys.stdout.buffer
    except OSError as err:
        raise click.BadParameter(f"{out}: {err.strerror}", param_hint="--out") from None
    progress = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        disable=quiet or size < 4_000_000,
    )
    try:
        with progress:
            task = progress.add_task(f"replaying {events.name}", total=size)
            result = run(
                events,
                config,
                sink,
                strict=strict,
                on_records=history,
                progress=lambda done: progress.update(task, completed=done),
                state_dir=state_dir,
                join_partitions=join_partitions,
            )
    except MalformedLine as err:
        raise click.ClickException(
            f"{events}: {err} (without --strict it would be skipped)"
        ) from None
    except NotUtf8:
        from streameval.decode_errors import utf16_file

        raise click.ClickException(utf16_file(events)) from None
    finally:
        if out:
            sink.close()
        else:
            sink.flush()
    if not quiet:
        print_summary(result, console, shown)
    if result.events == 0:
        skipped = sum(result.skipped.values())
        raise click.ClickException(
            f"{events} has no events: {result.lines} lines, {skipped} of them malformed"
            + (" (the first are listed above)" if skipped and not quiet else "")
            + "; an events file has one JSON event per line (see docs/replay.md)"
        )
    if plot:
        try:
            plot_history(history, plot)
        except Exception as err:  # a disk, or a format's own needs: said, not a traceback
            said = getattr(err, "strerror", None) or err
            raise click.ClickException(f"--plot {plot}: {said}") from None
        if not quiet:
            console.print(f"plot written to {plot}")


@main.command("alert-log")
@click.option("--host", default="0.0.0.0", show_default=True)
@click.option("--port", type=click.IntRange(1, 65535), default=9095, show_default=True)
def alert_log(host: str, port: int) -> None:
    """Receive Alertmanager's webhook notifications and print one line per alert."""
    import signal
    import threading

    from streameval.alertlog import AlertLog

    try:
        log = AlertLog(host, port, echo=lambda text: click.echo(text, nl=True)).start()
    except OSError as err:
        raise click.ClickException(f"cannot listen on {host}:{port}: {err}") from err
    click.echo(f"alert-log: listening on http://{host}:{log.port}/ for Alertmanager webhooks")
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    log.stop()


@main.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="STREAMEVAL_CONFIG",
    help="TOML file: the evaluation settings replay reads plus a [worker] table "
    "($STREAMEVAL_CONFIG).",
)
@click.option("--bootstrap", default=None, help="Kafka bootstrap servers ($STREAMEVAL_BOOTSTRAP).")
@click.option(
    "-X",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="A Kafka client setting passed through (SASL/SSL, client.id ...); repeatable.",
)
@click.option(
    "--app-id", default=None, help="Consumer group of the worker group ($STREAMEVAL_APP_ID)."
)
@click.option(
    "--prefix", "topic_prefix", default=None, help="Topic name prefix ($STREAMEVAL_TOPIC_PREFIX)."
)
@click.option(
    "--metrics-port",
    type=int,
    default=None,
    help="Port of /metrics, 0 for none ($STREAMEVAL_METRICS_PORT).",
)
@click.option(
    "--metrics-host", default=None, help="Address of /metrics ($STREAMEVAL_METRICS_HOST)."
)
@click.option("--log-level", default=None, help="debug, info, warning or error.")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default=None,
    help="Log lines as text, or one JSON object each ($STREAMEVAL_LOG_FORMAT).",
)
def worker(
    config_path,
    bootstrap,
    settings,
    app_id,
    topic_prefix,
    metrics_port,
    metrics_host,
    log_level,
    log_format,
) -> None:
    """Run a streaming worker: join, evaluate, compare and publish, with /metrics.

    Start as many as there are machines; workers with the same app id share the partitions.
    Settings: command line, then STREAMEVAL_* variables, then the [worker] table of --config.
    """
    from streameval.app.settings import SettingsError, load_settings, stray_variables
    from streameval.clients import ClientConfigError

    kafka = kafka_settings(settings)
    try:
        worker_settings, config = load_settings(
            config_path,
            bootstrap=bootstrap,
            kafka=kafka or None,
            app_id=app_id,
            topic_prefix=topic_prefix,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            log_level=log_level,
            log_format=log_format,
        )
        if worker_settings.uses_state_dir:  # before reaching for Kafka
            worker_settings.state_home()
    except SettingsError as err:
        raise click.UsageError(str(err)) from None
    port_free(worker_settings.metrics_host, worker_settings.metrics_port)
    import logging.config

    from streameval.logs import logging_config

    # the worker's log format from here on (the check below waits for Kafka, and says so)
    logging.config.dictConfig(logging_config(worker_settings.log_level, worker_settings.log_format))
    from streameval.core import kernels

    for line in stray_variables():  # a misspelt variable would change nothing, unseen
        logging.getLogger("streameval.worker").warning("%s", line)
    if not kernels.in_use():
        logging.getLogger("streameval.worker").warning(
            "the compiled kernels (streameval_kernels) are not in use (%s): the ROC AUC and the "
            "drift detectors run in numpy, with the same numbers and more time per batch; from "
            "a checkout of streameval, `pip install ./pipeline/kernels` (it needs Rust's cargo) "
            "installs them",
            kernels.PROBLEM,
        )
    signal.signal(signal.SIGTERM, _stopped_before_start)  # until Faust handles it
    check_before_start(worker_settings, config, config_path)  # what its checkpoints hold
    from streameval.app.faust_app import create_app, run_worker

    try:
        app = create_app(worker_settings, config)
    except ClientConfigError as err:
        raise click.UsageError(str(err)) from None
    sys.exit(run_worker(app, worker_settings.log_level, worker_settings.log_format))


def _stopped_before_start(signum: int, _frame: Any) -> None:
    """SIGTERM while the worker waits for Kafka or checks its checkpoints, before it owns a
    partition: nothing to save, so it ends at once, and cleanly (status 0)."""
    logging.getLogger("streameval.worker").info(
        "%s before start-up was complete: stopping (nothing was changed)",
        signal.Signals(signum).name,
    )
    raise SystemExit(0)


if __name__ == "__main__":  # pragma: no cover
    main()
