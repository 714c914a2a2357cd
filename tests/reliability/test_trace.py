"""The fault campaign's trace of where outcomes went (tests/reliability/campaign.py,
:func:`follow`), on messages made here: the campaign only follows instances when a run has lost
outcomes, which a passing run never shows."""

from __future__ import annotations

from collections import Counter

import pytest
from streameval.app.changelog_format import STATE
from streameval.app.wire import (
    LABEL,
    PREDICTION,
    WIRE_VERSION,
    EventBatch,
    OutcomeBatch,
    Source,
    encode,
)
from streameval.core.outcome import Outcome, notice
from streameval.core.state import MEMORY, RECORD
from streameval.topics import Topics

from tests.reliability.campaign import follow

TOPICS = Topics.with_prefix("t.", "t.app")


def outcome(model: str, instance: str) -> Outcome:
    return Outcome(model, instance, "cat", (10,), ("cat",), 10, 20, 20)


def outcomes_message(partition: int, offset: int, batch_offset: int, *made: Outcome) -> tuple:
    batch = OutcomeBatch(WIRE_VERSION, 4, batch_offset, 20, list(made), part=1)
    return (TOPICS.outcomes, partition, offset, None, encode(batch))


def test_counts_missing_and_extra_outcomes_and_follows_the_missing_back():
    expected = Counter({("m1", "i1"): 1, ("m2", "i1"): 1, ("m1", "i2"): 1, ("m2", "i2"): 1})
    predicted = notice("m1", 0, 1, 999)  # the join's count of predicted instances
    outcomes = [
        outcomes_message(0, 7, 30, outcome("m1", "i1"), outcome("m2", "i1"), predicted),
        outcomes_message(1, 9, 31, outcome("m1", "i1"), outcome("m2", "i2")),
    ]
    events = EventBatch(
        WIRE_VERSION,
        [Source("t.labels", 0, 20, False), Source("t.predictions", 2, 10, False)],
        [
            (PREDICTION, "i2", "m1", 10, "cat", 1, 4219, None),
            (PREDICTION, "i1", "m1", 10, "cat", 1, 4220, None),
            (LABEL, "i2", "", 20, "cat", 0, 17, None),
        ],
    )
    rest = [
        (TOPICS.events, 5, 37, b"i2", encode(events)),
        (TOPICS.dead_letters, 0, 3, None, b'{"reason": "late", "instance_id": "i2"}'),
        (TOPICS.dead_letters, 0, 4, None, b'{"reason": "late", "instance_id": "i1"}'),
        (TOPICS.join_changelog, 3, 77, STATE + RECORD + b"i2", b"pending"),
        (TOPICS.join_changelog, 3, 80, STATE + RECORD + b"i2", None),
        (TOPICS.join_changelog, 3, 81, STATE + MEMORY + b"i2", b"kept"),
        (TOPICS.join_changelog, 3, 82, STATE + RECORD + b"i1", b"other"),
    ]

    report = follow(expected, outcomes, lambda: rest, TOPICS)

    assert report["outcomes_missing"] == 1 and report["outcomes_extra"] == 1
    assert report["missing"] == [
        "i2 (m1): prediction m1 from t.predictions[2]@4219 -> events[5]@37; "
        "label  from t.labels[0]@17 -> events[5]@37; "
        'dead-letters[0]@3: b\'{"reason": "late", "instance_id": "i2"}\'; '
        "join changelog[3]@77 p: 7 bytes; join changelog[3]@80 p: deleted; "
        "join changelog[3]@81 r: 4 bytes"
    ]
    assert report["extra"] == [
        "m1 i1: outcomes[0]@7 (join 4 batch 30.1); outcomes[1]@9 (join 4 batch 31.1)"
    ]


def test_reads_nothing_more_when_nothing_is_missing():
    def unread():
        pytest.fail("the other topics are read only to follow missing outcomes")

    outcomes = [outcomes_message(0, 0, 1, outcome("m1", "i1"), outcome("m1", "i1"))]
    report = follow(Counter({("m1", "i1"): 1}), outcomes, unread, TOPICS)
    assert report["outcomes_missing"] == 0 and report["missing"] == []
    assert report["outcomes_extra"] == 1 and report["extra"][0].startswith("m1 i1: outcomes[0]@0")


def test_an_instance_on_no_topic_says_so():
    report = follow(Counter({("m1", "i9"): 1}), [], lambda: [], TOPICS)
    assert report["missing"] == ["i9 (m1): not on the events topic"]
