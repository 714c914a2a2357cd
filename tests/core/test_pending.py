"""A pending instance's record and the outcomes it resolves into."""

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from streameval.core.outcome import Outcome
from streameval.core.pending import _resolve_timelines, resolve_outcomes


def _counter():
    counts = Counter()

    def count(reason, model_id=None):
        counts[reason, model_id] += 1

    return counts, count


@settings(max_examples=300, deadline=None)
@given(
    predictions=st.lists(
        st.tuples(st.sampled_from(["m", "n", "o"]), st.integers(0, 20), st.sampled_from("ab")),
        max_size=6,
    ),
    has_record=st.booleans(),
    t_instance=st.integers(0, 20),
    label_ts=st.integers(0, 20),
)
def test_the_common_case_resolves_as_the_general_rule(
    predictions, has_record, t_instance, label_ts
):
    """One prediction per model, all in time, takes a shortcut in ``resolve_outcomes``: it
    gives the outcomes and counts of the general rule (``_resolve_timelines``)."""
    if not has_record:
        t_instance = min((t for _, t, _ in predictions), default=None)
    record = [0, t_instance, has_record, "a", label_ts, label_ts]
    for prediction in predictions:
        record += prediction
    (fast, count_fast), (general, count_general) = _counter(), _counter()
    out_fast, out_general = [], []
    resolve_outcomes("i", list(record), label_ts, count_fast, out_fast)
    _resolve_timelines("i", list(record), label_ts, count_general, out_general)
    assert out_fast == out_general
    assert [type(o) for o in out_fast] == [Outcome] * len(out_fast)
    assert fast == general
