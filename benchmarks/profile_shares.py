"""Where one worker process's data-path time goes, from a py-spy profile, and what making
parts of it free could give at most (Amdahl's law: the rate grows at most by 1 / the share
left as it is).

py-spy samples the stacks of a running process without changing its code; it is not one of
the project's dependencies (``pip install py-spy`` into any virtualenv). Record the worker of
a benchmark run with one data-path process, once it has started, then read the samples:

    .venv/bin/python benchmarks/pipeline_throughput.py --events 1000000 --processes 1 \\
        --rounds 1 --skip raw --skip faust --skip memory --skip latency --skip all \\
        --skip loop &
    until pgrep -f worker.toml; do sleep 0.5; done
    py-spy record -r 100 -f raw -p "$(pgrep -f worker.toml | head -1)" -o worker.txt
    .venv/bin/python benchmarks/profile_shares.py worker.txt --ratio 0.44

A part's share is the samples of the data-path thread (under ``Pipeline.run``) with one of
its functions on the stack, each sample counted once, so the parts may overlap (a commit that
settles) but a row of the bounds never counts a sample twice. ``--ratio`` is the worker's
rate over the naive loop's, measured by ``pipeline_throughput.py``: the bounds are given
against it too.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

#: The parts of the data path, by the functions whose stacks are theirs.
PARTS = {
    "join": ("JoinPacing._catch_up", "JoinPacing._apply_join"),
    "evaluation": ("Pipeline._evaluate",),
    "ingest and routing": ("Pipeline._ingest",),
    "the commit's cuts": ("Pipeline._commit",),
    "the disk store's batches": ("Checkpoints.settle",),
}
#: What a rewrite would make free, one part more per row.
FREED = (("join",), ("join", "evaluation"), ("join", "evaluation", "ingest and routing"))
ROOT = "Pipeline.run"
_FRAME = re.compile(r" \(.*\)$")


def read(path: Path) -> tuple[Counter[frozenset[str]], Counter[str], int]:
    """Samples of the data-path thread: per set of parts on the stack, per innermost
    function of the stacks under no part, and their total."""
    by_parts: Counter[frozenset[str]] = Counter()
    outside: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [_FRAME.sub("", frame) for frame in stack.split(";")]
        if ROOT not in frames:
            continue
        n = int(count)
        total += n
        on = frozenset(part for part, names in PARTS.items() if any(f in names for f in frames))
        by_parts[on] += n
        if not on:
            outside[frames[-1]] += n
    return by_parts, outside, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", type=Path, help="py-spy's samples (record -f raw)")
    parser.add_argument("--ratio", type=float, help="the worker's rate over the naive loop's")
    args = parser.parse_args()
    try:
        by_parts, outside, total = read(args.profile)
    except OSError as err:
        raise SystemExit(
            f"{args.profile}: {err.strerror} (py-spy record -f raw -o writes it)"
        ) from None
    if not total:
        raise SystemExit(f"{args.profile}: no sample under {ROOT} (the worker's data path)")
    print(f"{total} samples of the data-path thread")
    for part in PARTS:
        share = sum(n for on, n in by_parts.items() if part in on) / total
        print(f"  {part:<28} {share:6.1%}")
    print("  under none of them, by innermost function:")
    for function, n in outside.most_common(6):
        print(f"    {function:<40} {n / total:6.1%}")
    against = "" if args.ratio is None else f"   against the loop ({args.ratio:.2f}x now)"
    print(f"\n  {'made free':<46} {'left':>6}   {'at most':>6}{against}")
    for freed in FREED:
        left = sum(n for on, n in by_parts.items() if not on & set(freed)) / total
        bound = 1 / left if left else float("inf")
        row = f"  {' + '.join(freed):<46} {left:6.1%}   {bound:5.2f}x"
        if args.ratio is not None:
            row += f"   {args.ratio * bound:5.2f}x"
        print(row)


if __name__ == "__main__":
    main()
