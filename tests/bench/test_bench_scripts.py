"""The benchmark scripts run and report what they say (shortened runs; the
numbers themselves live in bench/RESULTS.md, not in assertions)."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_train_benchmark_reports_scaling_against_its_own_and_the_plain_run(tmp_path):
    pytest.importorskip("torch")
    command = [sys.executable, str(BENCH / "train.py"), "--np", "2", "--models", "cnn",
               "--backends", "torch,alone", "--steps", "2", "--out", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {r["backend"]: r for r in json.loads((tmp_path / "train.json").read_text())["summary"]}
    assert set(rows) == {"torch", "alone"}, rows
    for row in rows.values():
        assert row["one_rank"] > 0 and row["n_ranks"] > 0, row
        assert row["efficiency"] == pytest.approx(row["n_ranks"] / (2 * row["one_rank"]))
    # "vs plain" divides by plain PyTorch's single process (the alone run).
    torch_row = rows["torch"]
    assert torch_row["efficiency_vs_plain"] == pytest.approx(
        torch_row["n_ranks"] / (2 * rows["alone"]["one_rank"]))
    assert re.search(r"cnn\s+torch\s+1\.03M(\s+[0-9.]+){4}", done.stdout), done.stdout


def test_step_split_reports_submission_waiting_and_data_time(world):
    result = world(2, BENCH / "step_split.py", "--count", "20", "--iterations", "20",
                   "--warmup", "5", timeout=120)
    assert result.returncode == 0, result
    line = " ".join(result.lines(0))
    assert re.search(r"20 x 16 KiB step: [0-9.]+ ms = submit [0-9.]+ ms \([0-9.]+ us a call\) "
                     r"\+ wait [0-9.]+ ms; one allreduce of the same 0\.3 MB: [0-9.]+ ms", line), result
