"""The evaluation engine: decoded events in, the records the service publishes out.

Pure and deterministic (no I/O, no clock): the join, one :class:`ModelEvaluator` per model,
one :class:`PairEvaluator` per configured comparison, and the publishing cadence. ``replay``
drives it from a file; the streaming worker drives the same class from Kafka, which is why the
two give identical numbers for the same events in the same order.

Cadence: a metrics record per model and view every ``publish_every`` outcomes of that model
(at exactly n = k·publish_every, whatever the batch sizes), a comparison record every
``publish_every`` paired instances, a drift alarm the moment one fires, and one final record of
each kind from :meth:`Engine.finish`. Every record's ``ts`` is event time (the label time of the
last outcome it covers), so the output does not depend on when it was computed. A
label-maturity record per model each ``maturity.every_ms`` of event time in which the model
had an outcome or a newly predicted instance: as of the boundary ``B`` its stream crossed
(``ts`` = B), it counts what was predicted and labelled before B
(:mod:`streameval.core.maturity`).
"""

from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict, deque
from collections.abc import Iterable
from operator import itemgetter
from typing import Any

import msgspec
import numpy as np

from streameval.advice import closest
from streameval.codec import (
    Event,
    InstanceEvent,
    LabelEvent,
    PredictionEvent,
    canonical_scores,
    slice_value,
)
from streameval.config import EvaluationConfig
from streameval.core.alarm import Alarm
from streameval.core.join import Join, join_partition
from streameval.core.labels import LabelClash
from streameval.core.maturity import LabelMaturity
from streameval.core.model import ModelEvaluator
from streameval.core.outcome import INSTANCE, LABEL, PREDICTION, Outcome
from streameval.core.pair import PairEvaluator
from streameval.core.sliced import OTHER, SlicedModel, slice_key
from streameval.core.slices import SliceTracker
from streameval.records import (
    ClassDelay,
    ComparisonRecord,
    DelayTest,
    DriftAlarmRecord,
    FinalMetricsRecord,
    InitialMetricsRecord,
    LabelMaturityRecord,
    Latency,
    PairMeasures,
    Record,
)

__all__ = ["Engine"]


def _alarm_record(model_id: str, alarm: Alarm) -> DriftAlarmRecord:
    """The record of an alarm of a :class:`ModelEvaluator` (whose ``at`` and ``change_at`` are
    ``(instance_id, t_instance, t_label)``)."""
    instance_id, t_instance, t_label = alarm.at
    change_id, change_instance_ts, change_ts = alarm.change_at or (None, None, None)
    return DriftAlarmRecord(
        "drift_alarm",
        model_id,
        t_label,
        "final",
        alarm.detector,
        alarm.statistic,
        alarm.threshold,
        alarm.index,
        alarm.estimate,
        instance_id,
        t_instance,
        alarm.change_index,
        change_ts,
        change_id,
        change_instance_ts,
        alarm.estimate_before,
        alarm.estimate_after,
        alarm.settings,
    )


def _resolution_order(outcome: Outcome) -> tuple[int, str, str]:
    return outcome.due, outcome.instance_id, outcome.model_id


_due = itemgetter(7)  # Outcome.due


def _refusal(outcome: Outcome, err: ValueError) -> str:
    """The reason a model refused ``outcome`` (a label of ``streameval_dropped_records_total``
    in the worker)."""
    if outcome.t_label < outcome.t_instance:  # (the join drops such labels; outcomes built
        return "label_before_instance"  # elsewhere may not)
    return "label_type_clash" if isinstance(err, LabelClash) else "class_limit"


def _positive_clash(model: ModelEvaluator, outcome: Outcome) -> str | None:
    """What to say when a refused outcome's class differs from the model's configured
    ``positive_label`` by its type alone (TOML's ``positive_label = 1``, labels ``"1"``): the
    configuration is what to change, not the labels. None otherwise."""
    positive = model.positive_label
    if positive is None:
        return None
    if any(type(c) is type(positive) for c in model.classes if c != positive):
        return None  # the model has labels of its type: the data mixes types, not the config
    for label in (outcome.y_true, *outcome.labels):
        if type(label) is not type(positive) and str(label) == str(positive):
            written = msgspec.json.encode(label).decode()
            return (
                f"its labels come as {written} but its positive_label is {positive!r}, which "
                f"would be the same class name on the wire; write positive_label = {written} "
                f"in {_table_of(model.model_id)}"
            )
    return None


