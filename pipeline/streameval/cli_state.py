"""The ``streameval state`` commands: what an application's checkpoints hold, and starting
parts of them over; and the check a worker makes of them before it starts."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import click

from streameval.cli_kafka import kafka_settings

__all__ = ["check_before_start", "state"]


def _app_options(function):
    """The options that say which application, on which Kafka (those of `streameval worker`)."""
    for option in reversed(
        [
            click.option(
                "--config",
                "config_path",
                type=click.Path(dir_okay=False, path_type=Path),
                envvar="STREAMEVAL_CONFIG",
                help="The worker's TOML file: its [worker] table names the app and Kafka "
                "($STREAMEVAL_CONFIG).",
            ),
            click.option(
                "--bootstrap", default=None, help="Kafka bootstrap servers ($STREAMEVAL_BOOTSTRAP)."
            ),
            click.option(
                "-X",
                "settings",
                multiple=True,
                metavar="KEY=VALUE",
                help="A Kafka client setting passed through (SASL/SSL ...); repeatable.",
            ),
            click.option("--app-id", default=None, help="The application ($STREAMEVAL_APP_ID)."),
            click.option(
                "--prefix",
                "topic_prefix",
                default=None,
                help="Topic name prefix ($STREAMEVAL_TOPIC_PREFIX).",
            ),
        ]
    ):
        function = option(function)
    return function


def _load(config_path, bootstrap, settings, app_id, topic_prefix):
    from streameval.app.settings import SettingsError, load_settings
    from streameval.clients import ClientConfigError, client_config
    from streameval.topics import Topics

    kafka = kafka_settings(settings)
    try:
        worker, config = load_settings(
            config_path,
            bootstrap=bootstrap,
            kafka=kafka or None,
            app_id=app_id,
            topic_prefix=topic_prefix,
        )
        client = client_config(worker.bootstrap, [f"{k}={v}" for k, v in worker.kafka.items()])
    except (SettingsError, ClientConfigError) as err:
        raise click.UsageError(str(err)) from None
    return worker, config, client, Topics.with_prefix(worker.topic_prefix, worker.app_id)


def _naming(worker: Any, config_path: Path | None) -> str:
    """The options that name the application to the `state` commands, as a user would type."""
    options = []
    if config_path is not None:
        options += ["--config", str(config_path)]
    options += ["--app-id", worker.app_id]
    if worker.topic_prefix:
        options += ["--prefix", worker.topic_prefix]
    return shlex.join(options)


def _kafka_answers(client: dict[str, str]):
    import contextlib

    @contextlib.contextmanager
    def guard():
        from confluent_kafka import KafkaException

        from streameval.app.changelog import UNANSWERED
        from streameval.app.stateops import StateError
        from streameval.cli_kafka import kafka_failure

        try:
            yield
        except StateError as err:
            raise click.ClickException(str(err)) from None
        except UNANSWERED as err:
            raise click.ClickException(
                f"Kafka at {client.get('bootstrap.servers', '')} did not answer "
                f"({err or 'a request timed out'}); try again once it does, and check the "
                "brokers' advertised.listeners if other clients reach them"
            ) from None
        except KafkaException as err:
            raise kafka_failure(
                err,
                client.get("bootstrap.servers", ""),
                "--bootstrap (or $STREAMEVAL_BOOTSTRAP) and the -X settings",
            ) from None

    return guard()


@click.group()
def state() -> None:
    """An application's checkpoints: what they hold, and starting parts of them over."""


@state.command("show")
@_app_options
@click.option("--json", "as_json", is_flag=True, help="The seals as JSON, for scripts.")
@click.option(
    "--judge",
    is_flag=True,
    help="Also say what a worker started with --config's evaluation settings would "
    "keep, start fresh or refuse.",
)
def show(config_path, bootstrap, settings, app_id, topic_prefix, as_json, judge) -> None:
    """Print what an application's checkpoints hold: join partitions and their pending
    instances, models, pairs, estimators, outcome counts and each part's settings.

    It reads the latest checkpoint seal of each changelog partition, never the whole state.
    """
    from streameval.app.evolve import judge as judged
    from streameval.app.stateops import survey

    worker, config, client, topics = _load(config_path, bootstrap, settings, app_id, topic_prefix)
    with _kafka_answers(client):
        found = survey(client, topics, worker.app_id)
    if found.absent:  # (a worker creates them before it joins the group)
        raise click.ClickException(found.unknown())
    if as_json:
        click.echo(
            json.dumps(
                {
                    "app_id": found.app_id,
                    "members": found.members,
                    "joins": found.joins,
                    "evals": found.evals,
                },
                indent=1,
            )
        )
        return
    for line in _describe(found):
        click.echo(line)
    if judge:
        verdict = judged(found.stored(), config)
        click.echo("\nunder this configuration:")
        for refusal in verdict.refusals:
            click.echo(f"  refused: {refusal.describe()}")
        if verdict.refusals:
            click.echo(
                f"  reset: streameval state reset {_naming(worker, config_path)} "
                f"{shlex.join(verdict.reset_options())}"
            )
        for what in verdict.added:
            click.echo(f"  starts fresh: {what}")
        for what in verdict.dropped:
            click.echo(f"  dropped: {what}")
        for what in verdict.new:
            click.echo(f"  new, no history: {what}")
        if not (verdict.refusals or verdict.added or verdict.dropped):
            click.echo("  every part with a history goes on as it is")


