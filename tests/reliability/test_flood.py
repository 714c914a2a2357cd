"""A flood of malformed input on a real broker: more than 100 000 bad records — the corpus of
realistic mistakes of ``streameval.simulate.malformed`` (wrong types, NaN and ∞, negative,
absurd and far-future timestamps, 1 MB values, invalid UTF-8, valid JSON of the wrong shape,
empty values, null keys) and values drawn by hypothesis strategies that cannot be events —
with 5 000 odd but well-formed ones (duplicates, conflicting labels, labels for unknown
instances) mixed into the streaming tests' stream. One worker reads it all: every bad record
reaches dead-letters once, with its reason; the worker never restarts; the numbers are those of
replay of the valid events alone."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from streameval.simulate.malformed import Record, mix

from tests.integration.test_worker import Deployment, _scrape, _series, reasons

pytestmark = [pytest.mark.kafka, pytest.mark.reliability]

BAD = 100_000
ANY_REASON = "*"  # drawn by hypothesis: a dead letter, whichever reason fits
WHITE = b" \t\r\n\xef\xbb\xbf"  # and the byte order mark

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),  # (orjson writes 64-bit integers)
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
json_values = st.recursive(
    scalars,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=8,
)
#: values no decoder may take for an event, whatever hypothesis draws
never_events = st.one_of(
    # bytes that are not a JSON object
    st.binary(min_size=1, max_size=80).filter(
        lambda b: not b.strip(b" \t\r\n\xef\xbb\xbf")[:1] == b"{"
    ),
    # JSON that is not an object
    json_values.filter(lambda v: not isinstance(v, dict)).map(orjson.dumps),
    # objects without an instance id
    st.dictionaries(
        st.text(max_size=12).filter(lambda k: k != "instance_id"), json_values, max_size=6
    ).map(orjson.dumps),
    # an event whose time is not an integer
    st.fixed_dictionaries(
        {
            "instance_id": st.text(min_size=1, max_size=20),
            "ts": st.one_of(
                st.text(max_size=10),
                st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: x != int(x)),
                st.booleans(),
                st.none(),
                st.lists(st.integers(0, 9), max_size=2),
            ),
            "label": st.text(min_size=1, max_size=5),
        }
    ).map(orjson.dumps),
    # truncated JSON of an object
    st.dictionaries(st.text(max_size=6), scalars, min_size=1, max_size=4)
    .map(orjson.dumps)
    .map(lambda b: b[:-1]),
)


def drawn(count: int) -> list[bytes]:
    """About ``count`` values of :data:`never_events`, the same every run."""
    out: list[bytes] = []

    @settings(
        max_examples=count // 10,
        database=None,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(never_events, min_size=5, max_size=15))
    def collect(values: list[bytes]) -> None:
        out.extend(values)

    collect()
    return out


def flood(stream, seed: int = 11) -> list[Record]:
    records = mix(replace(stream, malformed=0), bad=BAD, odd=5_000, oversized=3, seed=seed)
    rng = random.Random(seed)
    topics = ("instances", "predictions", "labels")
    start = len(records) // 20  # every input partition has some progress by then
    for value in drawn(12_000):
        at = rng.randrange(start, len(records))
        neighbour = records[at]
        key = rng.choice([None, rng.randbytes(6)])
        record = Record(rng.choice(topics), key, value, neighbour.timestamp, ANY_REASON)
        records.insert(at + 1, record)
    return records


def test_a_flood_of_malformed_records_changes_no_number(
    kafka_bootstrap, tmp_path, stream, expected
):
    records = flood(stream)
    deployment = Deployment(kafka_bootstrap, tmp_path, stream)
    try:
        landed = deployment.produce_records(records)
        bad = {where: code for where, code in landed.items() if code is not None}
        drawn_by_hypothesis = sum(r.expect == ANY_REASON for r in records)
        assert drawn_by_hypothesis >= 5_000
        assert len(bad) == BAD + 3 + drawn_by_hypothesis
        process, port = deployment.start_worker()
        assert deployment.wait_for(expected, timeout=300) == expected
        letters = deployment.dead_letters(len(bad), timeout=300)
        got = reasons(letters)
        assert len(letters) == len(bad)  # each once
        assert got.keys() == bad.keys()
        wrong = {w: (got[w], c) for w, c in bad.items() if c != ANY_REASON and got[w] != c}
        assert not wrong, list(wrong.items())[:10]
        text = _scrape(port)
        total = sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("streameval_dead_letters_total{")
        )
        assert total == len(bad)
        assert _series(text, "streameval_dropped_records_total", reason="duplicate_label") > 0
        assert process.poll() is None  # it never stopped...
        log = deployment.workers[0][2].read_text()
        assert "Traceback" not in log and "skipping" not in log, log[-3000:]
        assert log.count("worker " + deployment.prefix) == 1  # ...nor restarted
        print(Counter(got.values()).most_common())
        deployment.stop_all()
    finally:
        deployment.kill_all()