def _table_of(model_id: str) -> str:
    """A model's table in the configuration file, its id a bare TOML key if it may be."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", model_id):
        model_id = msgspec.json.encode(model_id).decode()
    return f"[models.{model_id}]"


class Engine:
    """Join, evaluate, compare and publish, for every model seen in the events."""

    def __init__(self, config: EvaluationConfig, join: Join | list[Join] | None = None) -> None:
        """``join``: the join :meth:`process` feeds (a new in-memory one by default), or one
        per join partition, instances routed among them as the worker routes them; the
        streaming worker's evaluation stage, whose outcomes come joined, passes none."""
        self.config = config
        j = config.join
        if join is None:
            join = Join(
                j.label_grace_ms,
                j.label_ttl_ms,
                j.max_pending,
                notices=config.maturity.enabled,
            )
        self.joins = join if isinstance(join, list) else [join]
        self.join = self.joins[0]
        for each in self.joins:  # the configuration says whether they count predictions
            if config.maturity.enabled != (each.notices is not None):
                each.notices = {} if config.maturity.enabled else None
        self.models: dict[str, ModelEvaluator] = {}
        specs = config.estimator_specs
        self.pairs = {f"{p.a}|{p.b}": PairEvaluator(p.a, p.b, specs) for p in config.comparisons}
        self._pair_last_ts: dict[str, int] = {}
        self._model_last_ts: dict[str, int] = {}
        self._published: dict[str, int] = {}  # model or pair -> n of its latest record
        #: label maturity per model, and where the maturity tick (every_ms of event time) of
        #: the model's latest outcome or notice begins: a record is due when its stream
        #: enters a later tick
        self.maturity: dict[str, LabelMaturity] = {}
        self._tick: dict[str, int] = {}
        #: each model's slices (``slices.by``)
        self.slices: dict[str, SlicedModel] = {}
        #: since when (event time) label maturity has been counted: None, from the start; -1,
        #: from the first row after a restore of a state that did not count it (set then)
        self._counted_from: int | None = None
        #: models whose maturity must count from the next cohort when it starts again (its
        #: state was reset while predictions of it were pending)
        self._late: set[str] = set()
        self._now = 0
        self.alarms = 0
        #: outcomes a model refused, by (model, reason), and the latest reasons as text
        self.rejected: Counter[tuple[str, str]] = Counter()
        self.problems: deque[str] = deque(maxlen=10)
        #: each model's latest refusal as text, and how many since the caller last took
        #: them (the worker's log)
        self.refusals: dict[str, tuple[str, int]] = {}
        #: how many classes each model had when :meth:`misspelt_positives` last looked
        self._looked: dict[str, int] = {}
        #: models and pairs updated since the caller last emptied it (checkpoints)
        self.touched: set[str] = set()

    def unmatched_comparisons(self, least: int = 0) -> list[str]:
        """A sentence for each configured comparison a model of which has had no outcome:
        it makes no record (a misspelt model id, most often), which would otherwise pass
        unnoticed. ``least``: only comparisons whose other model has had at least this many
        (a stream that has only begun says nothing yet).

        >>> from streameval.config import load_config
        >>> engine = Engine(load_config(comparisons=[{"a": "champion", "b": "challanger"}]))
        >>> print(engine.unmatched_comparisons()[0][:70])
        comparison champion vs challanger: no outcome of 'champion', 'challang
        """
        seen = sorted(self.models)
        out = []
        for pair in self.pairs.values():
            missing = [m for m in (pair.model_a, pair.model_b) if m not in self.models]
            most = max(
                (self.models[m].n for m in (pair.model_a, pair.model_b) if m in self.models),
                default=0,
            )
            if missing and most >= least:
                out.append(
                    f"comparison {pair.model_a} vs {pair.model_b}: no outcome of "
                    f"{', '.join(repr(m) for m in missing)} (models seen: "
                    f"{', '.join(seen) or 'none'}); it makes no record until both have "
                    "outcomes — check the model ids in [[comparisons]]"
                )
        return out

    def unseen_models(self) -> list[str]:
        """A sentence for each model of the ``[models]`` tables that has had no outcome, with
        the model seen whose id is closest: a misspelt id leaves its settings (positive label,
        costs) to no model without a word. For a whole stream (replay): in the worker each
        evaluation partition sees only its own models.

        >>> from streameval.config import load_config
        >>> from streameval.codec import LabelEvent, PredictionEvent
        >>> engine = Engine(load_config(models={"champoin": {"positive_label": "yes"}}))
        >>> _ = engine.process([PredictionEvent("i", "champion", 10**12, "yes"),
        ...                     LabelEvent("i", 10**12 + 5, "no")])
        >>> _ = engine.finish()
        >>> print(engine.unseen_models()[0])
        [models] 'champoin': no outcome of that model (models seen: champion); its settings apply to no model: did you mean 'champion'?
        """  # noqa: E501
        seen = sorted(self.models)
        out = []
        for model_id in self.config.models:
            if model_id not in self.models:
                near = closest(model_id, seen)
                out.append(
                    f"[models] {model_id!r}: no outcome of that model (models seen: "
                    f"{', '.join(seen) or 'none'}); its settings apply to no model"
                    + (f": did you mean {near!r}?" if near is not None else "")
                )
        return out

    def misspelt_positives(self, least: int = 0) -> list[str]:
        """A sentence for each model, with at least ``least`` outcomes, whose outcomes name a
        class that differs from its ``positive_label`` only in case or blanks (``"Yes"`` for
        ``"yes"``): a positive label the outcomes spell otherwise leaves precision, recall
        and F1 null without a word. A model is looked at again only once it has new classes.

        >>> from streameval.config import load_config
        >>> from streameval.codec import InstanceEvent, LabelEvent, PredictionEvent
        >>> engine = Engine(load_config(models={"m": {"positive_label": "yes"}}))
        >>> _ = engine.process([PredictionEvent("i", "m", 10**12, "Yes"),
        ...                     LabelEvent("i", 10**12 + 5, "No")])
        >>> _ = engine.finish()
        >>> print(engine.misspelt_positives()[0][:72])
        positive_label of model 'm': its outcomes name 'Yes', which differs from
        """
        out = []
        for model_id, model in self.models.items():
            positive, count = model.positive_label, model.class_count
            if not isinstance(positive, str) or model.n < least:
                continue
            if self._looked.get(model_id) == count:
                continue
            self._looked[model_id] = count
            name = positive.strip().casefold()
            alike = [c for c in model.classes if isinstance(c, str) and c != positive
                     and c.strip().casefold() == name]  # fmt: skip
            if alike:
                written = msgspec.json.encode(alike[0]).decode()
                out.append(
                    f"positive_label of model {model_id!r}: its outcomes name {alike[0]!r}, "
                    f"which differs from positive_label {positive!r} only in case or blanks; "
                    f"the positive class's precision, recall and F1 count {positive!r} alone "
                    f"(null while no outcome names it). If {alike[0]!r} is the positive class, "
                    f"write positive_label = {written} in {_table_of(model_id)}"
                )
        return out

    def unsliced(self, least: int = 1) -> list[str]:
        """A sentence for each model none of whose first ``least`` or more outcomes had a
        slice value: every one is the rest's, which a misspelt ``slices.by`` would do.

        >>> from streameval.config import load_config
        >>> from streameval.codec import InstanceEvent, LabelEvent, PredictionEvent
        >>> engine = Engine(load_config(slices={"by": "attributes.contry"}))
        >>> _ = engine.process([InstanceEvent("i", 10**12, attributes={"country": "fr"}),
        ...     PredictionEvent("i", "m", 10**12, "a"), LabelEvent("i", 10**12 + 5, "a")])
        >>> _ = engine.finish()
        >>> print(engine.unsliced()[0][:75])
        model 'm': slices.by = 'attributes.contry' named no value in its 1 outcomes
        """
        by = self.config.slices.by
        return [
            f"model {model_id!r}: slices.by = {by!r} named no value in its {s.tracker.n} "
            f"outcomes, so all are in {OTHER}; check the name against the instances' "
            "attributes (or features)"
            for model_id, s in self.slices.items()
            if s.tracker.n >= least and not s.tracker.tracked
        ]

    # -- input ---------------------------------------------------------------------------
    def process(self, events: Iterable[Event]) -> list[Record]:
        """Run events in order; return the records they caused (metrics, alarms, comparisons)."""
        return self.evaluate(self.resolve(events))

    def resolve(self, events: Iterable[Event]) -> list[Outcome]:
        """Apply events to the join in order; return the outcomes they resolved.

        The clock of the join is event time: the largest ``ts`` seen so far, minus one — the
        streaming join's clock is its watermark minus one, and so here too an event stamped
        at the largest time seen waits until a later one shows that all of its time is in.
        """
        joins = self.joins
        partitions = len(joins)
        field = self.config.slices.field
        outcomes: list[Outcome] = []
        for event in events:
            if event.ts > self._now:
                self._now = event.ts
            kind = type(event)
            if kind is PredictionEvent:
                scores = event.scores
                if scores is not None:
                    scores = canonical_scores(scores, event.label)
                row = (
                    PREDICTION,
                    event.instance_id,
                    event.model_id,
                    event.ts,
                    event.label,
                    0,
                    0,
                    scores,
                )
            elif kind is LabelEvent:
                row = (LABEL, event.instance_id, "", event.ts, event.label, 0, 0, None)
            elif kind is InstanceEvent:  # an instance row's label is its slice value
                row = (
                    INSTANCE,
                    event.instance_id,
                    "",
                    event.ts,
                    slice_value(event, field),
                    0,
                    0,
                    None,
                )
            else:
                raise TypeError(f"not an event: {event!r}")
            now = self._now - 1
            if partitions == 1:
                out = joins[0].add_events((row,), now)[0]
            else:  # every partition's clock moves; the event goes to its own
                target = joins[join_partition(event.instance_id, partitions)]
                out = target.add_events((row,), now)[0]
                for join in joins:
                    if join is not target:
                        out += join.advance(now)
                if len(out) > 1:  # as the worker's evaluation merges join partitions
                    out.sort(key=_resolution_order)
            if out:
                outcomes.extend(out)
        return outcomes

    def evaluate(self, outcomes: list[Outcome]) -> list[Record]:
        """Feed outcomes (in resolution order) to the models and pairs; return records.

        Outcomes of one instance must not be split across two calls (the join returns them
        together), so that comparisons can pair them. The join's notices of newly predicted
        instances (:func:`~streameval.core.outcome.notice`) may come among them, in any
        order: they go to the models' label maturity.
        """
        # Each record is tagged with the position of the outcome that caused it; sorting by it
        # (stable) makes the output one sequence in resolution order, the same however the
        # outcomes were cut into calls.
        if not outcomes:
            return []
        rows = outcomes
        notices: dict[str, list[Outcome]] = {}
        if not all(o[3] for o in rows):  # Outcome.times: a notice has none
            outcomes = []
            for row in rows:
                if row[3]:
                    outcomes.append(row)
                else:
                    notices.setdefault(row[0], []).append(row)
        by_model: dict[str, list[Outcome]]
        if not outcomes:
            by_model = {}
        else:
            models = next(zip(*outcomes, strict=True))  # the model_id column
            first = models[0]
            if models.count(first) == len(models):  # one model: the common case per partition
                by_model = {first: outcomes}
            else:
                by_model = defaultdict(list)
                for outcome, model_id in zip(outcomes, models, strict=True):
                    by_model[model_id].append(outcome)
        caused: list[tuple[Outcome, int, Record]] = []
        for model_id, own in by_model.items():
            for cause, order, record in self._evaluate_model(
                model_id, own, notices.pop(model_id, ())
            ):
                caused.append((cause, order, record))
        for model_id, own_notices in notices.items():  # models with notices alone
            caused += self._evaluate_model(model_id, [], own_notices)
        for key, pair in self.pairs.items():
            for outcome, record in self._evaluate_pair(key, pair, outcomes):
                caused.append((outcome, 1, record))
        if not caused:  # most calls: records are due every publish_every outcomes
            return []
        position = {id(o): i for i, o in enumerate(rows)}
        caused.sort(key=lambda t: (position[id(t[0])], t[1]))
        return [record for _, _, record in caused]

    def finish(self, flush: bool = True, slices: bool = True) -> list[Record]:
        """Final records: at the end of a replay, or when a worker shuts down (and the latest
        ones of what changed, at a worker's every ``publish_interval``).

        With ``flush`` (the end of a finite stream) labels still waiting out their grace are
        resolved first, since nothing more can arrive. A final record is not repeated when the
        last periodic one already covered the same outcomes. With ``slices``, every slice's
        evaluator first takes the outcomes it gathered (streameval.core.sliced), for records
        of its latest numbers too.
        """
        if flush:
            out = [o for join in self.joins for o in join.flush()]
            if len(self.joins) > 1:
                out.sort(key=_resolution_order)
            records = self.evaluate(out)
        else:
            records = []
        for model_id, model in self.models.items():
            sliced = self.slices.get(model_id) if slices else None
            if sliced is not None:
                if sliced.flush():  # its slices' evaluators and gathered outcomes changed
                    self.touched.add(model_id)
                for name, evaluator in sliced.records_due():
                    if self._published.get(slice_key(model_id, name)) != evaluator.n:
                        ts = sliced.latest[name]
                        records += self._slice_records(model_id, name, evaluator, ts)
            if model.n and self._published.get(model_id) != model.n:  # n = 0: all refused
                records += self._metrics_records(model_id, model, self._model_last_ts[model_id])
        for key, pair in self.pairs.items():
            if key in self._pair_last_ts and self._published.get(key) != pair.n:
                records.append(self._comparison_record(key, pair, self._pair_last_ts[key]))
        return records

    def latest_records(self) -> list[Record]:
        """The current numbers of every model and pair as records, without publishing them
        (for an exporter taking over restored state)."""
        records = []
        for model_id, model in self.models.items():
            if model.n:
                published = self._published.get(model_id)
                records += self._metrics_records(model_id, model, self._model_last_ts[model_id])
                if published is None:
                    self._published.pop(model_id, None)
                else:
                    self._published[model_id] = published
            sliced = self.slices.get(model_id)
            for name, evaluator in () if sliced is None else sliced.records_due():
                ts = sliced.latest[name]
                records += self._metrics_records(model_id, evaluator, ts, name)
        for key, pair in self.pairs.items():
            if key in self._pair_last_ts:
                published = self._published.get(key)
                records.append(self._comparison_record(key, pair, self._pair_last_ts[key]))
                if published is None:
                    self._published.pop(key, None)
                else:
                    self._published[key] = published
        return records

    # -- internals -----------------------------------------------------------------------
    def _model(self, model_id: str) -> ModelEvaluator:
        model = self.models.get(model_id)
        if model is None:
            model = self.models[model_id] = self._new_evaluator(model_id)
        return model

    def _new_evaluator(self, model_id: str, detectors: bool = True) -> ModelEvaluator:
        """An evaluator with a model's settings (a slice's has no detectors)."""
        cfg, d = self.config, self.config.delayed
        return ModelEvaluator(
            model_id,
            estimators=cfg.estimator_specs,
            positive_label=cfg.model(model_id).positive_label,
            max_classes=cfg.max_classes,
            bins=d.bins,
            alpha=d.alpha,
            bin_rule=d.bin_rule,
            detectors=cfg.detectors_of(model_id) if detectors else [],
            normalize_max_count=cfg.normalize_max_count,
            ece_bins=cfg.scores.ece_bins,
            auc_max_values=cfg.scores.auc_max_values,
            costs=cfg.model(model_id).cost_matrix,
        )

    def _sliced(self, model_id: str) -> SlicedModel | None:
        """A model's slices (made at its first outcome), or None without ``slices.by``."""
        s = self.config.slices
        if s.field is None:
            return None
        sliced = self.slices.get(model_id)
        if sliced is None:
            sliced = self.slices[model_id] = SlicedModel(
                SliceTracker(s.top_k, s.window, s.hysteresis),
                functools.partial(self._new_evaluator, model_id, False),
                self.config.publish_every,
                functools.partial(self._slice_left, model_id),
            )
        return sliced

    def _slice_left(self, model_id: str, name: str) -> None:
        """A slice left its model's top: its next stay, if any, publishes from scratch."""
        self._published.pop(slice_key(model_id, name), None)

    def _restore_slice(self, model_id: str, state: dict[str, Any]) -> ModelEvaluator:
        """A slice's evaluator from its state, continued under the model's settings."""
        return ModelEvaluator.from_state(state, **{**self._continued(model_id), "detectors": []})

    def _slice_records(self, model_id: str, name: str, evaluator: ModelEvaluator, ts: int):
        """The initial and final metrics records of one slice of a model (marked published
        while the slice is tracked: one that left keeps no mark)."""
        if self.slices[model_id].evaluators.get(name) is evaluator:
            self._published[slice_key(model_id, name)] = evaluator.n
        return self._metrics_records(model_id, evaluator, ts, name)

    def _continued(self, model_id: str) -> dict[str, Any]:
        """The settings a model's state continues under (the others are the state's)."""
        cfg = self.config
        return {
            "estimators": cfg.estimator_specs,
            "detectors": cfg.detectors_of(model_id),
            "normalize_max_count": cfg.normalize_max_count,
            "ece_bins": cfg.scores.ece_bins,
            "auc_max_values": cfg.scores.auc_max_values,
            "costs": cfg.model(model_id).cost_matrix or {},
        }

    def _evaluate_model(
        self, model_id: str, outcomes: list[Outcome], notices: Iterable[Outcome] = ()
    ) -> list[tuple]:
        """(row that caused it, order among the records of one row, record) triples: the
        outcomes (in resolution order) through the model, in pieces cut where a metrics
        record is due and where a label-maturity record is (before the first outcome due at
        or after its boundary)."""
        maturity = self._maturity(model_id, outcomes, notices)
        if maturity is None:
            return self._evaluate_outcomes(model_id, outcomes)
        notices = list(notices)
        if notices:
            maturity.predicted(notices)
        every = self.config.maturity.every_ms
        # the maturity ticks the model's stream enters here, and the first row of each (the
        # outcomes come in order of due)
        entered: dict[int, Outcome] = {}
        dues = None  # all in one tick, the usual case with many models: no array needed
        if outcomes:
            first = outcomes[0].due // every
            entered[first] = outcomes[0]
            if outcomes[-1].due // every != first:
                dues = np.fromiter(map(_due, outcomes), dtype=np.int64, count=len(outcomes))
                ticks = dues // every
                starts = np.flatnonzero(np.diff(ticks))
                for i in (starts + 1).tolist():
                    entered[int(ticks[i])] = outcomes[i]
        for row in notices:
            entered.setdefault(row.due // every, row)
        last = self._tick.get(model_id)  # where the latest tick the stream entered begins
        if last is None:  # the model's first rows: nothing before them
            last = min(entered) * every
        records: list[tuple] = []
        done = 0
        for tick in sorted(t for t in entered if t * every > last):
            boundary = tick * every
            if dues is not None:
                end = int(np.searchsorted(dues, boundary, side="left"))
            else:  # every due lies in the tick entered first (or there are none)
                end = len(outcomes) if outcomes and tick > first else 0
            if end > done:
                records += self._evaluate_outcomes(model_id, outcomes[done:end])
                maturity.labelled(outcomes[done:end])
                done = end
            records.append((entered[tick], -1, self._maturity_record(model_id, boundary)))
            last = boundary
        if done < len(outcomes):
            records += self._evaluate_outcomes(model_id, outcomes[done:])
            maturity.labelled(outcomes[done:])
        self._tick[model_id] = last
        self.touched.add(model_id)
        return records

    def _maturity(
        self, model_id: str, outcomes: list[Outcome], notices: Iterable[Outcome]
    ) -> LabelMaturity | None:
        """A model's label maturity (made at its first rows), or None when it is off."""
        m = self.config.maturity
        if not m.enabled:
            return None
        maturity = self.maturity.get(model_id)
        if maturity is None:
            first = min([o.due for o in outcomes[:1]] + [n.due for n in notices], default=0)
            if self._counted_from == -1:
                self._counted_from = first
            since = None
            started = self._counted_from
            # a model evaluated before its maturity was counted (or reset since), or one that
            # may have had predictions pending from before it was counted: its cohorts count
            # from the first that starts after its first rows here
            if (
                model_id in self.models
                or model_id in self._late
                or (started is not None and first < started + self.config.join.label_ttl_ms)
            ):
                since = (first // m.cohort_ms + 1) * m.cohort_ms
            maturity = self.maturity[model_id] = LabelMaturity(m.cohort_ms, m.cohorts, since)
            self._late.discard(model_id)
        return maturity

    def _maturity_record(self, model_id: str, boundary: int) -> LabelMaturityRecord:
        snapshot = self.maturity[model_id].snapshot(boundary)
        model = self.models.get(model_id)
        latency = None
        if model is not None and model.n:
            latency = _latency(model.label_delays(self.config.confidence))
        return msgspec.convert(
            {
                "kind": "label_maturity",
                "model_id": model_id,
                "ts": boundary,
                "n": 0 if model is None else model.n,
                **snapshot,
                "latency_ms": latency,
            },
            LabelMaturityRecord,
            from_attributes=True,
        )

    def _evaluate_outcomes(self, model_id: str, outcomes: list[Outcome]) -> list[tuple]:
        """(outcome that caused it, 0, record) triples: the model's outcomes in pieces cut
        where a metrics record is due."""
        if not outcomes:
            return []
        model = self._model(model_id)
        sliced = self._sliced(model_id)
        self.touched.add(model_id)
        every = self.config.publish_every
        records = []
        start = 0
        while start < len(outcomes):
            # cut the batch where a metrics record is due, so records land on exact counts
            taken = outcomes[start : start + every - model.n % every]
            start += len(taken)
            before = model.n
            alarms, chunk = self._update(model_id, model, taken)
            if not chunk:  # every outcome refused
                continue
            if sliced is not None:
                for cause, name, evaluator, ts in sliced.add(chunk):
                    for record in self._slice_records(model_id, name, evaluator, ts):
                        records.append((cause, 0, record))
            for alarm in alarms:
                records.append((chunk[alarm.index - before - 1], 0, _alarm_record(model_id, alarm)))
                self.alarms += 1
            self._model_last_ts[model_id] = chunk[-1].t_label
            if model.n % every == 0:
                for record in self._metrics_records(model_id, model, chunk[-1].t_label):
                    records.append((chunk[-1], 0, record))
        return records

    def _update(self, model_id: str, model: ModelEvaluator, chunk: list[Outcome]):
        """Update a model; if the batch is refused (a class over ``max_classes``), retry one
        outcome at a time and count the refused ones, so one bad label never stops the others
        (the core is split-invariant: the result is as if they had never come)."""
        try:
            return model.update(chunk), chunk
        except ValueError:
            pass
        alarms, accepted = [], []
        for outcome in chunk:
            try:
                alarms += model.update([outcome])
            except ValueError as err:
                self.rejected[model_id, _refusal(outcome, err)] += 1
                said = _positive_clash(model, outcome) or str(err)
                self.problems.append(f"model {model_id!r}: {said}")
                self.refusals[model_id] = (said, self.refusals.get(model_id, ("", 0))[1] + 1)
            else:
                accepted.append(outcome)
        return alarms, accepted

    def _evaluate_pair(self, key: str, pair: PairEvaluator, outcomes: list[Outcome]) -> list:
        """(outcome that caused it, record) pairs."""
        pairs = pair.pairs(outcomes)
        if pairs:
            self.touched.add(key)
        every = self.config.publish_every
        records = []
        start = 0
        while start < len(pairs):
            n = pair.n
            chunk = pairs[start : start + every - n % every]
            pair.update_pairs(chunk)
            self._pair_last_ts[key] = chunk[-1][1].t_label
            if pair.n % every == 0:
                record = self._comparison_record(key, pair, chunk[-1][1].t_label)
                records.append((chunk[-1][1], record))
            start += len(chunk)
        return records

    def _metrics_records(
        self, model_id: str, model: ModelEvaluator, ts: int, slice_: str | None = None
    ) -> list[Record]:
        """A model's two records (or, with ``slice_``, those of one of its slices)."""
        if slice_ is None:
            self._published[model_id] = model.n
        cfg = self.config
        measures = model.measures(cfg.confidence, cfg.min_n)
        views, n = measures["views"], measures["n"]
        latency = _latency(measures["latency_ms"])
        tracked = None
        if slice_ is None and model_id in self.slices:  # which slices have records of their own
            sliced = self.slices[model_id]
            tracked = [*sliced.tracker.tracked] + ([OTHER] if OTHER in sliced.evaluators else [])
        return [
            InitialMetricsRecord("metrics", model_id, ts, n, views["initial"], slice_),
            FinalMetricsRecord(
                "metrics",
                model_id,
                ts,
                n,
                views["final"],
                slice_,
                delayed=measures["delayed"],
                latency_ms=latency,
                slices=tracked,
            ),
        ]

    def _comparison_record(self, key: str, pair: PairEvaluator, ts: int) -> ComparisonRecord:
        self._published[key] = pair.n
        cfg = self.config
        estimators = {
            name: PairMeasures(**values)
            for name, values in pair.measures(cfg.confidence, cfg.min_n).items()
        }
        return ComparisonRecord(
            "comparison", key, pair.model_a, pair.model_b, ts, pair.n, estimators
        )

    # -- state ---------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The evaluators' state (the join checkpoints itself: :meth:`Join.changes`)."""
        return {
            "models": {m: ev.state() for m, ev in self.models.items()},
            "pairs": {k: p.state() for k, p in self.pairs.items()},
            "maturity": {m: mat.state() for m, mat in self.maturity.items()},
            "slices": {m: sliced.state() for m, sliced in self.slices.items()},
            **self.scalars(),
        }

    def scalars(self) -> dict[str, Any]:
        """The state but the models' and pairs' (small: one number or two per model)."""
        return {
            "pair_last_ts": dict(self._pair_last_ts),
            "model_last_ts": dict(self._model_last_ts),
            "published": dict(self._published),
            "maturity_tick": dict(self._tick),
            "maturity_counted": self.config.maturity.enabled,
            "maturity_from": self._counted_from,
            "maturity_late": sorted(self._late),
            # what the slices' state was made under: another value starts them over
            "slices_config": self.config.slices.model_dump(),
            "now": self._now,
            "alarms": self.alarms,
            "rejected": [[m, r, c] for (m, r), c in self.rejected.items()],
        }

    @classmethod
    def from_state(
        cls, config: EvaluationConfig, state: dict[str, Any], join: Join | None = None
    ) -> Engine:
        """The engine of :meth:`state`, continued under ``config``: estimators and detectors
        it adds start fresh, the rest goes on (:meth:`ModelEvaluator.from_state`); a pair it
        no longer lists is left out. What ``config`` may change is decided before
        (streameval.app.evolve): this raises ValueError only where a history would go."""
        engine = cls(config, join)
        engine.models = {
            m: ModelEvaluator.from_state(s, **engine._continued(m))
            for m, s in state["models"].items()
            if s["n"]  # (a model whose every outcome was refused is made again when needed)
        }
        specs = config.estimator_specs
        for key, s in state["pairs"].items():
            if key in engine.pairs and s["n"]:
                engine.pairs[key] = PairEvaluator.from_state(s, specs)
        engine._pair_last_ts = dict(state["pair_last_ts"])
        engine._model_last_ts = dict(state["model_last_ts"])
        engine._published = dict(state["published"])
        m = config.maturity
        counted = state.get("maturity_counted", False)
        engine._counted_from = state.get("maturity_from") if counted else -1
        engine._late = set(state.get("maturity_late", ()))
        if m.enabled and counted:  # (a state that did not count it has none to go on with)
            for model_id, s in state.get("maturity", {}).items():
                if s["cohort_ms"] == m.cohort_ms:  # else it starts again from the next cohort
                    engine.maturity[model_id] = LabelMaturity.from_state(s, m.cohorts)
            engine._tick = {
                model_id: tick
                for model_id, tick in state.get("maturity_tick", {}).items()
                if model_id in engine.maturity
            }
        if state.get("slices_config") == config.slices.model_dump() and config.slices.field:
            for model_id, s in state.get("slices", {}).items():
                if model_id not in engine.models or "tracker" not in s:
                    continue
                try:
                    engine.slices[model_id] = SlicedModel.from_state(
                        s,
                        functools.partial(engine._new_evaluator, model_id, False),
                        functools.partial(engine._restore_slice, model_id),
                        config.publish_every,
                        functools.partial(engine._slice_left, model_id),
                    )
                except (KeyError, ValueError):  # a part missing, or settings it cannot take
                    pass  # its slices start over
        kept = {slice_key(m, name) for m, s in engine.slices.items() for name in s.evaluators}
        engine._published = {  # the marks of slices that start over go
            k: v for k, v in engine._published.items() if "\x00" not in k or k in kept
        }
        engine._now = state["now"]
        engine.alarms = state["alarms"]
        engine.rejected = Counter()
        for model_id, reason, count in state["rejected"]:  # (a state moved before 2026-11-29
            engine.rejected[model_id, reason] += count  # may hold two rows of one model)
        return engine


def _latency(values: dict[str, Any]) -> Latency:
    """The ``latency_ms`` of a final metrics record from :meth:`ModelEvaluator.measures`."""
    # NaN (no delay counted yet: a state from before the histogram) is null, as on the wire
    values = {k: None if isinstance(v, float) and v != v else v for k, v in values.items()}
    by_class = {name: ClassDelay(**v) for name, v in values.pop("by_class").items()}
    test = DelayTest(**values.pop("classes_differ"))
    return Latency(**values, by_class=by_class, classes_differ=test)
