"""bench/elastic_recovery.py runs and reports what it says (a shortened run
on hvdlite.numpy, which imports no framework; the numbers themselves live in
bench/RESULTS.md, not in assertions)."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.timeout(90)
def test_elastic_recovery_benchmark_times_a_kill_and_a_return_phase_by_phase(tmp_path):
    command = [sys.executable, str(BENCH / "elastic_recovery.py"), "--ranks", "2",
               "--frameworks", "numpy", "--cycles", "1", "--timeout", "40",
               "--out", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=80)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "elastic_recovery.json").read_text())
    assert report["failed"] == [] and len(report["results"]) == 1, report
    result = report["results"][0]
    assert (result["framework"], result["ranks"]) == ("numpy", 2), result
    for kind, phases in (("kill", ("detect", "round", "init", "sync", "step")),
                         ("return", ("round", "start", "init", "sync", "step"))):
        [cycle] = result[kind]
        # Every mark was seen, in order, and the phases add up to the total.
        assert all(cycle[p] is not None and cycle[p] >= 0 for p in phases), (kind, cycle)
        assert sum(cycle[p] for p in phases) == pytest.approx(cycle["total"], abs=1e-3), cycle
        assert 0 < cycle["total"] < 40, (kind, cycle)
    assert result["kill"][0]["step_time"] > 0, result
    assert re.search(r"numpy\s+2\s+[0-9.]+ \|\s+[0-9.]+ = ( *[0-9.]+ \+){4} *[0-9.]+ \|", done.stdout), \
        done.stdout
