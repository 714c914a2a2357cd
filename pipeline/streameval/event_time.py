"""Event time: the unit it comes in, and which well-formed events may move the clocks.

An event's time is epoch milliseconds: its ``ts`` in ``[time] ts_unit`` (:func:`event_ms`) or
its message's Kafka timestamp (:func:`kafka_ms`), refused unless it is a plausible date — the
one rule of the worker's decoders and replay's (:mod:`streameval.codec`). Whether an event
may then enter the join depends on its time against its partition's progress, which the
worker's router and ``streameval replay`` judge alike with :class:`TimeRules`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from streameval.messages import NO_TIMESTAMP, EventError
from streameval.records import MAX_TS, MIN_TS

__all__ = ["NO_TS", "TS_UNITS", "TimeRules", "event_ms", "kafka_ms"]

#: ``[time] ts_unit``: the units ``ts`` may come in, with their names and sizes in nanoseconds
TS_UNITS = {
    "s": ("seconds", 10**9),
    "ms": ("milliseconds", 10**6),
    "us": ("microseconds", 10**3),
    "ns": ("nanoseconds", 1),
}


_KAFKA_TS = ' (record timestamps are epoch ms; [time] ts_source = "kafka" reads event time there)'


def _date(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def event_ms(ts: int, unit: str = "ms", kafka: bool = False) -> int:
    """``ts``, a time in ``unit``, as epoch milliseconds — if it is a date from 1973-03-03 to
    2200-01-01 (:data:`MIN_TS` .. :data:`MAX_TS` in ms). Else :class:`EventError`, saying in
    which unit it would be a date and what to do; ``kafka``: ``ts`` is a Kafka timestamp
    (milliseconds by the protocol: only its producer can fix it).

    The one rule of the worker's decoder and replay's, so that they refuse the same events.
    The units' ranges are 1000 times apart and each spans a factor of 73, so a value can be a
    date in one unit only: today is about 1.8e9 in seconds, 1.8e12 in ms, 1.8e15 in µs.

    >>> event_ms(1_767_225_600, "s")
    1767225600000
    >>> event_ms(1_767_225_600)
    Traceback (most recent call last):
    ...
    streameval.messages.EventError: ts 1767225600 looks like seconds, not milliseconds (2026-01-01 00:00:00 UTC in seconds): multiply it by 1000 at the producer, or set [time] ts_unit = "s"
    """  # noqa: E501
    name, size = TS_UNITS[unit]
    ms = ts * size // 1_000_000
    if MIN_TS <= ms <= MAX_TS:
        return ms
    what = "the Kafka timestamp" if kafka else "ts"
    for other, (other_name, other_size) in TS_UNITS.items():
        as_ms = ts * other_size // 1_000_000
        if other != unit and MIN_TS <= as_ms <= MAX_TS:
            factor = other_size // size or size // other_size
            fix = f"{'multiply' if other_size > size else 'divide'} it by {factor} at the producer"
            fix += _KAFKA_TS if kafka else f', or set [time] ts_unit = "{other}"'
            raise EventError(
                f"{what} {ts} looks like {other_name}, not {name} ({_date(as_ms)} in "
                f"{other_name}): {fix}",
                "wrong_ts_unit",
            )
    raise EventError(
        f"{what} {ts} is no date from 1973-03-03 to 2200-01-01, in {name} or any other unit: "
        f"send the epoch time of the event in {name}"
        + (_KAFKA_TS if kafka else f' ([time] ts_unit = "{unit}")'),
        "bad_timestamp",
    )


def kafka_ms(timestamp: tuple[int, int]) -> int:
    """Event time from a message's Kafka timestamp (``Message.timestamp()``), for
    ``[time] ts_source = "kafka"``; :class:`EventError` if it has none or no plausible one."""
    stamped, ms = timestamp
    if stamped == NO_TIMESTAMP:
        raise EventError(
            'the message has no Kafka timestamp, and [time] ts_source = "kafka" reads event '
            "time from it: send it with one (the producer's send time, or timestamp=), or put "
            'ts in the message and set ts_source = "field"',
            "no_timestamp",
        )
    return event_ms(ms, "ms", kafka=True)


#: "nothing seen yet" for the progress (largest ``ts``) of an input partition
NO_TS = -(2**62)


def _iso(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"


@dataclass(frozen=True)
class TimeRules:
    """Which well-formed events may enter the join, by their event time.

    Event time drives every clock of the service (the join's grace and TTL, the watermark,
    the order of outcomes), so one wrong ``ts`` could otherwise move them all. Two rules, the
    same in the worker's router and in ``streameval replay``:

    * **in the future** — ``ts`` later than the time the message was sent (its Kafka
      timestamp; the present when there is none, as in replay), by more than
      ``max_future_ms``: nothing can have happened after it was reported. This is Kafka's own
      rule for record timestamps (``message.timestamp.after.max.ms``, 1 hour since Kafka 4.0).
    * **too old** — ``ts`` more than ``max_age_ms`` (the join's ``label_ttl_ms``) before the
      latest accepted event of its input partition (in replay: of its type): the join would
      have forgotten everything such an event could join.

    A refused event is a dead letter (``ts_in_future``, ``ts_too_old``); it moves no progress,
    no watermark and no clock. An event that passes both moves its partition's progress to
    its ``ts`` if that is later.

    ``ts_unit`` and ``ts_source`` say how event time is read (``[time]`` of the settings):
    the decoders take them (:class:`~streameval.codec.BatchDecoder`,
    :func:`~streameval.codec.decode_event`), and every time here is in milliseconds.

    Examples
    --------
    >>> rules = TimeRules(max_future_ms=3_600_000, max_age_ms=86_400_000)
    >>> now = 1_767_225_600_000                            # 2026-01-01
    >>> rules.check(now - 5, progress=now - 10, sent_ms=now, now_ms=now) is None
    True
    >>> rules.check(now + 7_200_000, progress=now, sent_ms=now, now_ms=now).code
    'ts_in_future'
    >>> rules.check(now - 2 * 86_400_000, progress=now, sent_ms=now, now_ms=now).code
    'ts_too_old'
    """

    max_future_ms: int
    max_age_ms: int
    ts_unit: str = "ms"
    ts_source: str = "field"

    @staticmethod
    def sent(sent_ms: int | None, now_ms: int) -> int:
        """When a message was sent: its Kafka timestamp, or the present if it has none (or
        one later than the present)."""
        return sent_ms if sent_ms is not None and 0 < sent_ms <= now_ms else now_ms

    def check(
        self, ts: int, progress: int, sent_ms: int | None, now_ms: int, where: str = "its partition"
    ) -> EventError | None:
        """None if an event at ``ts`` may enter, given its partition's ``progress``; else
        why not."""
        if ts > progress:
            sent = self.sent(sent_ms, now_ms)
            if ts > sent + self.max_future_ms:
                when = "the message was sent" if sent == sent_ms else "now"
                return EventError(
                    f"ts {ts} ({_iso(ts)}) is {_span(ts - sent)} after {when} ({_iso(sent)}): "
                    "event times are epoch milliseconds of when the event happened, and may run "
                    f"ahead of that by at most join.max_future_ms = {self.max_future_ms}",
                    "ts_in_future",
                )
        elif ts < progress - self.max_age_ms:
            return EventError(
                f"ts {ts} ({_iso(ts)}) is {_span(progress - ts)} older than the latest event so "
                f"far of {where} ({_iso(progress)}): a partition carries its events in time "
                f"order, give or take join.label_ttl_ms = {self.max_age_ms}, and nothing an "
                "event that old could join is still held",
                "ts_too_old",
            )
        return None


def _span(ms: int) -> str:
    for unit, size in (("days", 86_400_000), ("hours", 3_600_000), ("minutes", 60_000)):
        if ms >= 2 * size:
            return f"{ms / size:,.1f} {unit}"
    return f"{ms:,} ms"
