"""The fault campaign's own traffic: three models of three classes on UUID-keyed instances.

It shares nothing with the streams of the other tests (``streameval.simulate``), so that a
property those generators happen not to exercise is exercised here: ids of 36 characters,
three classes and no positive class, a model that serves scores and two that do not,
re-predictions that change their minds, labels from 60 ms to about a minute late (log-normal,
heavy-tailed) and some that never come, and instance records that arrive after the
predictions about them.

Timing keeps the worker's promise checkable (docs/architecture.md, "Ordering"): each record is
delivered at its ``ts`` plus a transport lag below ``MAX_LAG_MS``, less than the campaign's
``label_grace_ms``, so the worker's numbers must be those of ``streameval replay`` of the same
lines, through any fault.
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import orjson

__all__ = ["MAX_LAG_MS", "Traffic"]

MAX_LAG_MS = 400
TOPIC_OF = {"instance": "instances", "prediction": "predictions", "label": "labels"}


@dataclass
class Traffic:
    """Parameters; :meth:`events` makes the stream (the same for the same parameters)."""

    instances: int = 20_000
    seed: int = 11
    #: model -> probability that a prediction is right (re-predictions a little better)
    models: dict[str, float] = field(
        default_factory=lambda: {"scorer-a": 0.81, "scorer-b": 0.74, "triage": 0.66}
    )
    classes: tuple[str, ...] = ("low", "mid", "high")
    scored: tuple[str, ...] = ("triage",)  # models whose predictions carry scores
    start_ms: int = 1_780_000_000_000
    interval_ms: int = 4
    unlabelled: float = 0.08
    _cache: list[tuple[int, int, str, bytes, bytes]] | None = field(default=None, repr=False)

    def events(self) -> list[tuple[int, int, str, bytes, bytes]]:
        """``(delivery time, sequence, topic, key, value)`` in delivery order."""
        if self._cache is not None:
            return self._cache
        rng = random.Random(self.seed)
        classes, k = self.classes, len(self.classes)
        out: list[tuple[int, int, str, bytes, bytes]] = []
        truth = 0

        def add(when: int, event: dict) -> None:
            key = event["instance_id"].encode()
            out.append((when, len(out), TOPIC_OF[event["type"]], key, orjson.dumps(event)))

        for i in range(self.instances):
            iid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            t = self.start_ms + i * self.interval_ms
            if rng.random() < 0.15:
                truth = (truth + rng.randrange(1, k)) % k
            delay = 60 + int(math.exp(rng.gauss(7.0, 1.3)))  # median ≈ 1.2 s, p99 ≈ 22 s
            due = t + min(delay, 60_000)
            add(t + rng.randrange(MAX_LAG_MS), {"type": "instance", "instance_id": iid, "ts": t})
            for model, accuracy in self.models.items():
                times = [t + rng.randrange(50)]
                times += sorted(rng.randrange(times[0] + 1, due) for _ in range(rng.randrange(3)))
                for step, when in enumerate(times):
                    right = rng.random() < min(0.97, accuracy + 0.05 * step)
                    guess = truth if right else (truth + rng.randrange(1, k)) % k
                    event = {
                        "type": "prediction",
                        "instance_id": iid,
                        "model_id": model,
                        "ts": when,
                        "label": classes[guess],
                    }
                    if model in self.scored:
                        event["scores"] = _scores(rng, classes, guess)
                    add(when + rng.randrange(MAX_LAG_MS), event)
            if rng.random() >= self.unlabelled:
                add(due, {"type": "label", "instance_id": iid, "ts": due, "label": classes[truth]})
        out.sort(key=lambda e: (e[0], e[1]))
        self._cache = out
        return out

    def lines(self) -> Iterator[bytes]:
        """The stream as JSON lines in delivery order (what ``streameval replay`` reads)."""
        for *_, value in self.events():
            yield value

    def records(self) -> Iterator[tuple[str, bytes, bytes]]:
        """``(input topic, key, value)`` in delivery order, keyed by instance id."""
        for _, _, topic, key, value in self.events():
            yield topic, key, value

    def __len__(self) -> int:
        return len(self.events())


def _scores(rng: random.Random, classes: tuple[str, ...], guess: int) -> dict[str, float]:
    """Probabilities in thousandths (summing to 1000), at least 0.4 on the guess."""
    top = rng.randrange(400, 950)
    rest = 1000 - top
    others = [c for j, c in enumerate(classes) if j != guess]
    first = rng.randrange(0, min(rest, top - 1) + 1) if rest else 0
    parts = {classes[guess]: top, others[0]: first, others[1]: rest - first}
    return {c: parts[c] / 1000 for c in classes}
