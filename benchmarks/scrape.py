"""How long a scrape of /metrics holds the worker's interpreter, side by side.

The records of 100 models (the sample's latest initial and final metrics records, each model a
copy under its own name, the two comparisons), in one exporter, scraped:

* prometheus_client: ``generate_latest`` over the registry, whose collector turns every record
  into samples at each scrape (what /metrics served before);
* streameval: ``Exporter.scrape()``, what /metrics serves now: the records' series rendered
  once per record and the text kept until a record changes. Four cases: the first scrape (no
  record rendered before), every model's records new since the last scrape (busy models, a
  scrape every 15 s), one model's records new, and nothing new (a second Prometheus, or
  scrapes within one ``publish_interval``).

Both give the same text, family by family (checked each round). Selections: the default
budget and everything (``export_measures = ["all"]`` and the rest).

With ``--memory`` it also reports what the cache of rendered text holds after a first scrape
(tracemalloc: the memory the scrape allocated and kept, the body returned excluded), and the
body's size, per selection.

Run: ``.venv/bin/python benchmarks/scrape.py [--models 100] [--rounds 5] [--memory]``
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
import tracemalloc
from pathlib import Path

import msgspec
from prometheus_client import CollectorRegistry, generate_latest
from streameval.config import load_config
from streameval.exporter import Exporter, Selection
from streameval.replay import replay

ROOT = Path(__file__).resolve().parents[1]


def sample_records() -> list:
    records: list = []
    config = load_config(ROOT / "docs/examples/replay.toml")
    replay(
        ROOT / "docs/examples/sample-events.jsonl", config, io.BytesIO(), on_records=records.extend
    )
    latest = {}
    for record in records:
        if record.kind == "metrics":
            latest[record.model_id, record.view] = record
        elif record.kind == "comparison":
            latest[record.pair] = record
    return list(latest.values())


def families(text: str) -> dict[str, str]:
    return {block.split(" ", 1)[0]: block for block in text.split("# HELP ")[1:]}


def timed(call) -> tuple[float, bytes]:
    started = time.perf_counter()
    body = call()
    return time.perf_counter() - started, body


def filled(selection: Selection, records: list, models: int):
    """A registry and an exporter holding ``models`` copies of the sample's latest records."""
    registry = CollectorRegistry()
    exporter = Exporter(registry, selection=selection)
    metrics = [r for r in records if r.kind == "metrics"]
    for i in range(models):
        exporter.observe([msgspec.structs.replace(r, model_id=f"model-{i:03d}") for r in metrics])
    exporter.observe([r for r in records if r.kind != "metrics"])
    return registry, exporter


def cache_memory(selection: Selection, records: list, models: int) -> tuple[int, int]:
    """(bytes the first scrape allocated and kept, bytes of the body it returned)."""
    _, exporter = filled(selection, records, models)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        body = exporter.scrape()
        size = len(body)
        del body
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return kept, size


def one_round(selection: Selection, records: list, models: int) -> dict[str, float]:
    registry, exporter = filled(selection, records, models)
    metrics = [r for r in records if r.kind == "metrics"]

    def publish(model: str, n_more: int = 0) -> None:
        exporter.observe(
            [msgspec.structs.replace(r, model_id=model, n=r.n + n_more) for r in metrics]
        )

    out: dict[str, float] = {}
    out["prometheus_client"], reference = timed(lambda: generate_latest(registry))
    out["first"], body = timed(exporter.scrape)
    assert families(body.decode()) == families(reference.decode())
    out["nothing new"], _ = timed(exporter.scrape)
    for i in range(models):
        publish(f"model-{i:03d}", n_more=1)
    out["every model new"], body = timed(exporter.scrape)
    assert families(body.decode()) == families(generate_latest(registry).decode())
    publish("model-007", n_more=1)
    out["one model new"], body = timed(exporter.scrape)
    assert families(body.decode()) == families(generate_latest(registry).decode())
    out["series"] = body.count(b"\n") - 2 * body.count(b"# HELP ")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--memory", action="store_true", help="also the cache's memory")
    args = parser.parse_args()
    records = sample_records()
    cases = ("prometheus_client", "first", "every model new", "one model new", "nothing new")
    for name, selection in (("default", Selection()), ("everything", Selection.everything())):
        rounds = [one_round(selection, records, args.models) for _ in range(args.rounds)]
        print(f"{args.models} models, {name} selection: {int(rounds[0]['series']):,} samples")
        reference = statistics.median(r["prometheus_client"] for r in rounds)
        for case in cases:
            ms = sorted(r[case] * 1000 for r in rounds)
            ratio = reference / statistics.median(ms) * 1000
            print(
                f"  {case:<18} {ms[0]:8.2f} / {statistics.median(ms):8.2f} / {ms[-1]:8.2f} ms"
                f"  (min / median / max; {ratio:,.1f}x faster than prometheus_client)"
            )
        if args.memory:
            kept, size = cache_memory(selection, records, args.models)
            print(
                f"  cache after the first scrape: {kept / 2**20:.1f} MiB, "
                f"{kept / size:.1f}x the body of {size / 2**20:.1f} MiB"
            )


if __name__ == "__main__":
    main()
