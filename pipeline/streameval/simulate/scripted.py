"""A fast scripted stream: models whose predictions are right with a set probability.

No learning happens here — each model is a coin with its own accuracy, before and after an
injected drift — which makes millions of events a second cheap to generate: the load generator
of the benchmarks and the source of the integration tests' streams.

Timing follows the join's rules (docs/replay.md) so that the stream means the same read from a
file (``streameval replay``) or from three topics (the worker): instance ``i`` happens at
``start + i * interval``; each model predicts then, and re-predicts while the label is pending;
the label comes ``label_delay`` later (a minimum plus an exponential). Every record is
*delivered* at its ``ts`` except predictions, which take a transport lag of up to
``max_transport_ms`` — so labels with short delays overtake predictions. With
``max_transport_ms`` below the worker's ``label_grace_ms`` every overtaken prediction still
joins, in replay and in the worker alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import orjson

__all__ = ["ScriptedStream"]

TOPIC_OF = {"instance": "instances", "prediction": "predictions", "label": "labels"}


@dataclass
class ScriptedStream:
    """Parameters of the stream; :meth:`events` generates it (deterministic for a seed)."""

    instances: int = 10_000
    #: model -> (accuracy before the drift, accuracy after it)
    models: dict[str, tuple[float, float]] = field(
        default_factory=lambda: {
            "champion": (0.88, 0.55),
            "challenger": (0.84, 0.82),
            "baseline": (0.70, 0.70),
        }
    )
    classes: tuple[str, ...] = ("no", "yes")
    #: probability that the next instance's label differs from the last (temporal dependence)
    switch: float = 0.2
    drift_at: int | None = None  # instance index where the drift starts
    drift_models: tuple[str, ...] = ("champion",)
    start_ms: int = 1_767_225_600_000
    interval_ms: int = 10
    min_delay_ms: int = 50
    mean_delay_ms: float = 2_000.0
    #: re-predictions per model and instance: 0 .. this many, at random times before the label
    max_repredictions: int = 2
    max_transport_ms: int = 500
    #: fraction of instances whose label never comes
    unlabelled: float = 0.0
    malformed: int = 0
    #: fraction of predictions that carry scores (the predicted class's probability higher
    #: when it is right), drawn apart so that the rest of the stream does not change
    scored: float = 0.0
    #: distinct values of the instances' ``attributes.country`` (0: no attributes), drawn
    #: apart like the scores, c0 the most frequent (Zipf, exponent 1.2); one instance in 20
    #: has none
    countries: int = 0
    seed: int = 1

    def events(self) -> list[tuple[float, int, dict]]:
        """``(delivery time, tie-break, event)`` in delivery order."""
        rng = np.random.default_rng(self.seed)
        n, classes = self.instances, list(self.classes)
        k = len(classes)
        switches = rng.random(n) < self.switch
        shift = np.where(switches, rng.integers(1, max(k, 2), n), 0)
        truth = np.cumsum(shift) % k
        ts = self.start_ms + np.arange(n, dtype=np.int64) * self.interval_ms
        delay = self.min_delay_ms + rng.exponential(self.mean_delay_ms, n).astype(np.int64)
        t_label = ts + delay
        labelled = rng.random(n) >= self.unlabelled
        scoring = np.random.default_rng([self.seed, 1]) if self.scored else None
        country = None
        if self.countries:
            places = np.random.default_rng([self.seed, 2])
            weights = 1.0 / np.arange(1, self.countries + 1) ** 1.2
            country = places.choice(self.countries, size=n, p=weights / weights.sum())
            country = np.where(places.random(n) < 0.05, -1, country)
        out: list[tuple[float, int, dict]] = []
        seq = 0
        for i in range(n):
            iid = f"i{i:08d}"
            t = int(ts[i])
            instance = {"type": "instance", "instance_id": iid, "ts": t}
            if country is not None and country[i] >= 0:
                instance["attributes"] = {"country": f"c{country[i]}"}
            out.append((t, seq, instance))
            seq += 1
            y = int(truth[i])
            for model, (before, after) in self.models.items():
                drifted = self.drift_at is not None and i >= self.drift_at
                accuracy = after if drifted and model in self.drift_models else before
                reps = int(rng.integers(0, self.max_repredictions + 1))
                times = [t, *sorted(rng.integers(t + 1, int(t_label[i]) + 1, reps).tolist())]
                for step, when in enumerate(times):
                    p = min(0.99, accuracy + 0.03 * step)
                    wrong = rng.random() >= p
                    guess = (y + int(rng.integers(1, k))) % k if wrong and k > 1 else y
                    lag = float(rng.random() * self.max_transport_ms)
                    event = {
                        "type": "prediction",
                        "instance_id": iid,
                        "model_id": model,
                        "ts": int(when),
                        "label": classes[guess],
                    }
                    if scoring is not None and scoring.random() < self.scored:
                        event["scores"] = _scores(scoring, classes, guess, wrong)
                    out.append((when + lag, seq, event))
                    seq += 1
            if labelled[i]:
                tl = int(t_label[i])
                out.append(
                    (tl, seq, {"type": "label", "instance_id": iid, "ts": tl, "label": classes[y]})
                )
                seq += 1
        out.sort(key=lambda e: (e[0], e[1]))
        if self.malformed:
            picks = np.sort(rng.choice(len(out), size=self.malformed, replace=False))[::-1]
            bad = [
                {"type": "prediction", "instance_id": "broken", "model_id": "champion"},
                {"type": "label", "instance_id": "broken", "ts": "yesterday", "label": "no"},
                {"type": "prediction", "instance_id": "", "model_id": "x", "ts": 1, "label": 1},
            ]
            for j, at in enumerate(picks):
                when, _, _ = out[at]
                out.insert(int(at), (when, -1, bad[j % len(bad)]))
        return out

    def lines(self) -> Iterator[bytes]:
        """The stream as JSON lines, in delivery order (a file ``streameval replay`` reads)."""
        for _, _, event in self.events():
            yield orjson.dumps(event)

    def records(self) -> Iterator[tuple[str, bytes, bytes]]:
        """``(input topic, key, value)`` in delivery order, for producing to Kafka.

        Each value is a right-sized copy: orjson (3.12 on) returns bytes that keep a buffer of
        at least 4 KiB, so the 5 × 10⁶ records of a test held in a list took 20 GB."""
        for _, _, event in self.events():
            key = event.get("instance_id") or "?"
            yield TOPIC_OF[event["type"]], key.encode(), bytes(memoryview(orjson.dumps(event)))

    def write(self, path) -> int:
        """Write the JSON lines to ``path``; return how many."""
        count = 0
        with open(path, "wb") as handle:
            for line in self.lines():
                handle.write(line + b"\n")
                count += 1
        return count


def _scores(rng: np.random.Generator, classes: list[str], guess: int, wrong: bool) -> dict:
    """Probabilities with the guess on top, surer when it is right (to three decimals)."""
    top = round(float(rng.uniform(0.4, 0.8) if wrong else rng.uniform(0.55, 0.99)), 3)
    if len(classes) == 1:
        return {classes[0]: 1.0}
    rest = (1.0 - top) / (len(classes) - 1)
    return {c: top if j == guess else rest for j, c in enumerate(classes)}
