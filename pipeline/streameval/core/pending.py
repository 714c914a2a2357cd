"""A pending instance as the join holds it, and the outcomes it resolves into.

One flat list per instance, the fewest objects per instance::

    [created, t_instance, has_record, label, label_ts, due, model, ts, label, model, ts, ...]

``created`` is the time of its first event (its expiry and eviction order); ``t_instance`` is
None until the instance record or a prediction gives it; ``has_record`` whether its instance
record came, and then its slice value (``slices.by``) when it had one, else True; ``label``,
``label_ts`` and ``due`` are set when the label comes, which resolves the instance at once (its
events up to then are all in). The predictions follow as (model_id, ts, label) triples; a
prediction with scores has ``[label, scores]`` in its label's place (a record written before
scores were kept is one without any). Model ids and string labels are interned, so a pending
instance shares them with every other one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from streameval.core.outcome import Label, Outcome, Scores, label_order

__all__ = [
    "CREATED",
    "DUE",
    "HAS_RECORD",
    "LABEL_",
    "LABEL_TS",
    "PREDICTIONS",
    "T_INSTANCE",
    "models_of",
    "plain",
    "queue_entries",
    "resolve_outcomes",
    "scores_of",
]

CREATED, T_INSTANCE, HAS_RECORD, LABEL_, LABEL_TS, DUE, PREDICTIONS = range(7)
#: builds an :class:`Outcome` from a tuple of its fields without the Python-level ``__new__``
_new_outcome = tuple.__new__
#: counts a dropped or odd record: (reason, model_id or None)
Count = Callable[..., None]


def queue_entries(record: list, label_ttl: int) -> list[tuple[str, int]]:
    """The time-queue entries (queue, time) a pending instance's record stands for: its
    expiry."""
    return [("expiry", record[CREATED] + label_ttl + 1)]


def plain(entry: Label | list) -> Label:
    """The label of a record's prediction entry (``label`` or ``[label, scores]``)."""
    return entry[0] if type(entry) is list else entry


def scores_of(entry: Label | list) -> Scores | None:
    """The scores of a record's prediction entry (None: it had none)."""
    return entry[1] if type(entry) is list else None


def models_of(record: list) -> list[str]:
    """The models that predicted, in order of their first prediction."""
    return list(dict.fromkeys(record[PREDICTIONS::3]))


def resolve_outcomes(
    instance_id: str, record: list, due: int, count: Count, out: list[Outcome]
) -> None:
    """Append to ``out`` the outcomes of a resolved instance's ``record``, one per model that
    predicted it in time; ``count`` what is dropped (leaky predictions, an orphan label, a
    label before its instance)."""
    label, label_ts = record[LABEL_], record[LABEL_TS]
    models = record[PREDICTIONS::3]
    part = record[HAS_RECORD]
    part = part if type(part) is str else None  # the instance's slice
    if models and len(set(models)) == len(models):
        times = record[PREDICTIONS + 1 :: 3]
        if max(times) <= label_ts:  # the common case: one prediction per model, in time
            t_instance = _instance_time(record, models, times, count)
            if t_instance is None:
                return
            labels = record[PREDICTIONS + 2 :: 3]
            for model_id, t, y in zip(models, times, labels, strict=True):
                if type(y) is list:  # with scores
                    y, scores = y[0], (y[1],)
                else:
                    scores = ()
                fields = (
                    model_id,
                    instance_id,
                    label,
                    (t,),
                    (y,),
                    t_instance,
                    label_ts,
                    due,
                    scores,
                    part,
                )
                out.append(_new_outcome(Outcome, fields))
            return
    _resolve_timelines(instance_id, record, due, count, out)


def _resolve_timelines(
    instance_id: str, record: list, due: int, count: Count, out: list[Outcome]
) -> None:
    """:func:`resolve_outcomes` in general: any model may have predicted several times, some
    predictions may be stamped after the label (late events)."""
    label, label_ts = record[LABEL_], record[LABEL_TS]
    kept_by_model: dict[str, list[tuple[int, Label]]] = {}
    for model_id, timeline in _timelines(record).items():
        if timeline[-1][0] <= label_ts:  # the common case: nothing stamped after the label
            kept_by_model[model_id] = timeline
            continue
        kept = [(t, y) for t, y in timeline if t <= label_ts]
        for _ in range(len(timeline) - len(kept)):
            count("leaky_prediction", model_id)
        if kept:
            kept_by_model[model_id] = kept
    if not kept_by_model:  # nobody predicted it (in time)
        count("orphan_label")
        return
    firsts = [kept[0][0] for kept in kept_by_model.values()]
    t_instance = _instance_time(record, kept_by_model, firsts, count)
    if t_instance is None:
        return
    for model_id, kept in kept_by_model.items():
        times, entries = zip(*kept, strict=True)
        labels = tuple(map(plain, entries))
        scores = tuple(map(scores_of, entries))
        if not any(s is not None for s in scores):
            scores = ()
        part = record[HAS_RECORD]
        fields = (
            model_id,
            instance_id,
            label,
            times,
            labels,
            t_instance,
            label_ts,
            due,
            scores,
            part if type(part) is str else None,
        )
        out.append(_new_outcome(Outcome, fields))


def _instance_time(
    record: list, models: Iterable[str], firsts: list[int], count: Count
) -> int | None:
    """The time of a resolved instance: its record's, else its first prediction that counts
    (``firsts``: each model's first). None, counted per model, if the label precedes it."""
    if not record[HAS_RECORD]:
        return min(firsts)
    if record[LABEL_TS] < record[T_INSTANCE]:
        for model_id in models:
            count("label_before_instance", model_id)
        return None
    return record[T_INSTANCE]


def _by_time_then_label(entry: tuple[int, Label | list]) -> tuple[int, tuple[int, Label]]:
    return entry[0], label_order(plain(entry[1]))


def _timelines(record: list) -> dict[str, list[tuple[int, Label]]]:
    """The predictions of a record per model (models in order of their first prediction),
    each timeline sorted by ``ts``, ties by :func:`label_order`."""
    timelines: dict[str, list[tuple[int, Label]]] = {}
    for i in range(PREDICTIONS, len(record), 3):
        entry = (record[i + 1], record[i + 2])
        timeline = timelines.get(record[i])
        if timeline is None:
            timelines[record[i]] = [entry]
        elif entry[0] <= timeline[-1][0]:  # out of order (a late event), or a tie: rare
            timeline.append(entry)
            timeline.sort(key=_by_time_then_label)
        else:
            timeline.append(entry)
    return timelines
