"""Offline evaluation of an events file through the same engine the service runs.

``streameval replay EVENTS.jsonl`` reads one event per line, runs them in file order through
the join and the evaluators (:class:`streameval.engine.Engine`) and writes the records the
pipeline publishes — metrics, drift alarms, comparisons — as JSON lines.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from streameval.codec import (
    Event,
    InstanceEvent,
    LabelEvent,
    NotUtf8,
    PredictionEvent,
    decode_event,
    encode_record,
    event_lines,
)
from streameval.config import EvaluationConfig
from streameval.core.join import Join
from streameval.engine import Engine
from streameval.event_time import NO_TS, TimeRules
from streameval.messages import EventError
from streameval.records import Record

__all__ = ["MalformedLine", "NotUtf8", "ReplayResult", "replay"]

#: Events handed to the engine at a time (a line of the file is never split).
CHUNK = 2048


class MalformedLine(ValueError):
    """A line of the events file that is not a valid event (fatal with ``strict``)."""


@dataclass
class ReplayResult:
    """What a replay did: counts, the skipped lines and the last records of each kind."""

    lines: int = 0
    events: int = 0
    records: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    skipped_examples: list[tuple[int, str]] = field(default_factory=list)
    final_metrics: dict[tuple[str, str], Record] = field(default_factory=dict)
    final_comparisons: dict[str, Record] = field(default_factory=dict)
    final_maturity: dict[str, Record] = field(default_factory=dict)
    #: the latest metrics record of each slice of each model: (model, slice, view) -> record
    final_slices: dict[tuple[str, str, str], Record] = field(default_factory=dict)
    alarms: list[Record] = field(default_factory=list)
    join_counters: dict[str, int] = field(default_factory=dict)
    pending: int = 0  # instances still waiting for a label at the end
    rejected: dict[tuple[str, str], int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _events(
    lines: Iterator[bytes],
    result: ReplayResult,
    strict: bool,
    rules: TimeRules,
    now_ms: int,
    examples: int = 5,
) -> Iterator[Event]:
    """The valid events of the file, in order. A line that is no event, or whose event the
    time rules refuse (each type of event is one partition: the file has no others, nor Kafka
    timestamps, so ``now_ms`` stands for when every line was sent), is skipped and counted."""
    progress = dict.fromkeys((InstanceEvent, PredictionEvent, LabelEvent), NO_TS)
    check = rules.check

    def counted(lines: Iterator[bytes]) -> Iterator[bytes]:  # blank lines count too
        for number, line in enumerate(lines, start=1):
            result.lines = number
            yield line

    for number, line in event_lines(counted(lines)):  # each line as `produce` sends it
        try:
            event = decode_event(line, rules.ts_unit)
            kind = type(event)
            where = f"the file's {kind.__struct_config__.tag} lines"
            error = check(event.ts, progress[kind], None, now_ms, where)
            if error is not None:
                raise error
        except EventError as err:
            message = str(err)
            if strict:
                raise MalformedLine(f"line {number}: {message}") from None
            result.skipped[err.code] += 1
            if len(result.skipped_examples) < examples:
                result.skipped_examples.append((number, message))
            continue
        if event.ts > progress[kind]:
            progress[kind] = event.ts
        result.events += 1
        yield event


def replay(
    source: Path | IO[bytes],
    config: EvaluationConfig,
    out: IO[bytes],
    *,
    strict: bool = False,
    on_records: Callable[[list[Record]], None] | None = None,
    progress: Callable[[int], None] | None = None,
    now_ms: int | None = None,
    state_dir: Path | None = None,
    join_partitions: int = 1,
) -> ReplayResult:
    """Replay an events file; write every record to ``out`` as one JSON line.

    ``on_records`` sees every batch of records (for the plot); ``progress`` gets the number
    of bytes read so far. ``now_ms`` (epoch ms, default: the clock when the replay starts) is
    the present the time rules hold events to: nothing may be stamped later than it by more
    than ``join.max_future_ms``.

    ``join_partitions`` joins, each holding the instances the worker's join partition of that
    number would hold (``join.max_pending`` binds per partition, as in the worker); with a
    ``state_dir`` they hold them in disk stores there (a file of any size in bounded memory).
    """
    result = ReplayResult()
    j = config.join
    stores = []
    if state_dir is not None:
        from streameval.store import DiskState

        for q in range(join_partitions):
            DiskState.wipe(Path(state_dir) / f"join-{q}")
            stores.append(DiskState(Path(state_dir) / f"join-{q}"))
    joins = [
        Join(
            j.label_grace_ms,
            j.label_ttl_ms,
            j.max_pending,
            stores[q] if stores else None,
            notices=config.maturity.enabled,
        )
        for q in range(join_partitions)
    ]
    engine = Engine(config, joins)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    started = time.perf_counter()
    handle = source.open("rb") if isinstance(source, Path) else source
    try:
        lines = _counting(handle, progress)
        chunk: list[Event] = []
        for event in _events(lines, result, strict, config.time_rules(), now_ms):
            chunk.append(event)
            if len(chunk) >= CHUNK:
                _emit(engine.process(chunk), out, result, on_records)
                chunk = []
        _emit(engine.process(chunk), out, result, on_records)
        _emit(engine.finish(), out, result, on_records)
    finally:
        if isinstance(source, Path):
            handle.close()
    result.join_counters = dict(sum((join.counters for join in joins), Counter()))
    result.pending = sum(join.pending for join in joins)
    for store in stores:
        store.close()
    result.rejected = dict(engine.rejected)
    result.problems = (
        engine.misspelt_positives()
        + engine.unmatched_comparisons()
        + engine.unseen_models()
        + engine.unsliced()
        + list(engine.problems)
    )
    result.seconds = time.perf_counter() - started
    return result


def _counting(handle: IO[bytes], progress: Callable[[int], None] | None) -> Iterator[bytes]:
    read = 0
    for line in handle:
        read += len(line)
        if progress is not None and read & 0xFFFF < len(line):  # about every 64 KiB
            progress(read)
        yield line
    if progress is not None:
        progress(read)


def _emit(records, out, result: ReplayResult, on_records) -> None:
    if not records:
        return
    out.write(b"".join(encode_record(r) + b"\n" for r in records))
    for record in records:
        kind = record.kind
        result.records[kind] += 1
        if kind == "metrics":
            if record.slice is None:
                result.final_metrics[record.model_id, record.view] = record
            else:
                result.final_slices[record.model_id, record.slice, record.view] = record
        elif kind == "comparison":
            result.final_comparisons[record.pair] = record
        elif kind == "label_maturity":
            result.final_maturity[record.model_id] = record
        else:
            result.alarms.append(record)
    if on_records is not None:
        on_records(records)
