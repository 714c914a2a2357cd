"""The join's Python compiled as it is, by Cython and by mypyc, against the same code
interpreted: what compiling without rewriting gives the data path.

The issue asks for the per-event join in compiled code where Python is the limit. The
cheapest way there keeps the source: compile the join's modules (``join``, ``join_rules``,
``pending``, ``waiting`` and the in-memory ``state``) as they are. This benchmark copies
``pipeline/streameval`` three times into a scratch directory, leaves one copy interpreted,
compiles the five modules of the second with Cython 3 and of the third with mypyc, then runs
``benchmarks/stages.py`` on each copy in turn, the three alternated in every round and each
round starting with the next copy (so none always runs first; a multiple of 3 rounds puts
each copy in each place equally often), and prints min / median / max of:

* the join's step (decode the event batches, apply them, encode the outcomes) in seconds;
* that step's time over the ingest's and the evaluation's of the same run, which stay
  interpreted in every copy: the machine's speed, which varies by a quarter from one minute to
  the next on a shared machine, cancels out of this ratio;
* the events/s of the whole path and the records digest (the same digest: the compiled join
  published the same records).

Cython and mypy are not dependencies of streameval: they are installed into the scratch
directory by pip (``--tools DIR`` reuses an earlier install), and the C compiler is the
one Python's build uses (``cc``). mypyc needs the types of the copy to check, so the copy it
compiles gets three annotations loosened to ``Any`` (values typed ``Label`` that are record
entries, and the notices, which are ``None`` when off); the code is the same.

    .venv/bin/python benchmarks/compiled_join.py                      # 300 000 events, 3 rounds
    .venv/bin/python benchmarks/compiled_join.py --events 1000000 --rounds 6 --tools /tmp/tools
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The modules of the join that a compiler is given, in ``pipeline/streameval/core``.
MODULES = ("join", "join_rules", "pending", "waiting", "state")
TOOLS = ("cython>=3,<4", "mypy>=1.10,<3")
#: What mypyc's type check refuses in the copy it compiles, and the looser annotation it gets
#: (the same code: mypyc checks annotated types at run time, so they must hold for every value).
LOOSER = {
    "pending.py": (
        (
            "from __future__ import annotations\n",
            "from __future__ import annotations\n\nfrom typing import Any\n",
        ),
        ("def plain(entry: Label | list) -> Label:", "def plain(entry: Any) -> Any:"),
        (
            "def scores_of(entry: Label | list) -> Scores | None:",
            "def scores_of(entry: Any) -> Any:",
        ),
        (
            "                if type(y) is list:  # with scores",
            "                scores: tuple[Any, ...]\n"
            "                if type(y) is list:  # with scores",
        ),
    ),
    "join_rules.py": (
        (
            "        notices = self.notices\n        if earliest",
            "        notices: Any = self.notices\n        if earliest",
        ),
    ),
}
STEPS = ("ingest (route)", "join (decode, apply, encode)", "evaluate (decode, apply)")


def run(cmd: list[str], **kwargs) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if done.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


def tools(where: Path) -> dict[str, str]:
    """The environment in which Cython and mypy import (installed into ``where`` once)."""
    env = {**os.environ, "PYTHONPATH": str(where)}
    probe = [sys.executable, "-c", "import Cython, mypyc"]
    if subprocess.run(probe, env=env, capture_output=True).returncode:
        print(f"installing {', '.join(TOOLS)} into {where} ...", flush=True)
        run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(where), *TOOLS])
    return env


def copies(scratch: Path, env: dict[str, str]) -> dict[str, Path]:
    """The three copies of the package, by name: each is a directory for ``PYTHONPATH``."""
    made = {}
    for name in ("interpreted", "cython", "mypyc"):
        top = scratch / name
        shutil.copytree(ROOT / "pipeline" / "streameval", top / "streameval")
        made[name] = top
    core = Path("streameval") / "core"
    files = [str(core / f"{m}.py") for m in MODULES]
    print("compiling with Cython ...", flush=True)
    cythonize = [sys.executable, "-m", "Cython.Build.Cythonize", "-3", "-i", "-q", *files]
    run(cythonize, cwd=made["cython"], env=env)
    for file, edits in LOOSER.items():
        path = made["mypyc"] / core / file
        text = path.read_text()
        for old, new in edits:
            if old not in text:
                sys.exit(f"{core / file} changed: {old.strip()!r} is not in it; update LOOSER")
            text = text.replace(old, new, 1)
        path.write_text(text)
    print("compiling with mypyc ...", flush=True)
    mypyc = [sys.executable, "-m", "mypyc", "--ignore-missing-imports", "--follow-imports=silent"]
    mypyc += files
    run(mypyc, cwd=made["mypyc"], env={**env, "MYPYPATH": str(made["mypyc"])})
    for name in ("cython", "mypyc"):
        built = list((made[name] / core).glob("*.so"))
        if len(built) != len(MODULES):
            sys.exit(
                f"{name}: {len(built)} compiled modules in {made[name] / core}, not {len(MODULES)}"
            )
    return made


def stages(top: Path, events: int) -> dict[str, float | str]:
    """One run of benchmarks/stages.py on the copy at ``top``: seconds per step, events/s and
    the records digest."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "stages.py"), "--events", str(events)]
    env = {**os.environ, "PYTHONPATH": str(top)}
    probe = [sys.executable, "-c", "import streameval.core.join as j; print(j.__file__)"]
    where = subprocess.run(probe, env=env, capture_output=True, text=True).stdout.strip()
    if not where.startswith(str(top)):
        sys.exit(f"PYTHONPATH={top} imported the join from {where}")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"stages.py on {top} failed:\n{done.stderr}")
    result: dict[str, float | str] = {}
    for step in STEPS:
        line = re.search(rf"^{re.escape(step)}\s+([\d.]+) s", done.stdout, re.M)
        result[step] = float(line.group(1))
    total = re.search(r"([\d,]+) events/s .* records digest (\w+)", done.stdout)
    result["events/s"] = float(total.group(1).replace(",", ""))
    result["digest"] = total.group(2)
    return result


