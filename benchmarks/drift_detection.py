"""Drift detectors on the error streams of the demo's own system, against River's detectors.

Streams. ``streameval.simulate`` runs River learners (Hoeffding tree, naive Bayes, logistic
regression) on a River generator with a concept drift, labels coming late; its events go
through the project's join exactly as ``streameval replay`` runs them (``Engine.resolve``, then
the join's flush at the end), with the demo's ``label_grace_ms = 1000``. Each learning model's
outcomes, in resolution order, give its final-view 0/1 error sequence: the sequence its drift
detectors see in the service (``ModelEvaluator.update``). The change point of a stream is its
*first post-drift outcome*: the first outcome, in that order, whose instance index is >= the
drift position (for a gradual drift, >= its start). Scenarios (:data:`SCENARIOS`): four
generators with an abrupt drift, two gradual drifts, class imbalance, a label delay 5x the
demo's, and streams with no drift at all, each over ``--seeds`` seeds (30 by default). The
simulator runs with ``repredict_every = 0``: re-predictions never change a final prediction,
so the error sequences are identical (``tests/test_drift_benchmark.py`` checks it) and
simulation is about 3x faster.

Detectors, all on the same 0/1 error sequences: the service's default
(:data:`~streameval.core.drift.DEFAULT_DETECTORS`), ``page_hinkley`` and
``ratio_page_hinkley`` with Gama et al.'s settings (:data:`PAPER_DETECTORS`, the defaults before
this benchmark chose one), plus any ``--detector '{"type": ...}'``, fed one numpy batch per
stream as the service feeds them; and
River's ``drift.PageHinkley``, ``drift.ADWIN``, ``drift.KSWIN``, ``drift.binary.DDM`` and
``drift.binary.HDDMA`` with River's default parameters (KSWIN with ``seed=0``, for
repeatable runs), fed one value at a time as River's API takes them. One row more,
``PageHinkley(mode='up')``, is River's PH tested for increases only (its default, ``'both'``,
also fires when a model gets better). KSWIN costs ~0.7 ms per value, so by default it runs on
the first ``--kswin-seeds`` seeds of each scenario only: its ``outcomes`` column says so.

Numbers (:func:`score_stream`, per detector, overall, per family and per model):

* delay: outcomes from the change point to the first alarm at or after it, that alarm
  included (an alarm on the first post-drift outcome has delay 1); mean and p90 over the
  detected changes;
* missed: no alarm at or after the change point within ``--horizon`` outcomes (default 2500),
  or before the stream ends if that comes first (every scenario has about 2750 or more
  outcomes after its change);
* false alarms per 10⁵ outcomes on the no-drift streams, and separately alarms before the
  change point on the drift streams per 10⁵ pre-change outcomes;
* µs per outcome: the detector's own time (River's measured once, when its alarms were
  cached).

Generating the streams is the slow part: about 0.6 ms of CPU per instance on a free core (the
three learners predict and learn), 2.4 million instances in all, so about 14 min on 2 free
cores (measured: 810 s) and several times that on a busy machine. They are cached in
``--cache`` (default ``benchmarks/.cache/drift/``, git-ignored) as npz files keyed by every
setting, River's alarms likewise; a second run only runs the project's detectors. Scenarios
fill seed by seed, so ``--seeds N`` below the full count reads what an interrupted first run
left. ``--grid`` evaluates a grid of the project detectors' settings on the cached streams and
lists those at least as good as River's detectors: ``--grid`` or ``--grid wide``
:func:`grid_specs` (the first 256, and the restart, smoothing and warm-up settings with small δ
for ``page_hinkley``; 1 084 in all), ``--grid fine`` :func:`fine_grid_specs` (around the wide
grid's best, and ``standardize``; 1 122). With ``--grid-seeds N`` the grid is scored on the
first N seeds only, and its best settings, the default and River's detectors again on the other
seeds, which the grid did not see: how the default was chosen and checked (docs/measures.md).

Run: ``PYTHONPATH=pipeline .venv/bin/python benchmarks/drift_detection.py [--quick] [--seeds N]
[--jobs 2] [--grid [fine]] [--grid-seeds N] [--detector JSON ...]``.
``benchmarks/drift_delays.py`` is the older check on a synthetic Bernoulli stream
(docs/replay.md).

References
----------
Gama, Sebastião, Rodrigues (2013), *On evaluating stream learning algorithms*, Machine
Learning 90(3), §5 (the project's detectors, Algorithms 3 and 4; detection delay, false
alarms and missed detections as the measures of a detector). docs/measures.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import itertools
import json
import os
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

MODELS = ("hoeffding_tree", "naive_bayes", "logistic_regression")
#: The demo's join (``streameval.demo.WORKER_CONFIG``).
GRACE_MS = 1000
#: Bump when what a cached stream holds changes.
CACHE_FORMAT = 1
DEFAULT_CACHE = Path(__file__).resolve().parent / ".cache" / "drift"
FIRST_SEED = 1000
DEFAULT_HORIZON = 2500
FAMILIES = ("abrupt", "gradual", "imbalanced", "long delay", "no drift")


@dataclass(frozen=True)
class Scenario:
    """One kind of stream: a generator, its drift, its class balance and its label delay."""

    name: str
    family: str
    generator: str
    instances: int
    drift: int | None  # instance position of the change (start of a gradual one); None: none
    drift_width: int = 1
    positive_share: float | None = None
    delay_value: float = 2000.0  # exponential label delay, mean in ms (the demo's 2000 ms)

    def config(self, seed: int) -> Any:
        from streameval.simulate.system import SimulationConfig

        return SimulationConfig(
            generator=self.generator,
            instances=self.instances,
            drifts=[] if self.drift is None else [self.drift],
            drift_width=self.drift_width,
            positive_share=self.positive_share,
            models=list(MODELS),
            delay="exponential",
            delay_value=self.delay_value,
            repredict_every=0,
            rate=200.0,
            scores=False,  # the detectors see errors only
            seed=seed,
        )

    def shortened(self, instances: int) -> Scenario:
        """The same scenario on ``instances`` instances, the drift at the same fraction."""
        drift = None if self.drift is None else self.drift * instances // self.instances
        width = max(1, self.drift_width * instances // self.instances)
        return dataclasses.replace(self, instances=instances, drift=drift, drift_width=width)


def _scenarios() -> tuple[Scenario, ...]:
    n = 5000
    at = n * 45 // 100  # the demo's drift is at 45 % of its stream
    return (
        # the demo's kind of stream (Agrawal, abrupt drift 45 % in), 15 000 instances
        Scenario("agrawal-demo", "abrupt", "agrawal", 15_000, 6_750),
        Scenario("sea-abrupt", "abrupt", "sea", n, at),
        Scenario("hyperplane-abrupt", "abrupt", "hyperplane", n, at),
        Scenario("sine-abrupt", "abrupt", "sine", n, at),
        Scenario("agrawal-gradual", "gradual", "agrawal", n, at, drift_width=1000),
        Scenario("sine-gradual", "gradual", "sine", n, at, drift_width=500),
        Scenario("agrawal-imbalanced", "imbalanced", "agrawal", n, at, positive_share=0.1),
        Scenario("agrawal-late-labels", "long delay", "agrawal", n, at, delay_value=10_000.0),
        Scenario("agrawal-demo-none", "no drift", "agrawal", 15_000, None),
        Scenario("sea-none", "no drift", "sea", n, None),
        Scenario("hyperplane-none", "no drift", "hyperplane", n, None),
        Scenario("sine-none", "no drift", "sine", n, None),
    )


SCENARIOS = _scenarios()


# ---------------------------------------------------------------------------------------------
# error streams


@dataclass
class Stream:
    """One model's final-view 0/1 errors in resolution order, and where its change is."""

    scenario: Scenario
    seed: int
    model: str
    errors: np.ndarray  # uint8, 1 = wrong
    instances: np.ndarray  # instance index of each outcome
    change: int | None  # 1-based index of the first post-drift outcome; None: no drift

    @property
    def n(self) -> int:
        return int(self.errors.size)


