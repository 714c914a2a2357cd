"""Malformed and odd input records mixed into a valid stream: what real producers send.

A test of the service's promise on bad input: every malformed record goes to the dead-letter
topic with a reason, every odd but well-formed one (a duplicate, a conflicting label, a label
for an instance nobody predicted) is counted and ignored, and the numbers are those of the
valid stream alone. :func:`mix` builds such a stream; each record says what it must become
(the dead-letter reason code it must get, or None for an event), so a test can check the
verdict record by record.

The valid stream's records are sent with their delivery time as Kafka timestamp (what a live
producer's clock gives, and what a backfill keeps when it sends each record with the time of
its event) and keyed at random — the service may not rely on producers keying by
``instance_id`` —, one in 50 starts with a UTF-8 byte order mark (tolerated), and every bad
record is sent at the time of the valid record it follows.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from streameval.messages import BOM
from streameval.simulate.scripted import TOPIC_OF, ScriptedStream

__all__ = ["BAD_KINDS", "ODD_KINDS", "Record", "mix"]

DAY = 86_400_000


@dataclass(frozen=True)
class Record:
    """One input record: its topic (without prefix), key, value and Kafka timestamp."""

    topic: str
    key: bytes | None
    value: bytes | None
    timestamp: int
    #: the dead-letter reason code it must get, or None: an event (valid or odd)
    expect: str | None = None
    #: for an odd event, which kind of odd (:data:`ODD_KINDS`)
    odd: str | None = None


def _dumps(fields: dict[str, Any]) -> bytes:
    return orjson.dumps(fields)


def _deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


# Each maker: (rng, the valid event it follows, its send time) -> (topic, value, reason code)
Maker = Callable[[random.Random, dict[str, Any], int], tuple[str, bytes | None, str]]

BAD_KINDS: dict[str, Maker] = {
    # the two poison pills of the landed worker
    "utf8_instance": lambda r, e, t: (
        "instances",
        b'{"type":"instance","instance_id":"bad\xff\xfe","ts":%d}' % t,
        "invalid_utf8",
    ),
    "utf8_model": lambda r, e, t: (
        "predictions",
        b'{"instance_id":"%s","model_id":"m\xc3\x28","ts":%d,"label":"no"}'
        % (e["instance_id"].encode(), t),
        "invalid_utf8",
    ),
    "deep_features": lambda r, e, t: (
        "instances",
        b'{"instance_id":"deep-%d","ts":%d,"features":{"x":%s}}'
        % (r.randrange(10**6), t, _deep(r.choice([65, 2_000, 20_000]))),
        "too_deep",
    ),
    # not JSON
    "truncated": lambda r, e, t: ("labels", _dumps(e)[: r.randint(1, 20)], "invalid_json"),
    "nan": lambda r, e, t: ("labels", b'{"instance_id":"x","ts":NaN,"label":1}', "invalid_json"),
    "infinity": lambda r, e, t: (
        "predictions",
        b'{"instance_id":"x","model_id":"m","ts":%d,"label":1,"scores":{"a":Infinity}}' % t,
        "invalid_json",
    ),
    "garbage": lambda r, e, t: (
        r.choice(list(TOPIC_OF.values())),
        b"<" + r.randbytes(r.randint(0, 64)),
        "invalid_json",
    ),
    "trailing": lambda r, e, t: (
        "instances",
        _dumps({"instance_id": "i", "ts": t}) + b"}",
        "invalid_json",
    ),
    "empty": lambda r, e, t: ("labels", b"", "invalid_json"),
    "schema_registry": lambda r, e, t: (
        TOPIC_OF[e["type"]],
        b"\x00" + r.randrange(2**31).to_bytes(4, "big") + _dumps(e),
        "schema_registry",
    ),
    "lone_surrogate": lambda r, e, t: (
        "labels",
        b'{"instance_id":"x\\ud800","ts":%d,"label":1}' % t,
        "invalid_json",
    ),
    # JSON of the wrong shape
    "array": lambda r, e, t: ("predictions", b"[1, 2, 3]", "not_an_object"),
    "null": lambda r, e, t: ("instances", b"null", "not_an_object"),
    "string": lambda r, e, t: ("labels", b'"a label"', "not_an_object"),
    "no_label": lambda r, e, t: (
        "predictions",
        _dumps({"instance_id": e["instance_id"], "model_id": "champion", "ts": t}),
        "missing_field",
    ),
    "no_ts": lambda r, e, t: (
        "labels",
        _dumps({"instance_id": e["instance_id"], "label": "no"}),
        "missing_field",
    ),
    "extra_field": lambda r, e, t: (
        "predictions",
        _dumps(
            {
                "instance_id": e["instance_id"],
                "model_id": "champion",
                "ts": t,
                "label": "no",
                "confidence": 0.9,
            }
        ),
        "unknown_field",
    ),
    "prediction_on_instances": lambda r, e, t: (
        "instances",
        _dumps({"instance_id": e["instance_id"], "model_id": "champion", "ts": t, "label": "no"}),
        "wrong_topic",
    ),
    "prediction_on_labels": lambda r, e, t: (
        "labels",
        _dumps({"instance_id": e["instance_id"], "model_id": "champion", "ts": t, "label": "no"}),
        "wrong_topic",
    ),
    "wrong_type_tag": lambda r, e, t: (
        "predictions",
        _dumps(
            {
                "type": "label",
                "instance_id": e["instance_id"],
                "model_id": "champion",
                "ts": t,
                "label": "no",
            }
        ),
        "unknown_type",
    ),
    "unknown_type_tag": lambda r, e, t: (
        "labels",
        _dumps({"type": "feedback", "instance_id": "x", "ts": t, "label": 1}),
        "unknown_type",
    ),
    "ts_string": lambda r, e, t: (
        "labels",
        _dumps({"instance_id": e["instance_id"], "ts": str(t), "label": "no"}),
        "wrong_type",
    ),
    "ts_float": lambda r, e, t: (
        "instances",
        _dumps({"instance_id": "f", "ts": t + 0.5}),
        "wrong_type",
    ),
    "label_bool": lambda r, e, t: (
        "labels",
        _dumps({"instance_id": e["instance_id"], "ts": t, "label": True}),
        "wrong_type",
    ),
    "label_list": lambda r, e, t: (
        "predictions",
        _dumps({"instance_id": "x", "model_id": "m", "ts": t, "label": ["no"]}),
        "wrong_type",
    ),
    "id_number": lambda r, e, t: ("instances", _dumps({"instance_id": 42, "ts": t}), "wrong_type"),
    "features_list": lambda r, e, t: (
        "instances",
        _dumps({"instance_id": "x", "ts": t, "features": [1, 2]}),
        "wrong_type",
    ),
    "score_text": lambda r, e, t: (
        "predictions",
        _dumps({"instance_id": "x", "model_id": "m", "ts": t, "label": 1, "scores": {"a": "hi"}}),
        "wrong_type",
    ),
    "empty_id": lambda r, e, t: (
        "labels",
        _dumps({"instance_id": "", "ts": t, "label": "no"}),
        "empty_value",
    ),
    "empty_model": lambda r, e, t: (
        "predictions",
        _dumps({"instance_id": e["instance_id"], "model_id": "", "ts": t, "label": "no"}),
        "empty_value",
    ),
    "ts_negative": lambda r, e, t: (
        "instances",
        _dumps({"instance_id": e["instance_id"], "ts": -t}),
        "bad_timestamp",
    ),
    "ts_microseconds": lambda r, e, t: (
        "predictions",
        _dumps(
            {"instance_id": e["instance_id"], "model_id": "champion", "ts": t * 1000, "label": "no"}
        ),
        "wrong_ts_unit",
    ),
    "ts_seconds": lambda r, e, t: (
        "labels",
        _dumps({"instance_id": e["instance_id"], "ts": t // 1000, "label": "yes"}),
        "wrong_ts_unit",
    ),
    "ts_zero": lambda r, e, t: (
        "instances",
        _dumps({"instance_id": e["instance_id"], "ts": 0}),
        "bad_timestamp",
    ),
    "label_huge": lambda r, e, t: (
        "labels",
        b'{"instance_id":"%s","ts":%d,"label":%d}' % (e["instance_id"].encode(), t, 2**70),
        "bad_label",
    ),
    "id_too_long": lambda r, e, t: (
        "labels",
        _dumps({"instance_id": "i" * r.randint(513, 2_000), "ts": t, "label": "no"}),
        "too_long",
    ),
    "score_overflow": lambda r, e, t: (
        "predictions",
        b'{"instance_id":"%s","model_id":"champion","ts":%d,"label":"no","scores":{"no":1e400}}'
        % (e["instance_id"].encode(), t),
        "bad_scores",
    ),
    "tombstone": lambda r, e, t: ("predictions", None, "empty_message"),
    # well-formed, but its event time would move the clocks
    "ts_hours_ahead": lambda r, e, t: (
        "labels",
        _dumps(
            {"instance_id": e["instance_id"], "ts": t + r.randint(2, 48) * 3_600_000, "label": "no"}
        ),
        "ts_in_future",
    ),
    "ts_year_2150": lambda r, e, t: (
        "predictions",
        _dumps(
            {
                "instance_id": e["instance_id"],
                "model_id": "champion",
                "ts": 5_680_281_600_000,
                "label": "yes",
            }
        ),
        "ts_in_future",
    ),
    "ts_month_old": lambda r, e, t: (
        "predictions",
        _dumps(
            {
                "instance_id": e["instance_id"],
                "model_id": "challenger",
                "ts": t - 30 * DAY,
                "label": "yes",
            }
        ),
        "ts_too_old",
    ),
}
#: 1 MB and more: sent only when asked for (the input topics must allow them)
OVERSIZED: Maker = lambda r, e, t: (  # noqa: E731
    "predictions",
    b'{"instance_id":"big","model_id":"m","ts":%d,"label":"%s"}' % (t, b"x" * 1_100_000),
    "oversized",
)

#: well-formed records that the join counts and ignores (none may change a number)
ODD_KINDS = ("duplicate", "conflicting_label", "unknown_instance_label", "later_instance_record")


def _odd(
    rng: random.Random, kind: str, event: dict[str, Any], when: int
) -> tuple[str, dict[str, Any]] | None:
    """An odd copy of ``event`` (None if this kind does not apply to it)."""
    if kind == "duplicate":
        return TOPIC_OF[event["type"]], dict(event)
    if kind == "conflicting_label" and event["type"] == "label":
        other = "yes" if event["label"] == "no" else "no"
        return "labels", {**event, "ts": event["ts"] + rng.randint(1, 400), "label": other}
    if kind == "unknown_instance_label":
        return "labels", {
            "instance_id": f"ghost-{rng.randrange(10**9)}",
            "ts": when,
            "label": rng.choice(["yes", "no"]),
        }
    if kind == "later_instance_record" and event["type"] == "instance":
        return "instances", {**event, "ts": event["ts"] + rng.randint(1, 3_000)}
    return None


def _key(rng: random.Random, event: dict[str, Any]) -> bytes | None:
    """Any key a producer might use: none, the instance id, something unrelated."""
    roll = rng.random()
    if roll < 0.2:
        return None
    if roll < 0.5:
        return str(event.get("instance_id", "")).encode()
    return rng.randbytes(rng.randint(1, 12))


def mix(
    stream: ScriptedStream,
    bad: int = 10_000,
    odd: int = 2_000,
    *,
    oversized: int = 0,
    settle: int = 100,
    seed: int = 0,
) -> list[Record]:
    """The stream's records with ``bad`` malformed records (every kind of :data:`BAD_KINDS`,
    the poison pills first) and ``odd`` odd ones mixed in, in delivery order.

    Nothing bad comes before ``settle`` records of every topic, so that every input partition
    has some progress by then: a partition's very first event has nothing to be judged
    against. Odd records follow the event they copy (a duplicate arrives after the original,
    a conflicting label is stamped after the true one).
    """
    rng = random.Random(seed)
    timeline = stream.events()
    valid = [
        Record(
            TOPIC_OF[event["type"]],
            _key(rng, event),
            (BOM if n % 50 == 7 else b"") + orjson.dumps(event),
            int(when),
        )
        for n, (when, _, event) in enumerate(timeline)
    ]
    inserts: dict[int, list[Record]] = {}
    seen = dict.fromkeys(TOPIC_OF.values(), 0)
    start = 0
    while start < len(valid) and min(seen.values()) < settle:
        seen[valid[start].topic] += 1
        start += 1
    kinds = list(BAD_KINDS.items())
    for n in range(bad + oversized):
        at = rng.randrange(start, len(timeline))
        when, _, event = timeline[at]
        maker = OVERSIZED if n >= bad else kinds[n % len(kinds)][1]
        if n < len(kinds):  # one of each kind early: a poison pill must not hide at the end
            at = start + n
            when, _, event = timeline[at]
        topic, value, code = maker(rng, event, int(when))
        inserts.setdefault(at, []).append(Record(topic, _key(rng, event), value, int(when), code))
    made = 0
    while made < odd:
        at = rng.randrange(start, len(timeline))
        kind = ODD_KINDS[made % len(ODD_KINDS)]
        when, _, event = timeline[at]
        copy = _odd(rng, kind, event, int(when))
        if copy is None:
            continue
        topic, fields = copy
        later = rng.randrange(at, min(len(timeline), at + 200))  # delivered a little later
        sent = max(int(timeline[later][0]), fields["ts"])
        record = Record(topic, _key(rng, fields), orjson.dumps(fields), sent, None, kind)
        # keep delivery order: after the record it copies, at the latest delivery time needed
        while later + 1 < len(timeline) and timeline[later + 1][0] <= sent:
            later += 1
        inserts.setdefault(later, []).append(record)
        made += 1
    out: list[Record] = []
    for index, record in enumerate(valid):
        out.append(record)
        out.extend(inserts.get(index, ()))
    return out
