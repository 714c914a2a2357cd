"""benchmarks/profile_shares.py: py-spy's samples counted per part, each sample once."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "profile_shares.py"
_SPEC = importlib.util.spec_from_file_location("profile_shares", _PATH)
bench = sys.modules.setdefault("profile_shares", importlib.util.module_from_spec(_SPEC))
_SPEC.loader.exec_module(bench)

LOOP = "Thread.run (t.py:982);Pipeline.run (a/runner.py:203);Pipeline._loop (a/runner.py:311)"


def test_a_sample_counts_once_and_outside_the_data_path_not_at_all(tmp_path, capsys, monkeypatch):
    samples = tmp_path / "worker.txt"
    samples.write_text(
        # a batch applied inside the catch-up: the join's, once
        f"{LOOP};JoinPacing._catch_up (j.py:1);JoinPacing._apply_join (j.py:2);f (x.py:3) 4\n"
        f"{LOOP};JoinPacing._apply_join (j.py:2) 1\n"
        f"{LOOP};Pipeline._evaluate (r.py:9) 3\n"
        f"{LOOP} 2\n"  # the loop itself: under no part
        "Thread.run (threading.py:982);produce (p.py:1) 50\n"  # not the data path
    )
    by_parts, outside, total = bench.read(samples)
    assert total == 10
    assert by_parts == {frozenset({"join"}): 5, frozenset({"evaluation"}): 3, frozenset(): 2}
    assert outside == {"Pipeline._loop": 2}
    monkeypatch.setattr(sys, "argv", ["profile_shares.py", str(samples), "--ratio", "0.5"])
    bench.main()
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert ["join", "50.0%"] in rows and ["evaluation", "30.0%"] in rows
    # the join made free leaves 50 %: twice the rate at most, 1.0x the loop at 0.5x now;
    # with evaluation too, 20 % is left: five times
    assert ["join", "50.0%", "2.00x", "1.00x"] in rows
    assert ["join", "+", "evaluation", "20.0%", "5.00x", "2.50x"] in rows
