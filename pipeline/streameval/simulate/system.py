"""A small streaming-ML system: River learners predicting, re-predicting and learning on late
labels — the traffic a team's online models put on Kafka.

Instances come from one of River's synthetic generators (with concept drift injected at given
positions, abrupt or gradual) or from a data set River ships; each model is a real online
learner or a baseline. Following Grzenda et al.'s Algorithm 1 (IJCNN 2020, and the authors' code):

* when an instance arrives every model predicts it (the initial prediction);
* when a label arrives, every pending instance that has waited ``repredict_every`` labels since
  its last prediction is re-predicted (time-stamped with that arrival), then every model makes
  its final prediction of the labelled instance, then learns from it (test-then-train on
  delayed labels);
* labels come ``delay`` after their instance: fixed (instances or milliseconds), exponential, or
  never for a fraction of instances; ``class_delay`` makes the labels of some classes later or
  earlier (frauds confirmed days after non-frauds) by a factor on the delay;
* with ``segments``, every instance belongs to one (``attributes.segment``, the first the most
  frequent: weights 1, 1/2, 1/3 …) and the segments drift differently: where the stream
  drifts to concept c, segment k's instances drift to concept c + k (cyclically: with as many
  segments as concepts, the last one returns to the first), so a model's numbers per segment
  part at a drift.

Event times follow ``rate`` instances per second from ``start_ms``. The output is a sequence of
events in time order — to a JSON-lines file for ``streameval replay`` or to the input topics —
and is the same for the same settings and seed.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["CLASSES", "GENERATORS", "LEARNERS", "SimulationConfig", "simulate"]

GENERATORS = ("agrawal", "sea", "led", "hyperplane", "sine", "phishing")
LEARNERS = ("hoeffding_tree", "naive_bayes", "logistic_regression", "no_change", "majority")
DELAYS = ("fixed_instances", "fixed_ms", "exponential")
#: the classes of each generator's labels (as ``class_delay`` names them): LED's ten digits,
#: 0 and 1 for the others
CLASSES = {name: ("0", "1") for name in GENERATORS} | {"led": tuple(map(str, range(10)))}


@dataclass
class SimulationConfig:
    """Everything that shapes the simulated traffic (validated by :meth:`check`)."""

    generator: str = "agrawal"
    instances: int = 20_000
    #: instance positions where the concept changes (each to the next concept of the generator);
    #: empty: no drift, one concept throughout
    drifts: list[int] = field(default_factory=lambda: [10_000])
    drift_width: int = 1  # 1: abrupt; more: a gradual change over this many instances
    #: share of the positive (second) class to keep for binary generators; None: as generated
    positive_share: float | None = None
    models: list[str] = field(default_factory=lambda: list(LEARNERS))
    delay: str = "exponential"
    delay_value: float = 2_000.0  # instances (fixed_instances) or ms (fixed_ms, exponential mean)
    #: the delay of the labels of a class (by its text, "1") multiplied by this factor
    class_delay: dict[str, float] = field(default_factory=dict)
    unlabelled: float = 0.0  # fraction of instances whose label never comes
    repredict_every: int = 100  # K of Grzenda et al.'s Algorithm 1; 0: none
    rate: float = 200.0  # instances per second of event time
    #: predictions carry the model's probabilities (River's predict_proba_one) as ``scores``
    scores: bool = True
    #: names of the instances' ``attributes.segment`` (none: no attributes); at a drift each
    #: segment moves to a concept of its own
    segments: list[str] = field(default_factory=list)
    start_ms: int = 1_767_225_600_000
    seed: int = 42

    def check(self) -> SimulationConfig:
        problems = []
        if self.generator not in GENERATORS:
            problems.append(f"generator={self.generator!r}: use one of {', '.join(GENERATORS)}")
        if self.instances < 1:
            problems.append(f"instances={self.instances}: use an integer >= 1")
        if any(not 0 < d < self.instances for d in self.drifts):
            problems.append(f"drifts={self.drifts}: positions must lie in (0, instances)")
        if self.drift_width < 1:
            problems.append(f"drift_width={self.drift_width}: use an integer >= 1")
        if self.positive_share is not None and not 0 < self.positive_share < 1:
            problems.append(f"positive_share={self.positive_share}: use a number in (0, 1)")
        classes = CLASSES.get(self.generator, ("0", "1"))
        if self.positive_share is not None and len(classes) > 2:  # it keeps 0 and 1 alone
            problems.append(
                f"positive_share={self.positive_share}: {self.generator} has {len(classes)} "
                "classes; the share of class 1 is for the generators of two classes"
            )
        elif self.positive_share is not None and self.generator == "phishing":
            problems.append(
                f"positive_share={self.positive_share}: phishing is a data set, read as it is; "
                "the share of class 1 is for the generators"
            )
        strangers = sorted(set(self.class_delay) - set(classes))
        if strangers:
            problems.append(
                f"class_delay={self.class_delay}: {', '.join(strangers)} is no class of "
                f"{self.generator}, whose classes are {', '.join(classes)}"
            )
        unknown = [m for m in self.models if m not in LEARNERS]
        if unknown or not self.models:
            problems.append(f"models={self.models}: choose from {', '.join(LEARNERS)}")
        if self.delay not in DELAYS:
            problems.append(f"delay={self.delay!r}: use one of {', '.join(DELAYS)}")
        if not (self.delay_value >= 0 and math.isfinite(self.delay_value)):
            problems.append(f"delay_value={self.delay_value}: use a number >= 0")
        bad = {c: f for c, f in self.class_delay.items() if not (f >= 0 and math.isfinite(f))}
        if bad:
            problems.append(f"class_delay={bad}: use factors >= 0 (1: the class's own delay)")
        if not 0 <= self.unlabelled < 1:
            problems.append(f"unlabelled={self.unlabelled}: use a fraction in [0, 1)")
        if self.repredict_every < 0:
            problems.append(f"repredict_every={self.repredict_every}: use an integer >= 0")
        if not (self.rate > 0 and math.isfinite(self.rate)):
            problems.append(f"rate={self.rate}: use instances per second > 0")
        if len(set(self.segments)) != len(self.segments) or not all(self.segments):
            problems.append(f"segments={self.segments}: use distinct, non-empty names")
        if problems:
            raise ValueError("invalid simulation settings:\n  " + "\n  ".join(problems))
        return self


# -- instances ------------------------------------------------------------------------------
def _concepts(name: str, seed: int) -> list[Any]:
    """A list of River streams, one per concept (drifts move to the next, cyclically)."""
    from river.datasets import synth

    if name == "agrawal":
        return [synth.Agrawal(classification_function=f, seed=seed) for f in (0, 2, 5, 8)]
    if name == "sea":
        return [synth.SEA(variant=v, seed=seed) for v in (0, 1, 2, 3)]
    if name == "led":
        return [
            synth.LEDDrift(seed=seed, noise_percentage=0.1, n_drift_features=d) for d in (0, 4, 7)
        ]
    if name == "hyperplane":
        return [synth.Hyperplane(seed=seed + i, n_features=10, mag_change=0.0) for i in range(4)]
    if name == "sine":
        return [synth.Sine(classification_function=f, seed=seed) for f in (0, 1, 2, 3)]
    raise ValueError(name)


def _instances(config: SimulationConfig) -> Iterator[tuple[dict, Any, str | None]]:
    """(features, class, segment or None) of each instance, in order."""
    rng = np.random.default_rng(config.seed)
    segments = config.segments
    if segments:  # a segment for each instance, drawn apart (the rest is as without them)
        places = np.random.default_rng([config.seed, 3])
        weights = 1.0 / np.arange(1, len(segments) + 1)
        weights /= weights.sum()
    if config.generator == "phishing":  # a real data set bundled with River (1250 rows)
        from river import datasets

        rows = list(datasets.Phishing())
        while True:
            for i in rng.permutation(len(rows)):
                x, y = rows[int(i)]
                k = int(places.choice(len(segments), p=weights)) if segments else 0
                yield x, int(y), segments[k] if segments else None
    concepts = [iter(c) for c in _concepts(config.generator, config.seed)]
    drifts = sorted(config.drifts)
    position = 0
    while True:
        concept = sum(1 for d in drifts if position >= d)
        # a gradual drift mixes old and new concepts, the new one ever more likely
        start = drifts[concept - 1] if concept else 0
        if concept and position - start < config.drift_width:
            if rng.random() >= (position - start + 1) / config.drift_width:
                concept -= 1
        k = int(places.choice(len(segments), p=weights)) if segments else 0
        if concept:  # segment k drifts to the concept k further (back to the first, maybe)
            concept += k
        stream = concepts[concept % len(concepts)]
        x, y = next(stream)
        if config.positive_share is not None:
            # choose the class first, then draw from the concept until it comes (imbalance)
            want = 1 if rng.random() < config.positive_share else 0
            for _ in range(1000):
                if int(y) == want:
                    break
                x, y = next(stream)
        y = int(y) if isinstance(y, bool | np.bool_) else y
        position += 1
        yield x, y, segments[k] if segments else None


# -- models ------------------------------------------------------------------------------
def _model(name: str, seed: int):
    from river import dummy, linear_model, multiclass, naive_bayes, preprocessing, tree

    if name == "hoeffding_tree":
        return tree.HoeffdingTreeClassifier(grace_period=100)
    if name == "naive_bayes":
        return naive_bayes.GaussianNB()
    if name == "logistic_regression":
        return preprocessing.StandardScaler() | multiclass.OneVsRestClassifier(
            linear_model.LogisticRegression()
        )
    if name == "no_change":
        return dummy.NoChangeClassifier()
    return dummy.PriorClassifier()


def _predict(model, x, scored: bool) -> tuple[Any, dict[str, float] | None]:
    """The model's class for ``x`` and, if ``scored``, its probabilities as ``scores`` (none
    before it has learnt anything).

    A learner whose ``predict_one`` is River's default (the class of highest probability, the
    first in the dict on a tie) is asked for its probabilities once and its class taken from
    them as that default takes it: the same class, at half the cost of asking twice (Gaussian
    naive Bayes spends most of a prediction in ``predict_proba_one``)."""
    proba = None
    if scored and _class_from_proba(model):
        proba = model.predict_proba_one(x)
        y = max(proba, key=proba.get) if proba else None
    else:
        y = model.predict_one(x)
    y = 0 if y is None else (int(y) if isinstance(y, bool | np.bool_) else y)
    if not scored:
        return y, None
    if proba is None:
        proba = model.predict_proba_one(x)
    total = math.fsum(proba.values())
    if not proba or not total > 0:
        return y, None
    return y, {str(_plain(c)): p / total for c, p in proba.items()}


def _class_from_proba(model) -> bool:
    """Whether ``model.predict_one`` is River's default: the argmax of ``predict_proba_one``
    (through a pipeline, of its last step; the pipeline's own steps do not learn while
    predicting, River's default)."""
    from river import base, compose

    if isinstance(model, compose.Pipeline):
        if compose.Pipeline._LEARN_UNSUPERVISED_DURING_PREDICT:
            return False
        model = list(model.steps.values())[-1]
    return type(model).predict_one is base.Classifier.predict_one


def _plain(label: Any) -> Any:
    return int(label) if isinstance(label, bool | np.bool_ | np.integer) else label


# -- the system -----------------------------------------------------------------------------
def simulate(config: SimulationConfig) -> Iterator[dict[str, Any]]:
    """Events (``type``: instance, prediction, label) in event-time order."""
    config.check()
    rng = np.random.default_rng(config.seed + 1)
    models = {name: _model(name, config.seed) for name in config.models}
    interval = 1000.0 / config.rate
    arrivals: list[tuple[int, int, int]] = []  # heap of (t_label, i, seq)
    pending: dict[int, tuple[dict, Any, str]] = {}  # i -> (x, y, instance_id)
    due: deque[tuple[int, int]] = deque()  # (labels count when due for a re-prediction, i)
    labels_seen = 0
    scored = config.scores
    seq = itertools.count()
    source = _instances(config)

    def deliver_labels_until(now: int) -> Iterator[dict[str, Any]]:
        nonlocal labels_seen
        while arrivals and arrivals[0][0] <= now:
            t_label, i, _ = heapq.heappop(arrivals)
            x, y, iid = pending.pop(i)
            k = config.repredict_every
            while k and due and due[0][0] <= labels_seen:
                _, j = due.popleft()
                if j in pending:
                    xj, _, jid = pending[j]
                    for name, model in models.items():
                        yield _prediction(jid, name, t_label, _predict(model, xj, scored))
                    due.append((labels_seen + k, j))
            for name, model in models.items():
                yield _prediction(iid, name, t_label, _predict(model, x, scored))  # the final one
                model.learn_one(x, y)
            yield {"type": "label", "instance_id": iid, "ts": t_label, "label": y}
            labels_seen += 1

    for i in range(config.instances):
        x, y, segment = next(source)
        ts = config.start_ms + int(i * interval)
        yield from deliver_labels_until(ts)
        iid = f"sim-{config.seed}-{i:08d}"
        instance: dict[str, Any] = {"type": "instance", "instance_id": iid, "ts": ts}
        if segment is not None:
            instance["attributes"] = {"segment": segment}
        yield instance
        for name, model in models.items():
            yield _prediction(iid, name, ts, _predict(model, x, scored))
        if rng.random() < config.unlabelled:
            continue
        if config.delay == "fixed_instances":
            delay_ms = int(config.delay_value * interval)
        elif config.delay == "fixed_ms":
            delay_ms = int(config.delay_value)
        else:
            delay_ms = int(rng.exponential(config.delay_value))
        if config.class_delay:
            delay_ms = int(delay_ms * config.class_delay.get(str(y), 1.0))
        pending[i] = (x, y, iid)
        heapq.heappush(arrivals, (ts + max(delay_ms, 1), i, next(seq)))
        if config.repredict_every:
            due.append((labels_seen + config.repredict_every, i))
    yield from deliver_labels_until(2**62)


def _prediction(
    iid: str, model: str, ts: int, predicted: tuple[Any, dict[str, float] | None]
) -> dict[str, Any]:
    label, scores = predicted
    event = {"type": "prediction", "instance_id": iid, "model_id": model, "ts": ts, "label": label}
    if scores is not None:
        event["scores"] = scores
    return event
