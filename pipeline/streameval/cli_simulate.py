"""The ``streameval simulate`` and ``streameval demo`` commands: River models on a drifting
stream, to a file, to the input topics, or with the whole service around them. Both need the
``simulate`` extra; :func:`need_extra` stops any command whose extra is missing.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import click

from streameval.cli_checks import need_extra, port_free, writable
from streameval.cli_kafka import name_part

__all__ = ["demo", "simulate"]


def _class_delays(_ctx, _param, values: tuple[str, ...]) -> dict[str, float]:
    """``--class-delay 1=5`` as ``{"1": 5.0}``."""
    delays = {}
    for value in values:
        name, sep, factor = value.partition("=")
        try:
            number = float(factor)
        except ValueError:
            number = math.nan
        if not sep or not name or not (number >= 0 and math.isfinite(number)):
            raise click.BadParameter(
                f"{value!r}: use CLASS=FACTOR, a class and a number >= 0 (e.g. 1=5: the labels "
                "of class 1 come five times as late)"
            )
        delays[name] = number
    return delays


def _simulation_options(function):
    from streameval.simulate.system import DELAYS, GENERATORS, LEARNERS

    options = [
        click.option(
            "--generator",
            type=click.Choice(GENERATORS),
            default="agrawal",
            show_default=True,
            help="River generator (or the Phishing data set).",
        ),
        click.option("--instances", type=click.IntRange(min=1), default=20_000, show_default=True),
        click.option(
            "--drift",
            "drifts",
            type=int,
            multiple=True,
            help="Instance position of a concept drift; repeatable (default: half way).",
        ),
        click.option(
            "--no-drift",
            is_flag=True,
            help="No concept drift: one concept throughout (instead of --drift).",
        ),
        click.option(
            "--drift-width",
            type=click.IntRange(min=1),
            default=1,
            show_default=True,
            help="1 for an abrupt drift, more for a gradual one over that many.",
        ),
        click.option(
            "--positive-share",
            type=click.FloatRange(0, 1, min_open=True, max_open=True),
            default=None,
            help="Class imbalance: share of class 1.",
        ),
        click.option(
            "--model",
            "models",
            type=click.Choice(LEARNERS),
            multiple=True,
            help="A model to run; repeatable (default: all).",
        ),
        click.option(
            "--delay",
            type=click.Choice(DELAYS),
            default="exponential",
            show_default=True,
            help="How labels are delayed.",
        ),
        click.option(
            "--delay-value",
            type=click.FloatRange(min=0),
            default=2000.0,
            show_default=True,
            help="Instances, or ms (fixed, or the exponential mean).",
        ),
        click.option(
            "--class-delay",
            "class_delay",
            multiple=True,
            metavar="CLASS=FACTOR",
            callback=_class_delays,
            help="Labels of CLASS come FACTOR times as late (e.g. 1=5); repeatable.",
        ),
        click.option(
            "--unlabelled",
            type=click.FloatRange(0, 1, max_open=True),
            default=0.0,
            show_default=True,
            help="Fraction of labels that never arrive.",
        ),
        click.option(
            "--repredict-every",
            type=click.IntRange(min=0),
            default=100,
            show_default=True,
            help="Re-predict a pending instance every K labels.",
        ),
        click.option(
            "--rate",
            type=click.FloatRange(min=0, min_open=True),
            default=200.0,
            show_default=True,
            help="Instances per second (event time; and real time with --realtime).",
        ),
        click.option(
            "--segments",
            default="",
            metavar="NAME,NAME,...",
            help="Instances carry attributes.segment, one of these (the first the most "
            "frequent); at a drift each segment moves to a concept of its own. Evaluate per "
            'segment with [slices] by = "attributes.segment".',
        ),
        click.option("--seed", type=int, default=42, show_default=True),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _simulation_config(
    generator,
    instances,
    drifts,
    no_drift,
    drift_width,
    positive_share,
    models,
    delay,
    delay_value,
    class_delay,
    unlabelled,
    repredict_every,
    rate,
    seed,
    segments="",
    start_ms=None,
):
    from streameval.simulate.system import LEARNERS, SimulationConfig

    if no_drift and drifts:
        raise click.UsageError(
            f"--no-drift and --drift {' '.join(map(str, drifts))} contradict each other; "
            "give one of them"
        )
    if not drifts and not no_drift:
        drifts = [instances // 2] if instances > 1 else []
    config = SimulationConfig(
        generator=generator,
        instances=instances,
        drifts=list(drifts),
        drift_width=drift_width,
        positive_share=positive_share,
        models=list(models) or list(LEARNERS),
        delay=delay,
        delay_value=delay_value,
        class_delay=dict(class_delay),
        unlabelled=unlabelled,
        repredict_every=repredict_every,
        rate=rate,
        seed=seed,
        segments=[s.strip() for s in segments.split(",") if s.strip()],
    )
    if start_ms is not None:
        config.start_ms = start_ms
    try:
        return config.check()
    except ValueError as err:
        raise click.UsageError(str(err)) from None


@click.command()
@_simulation_options
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write JSON lines here (for streameval replay) instead of to Kafka.",
)
@click.option("--bootstrap", default=None, help="Kafka bootstrap servers ($STREAMEVAL_BOOTSTRAP).")
@click.option(
    "-X",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="A Kafka client setting passed through; repeatable.",
)
@click.option(
    "--prefix",
    envvar="STREAMEVAL_TOPIC_PREFIX",
    default="",
    callback=name_part,
    help="Topic prefix ($STREAMEVAL_TOPIC_PREFIX).",
)
@click.option(
    "--realtime", is_flag=True, help="Produce at --rate in real time, stamped with the wall clock."
)
def simulate(out, bootstrap, settings, prefix, realtime, **options) -> None:
    """Simulate a streaming ML system: River models predicting, re-predicting and learning on
    late labels, with concept drift. To a file (--out) or to the input topics."""
    import time

    from rich.progress import Progress

    need_extra("river", "simulate", "`streameval simulate`")
    writable(out, "--out")
    from streameval.simulate.system import simulate as run

    start_ms = int(time.time() * 1000) if realtime else None
    config = _simulation_config(**options, start_ms=start_ms)
    events = run(config)
    with Progress(transient=True) as progress:
        task = progress.add_task("simulating", total=config.instances)
        if out is not None:
            import orjson

            with out.open("wb") as handle:
                for event in events:
                    handle.write(orjson.dumps(event) + b"\n")
                    if event["type"] == "instance":
                        progress.advance(task)
            click.echo(f"wrote {out}")
            return
        from streameval.cli_kafka import _kafka_errors
        from streameval.clients import ClientConfigError, client_config
        from streameval.produce import ProduceError
        from streameval.simulate.produce import produce_events

        try:
            client = client_config(bootstrap, settings)
        except ClientConfigError as err:
            raise click.UsageError(str(err)) from None
        try:
            with _kafka_errors(client["bootstrap.servers"]):
                sent = produce_events(
                    events,
                    client,
                    prefix,
                    realtime=realtime,
                    on_instance=lambda: progress.advance(task),
                )
        except ProduceError as err:
            raise click.ClickException(str(err)) from None
    click.echo(f"produced {sent} events to {prefix}instances, {prefix}predictions, {prefix}labels")


@click.command()
@click.option(
    "--duration",
    type=click.FloatRange(min=1),
    default=None,
    help="Seconds to run (default: until Ctrl-C).",
)
@click.option(
    "--bootstrap",
    default=None,
    help="Use this Kafka ($STREAMEVAL_BOOTSTRAP) instead of a local one.",
)
@click.option("--metrics-port", type=click.IntRange(1, 65535), default=9464, show_default=True)
@click.option(
    "--rate",
    type=click.FloatRange(min=1),
    default=200.0,
    show_default=True,
    help="Simulated instances per second.",
)
@click.option("--seed", type=int, default=42, show_default=True)
def demo(duration, bootstrap, metrics_port, rate, seed) -> None:
    """The whole service in one command: Kafka (a local one unless --bootstrap), the topics,
    a worker, and five River models on a drifting stream, with a live view of their numbers."""
    from rich.console import Console

    need_extra("river", "simulate", "`streameval demo`")
    port_free(  # (before a local Kafka is started for nothing)
        "0.0.0.0",
        metrics_port,
        "another program (a worker, or a demo) on this machine has it; choose another with "
        "--metrics-port",
    )
    from streameval.demo import run_demo

    sys.exit(run_demo(duration, bootstrap, metrics_port, rate, seed, Console()))