def first_post_drift(instances: np.ndarray, drift: int | None) -> int | None:
    """1-based index of the first outcome whose instance index is >= ``drift``.

    >>> first_post_drift(np.array([0, 2, 1, 4, 3, 5]), 3)
    4
    >>> first_post_drift(np.array([0, 1]), 5) is None, first_post_drift(np.array([0]), None)
    (True, None)
    """
    if drift is None:
        return None
    after = np.flatnonzero(instances >= drift)
    return int(after[0]) + 1 if after.size else None


def error_streams(config: Any, grace_ms: int = GRACE_MS) -> dict[str, tuple[np.ndarray, ...]]:
    """Simulate ``config`` and join its events as ``streameval replay`` does.

    Returns, per model, its final-view 0/1 errors (uint8) and the instance index of each
    outcome (int32), both in resolution order (the order ``ModelEvaluator.update`` sees).
    """
    import orjson
    from streameval.codec import decode_event
    from streameval.config import load_config
    from streameval.engine import Engine
    from streameval.simulate.system import simulate

    engine = Engine(load_config(join={"label_grace_ms": grace_ms}))
    events = (decode_event(orjson.dumps(event)) for event in simulate(config))
    outcomes = engine.resolve(events)
    outcomes += [outcome for join in engine.joins for outcome in join.flush()]  # as finish()
    outcomes = [o for o in outcomes if o.times]  # not the join's notices (label maturity)
    streams = {}
    for model in config.models:
        own = [o for o in outcomes if o.model_id == model]
        errors = np.fromiter((o.labels[-1] != o.y_true for o in own), np.uint8, len(own))
        index = np.fromiter((int(o.instance_id.rsplit("-", 1)[1]) for o in own), np.int32, len(own))
        streams[model] = (errors, index)
    return streams


def _river_version() -> str:
    import river

    return river.__version__


def stream_key(scenario: Scenario, seed: int) -> str:
    """Cache key of a scenario's streams: every setting that shapes them."""
    settings = {
        "format": CACHE_FORMAT,
        "simulation": dataclasses.asdict(scenario.config(seed)),
        "grace_ms": GRACE_MS,
        "river": _river_version(),
    }
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()
    return f"{scenario.name}-s{seed}-{digest[:12]}"


def cached_streams(scenario: Scenario, seed: int, cache: Path) -> tuple[list[Stream], float]:
    """The scenario's streams for one seed (simulated once, then read from ``cache``), and
    the seconds their simulation took."""
    path = cache / f"{stream_key(scenario, seed)}.npz"
    if not path.exists():
        started = time.perf_counter()
        made = error_streams(scenario.config(seed))
        seconds = time.perf_counter() - started
        arrays = {f"errors_{m}": e for m, (e, _) in made.items()}
        arrays |= {f"instances_{m}": i for m, (_, i) in made.items()}
        cache.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp.npz")
        np.savez_compressed(temporary, seconds=seconds, **arrays)
        temporary.replace(path)
    with np.load(path) as data:
        seconds = float(data["seconds"])
        streams = [
            Stream(
                scenario,
                seed,
                model,
                data[f"errors_{model}"],
                data[f"instances_{model}"],
                first_post_drift(data[f"instances_{model}"], scenario.drift),
            )
            for model in MODELS
        ]
    return streams, seconds


# ---------------------------------------------------------------------------------------------
# detectors