def _describe(found: Any) -> list[str]:
    running = (
        f"{len(found.members)} worker(s) run: {', '.join(found.members)}"
        if found.members
        else "no worker runs"
    )
    lines = [f"app {found.app_id!r}: {running}"]
    if found.empty:
        return [*lines, "no checkpoints yet"]
    for kind, q in found.earlier():
        lines.append(
            f"{kind} partition {q}: its latest checkpoint was written by an earlier "
            "release (what it holds is read from its state; a join's counts only "
            "from its next checkpoint on)"
        )
    joins = {q: s["summary"] for q, s in found.joins.items() if s}
    rules = {json.dumps(summary["join"], sort_keys=True) for summary in joins.values()}
    if len(rules) == 1:
        lines.append(f"join ({len(found.joins)} partitions): {_rules(next(iter(joins.values())))}")
    for q, summary in sorted(joins.items()):
        own = "" if len(rules) == 1 else f"; {_rules(summary)}"
        counts = (
            "counts unknown"
            if summary["pending"] is None
            else f"{summary['pending']:,} pending, {summary['remembered']:,} remembered, "
            f"{summary['waiting']:,} events waiting"
        )
        lines.append(
            f"  join partition {q}: {counts}; events offset {summary['offset']}, "
            f"checkpoint {found.joins[q]['n']}{own}"
        )
    for r, summary in found.eval_summaries():
        lines.append(
            f"evaluation partition {r}: checkpoint {found.evals[r]['n']}, outcomes offset "
            f"{summary['offset']}, {summary['waiting']:,} outcomes waiting"
        )
        for name, (n, shape) in sorted(summary["models"].items()):
            lines.append(f"  model {name}: {n:,} outcomes")
            lines += [f"    {text}" for text in _shape(summary["shapes"][shape])]
        for key, (n, _, _, estimators) in sorted(summary["pairs"].items()):
            lines.append(
                f"  pair {key}: {n:,} paired instances; estimators {', '.join(estimators)}"
            )
    return lines


def _rules(summary: dict[str, Any]) -> str:
    if summary["join"] is None:
        return "reset: takes the configured rules at the next start"
    return ", ".join(f"{k}={v}" for k, v in summary["join"].items())


def _shape(shape: dict[str, Any]) -> list[str]:
    detectors = ", ".join(
        f"{d['type']}({', '.join(f'{k}={v:g}' for k, v in d.items() if k != 'type')})"
        for d in shape["detectors"]
    )
    return [
        f"estimators {', '.join(shape['estimators'])}; positive_label "
        f"{shape['positive_label']!r}; max_classes {shape['max_classes']}; delayed bins="
        f"{shape['bins']}, alpha={shape['alpha']:g}, bin_rule={shape['bin_rule']}",
        f"detectors {detectors or 'none'}",
    ]


