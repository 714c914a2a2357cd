"""Event time: which well-formed events may move the service's clocks.

Decoding (:mod:`streameval.schemas`) is about one message alone, its time included: ``ts`` in
``ts_unit`` or the Kafka timestamp, made epoch milliseconds (:func:`streameval.schemas.event_ms`).
Whether an event may enter the join at all depends on its event time against its partition's
progress, which the worker's router and ``streameval replay`` judge alike with
:class:`TimeRules`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from streameval.schemas import EventError

__all__ = ["NO_TS", "TimeRules"]

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
    the decoders take them (:class:`~streameval.schemas.BatchDecoder`,
    :func:`~streameval.schemas.decode_event`), and every time here is in milliseconds.

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