def project_alarms(spec: dict[str, Any], errors: np.ndarray) -> np.ndarray:
    """1-based outcome indices of a project detector's alarms, the stream in one batch."""
    from streameval.core.drift import make_detector

    alarms = make_detector(spec).update(errors.astype(np.float64))
    return np.fromiter((a.index for a in alarms), np.int64, len(alarms))


def _river_factories() -> dict[str, Callable[[], Any]]:
    from river import drift

    return {
        "river PageHinkley": drift.PageHinkley,
        "river PageHinkley(mode='up')": lambda: drift.PageHinkley(mode="up"),
        "river ADWIN": drift.ADWIN,
        "river KSWIN": lambda: drift.KSWIN(seed=0),
        "river DDM": drift.binary.DDM,
        "river HDDM_A": drift.binary.HDDMA,
    }


RIVER_DETECTORS = tuple(
    (
        "river PageHinkley",
        "river PageHinkley(mode='up')",
        "river ADWIN",
        "river KSWIN",
        "river DDM",
        "river HDDM_A",
    )
)
#: River's detectors with their default parameters (the extra mode='up' row is not one)
RIVER_DEFAULTS = tuple(name for name in RIVER_DETECTORS if "mode=" not in name)


def river_alarms(name: str, errors: np.ndarray) -> tuple[np.ndarray, float]:
    """1-based outcome indices of a River detector's alarms, values fed one at a time, and
    the seconds it took."""
    detector = _river_factories()[name]()
    values = errors.tolist()
    alarms = []
    started = time.perf_counter()
    for index, value in enumerate(values, start=1):
        detector.update(value)
        if detector.drift_detected:
            alarms.append(index)
    return np.array(alarms, dtype=np.int64), time.perf_counter() - started


def cached_river(
    scenario: Scenario, seed: int, name: str, cache: Path, streams: Sequence[Stream] | None = None
) -> tuple[dict[str, np.ndarray], float] | None:
    """A River detector's alarms per model on the scenario's streams and its total seconds;
    computed when ``streams`` are given and nothing is cached, else None."""
    slug = name.replace("river ", "").replace("(mode='up')", "-up")
    path = cache / "river" / f"{stream_key(scenario, seed)}-{slug}.npz"
    if not path.exists():
        if streams is None:
            return None
        alarms, seconds = {}, 0.0
        for stream in streams:
            alarms[stream.model], spent = river_alarms(name, stream.errors)
            seconds += spent
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp.npz")
        np.savez(temporary, seconds=seconds, **alarms)
        temporary.replace(path)
    with np.load(path) as data:
        return {model: data[model] for model in MODELS}, float(data["seconds"])


def prepare(scenario: Scenario, seed: int, cache: Path, river: Sequence[str]) -> tuple[str, float]:
    """Make sure the streams and River's alarms on them are cached (a worker's task)."""
    streams, seconds = cached_streams(scenario, seed, cache)
    for name in river:
        cached_river(scenario, seed, name, cache, streams)
    return scenario.name, seconds


# ---------------------------------------------------------------------------------------------
# scoring


def score_stream(alarms: np.ndarray, n: int, change: int | None, horizon: int) -> dict[str, Any]:
    """The numbers of one detector on one stream of ``n`` outcomes.

    ``alarms``: 1-based outcome indices of the alarms, ascending. ``change``: 1-based index of
    the first post-drift outcome, None for a stream without drift. A drift stream gives its
    ``delay`` (outcomes from the change to the first alarm at or after it, both included;
    None when missed: no such alarm within ``horizon`` outcomes of the change nor before the
    end) and its ``pre_alarms`` among ``pre_outcomes = change - 1``. A stream without drift
    gives ``false_alarms`` among ``quiet_outcomes = n``.

    >>> score_stream(np.array([5, 40, 43]), 100, 38, horizon=10)
    {'outcomes': 100, 'pre_alarms': 1, 'pre_outcomes': 37, 'delay': 3}
    >>> score_stream(np.array([5, 60]), 100, 38, horizon=10)["delay"] is None
    True
    >>> score_stream(np.array([5, 60]), 100, None, horizon=10)
    {'outcomes': 100, 'false_alarms': 2, 'quiet_outcomes': 100}
    """
    alarms = np.asarray(alarms)
    if change is None:
        return {"outcomes": n, "false_alarms": int(alarms.size), "quiet_outcomes": n}
    before = int(np.searchsorted(alarms, change))  # alarms at indices < change
    limit = min(n, change + horizon - 1)
    delay = None
    if before < alarms.size and alarms[before] <= limit:
        delay = int(alarms[before]) - change + 1
    return {"outcomes": n, "pre_alarms": before, "pre_outcomes": change - 1, "delay": delay}


@dataclass
class Tally:
    """One detector's numbers summed over streams."""

    streams: int = 0
    outcomes: int = 0
    delays: list[int] = field(default_factory=list)
    missed: int = 0
    pre_alarms: int = 0
    pre_outcomes: int = 0
    false_alarms: int = 0
    quiet_outcomes: int = 0
    seconds: float = 0.0

    def add(self, score: dict[str, Any], seconds: float = 0.0) -> None:
        self.streams += 1
        self.outcomes += score["outcomes"]
        self.seconds += seconds
        if "false_alarms" in score:
            self.false_alarms += score["false_alarms"]
            self.quiet_outcomes += score["quiet_outcomes"]
            return
        self.pre_alarms += score["pre_alarms"]
        self.pre_outcomes += score["pre_outcomes"]
        if score["delay"] is None:
            self.missed += 1
        else:
            self.delays.append(score["delay"])

    @property
    def changes(self) -> int:
        return len(self.delays) + self.missed

    def summary(self) -> dict[str, float]:
        """mean/p90 delay, missed share, false alarms and pre-change alarms per 10⁵, µs."""
        nan = float("nan")
        return {
            "mean_delay": statistics.fmean(self.delays) if self.delays else nan,
            "p90_delay": float(np.percentile(self.delays, 90)) if self.delays else nan,
            "missed": self.missed / self.changes if self.changes else nan,
            "false_per_1e5": 1e5 * self.false_alarms / self.quiet_outcomes
            if self.quiet_outcomes
            else nan,
            "pre_per_1e5": 1e5 * self.pre_alarms / self.pre_outcomes if self.pre_outcomes else nan,
            "us_per_outcome": 1e6 * self.seconds / self.outcomes if self.outcomes else nan,
        }