@state.command("reset")
@_app_options
@click.option(
    "--join",
    is_flag=True,
    help="Every join partition drops its pending and remembered instances and takes "
    "the configured join rules.",
)
@click.option(
    "--model",
    "models",
    multiple=True,
    metavar="NAME",
    help="The model starts over (its pairs keep theirs); repeatable.",
)
@click.option("--all-models", is_flag=True, help="Every model starts over.")
@click.option(
    "--pair",
    "pairs",
    multiple=True,
    metavar="A:B",
    help="The comparison of A and B starts over (or goes, if no longer configured); repeatable.",
)
@click.option(
    "--estimator",
    "estimators",
    multiple=True,
    metavar="NAME",
    help="Every model and pair forgets this estimator (e.g. window:1000); repeatable.",
)
def reset(
    config_path,
    bootstrap,
    settings,
    app_id,
    topic_prefix,
    join,
    models,
    all_models,
    pairs,
    estimators,
) -> None:
    """Start just the named parts of an application's checkpoints over; every other part keeps
    its history. Refused while a worker of the application runs.

    The worker's message names the options to use when a new configuration changes what a
    part's numbers mean. A restarted worker starts the named parts afresh at its next outcome.
    """
    from streameval.app.state_reset import Resets
    from streameval.app.state_reset import reset as run

    asked = Resets(join, list(models), all_models, list(pairs), list(estimators))
    if not asked:
        raise click.UsageError(
            "name what to reset: --join, --model NAME, --all-models, --pair A:B or "
            "--estimator NAME (`streameval state show` lists what there is)"
        )
    worker, _, client, topics = _load(config_path, bootstrap, settings, app_id, topic_prefix)
    with _kafka_answers(client):
        run(client, topics, worker.app_id, asked, say=click.echo)
    click.echo(f"done: start the workers of app {worker.app_id!r} again")


#: the longest wait between two of a worker's checks of its checkpoints at its start, when
#: Kafka stopped answering after it was reached (as connect's between two tries)
CHECK_DELAY_MAX_S = 30.0
#: after this long of such failures they are logged as errors, with :data:`LONG_HINT`
CHECK_LONG_S = 300.0
LONG_HINT = (
    f" (for {CHECK_LONG_S / 60:.0f} minutes or more: if the brokers answer other clients, "
    "check that the addresses they advertise, advertised.listeners, are reachable from the "
    "worker)"
)


def check_before_start(worker: Any, config: Any, config_path: Path | None) -> None:
    """A worker's check of its application's checkpoints (streameval.app.stateops.preflight),
    with the cluster waited for as the worker waits for it — also when it stops answering
    during the check (a broker restarting, a coordinator being elected): the check starts
    again once Kafka answers. A refusal ends the command with its message and a non-zero
    status, before anything is changed."""
    import logging
    import threading
    import time

    from confluent_kafka import KafkaException

    from streameval.app.changelog import UNANSWERED
    from streameval.app.output import KafkaErrors, KafkaRefused, connect
    from streameval.app.stateops import StateError, preflight
    from streameval.cli_kafka import kafka_failure, kafka_words
    from streameval.clients import ClientConfigError, client_config, kafka_trouble
    from streameval.logs import KAFKA_LOG
    from streameval.topics import Topics

    try:
        client = client_config(worker.bootstrap, [f"{k}={v}" for k, v in worker.kafka.items()])
    except ClientConfigError as err:
        raise click.UsageError(str(err)) from None
    client["logger"] = KAFKA_LOG  # in the worker's log format, rate-limited
    topics = Topics.with_prefix(worker.topic_prefix, worker.app_id)
    naming = _naming(worker, config_path)
    commands = (f"streameval state reset {naming}", f"streameval state show {naming}")
    where = client.get("bootstrap.servers", "")
    delay, began = 1.0, 0.0
    try:
        while connect(client, worker, topics, KafkaErrors(), threading.Event()):
            try:
                preflight(client, topics, worker.app_id, config, commands, say=_said)
                return
            except KafkaException as err:
                if kafka_trouble(err) not in ("unanswered", "not ready"):
                    raise kafka_failure(
                        err, where, "--bootstrap (or $STREAMEVAL_BOOTSTRAP) and the -X settings"
                    ) from None
                reason = kafka_words(err)
            except UNANSWERED as err:
                reason = str(err) or "a request timed out"
            began = began or time.monotonic()
            long_ = time.monotonic() - began >= CHECK_LONG_S
            logging.getLogger("streameval.worker").log(
                logging.ERROR if long_ else logging.WARNING,
                "Kafka at %s stopped answering during the check of the checkpoints (%s): "
                "checking again in %.0f s%s",
                where,
                reason,
                delay,
                LONG_HINT if long_ else "",
            )
            time.sleep(delay)
            delay = min(delay * 2, CHECK_DELAY_MAX_S)
    except StateError as err:
        raise click.ClickException(str(err)) from None
    except KafkaRefused as err:
        raise click.ClickException(str(err)) from None
    except KeyboardInterrupt:
        sys.exit(130)


def _said(line: str) -> None:
    click.echo(f"streameval worker: {line}", err=True)
