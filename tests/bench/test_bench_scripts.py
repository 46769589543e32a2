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


def test_horovod_backend_runs_every_collective_through_horovods_api(world, tmp_path):
    # Horovod itself does not build here; its backend runs over hvdlite.torch,
    # which has Horovod's API, so what it calls is checked all the same.
    pytest.importorskip("torch")
    out = tmp_path / "horovod.json"
    env = {"BENCH_HOROVOD_MODULE": "hvdlite.torch"}
    result = world(2, BENCH / "collectives.py", "--backend", "horovod", "--sizes", "4,65536",
                   "--min-seconds", "0.05", "--json", str(out), timeout=120, env=env)
    assert result.returncode == 0, result
    assert "not measured" not in " ".join(result.lines(0)), result
    measured = json.loads(out.read_text())["results"]
    assert set(measured) == {"allreduce", "allgather", "broadcast", "reducescatter", "alltoall"}
    assert all(len(rows) == 2 and rows[1]["busbw_GBps"] > 0 for rows in measured.values()), measured
    result = world(2, BENCH / "fusion.py", "--backend", "horovod", "--min-seconds", "0.05",
                   timeout=120, env=env)
    assert result.returncode == 0, result
    assert re.search(r"horovod step 200x16KiB: median [0-9.]+ ms", " ".join(result.lines(0))), result


def test_horovod_training_backend_runs_the_same_script(world, tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "train.json"
    result = world(2, BENCH / "train.py", "--backend", "horovod", "--model", "cnn", "--steps", "2",
                   "--json", str(out), timeout=120, env={"BENCH_HOROVOD_MODULE": "hvdlite.torch"})
    assert result.returncode == 0, result
    measured = json.loads(out.read_text())
    assert measured["backend"] == "horovod" and measured["ranks"] == 2, measured
    assert measured["results"]["samples_per_s"] > 0, measured