def _fmt(value: float, digits: int = 0) -> str:
    return "–" if value != value else f"{value:,.{digits}f}".replace(",", " ")


def table(tallies: dict[str, Tally], timing: bool = True) -> str:
    """A markdown table of the detectors' numbers."""
    head = [
        "detector",
        "outcomes",
        "changes",
        "mean delay",
        "p90 delay",
        "missed",
        "false alarms /10⁵ (no drift)",
        "alarms before change /10⁵",
    ]
    if timing:
        head.append("µs/outcome")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, tally in tallies.items():
        s = tally.summary()
        row = [
            name,
            _fmt(tally.outcomes),
            str(tally.changes),
            _fmt(s["mean_delay"]),
            _fmt(s["p90_delay"]),
            f"{tally.missed} ({_fmt(100 * s['missed'])} %)" if tally.changes else "–",
            _fmt(s["false_per_1e5"], 1),
            _fmt(s["pre_per_1e5"], 1),
        ]
        if timing:
            row.append(_fmt(s["us_per_outcome"], 2))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# running the detectors


#: Gama et al.'s settings of both detectors (the classes' own defaults): what the service ran
#: by default before this benchmark chose its default, shown beside it
PAPER_DETECTORS = (
    {"type": "page_hinkley", "fading_factor": 0.999, "delta": 0.1, "threshold": 100.0,
     "min_instances": 30, "restart_threshold": 0.0, "warmup": 0, "standardize": False},
    {"type": "ratio_page_hinkley", "long_factor": 0.9994, "short_factor": 0.997, "delta": 0.1,
     "threshold": 100.0, "min_instances": 30, "restart_threshold": 0.0, "smoothing": 0.0,
     "warmup": 0},
)  # fmt: skip


def _label(spec: dict[str, Any]) -> str:
    """A project detector's name, with the settings that differ from its defaults (the
    service's default of its type, else the class's)."""
    from streameval.core.drift import DEFAULT_DETECTORS, canonical_spec

    spec = canonical_spec(spec)
    if spec in [canonical_spec(d) for d in PAPER_DETECTORS]:
        return f"{spec['type']} (Gama et al.)"
    default = canonical_spec({"type": spec["type"]})
    changed = [
        f"{k}={str(v).lower() if isinstance(v, bool) else f'{v:g}'}"
        for k, v in spec.items()
        if k != "type" and v != default[k]
    ]
    if changed:
        return f"{spec['type']}({', '.join(changed)})"
    in_service = default in [canonical_spec(d) for d in DEFAULT_DETECTORS]
    return f"{spec['type']} ({'default' if in_service else 'its defaults'})"


def evaluate_project(
    specs: Sequence[dict[str, Any]],
    streams: Sequence[Stream],
    horizon: int,
    keys: Callable[[Stream], Iterable[str]] = lambda s: ("all",),
) -> dict[str, dict[str, Tally]]:
    """{label: {group: Tally}} of project detectors on the streams, one batch per stream."""
    out: dict[str, dict[str, Tally]] = {}
    for spec in specs:
        groups: dict[str, Tally] = defaultdict(Tally)
        for stream in streams:
            started = time.perf_counter()
            alarms = project_alarms(spec, stream.errors)
            seconds = time.perf_counter() - started
            score = score_stream(alarms, stream.n, stream.change, horizon)
            for key in keys(stream):
                groups[key].add(score, seconds)
        out[_label(spec)] = groups
    return out


def evaluate_river(
    names: Sequence[str],
    streams: Sequence[Stream],
    cache: Path,
    horizon: int,
    keys: Callable[[Stream], Iterable[str]] = lambda s: ("all",),
) -> dict[str, dict[str, Tally]]:
    """{name: {group: Tally}} of River's cached alarms on those streams that have them."""
    out: dict[str, dict[str, Tally]] = {}
    by_seed: dict[tuple[str, int], list[Stream]] = defaultdict(list)
    for stream in streams:
        by_seed[stream.scenario.name, stream.seed].append(stream)
    for name in names:
        groups: dict[str, Tally] = defaultdict(Tally)
        for own in by_seed.values():
            found = cached_river(own[0].scenario, own[0].seed, name, cache)
            if found is None:
                continue
            alarms, seconds = found
            total = sum(s.n for s in own)
            for stream in own:
                score = score_stream(alarms[stream.model], stream.n, stream.change, horizon)
                for key in keys(stream):
                    groups[key].add(score, seconds * stream.n / total)
        out[name] = groups
    return out


# ---------------------------------------------------------------------------------------------
# why the project's detectors alarm without a change


