"""The worker's data path in one process, without a broker: where the CPU time goes.

The same stream as phase 1 of ``pipeline_throughput.py`` (instances, one prediction from each
of three models, labels; 5 events per instance) is cut into input partitions as the producer
would, then driven through the worker's stages exactly as :mod:`streameval.app.runner` drives
them — ``Router.route``, the msgpack event batches, ``JoinStage.apply``, the outcome batches,
``EvalStage.apply`` — with Kafka replaced by lists (a join applies what an event batch makes
due in one step here, not in the worker's steps of ``SLICE_EVENTS``). It prints the time
spent in each step, the events/s of the whole path, and a digest of every published record,
sorted (the same digest before and after a change proves the change left every number
alone).

    .venv/bin/python benchmarks/stages.py                     # 1M events
    .venv/bin/python benchmarks/stages.py --events 300000 --profile 25
    .venv/bin/python benchmarks/stages.py --compare-scores 3   # without and with scores
    .venv/bin/python benchmarks/stages.py --compare-features 3   # label maturity, slices
    .venv/bin/python benchmarks/stages.py --features slices --profile 25

The configuration has label maturity off unless ``--features`` says otherwise, so that the
records digest stays comparable with the runs before it existed (it adds records).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import pstats
import sys
import time
import zlib
from collections import defaultdict
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from streameval.app.eval_stage import EvalStage  # noqa: E402
from streameval.app.join_stage import JoinStage  # noqa: E402
from streameval.app.router import Router  # noqa: E402
from streameval.app.runner import GC_THRESHOLDS  # noqa: E402
from streameval.app.topology import Topology  # noqa: E402
from streameval.app.wire import (  # noqa: E402
    WIRE_VERSION,
    EventBatch,
    decode_events,
    decode_outcomes,
    encode,
)
from streameval.codec import encode_record  # noqa: E402
from streameval.config import load_config  # noqa: E402
from streameval.messages import StoredMessage  # noqa: E402
from streameval.simulate.scripted import TOPIC_OF, ScriptedStream  # noqa: E402
from streameval.topics import INPUT_KINDS  # noqa: E402

MODELS = {"champion": (0.88, 0.6), "challenger": (0.84, 0.82), "baseline": (0.7, 0.7)}


def messages(
    events: int, partitions: int, scored: float = 0.0, countries: int = 0
) -> list[StoredMessage]:
    """The benchmark's stream as input messages, in delivery order (``scored``: the share of
    predictions that carry scores; ``countries``: values of the instances'
    ``attributes.country``, none without)."""
    instances = events // 5
    stream = ScriptedStream(
        instances=instances,
        models=MODELS,
        max_repredictions=0,
        drift_at=instances // 2,
        interval_ms=2,
        mean_delay_ms=2000,
        scored=scored,
        countries=countries,
        seed=3,
    )
    offsets: dict[tuple[str, int], int] = defaultdict(int)
    out = []
    for _, _, event in stream.events():
        topic = TOPIC_OF[event["type"]]
        key = event["instance_id"].encode()
        p = zlib.crc32(key) % partitions
        out.append(StoredMessage(topic, p, offsets[topic, p], key, orjson.dumps(event)))
        offsets[topic, p] += 1
    return out


#: the evaluation settings of each ``--features`` choice
FEATURES = {
    "neither": {"maturity": {"enabled": False}},
    "maturity": {},
    "slices": {"maturity": {"enabled": False}, "slices": {"by": "attributes.country"}},
    "both": {"slices": {"by": "attributes.country"}},
}


def run(
    msgs: list[StoredMessage], partitions: int, chunk: int, features: str = "neither"
) -> tuple[dict[str, float], str]:
    config = load_config(
        publish_every=100_000,
        join={"label_grace_ms": 1000},
        comparisons=[{"a": "champion", "b": "challenger"}],
        **FEATURES[features],
    )
    inputs = sorted((t, p) for t in INPUT_KINDS for p in range(partitions))
    router = Router(INPUT_KINDS, partitions, idle_ms=200, slices=config.slices.field)
    router.assign(inputs)
    joins = [JoinStage(q, config, inputs) for q in range(partitions)]
    evals = [EvalStage(r, config, partitions) for r in range(partitions)]
    topology = Topology(config, partitions)
    join_logs: list[list[bytes]] = [[] for _ in range(partitions)]
    eval_logs: list[list[bytes]] = [[] for _ in range(partitions)]
    seconds = defaultdict(float)
    published: list[bytes] = []  # every record, encoded
    clock = time.perf_counter

    def step(batch: list[StoredMessage], wall: float) -> None:
        t0 = clock()
        per_partition, _ = router.route(batch)
        if not batch:
            for tp in inputs:
                router.at_end(*tp, wall)
        sources = router.sources(wall)
        t1 = clock()
        for q, rows in enumerate(per_partition):
            join_logs[q].append(encode(EventBatch(WIRE_VERSION, sources, rows)))
        t2 = clock()
        for q, stage in enumerate(joins):
            for data in join_logs[q]:
                before = (stage.frontier, stage.join.clock)
                outcomes = stage.apply(stage.offset + 1, decode_events(data))
                for r, batch in topology.after_batch(stage, before, outcomes):
                    eval_logs[r].append(encode(batch))
            join_logs[q].clear()
        t3 = clock()
        for r, stage in enumerate(evals):
            for data in eval_logs[r]:
                records, _ = stage.apply(stage.offset + 1, decode_outcomes(data))
                for record in records:
                    published.append(encode_record(record))
            eval_logs[r].clear()
        t4 = clock()
        seconds["ingest (route)"] += t1 - t0
        seconds["event batches (encode)"] += t2 - t1
        seconds["join (decode, apply, encode)"] += t3 - t2
        seconds["evaluate (decode, apply)"] += t4 - t3

    for start in range(0, len(msgs), chunk):
        step(msgs[start : start + chunk], 0.0)
    step([], 0.0)  # every input read to its end...
    step([], 1000.0)  # ...and idle: the last labels resolve
    for stage in evals:
        for record in stage.tick()[0]:
            published.append(encode_record(record))
    outcomes = sum(stage.engine.models[m].n for stage in evals for m in stage.engine.models)
    seconds["outcomes"] = outcomes
    # sorted: when a stage evaluates (and so the order of different models' records) depends
    # on how many outcomes it has gathered; each record names its model and n
    return seconds, hashlib.sha256(b"\n".join(sorted(published))).hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--chunk", type=int, default=20_000, help="messages per consume call")
    parser.add_argument("--profile", type=int, default=0, help="print the top N functions")
    parser.add_argument(
        "--scored", type=float, default=0.0, help="share of predictions with scores (0 to 1)"
    )
    parser.add_argument(
        "--features",
        choices=list(FEATURES),
        default="neither",
        help="label maturity and slices (top 20 of 30 countries) on or off",
    )
    parser.add_argument(
        "--compare-features",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="alternate the four --features on one stream whose instances have a country",
    )
    parser.add_argument(
        "--compare-scores",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="alternate the stream without scores and with scores on every prediction",
    )
    args = parser.parse_args()
    if args.compare_scores:
        compare_scores(args)
        return
    if args.compare_features:
        compare_features(args)
        return
    countries = 30 if args.features != "neither" else 0
    msgs = messages(args.events, args.partitions, args.scored, countries)
    gc.freeze()  # the input, held here, is not the worker's: keep it out of its collections
    gc.set_threshold(*GC_THRESHOLDS)  # as the worker does
    collections = [0, 0, 0]  # per generation, during the run

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            collections[info["generation"]] += 1

    gc.callbacks.append(count)
    profiler = cProfile.Profile() if args.profile else None
    started = time.perf_counter()
    if profiler:
        profiler.enable()
    seconds, digest = run(msgs, args.partitions, args.chunk, args.features)
    if profiler:
        profiler.disable()
    total = time.perf_counter() - started
    gc.callbacks.remove(count)
    outcomes = int(seconds.pop("outcomes"))
    for name, value in seconds.items():
        print(f"{name:<30} {value:6.2f} s  {value / total:4.0%}")
    print(
        f"{'total':<30} {total:6.2f} s  {len(msgs) / total:,.0f} events/s "
        f"({len(msgs):,} events, {outcomes:,} outcomes); records digest {digest}"
    )
    print(f"garbage collections (generations 0, 1, 2): {collections} at thresholds {GC_THRESHOLDS}")
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile)


def compare_scores(args: argparse.Namespace) -> None:
    """The data path's rate without scores and with scores on every prediction, the two
    streams alternated ``args.compare_scores`` times (the same events, the same outcomes)."""
    shares = {"without scores": 0.0, "with scores": 1.0}
    streams = {
        name: messages(args.events, args.partitions, share) for name, share in shares.items()
    }
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    rates: dict[str, list[float]] = {name: [] for name in streams}
    counts = {}
    for _ in range(args.compare_scores):
        for name, msgs in streams.items():
            started = time.perf_counter()
            seconds, _ = run(msgs, args.partitions, args.chunk)
            rates[name].append(len(msgs) / (time.perf_counter() - started))
            counts[name] = (len(msgs), int(seconds["outcomes"]))
    for name, values in rates.items():
        values.sort()
        events, outcomes = counts[name]
        low, median, high = values[0], values[len(values) // 2], values[-1]
        print(
            f"{name:<15} {low:>10,.0f} / {median:>10,.0f} / {high:>10,.0f} events/s "
            f"(min / median / max of {len(values)}; {events:,} events, {outcomes:,} outcomes)"
        )
    ratio = rates["with scores"][len(values) // 2] / rates["without scores"][len(values) // 2]
    print(f"with scores / without, medians: {ratio:.2f} (target >= 0.80)")


def compare_features(args: argparse.Namespace) -> None:
    """The data path's rate with label maturity and slices off and on, alternated
    ``args.compare_features`` times on one stream (each instance with one of 30 countries)."""
    msgs = messages(args.events, args.partitions, args.scored, countries=30)
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    rates: dict[str, list[float]] = {name: [] for name in FEATURES}
    outcomes = {}
    for _ in range(args.compare_features):
        for name in FEATURES:
            started = time.perf_counter()
            seconds, _ = run(msgs, args.partitions, args.chunk, name)
            rates[name].append(len(msgs) / (time.perf_counter() - started))
            outcomes[name] = int(seconds["outcomes"])
    medians = {}
    for name, values in rates.items():
        values.sort()
        low, medians[name], high = values[0], values[len(values) // 2], values[-1]
        print(
            f"{name:<9} {low:>10,.0f} / {medians[name]:>10,.0f} / {high:>10,.0f} events/s "
            f"(min / median / max of {len(values)}; {len(msgs):,} events, "
            f"{outcomes[name]:,} outcomes)"
        )
    for name in ("maturity", "slices", "both"):
        print(f"{name} / neither, medians: {medians[name] / medians['neither']:.2f}")


if __name__ == "__main__":
    main()
