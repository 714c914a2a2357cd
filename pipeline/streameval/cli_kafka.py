"""The ``streameval kafka``, ``streameval topics`` and ``streameval produce`` commands: a local
broker, the topics the service uses on any broker, and an events file onto its input topics."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click

__all__ = ["kafka", "produce", "topics"]


@click.group()
def kafka() -> None:
    """A local single-node Apache Kafka (KRaft) for development, without Docker."""


def _say(message: str) -> None:
    click.echo(message, err=True)


@kafka.command("start")
@click.option("--name", default="default", show_default=True, help="Instance name.")
@click.option(
    "--fresh",
    is_flag=True,
    help="Start an empty broker on new ports, deleting the stopped instance's topics and "
    "messages (without it, a stopped instance comes back on its ports with its data).",
)
def kafka_start(name: str, fresh: bool) -> None:
    """Fetch Kafka if needed (Maven Central, cached) and start it; print its bootstrap."""
    from streameval.devkafka import KafkaInstance, LauncherError

    directory = KafkaInstance.named(name)
    existing = KafkaInstance.load(directory)
    if existing is not None and existing.running():
        if fresh:
            raise click.ClickException(
                f"kafka {name!r} is running (pid {existing.pid}): `streameval kafka stop "
                f"--name {name}` first, then start it --fresh"
            )
        _say(f"kafka {name!r} is already running (pid {existing.pid}); logs: {existing.log_file}")
        click.echo(existing.bootstrap)
        return
    try:
        if existing is not None and not fresh:
            try:
                existing.restart(tie_to_parent=False, log=_say)
            except LauncherError as err:
                fresh_start = f"streameval kafka start --name {name} --fresh"
                raise LauncherError(f"{err} (`{fresh_start}`)") from None
            instance, how = existing, "restarted with its data on its ports"
        else:
            instance = KafkaInstance.start(directory, tie_to_parent=False, log=_say)
            how = "started"
    except LauncherError as err:
        raise click.ClickException(str(err)) from None
    _say(f"kafka {name!r} {how} (pid {instance.pid}); logs: {instance.log_file}")
    click.echo(instance.bootstrap)


@kafka.command("stop")
@click.option("--name", default="default", show_default=True, help="Instance name.")
def kafka_stop(name: str) -> None:
    """Stop a local Kafka started with `streameval kafka start`."""
    from streameval.devkafka import KafkaInstance

    instance = KafkaInstance.load(KafkaInstance.named(name))
    if instance is None or not instance.running():
        _say(f"kafka {name!r} is not running")
        return
    instance.stop()
    _say(f"kafka {name!r} stopped")


@kafka.command("status")
@click.option("--name", default="default", show_default=True, help="Instance name.")
def kafka_status(name: str) -> None:
    """Say whether the local Kafka runs, where, and where its log is; exit 1 if it does not."""
    from streameval.devkafka import KafkaInstance

    instance = KafkaInstance.load(KafkaInstance.named(name))
    if instance is None or not instance.running():
        _say(f"kafka {name!r} is not running")
        sys.exit(1)
    click.echo(f"running pid={instance.pid} bootstrap={instance.bootstrap} log={instance.log_file}")


def _kafka_options(function):
    function = click.option(
        "-X",
        "settings",
        multiple=True,
        metavar="KEY=VALUE",
        help="A Kafka client setting passed through (SASL/SSL, client.id ...); repeatable.",
    )(function)
    return click.option(
        "--bootstrap",
        envvar="STREAMEVAL_BOOTSTRAP",
        help="Kafka bootstrap servers (default: $STREAMEVAL_BOOTSTRAP, else the local Kafka "
        "of `streameval kafka start`).",
    )(function)


def kafka_settings(items) -> dict[str, str]:
    """The -X KEY=VALUE options of a command as the worker's ``kafka`` setting."""
    kafka = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="-X")
        kafka[key.strip()] = value
    return kafka


def _admin(bootstrap, settings):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from streameval.clients import ClientConfigError, client_config, producer_settings

    try:
        config = client_config(bootstrap, settings)
        return AdminClient(producer_settings(config)), config["bootstrap.servers"]
    except ClientConfigError as err:
        raise click.UsageError(str(err)) from None
    except KafkaException as err:  # a setting the client does not know, or a wrong value
        raise click.UsageError(f"-X: {kafka_words(err)}") from None


def kafka_words(err: Exception) -> str:
    """What librdkafka said in a KafkaException (its KafkaError's text), else the exception's."""
    error = err.args[0] if err.args else None
    return error.str() if hasattr(error, "str") else str(err)


def kafka_failure(err: Exception, where: str, check: str) -> click.ClickException:
    """A KafkaException as a message that says what to do: a broker that did not answer (a
    wrong address, Kafka down; ``check`` says what to look at), or Kafka's own refusal."""
    from streameval.clients import kafka_trouble

    reason = kafka_words(err)
    trouble = kafka_trouble(err)
    if trouble == "unanswered":
        return click.ClickException(f"Kafka at {where} did not answer ({reason}); check {check}")
    if trouble == "connection refused":
        return click.ClickException(
            f"Kafka at {where} refused the connection ({reason}); check the -X security "
            "settings (security.protocol, sasl.*, ssl.*)"
        )
    if trouble == "client":
        return click.ClickException(f"the Kafka client failed ({reason}); check the -X settings")
    if trouble == "not ready":
        return click.ClickException(
            f"Kafka at {where} is not ready ({reason}): a cluster starting or electing a "
            "leader says so for a while; try again in a minute"
        )
    return click.ClickException(f"Kafka at {where} refused: {reason}")