def explain(streams: Sequence[Stream]) -> str:
    """Where and why the default project detectors alarm on no-drift streams and before the
    change point: position, repeats, the model's learning, the ratio's running mean."""
    from streameval.core.drift import DEFAULT_DETECTORS
    from streameval.core.forgetting import BlockFading

    def fading(errors: np.ndarray, factor: float) -> np.ndarray:
        sums = BlockFading(factor, 2).running(np.column_stack([errors, np.ones(errors.size)]))
        return sums[:, 0] / sums[:, 1]

    lines = []
    for spec in (*DEFAULT_DETECTORS, *PAPER_DETECTORS):
        buckets: Counter[str] = Counter()
        models: Counter[str] = Counter()
        facts: Counter[str] = Counter()
        outcomes = 0
        # alarms at or after the first post-drift outcome but at an outcome count below the
        # drift's instance position: early only if one reads the alarm's n as an instance index
        between: Counter[str] = Counter()
        drift_streams: Counter[str] = Counter()
        repeats: Counter[str] = Counter()
        for stream in streams:
            quiet = stream.n if stream.change is None else stream.change - 1
            errors = stream.errors[:quiet].astype(np.float64)
            outcomes += quiet
            alarms = project_alarms(spec, stream.errors)
            if stream.change is not None:
                drift = stream.scenario.drift
                drift_streams[stream.model] += 1
                if np.any((alarms >= stream.change) & (alarms < drift)):
                    between[stream.model] += 1
                after = alarms[(alarms >= stream.change) & (alarms < stream.change + 2500)]
                if after.size > 1:  # the change detected, then more alarms
                    factor = spec.get("long_factor", spec.get("fading_factor"))
                    long_term = fading(stream.errors.astype(np.float64), factor)
                    repeats["streams"] += 1
                    for earlier, later in itertools.pairwise(after.tolist()):
                        repeats["alarms"] += 1
                        repeats["gap"] += later - earlier
                        if long_term[later - 1] > long_term[earlier - 1]:
                            repeats["rising"] += 1
            alarms = alarms[alarms <= quiet]
            if not alarms.size:
                continue
            models[stream.model] += alarms.size
            if spec["type"] == "page_hinkley":
                monitored = fading(errors, spec["fading_factor"])
                long_term = monitored
            else:
                long_term = fading(errors, spec["long_factor"])
                short = fading(errors, spec["short_factor"])
                with np.errstate(invalid="ignore", divide="ignore"):
                    monitored = np.where(long_term > 0, short / long_term, np.nan)
            previous = 0
            for alarm in alarms.tolist():
                facts["alarms"] += 1
                buckets[_bucket(alarm)] += 1
                if previous and alarm - previous <= 1000:
                    facts["within 1000 outcomes of the previous alarm"] += 1
                segment = monitored[previous:alarm]  # since the PH test's last reset
                segment = segment[np.isfinite(segment)]
                mean = float(segment.mean()) if segment.size else float("nan")
                value = float(monitored[alarm - 1])
                if spec["type"] == "ratio_page_hinkley":
                    if mean < 0.95:
                        facts[
                            "ratio's mean since reset < 0.95 (it was below 1: the error fell)"
                        ] += 1
                    if value < 1.2:
                        facts["ratio at the alarm < 1.2"] += 1
                # did the model's error fall over the 2000 outcomes before the alarm?
                early = long_term[max(previous, alarm - 2000) - 1] if alarm > 1 else np.nan
                if np.isfinite(early) and long_term[alarm - 1] < early:
                    facts["long-term error lower at the alarm than 2000 outcomes before"] += 1
                window = errors[max(0, alarm - 1000) : alarm]
                before = errors[max(0, alarm - 3000) : max(0, alarm - 1000)]
                if before.size and window.mean() > before.mean() + 0.02:
                    facts["error of the last 1000 outcomes > the 2000 before + 0.02"] += 1
                if window.mean() < 0.05:
                    facts["error of the last 1000 outcomes < 0.05"] += 1
                if long_term[alarm - 1] < 0.01:
                    facts[
                        "long-term fading error at the alarm < 0.01 (a near error-free model)"
                    ] += 1
                if errors[max(0, alarm - 300) : alarm].sum() <= 2:
                    facts["at most 2 errors in the 300 outcomes up to the alarm"] += 1
                previous = alarm
        total = facts["alarms"]
        lines.append(
            f"\n{_label(spec)} — {total} alarms on {outcomes:,} outcomes "
            "without a change (no-drift streams and before the change point)"
        )
        lines.append(
            "  drift streams with an alarm at or after the first post-drift outcome but at n <"
            " the drift's instance position: "
            + ", ".join(f"{m} {between[m]}/{drift_streams[m]}" for m in drift_streams)
        )
        if repeats["alarms"]:
            lines.append(
                f"  after a detected change, {repeats['alarms']} more alarms within 2500 outcomes"
                f" on {repeats['streams']} drift streams, {repeats['gap'] / repeats['alarms']:.0f}"
                f" outcomes apart on average; at {repeats['rising']} of them the long-term"
                " fading error was higher than at the alarm before (still rising)"
            )
        if not total:
            continue
        lines.append("  at outcome: " + ", ".join(f"{k} {v}" for k, v in sorted(buckets.items())))
        lines.append("  by model: " + ", ".join(f"{k} {v}" for k, v in models.most_common()))
        for fact, count in facts.items():
            if fact != "alarms":
                lines.append(f"  {fact}: {count} ({100 * count / total:.0f} %)")
    return "\n".join(lines)


def _bucket(index: int) -> str:
    for upper in (300, 1000, 2000, 4000, 8000):
        if index <= upper:
            return f"≤{upper:>5}"
    return "> 8000"


# ---------------------------------------------------------------------------------------------
# the grid


def _ph(factor, delta, threshold, least=30, restart=0.0, warmup=0, standardize=False):
    """A ``page_hinkley`` spec with every setting written out."""
    return {"type": "page_hinkley", "fading_factor": factor, "delta": delta,
            "threshold": threshold, "min_instances": least, "restart_threshold": restart,
            "warmup": warmup, "standardize": standardize}  # fmt: skip