def spread(values: list[float], form: str) -> str:
    return " / ".join(form.format(v) for v in (min(values), statistics.median(values), max(values)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--tools", type=Path, help="where Cython and mypy are (or go); default: scratch"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="compiled-join-") as scratch:
        scratch = Path(scratch)
        env = tools(args.tools or scratch / "tools")
        made = copies(scratch, env)
        runs: dict[str, list[dict]] = {name: [] for name in made}
        names = list(made)
        for r in range(args.rounds):
            # Each round starts with the next copy, so none always runs first (or last).
            for name in names[r % len(names) :] + names[: r % len(names)]:
                top = made[name]
                result = runs[name]
                result.append(stages(top, args.events))
                last = result[-1]
                join, rate = last[STEPS[1]], last["events/s"]
                print(
                    f"round {r + 1} {name:<12} join {join:.2f} s, {rate:,.0f} events/s", flush=True
                )
    base = statistics.median(r[STEPS[1]] / (r[STEPS[0]] + r[STEPS[2]]) for r in runs["interpreted"])
    print(f"\n{args.events:,} events, {args.rounds} rounds; min / median / max")
    heads = ("join step, s", 20), ("join / (ingest + evaluate)", 28), ("against interpreted", 20)
    print(f"{'':<12} " + " ".join(f"{head:<{width}}" for head, width in heads) + " events/s")
    for name, results in runs.items():
        joins = [r[STEPS[1]] for r in results]
        shares = [r[STEPS[1]] / (r[STEPS[0]] + r[STEPS[2]]) for r in results]
        rates = [r["events/s"] for r in results]
        print(
            f"{name:<12} {spread(joins, '{:.2f}'):<20} {spread(shares, '{:.3f}'):<28} "
            f"{statistics.median(shares) / base:<20.2f} {spread(rates, '{:,.0f}')}"
        )
    digests = {r["digest"] for results in runs.values() for r in results}
    same = "the same" if len(digests) == 1 else "DIFFERENT"
    print(f"records digests: {', '.join(sorted(digests))} ({same})")
    if len(digests) != 1:
        sys.exit("a compiled join published other records than the interpreted one")


if __name__ == "__main__":
    main()