@contextlib.contextmanager
def _kafka_errors(where: str):
    """Kafka's failures as messages that say what to do (:func:`kafka_failure`), not a
    traceback."""
    from confluent_kafka import KafkaException

    try:
        yield
    except KafkaException as err:
        raise kafka_failure(
            err,
            where,
            "--bootstrap (or $STREAMEVAL_BOOTSTRAP), or start a local one with "
            "`streameval kafka start`",
        ) from None


def name_part(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A click callback: a topic prefix or an app id, which topic names are made of, of the
    characters Kafka allows there (it would refuse the topics, and say less)."""
    import re

    from streameval.topics import NAME_CHARS

    if value is not None and not re.fullmatch(f"{NAME_CHARS}*", value):
        raise click.BadParameter(
            f"{value!r} has characters no Kafka topic name may have: use ASCII letters, "
            "digits, '.', '_' and '-'"
        )
    if value == "" and param.name == "app_id":  # (a prefix may be empty)
        raise click.BadParameter("an app id has at least one character")
    return value


@click.group()
def topics() -> None:
    """The topics of topics/topics.toml: create what is missing, describe them."""


_prefix = click.option(
    "--prefix",
    envvar="STREAMEVAL_TOPIC_PREFIX",
    default="",
    show_default=True,
    callback=name_part,
    help="Prefix of every topic name ($STREAMEVAL_TOPIC_PREFIX).",
)


@topics.command("create")
@_kafka_options
@_prefix
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    default=None,
    help="Partitions of every new topic instead of the declared count.",
)
@click.option(
    "--app-id",
    envvar="STREAMEVAL_APP_ID",
    default="streameval",
    show_default=True,
    callback=name_part,
    help="The worker group whose internal topics to create ($STREAMEVAL_APP_ID).",
)
@click.option(
    "--changelog-config",
    "changelog_configs",
    multiple=True,
    metavar="KEY=VALUE",
    help="A topic config of the changelog topics over topics/topics.toml's; repeatable.",
)
def topics_create(bootstrap, settings, prefix, partitions, app_id, changelog_configs) -> None:
    """Create the missing topics; report existing ones whose partitions or configs differ
    (they are left alone: changing a live topic is a decision for a person)."""
    from streameval.topics import create_topics, load_topics

    overrides = {}
    for item in changelog_configs:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.UsageError(f"--changelog-config {item!r}: use KEY=VALUE")
        overrides[key] = value
    specs = load_topics(prefix, partitions=partitions, app_id=app_id, changelog_configs=overrides)
    admin, where = _admin(bootstrap, settings)
    with _kafka_errors(where):
        report = create_topics(admin, specs)
    for name in report.created:
        click.echo(f"created    {name}")
    for name in report.unchanged:
        click.echo(f"exists     {name}")
    for name, differences in report.mismatched.items():
        click.echo(f"DIFFERS    {name}: " + "; ".join(differences))
    if report.mismatched:
        _say("some existing topics differ from topics/topics.toml; they were not changed")


@topics.command("describe")
@_kafka_options
@_prefix
def topics_describe(bootstrap, settings, prefix) -> None:
    """Print every declared topic: role, key, schema, and declared vs actual settings."""
    from rich.console import Console
    from rich.table import Table

    from streameval.topics import describe_topics, load_topics

    table = Table(title="streameval topics")
    for column in ("topic", "role", "key", "schema", "partitions", "configs (actual)"):
        table.add_column(column)
    admin, where = _admin(bootstrap, settings)
    with _kafka_errors(where):
        rows = describe_topics(admin, load_topics(prefix))
    for row in rows:
        partitions = f"{row['partitions']}" if row["exists"] else "missing"
        if row["exists"] and row["partitions"] != row["declared_partitions"]:
            partitions += f" (declared {row['declared_partitions']})"
        configs = ", ".join(
            f"{k}={v}"
            + (
                ""
                if v == row["declared_configs"][k]
                else f" (declared {row['declared_configs'][k]})"
            )
            for k, v in row["configs"].items()
        )
        table.add_row(
            row["name"],
            row["role"],
            row["key"],
            row["schema"] or "-",
            partitions,
            configs if row["exists"] else "-",
        )
    Console(width=None if sys.stdout.isatty() else 160).print(table)


@click.command()
@click.argument("events", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="STREAMEVAL_CONFIG",
    help="The evaluation settings ($STREAMEVAL_CONFIG): [time] says how ts is read, and "
    "whether record timestamps must carry it.",
)
@_kafka_options
@_prefix
def produce(events, config_path, bootstrap, settings, prefix) -> None:
    """Put an events file (the lines `streameval replay` reads) on the input topics.

    Each line goes to the topic of its type, keyed by its instance id, in file order; a
    malformed line stops it before anything is sent. Then run a worker on those topics.
    """
    from streameval.clients import ClientConfigError, client_config
    from streameval.config import ConfigError, load_config
    from streameval.produce import ProduceError, produce_file

    try:
        time = load_config(config_path).time
    except ConfigError as err:
        raise click.UsageError(str(err)) from None
    try:
        client = client_config(bootstrap, settings)
    except ClientConfigError as err:
        raise click.UsageError(str(err)) from None
    try:
        with _kafka_errors(client["bootstrap.servers"]):
            sent = produce_file(
                events,
                client,
                prefix,
                ts_unit=time.ts_unit,
                stamp_event_time=time.ts_source == "kafka",
            )
    except ProduceError as err:
        raise click.ClickException(str(err)) from None
    for topic in ("instances", "predictions", "labels"):
        click.echo(f"{sent[prefix + topic]:>9,}  {prefix}{topic}")
    click.echo(f"{sum(sent.values()):>9,}  records")