def _ratio(factors, delta, threshold, least=30, restart=0.0, smoothing=0.0, warmup=0):
    """A ``ratio_page_hinkley`` spec with every setting written out."""
    return {"type": "ratio_page_hinkley", "long_factor": factors[0], "short_factor": factors[1],
            "delta": delta, "threshold": threshold, "min_instances": least,
            "restart_threshold": restart, "smoothing": smoothing, "warmup": warmup}  # fmt: skip


#: pairs of (long, short) fading factors of the ratio in the grids
RATIO_FACTORS = ((0.9994, 0.997), (0.999, 0.99), (0.9995, 0.995), (0.9998, 0.998), (0.9999, 0.999))


def _unique(specs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    from streameval.core.drift import canonical_spec

    found = {json.dumps(canonical_spec(spec), sort_keys=True): spec for spec in specs}
    return list(found.values())


def grid_specs() -> list[dict[str, Any]]:
    """Settings of the project detectors evaluated by ``--grid`` (``wide``)."""
    product = itertools.product
    return _unique(
        [
            *(_ph(*args) for args in product((0.99, 0.995, 0.999), (0.005, 0.01, 0.05, 0.1),
                                             (10.0, 25.0, 50.0, 100.0), (30, 1000))),
            *(_ratio(*args) for args in product(RATIO_FACTORS, (0.05, 0.1, 0.2, 0.5),
                                                (25.0, 50.0, 100.0, 200.0), (30, 1000))),
            # the settings added for the causes of misses and false alarms (docs/measures.md,
            # "How good the detectors are"): a small δ with a restart when the error has
            # fallen, for PH on the fading error; the restart and a smoothed ratio
            *(_ph(f, d, t, 30, r, w) for f, d, t, r, w in product(
                (0.99, 0.995, 0.999), (0.005, 0.0075, 0.01, 0.02), (5.0, 10.0, 15.0, 20.0, 25.0),
                (0.0, 2.0, 5.0, 10.0), (0, 1000))),
            *(_ratio(f, d, t, 30, r, e) for f, d, t, r, e in product(
                RATIO_FACTORS, (0.05, 0.1, 0.2), (25.0, 50.0, 100.0), (0.0, 25.0, 50.0),
                (0.0, 0.005, 0.02)) if r or e),
        ]
    )  # fmt: skip


def fine_grid_specs() -> list[dict[str, Any]]:
    """Settings of ``--grid fine``: around the best of :func:`grid_specs` on five seeds (a
    small δ, a restart and a warm-up for ``page_hinkley``; the warm-up, which the wide grid
    left out, for the ratio), and ``page_hinkley`` standardized (δ and λ in standard
    deviations of one outcome's error), from which the default was chosen."""
    product = itertools.product
    return _unique(
        [
            *(_ph(f, d, t, 30, r, w) for f, d, t, r, w in product(
                (0.995, 0.997), (0.01, 0.015, 0.02, 0.03), (7.5, 10.0, 15.0),
                (0.0, 3.0, 5.0, 10.0), (0, 1000))),
            *(_ph(f, d, t, 30, r, w, True) for f, d, t, r, w in product(
                (0.99, 0.995, 0.997, 0.998), (0.01, 0.03, 0.05, 0.075, 0.1),
                (10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 80.0), (0.0, 10.0, 20.0), (0, 1000))),
            *(_ratio(f, d, t, 30, 0.0, 0.0, w) for f, d, t, w in product(
                RATIO_FACTORS, (0.05, 0.1, 0.2), (25.0, 50.0, 100.0), (0, 1000))),
        ]
    )  # fmt: skip


_WORKER_STREAMS: list[Stream] = []


def _load_worker(scenarios: Sequence[Scenario], seeds: Sequence[int], cache: Path) -> None:
    _WORKER_STREAMS[:] = _load(scenarios, seeds, cache)[0]


def _grid_part(specs: Sequence[dict[str, Any]], horizon: int) -> dict[str, dict[str, float]]:
    tallies = evaluate_project(specs, _WORKER_STREAMS, horizon)
    return {
        label: {**g["all"].summary(), "changes": g["all"].changes} for label, g in tallies.items()
    }


def qualifying(
    grid: dict[str, dict[str, float]], reference: dict[str, float], slack: float = 0.2
) -> list[str]:
    """Settings at least as good as ``reference`` on two of (mean delay, missed, false alarms
    per 10⁵) and within ``slack`` (20 %) of it on the third.

    >>> ref = {"mean_delay": 100.0, "missed": 0.1, "false_per_1e5": 10.0}
    >>> grid = {"a": {"mean_delay": 90.0, "missed": 0.1, "false_per_1e5": 11.0},
    ...         "b": {"mean_delay": 90.0, "missed": 0.2, "false_per_1e5": 11.0}}
    >>> qualifying(grid, ref)
    ['a']
    """
    keys = ("mean_delay", "missed", "false_per_1e5")
    out = []
    for label, s in grid.items():
        at_least = [s[k] <= reference[k] for k in keys]
        within = [s[k] <= reference[k] * (1 + slack) + 1e-12 for k in keys]
        if sum(at_least) >= 2 and all(within):
            out.append(label)
    return out


# ---------------------------------------------------------------------------------------------
# main


def _load(
    scenarios: Sequence[Scenario], seeds: Sequence[int], cache: Path
) -> tuple[list[Stream], dict[str, float]]:
    streams, seconds = [], defaultdict(float)
    for scenario in scenarios:
        for seed in seeds:
            own, spent = cached_streams(scenario, seed, cache)
            streams += own
            seconds[scenario.name] += spent
    return streams, seconds


def _river_tasks(args: argparse.Namespace, index: int) -> list[str]:
    names = [n for n in RIVER_DETECTORS if n != "river KSWIN"]
    if args.kswin_seeds < 0 or index < args.kswin_seeds:
        names.append("river KSWIN")
    return names


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=30, help="seeds per scenario (30)")
    parser.add_argument(
        "--quick", action="store_true", help="3 seeds of 3000-instance streams, for a smoke run"
    )
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--jobs", type=int, default=2, help="processes that simulate (2)")
    parser.add_argument(
        "--horizon",
        type=int,
        default=DEFAULT_HORIZON,
        help="outcomes after the change within which an alarm detects it",
    )
    parser.add_argument(
        "--kswin-seeds",
        type=int,
        default=1,
        help="seeds per scenario for KSWIN (~0.7 ms/outcome); -1: all, 0: none",
    )
    parser.add_argument(
        "--detector",
        action="append",
        default=[],
        type=json.loads,
        help="a project detector spec as JSON, in addition; repeatable",
    )
    parser.add_argument(
        "--grid",
        nargs="?",
        const="wide",
        choices=("wide", "fine"),
        help="evaluate a grid of the project detectors' settings: the wide one (1 084 settings, "
        "the default) or the fine one around its best (1122)",
    )
    parser.add_argument(
        "--grid-seeds",
        type=int,
        default=None,
        help="score the grid on the first N seeds only, then its best settings on the other "
        "seeds (held out); default: all seeds",
    )
    parser.add_argument(
        "--scenario", action="append", default=[], help="only this scenario (repeatable)"
    )
    args = parser.parse_args(argv)
    scenarios = [s for s in SCENARIOS if not args.scenario or s.name in args.scenario]
    if args.quick:
        scenarios = [s.shortened(3000) for s in scenarios]
        args.seeds = min(args.seeds, 3)
        args.horizon = min(args.horizon, 1500)
    seeds = list(range(FIRST_SEED, FIRST_SEED + args.seeds))
    from streameval.core.drift import DEFAULT_DETECTORS, make_detector

    for spec in args.detector:
        try:
            make_detector(spec)
        except ValueError as err:
            parser.error(f"--detector {json.dumps(spec)}: {err}")

    started = time.perf_counter()
    tasks = [
        (s, seed, args.cache, _river_tasks(args, i))
        for i, seed in enumerate(seeds)
        for s in scenarios
    ]
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        done = 0
        for _ in pool.map(prepare, *zip(*tasks, strict=True)):
            done += 1
            if done % 20 == 0 or done == len(tasks):
                print(
                    f"  streams ready: {done}/{len(tasks)} ({time.perf_counter() - started:.0f} s)",
                    file=sys.stderr,
                    flush=True,
                )
    prepared = time.perf_counter() - started
    streams, generation = _load(scenarios, seeds, args.cache)
    print(
        f"# Drift detectors on simulated error streams ({len(seeds)} seeds per scenario, "
        f"seeds {seeds[0]}–{seeds[-1]})\n"
    )
    print(
        f"streams and River's alarms ready in {prepared:.0f} s (simulation of every stream, "
        f"when not cached: {sum(generation.values()):.0f} s of CPU)"
    )
    print(
        f"horizon: an alarm detects a change if it comes at or after the first post-drift "
        f"outcome and at most {args.horizon} outcomes after it, the first included; otherwise "
        f"the change is missed\n"
    )
    print(_stream_table(scenarios, streams, generation))

    specs = [*DEFAULT_DETECTORS, *PAPER_DETECTORS, *args.detector]

    def keys(stream: Stream) -> tuple[str, ...]:
        return ("all", stream.scenario.family, stream.model)

    tallies = evaluate_project(specs, streams, args.horizon, keys)
    tallies |= evaluate_river(RIVER_DETECTORS, streams, args.cache, args.horizon, keys)
    print("\n## All scenarios\n")
    print(table({name: groups["all"] for name, groups in tallies.items()}))
    for group in (*FAMILIES, *MODELS):
        print(f"\n## {group}\n")
        print(
            table(
                {name: groups[group] for name, groups in tallies.items() if group in groups},
                timing=False,
            )
        )
    print(
        "\nRiver's detectors run with River's default parameters (KSWIN with seed=0); "
        "PageHinkley(mode='up') is not a default (River's is mode='both')."
    )
    print("\n## The default against River's detectors\n")
    print(_verdict(tallies))
    print("\n## Why the project's detectors alarm without a change")
    print(explain(streams))
    if args.grid:
        _run_grid(args, scenarios, seeds, tallies)
    print(f"\nwall time {time.perf_counter() - started:.0f} s", file=sys.stderr)


