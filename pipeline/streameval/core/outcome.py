"""What the join takes and gives: event rows in, outcomes out, and the order of labels by
which it breaks ties between records alike but for their label."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

__all__ = [
    "INSTANCE",
    "LABEL",
    "PREDICTION",
    "EventRow",
    "Outcome",
    "Scores",
    "is_notice",
    "label_order",
    "notice",
    "outcome_of",
    "scores_order",
]

Label = str | int
#: A prediction's scores as one value: ``(class, p, class, p, ...)``, classes in order
#: (streameval.codec.canonical_scores); a sequence of either kind, as msgpack gives it back.
Scores = tuple[Label | float, ...]
#: The kinds of event, as :class:`EventRow` and the worker's wire format carry them
INSTANCE, PREDICTION, LABEL = 0, 1, 2
#: (kind, instance_id, model_id or "", ts, label or "" — an instance's slice value, "" for
#: none —, source index, source offset, a prediction's scores or None)
EventRow = tuple[int, str, str, int, Label, int, int, Scores | None]


class Outcome(NamedTuple):
    """One resolved instance for one model.

    ``times`` and ``labels`` are the model's prediction timeline, oldest first, every entry
    stamped at or before the label: ``labels[0]`` is the initial prediction, ``labels[-1]`` the
    final one, anything between are re-predictions (the evolving predictions of Grzenda et al.);
    ``scores``, when any prediction had them, the probabilities of each.
    A named tuple: cheap to build by the million, and it travels between the worker's stages
    as a msgpack array as it is.
    """

    model_id: str
    instance_id: str
    y_true: Label
    times: tuple[int, ...]
    labels: tuple[Label, ...]
    t_instance: int
    t_label: int
    #: when the join resolved it on its clock (the label's time; for a label that came late,
    #: the clock when it came): with ``instance_id`` the key that orders outcomes
    due: int = 0
    #: the scores of each prediction of the timeline (None: it had none), or () when none had
    scores: tuple[Scores | None, ...] = ()
    #: the instance's slice (``slices.by`` of its instance record), None without one
    slice: str | None = None

    @property
    def initial(self) -> Label:
        return self.labels[0]

    @property
    def final(self) -> Label:
        return self.labels[-1]


def notice(model_id: str, second: int, count: int, due: int) -> Outcome:
    """A *notice*: ``count`` instances that the join saw ``model_id`` predict for the first
    time, their first prediction in the second starting at ``second`` (ms), applied by the join
    in the second that ends at ``due``. It travels and is ordered as an outcome (by ``due``,
    and an empty ``instance_id`` no instance has), so the evaluation counts exactly the
    predictions applied before a time (streameval.core.maturity); its empty timeline tells it
    from an outcome. A count may be negative: a late prediction that moved an instance's
    first prediction to another second takes it from the old one.

    >>> n = notice("m", 5_000, 3, 7_999)
    >>> is_notice(n), n.y_true, n.t_instance, n.due
    (True, 3, 5000, 7999)
    """
    return Outcome(model_id, "", count, (), (), second, due, due, ())


def is_notice(outcome: Outcome) -> bool:
    """Whether a row of an outcome stream is a :func:`notice` (an outcome has a prediction)."""
    return not outcome.times


def outcome_of(row: Sequence[Any]) -> Outcome:
    """An outcome from its fields as a checkpoint gives them back (lists for tuples); a row
    written before scores, or slices, were kept has none.

    >>> outcome_of(["m", "i1", "a", [3], ["b"], 3, 5, 5]).times
    (3,)
    """
    model_id, instance_id, y_true, times, labels, t_instance, t_label, due = row[:8]
    scores = tuple(None if s is None else tuple(s) for s in row[8]) if len(row) > 8 else ()
    part = row[9] if len(row) > 9 else None
    return Outcome(
        model_id,
        instance_id,
        y_true,
        tuple(times),
        tuple(labels),
        t_instance,
        t_label,
        due,
        scores,
        part,
    )


def label_order(label: Label) -> tuple[int, Label]:
    """A total order of labels, integers before strings: how the join orders records that are
    alike but for their label (two labels of one instance stamped alike, two predictions of one
    model stamped alike) — by content, never by which arrived first.

    >>> sorted(["b", 2, "a", 1], key=label_order)
    [1, 2, 'a', 'b']
    """
    return (1, label) if isinstance(label, str) else (0, label)


def scores_order(scores: Scores | None) -> tuple:
    """A total order of two predictions' scores alike but for them: none first, then by
    content (two predictions of one label name their classes alike)."""
    return () if scores is None else (1, *scores)