def _verdict(tallies: dict[str, dict[str, Tally]]) -> str:
    """Whether each default detector is at least as good as each River detector (with its
    defaults, on every change) on two of (mean delay, missed, false alarms /10⁵) and within
    20 % of it on the third."""
    from streameval.core.drift import DEFAULT_DETECTORS

    lines = []
    for spec in DEFAULT_DETECTORS:
        label = _label(spec)
        ours = tallies[label]["all"].summary()
        for name in RIVER_DEFAULTS:
            if name not in tallies or not tallies[name]["all"].changes:
                continue
            if tallies[name]["all"].changes != tallies[label]["all"].changes:
                continue  # on fewer streams (KSWIN): not comparable
            theirs = tallies[name]["all"].summary()
            ok = bool(qualifying({label: ours}, theirs))
            lines.append(
                f"{label} vs {name}: delay {ours['mean_delay']:.0f} vs "
                f"{theirs['mean_delay']:.0f}, missed {100 * ours['missed']:.1f} % vs "
                f"{100 * theirs['missed']:.1f} %, false alarms {ours['false_per_1e5']:.1f} vs "
                f"{theirs['false_per_1e5']:.1f} /10⁵: {'as good' if ok else 'NOT as good'}"
            )
    return "\n".join(lines)


def _stream_table(
    scenarios: Sequence[Scenario], streams: Sequence[Stream], generation: dict[str, float]
) -> str:
    head = (
        "| scenario | family | instances | drift | streams | error before → after change "
        "(1000 outcomes each side) | simulation s |"
    )
    lines = [head, "|---|---|---|---|---|---|---|"]
    for scenario in scenarios:
        own = [s for s in streams if s.scenario.name == scenario.name]
        parts = []
        for model in MODELS:
            mine = [s for s in own if s.model == model]
            if scenario.drift is None:
                rate = np.mean([s.errors.mean() for s in mine])
                parts.append(f"{model} {rate:.3f}")
            else:
                before = np.mean(
                    [s.errors[max(0, s.change - 1001) : s.change - 1].mean() for s in mine]
                )
                after = np.mean([s.errors[s.change - 1 : s.change + 999].mean() for s in mine])
                parts.append(f"{model} {before:.3f} → {after:.3f}")
        drift = "none" if scenario.drift is None else str(scenario.drift)
        if scenario.drift_width > 1:
            drift += f" (gradual over {scenario.drift_width})"
        lines.append(
            f"| {scenario.name} | {scenario.family} | {scenario.instances} | {drift} | "
            f"{len(own)} | {'; '.join(parts)} | {generation[scenario.name]:.0f} |"
        )
    return "\n".join(lines)


def _run_grid(args, scenarios, seeds, tallies) -> None:
    specs = grid_specs() if args.grid == "wide" else fine_grid_specs()
    tune = seeds[: args.grid_seeds] if args.grid_seeds else seeds
    held = [seed for seed in seeds if seed not in tune]
    started = time.perf_counter()
    parts = [specs[i :: max(1, args.jobs) * 4] for i in range(max(1, args.jobs) * 4)]
    results: dict[str, dict[str, float]] = {}
    with ProcessPoolExecutor(
        max_workers=max(1, args.jobs),
        initializer=_load_worker,
        initargs=(scenarios, tune, args.cache),
    ) as pool:
        for part in pool.map(_grid_part, parts, [args.horizon] * len(parts)):
            results |= part
    print(
        f"\n## Grid ({args.grid}): {len(specs)} settings of the project's detectors, "
        f"seeds {tune[0]}–{tune[-1]} ({time.perf_counter() - started:.0f} s)\n"
    )
    print("| setting | mean delay | p90 delay | missed | false alarms /10⁵ | before change /10⁵ |")
    print("|---|---|---|---|---|---|")
    order = sorted(results, key=lambda k: (results[k]["missed"], results[k]["false_per_1e5"]))
    for label in order:
        print(f"| {label} | {_cells(results[label])} |")
    if held:
        streams = _load(scenarios, tune, args.cache)[0]
        tallies = evaluate_river(RIVER_DEFAULTS, streams, args.cache, args.horizon)
    river = {
        name: tallies[name]["all"].summary()
        for name in RIVER_DEFAULTS
        if name in tallies and tallies[name]["all"].changes
    }
    best = {k: min(r[k] for r in river.values()) for k in ("mean_delay", "missed", "false_per_1e5")}
    print(
        "\nbest River value of each measure (River's defaults): "
        + ", ".join(f"{k} {v:.4g}" for k, v in best.items())
    )
    found = qualifying(results, best)
    print(
        f"settings at least as good as River's best value on two of (mean delay, missed, "
        f"false alarms/10⁵) and within 20 % on the third: {len(found)}"
    )
    for label in found:
        print(f"  {label}")
    shortlist: dict[str, None] = dict.fromkeys(found)
    for name, reference in river.items():
        found = qualifying(results, reference)
        print(f"\nsettings as good as {name} on two and within 20 % on the third: {len(found)}")
        for label in sorted(found, key=lambda k: results[k]["mean_delay"])[:15]:
            s = results[label]
            print(
                f"  {label}: delay {s['mean_delay']:.0f}, missed {100 * s['missed']:.1f} %, "
                f"false {s['false_per_1e5']:.1f}/10⁵"
            )
            shortlist.setdefault(label)
    if held:
        _held_out(args, scenarios, held, specs, shortlist, order)


def _cells(s: dict[str, float]) -> str:
    return (
        f"{_fmt(s['mean_delay'])} | {_fmt(s['p90_delay'])} | {_fmt(100 * s['missed'], 1)} % | "
        f"{_fmt(s['false_per_1e5'], 1)} | {_fmt(s['pre_per_1e5'], 1)}"
    )


def _held_out(args, scenarios, held, specs, shortlist, order) -> None:
    """The grid's best settings (those that qualified against a River detector, then the ten
    with the fewest misses) and River's detectors on the seeds the grid did not see."""
    from streameval.core.drift import DEFAULT_DETECTORS

    for label in [*map(_label, DEFAULT_DETECTORS), *order[:10]]:
        shortlist.setdefault(label)
    by_label = {_label(spec): spec for spec in specs}
    streams = _load(scenarios, held, args.cache)[0]
    chosen = [by_label[label] for label in shortlist]
    tallies = evaluate_project(chosen, streams, args.horizon)
    tallies |= evaluate_river(RIVER_DEFAULTS, streams, args.cache, args.horizon)
    print(f"\n## Held out: seeds {held[0]}–{held[-1]}, which the grid did not see\n")
    print("| setting | mean delay | p90 delay | missed | false alarms /10⁵ | before change /10⁵ |")
    print("|---|---|---|---|---|---|")
    for label, groups in tallies.items():
        print(f"| {label} | {_cells(groups['all'].summary())} |")


if __name__ == "__main__":
    main()
