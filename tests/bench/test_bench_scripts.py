"""The benchmark scripts run and report what they say (shortened runs; the
numbers themselves live in bench/RESULTS.md, not in assertions)."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


# The training benchmarks run their models at small sizes: one warm-up step
# and a batch of 4 instead of 5 and 32 (cnn: 7 steps were most of a job's
# CPU time after its start-up); the model, and so its parameters, stays.
SMALL_TRAINING = ["--steps", "2", "--warmup", "1", "--batch", "4"]


def test_train_benchmark_reports_scaling_against_its_own_and_the_plain_run(tmp_path):
    pytest.importorskip("torch")
    command = [sys.executable, str(BENCH / "train.py"), "--np", "2", "--models", "cnn",
               "--backends", "torch,alone", *SMALL_TRAINING, "--out", str(tmp_path)]
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
                   "--warmup", "5", timeout=120).expect_ok()
    line = " ".join(result.lines(0))
    assert re.search(r"20 x 16 KiB step: [0-9.]+ ms = submit [0-9.]+ ms \([0-9.]+ us a call\) "
                     r"\+ wait [0-9.]+ ms; one allreduce of the same 0\.3 MB: [0-9.]+ ms", line), result


def test_thread_cpu_reports_the_process_and_each_thread_cpu_per_step(world):
    pytest.importorskip("torch")
    result = world(2, BENCH / "thread_cpu.py", "--model", "cnn", "--steps", "3", "--warmup", "1",
                   timeout=180).expect_ok()
    for rank in (0, 1):
        line = " ".join(result.lines(rank))
        assert re.search(rf"rank {rank}: [0-9.]+ ms a step; process CPU [0-9.]+ ms a step "
                         r"\([0-9]+ minor faults\); CPU ms a step by thread: \w", line), result


def test_gradient_allreduce_reports_the_step_beside_a_copy_and_checks_the_results(world):
    pytest.importorskip("torch")
    result = world(2, BENCH / "gradient_allreduce.py", "--model", "cnn", "--steps", "2", "--compete",
                   timeout=120).expect_ok()
    for rank in (0, 1):
        line = " ".join(result.lines(rank))
        assert re.search(rf"rank {rank}: cnn gradients 4\.1 MB: allreduce [0-9.]+ ms a step \(fastest "
                         r"[0-9.]+\), process CPU [0-9.]+ ms \(hvdlite-bg [0-9.]+\); copy of the same bytes "
                         r"[0-9.]+ ms; competing matrix products [0-9]+/s, their thread's CPU [0-9.]+ ms and "
                         r"run-queue wait [0-9.]+ ms a step; results match", line), result


# Horovod itself does not build here, so the tests below run the "horovod"
# backend's code over hvdlite.torch (which has Horovod's API) through a
# recorder (workers/horovod_api_recorder.py): they prove which of Horovod's
# functions the backend calls and that its numbers come out, not how Horovod
# performs; test_horovod_backend_runs_real_horovod_where_installed does that.
RECORDER = {"BENCH_HOROVOD_MODULE": "horovod_api_recorder",
            "PYTHONPATH": str(Path(__file__).parent / "workers")}


def horovod_calls(result, rank=0):
    """The Horovod functions rank called, from the recorder's line at exit."""
    lines = [line for line in result.lines(rank) if line.startswith("horovod API over ")]
    assert lines and lines[-1].startswith("horovod API over hvdlite.torch: called "), result
    return set(lines[-1].rsplit(" ", 1)[1].split(","))


def test_horovod_backend_code_runs_every_collective_over_hvdlite_torch(world, tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "horovod.json"
    result = world(2, BENCH / "collectives.py", "--backend", "horovod", "--sizes", "4,65536",
                   "--min-seconds", "0.05", "--json", str(out), timeout=120, env=RECORDER)
    result.expect_ok()
    assert "not measured" not in " ".join(result.lines(0)), result
    assert {"init", "allreduce", "allgather", "broadcast_", "reducescatter",
            "alltoall"} <= horovod_calls(result), result
    measured = json.loads(out.read_text())["results"]
    assert set(measured) == {"allreduce", "allreduce_async", "allgather", "broadcast",
                             "reducescatter", "alltoall"}
    assert all(len(rows) == 2 and rows[1]["busbw_GBps"] > 0 for rows in measured.values()), measured
    result = world(2, BENCH / "fusion.py", "--backend", "horovod", "--min-seconds", "0.05",
                   timeout=120, env=RECORDER).expect_ok()
    assert re.search(r"horovod step 200x16KiB: median [0-9.]+ ms", " ".join(result.lines(0))), result
    assert "allreduce_async" in horovod_calls(result) or "allreduce_async_" in \
        horovod_calls(result), result


def test_hvdlite_torch_backend_reports_the_synchronous_and_asynchronous_paths(world, tmp_path):
    """The suite's hvdlite-torch backend (bench/ab.py's torch figures): allreduce_ and
    allreduce_async_ + synchronize at 4 bytes, beside the other collectives."""
    pytest.importorskip("torch")
    out = tmp_path / "torch.json"
    world(2, BENCH / "collectives.py", "--backend", "hvdlite-torch", "--sizes", "4",
          "--ops", "allreduce,allreduce_async,broadcast,allgather", "--min-seconds", "0.05",
          "--json", str(out), timeout=120).expect_ok()
    measured = json.loads(out.read_text())
    assert measured["backend"] == "hvdlite-torch", measured
    results = measured["results"]
    assert set(results) == {"allreduce", "allreduce_async", "broadcast", "allgather"}, results
    assert all(rows[0]["bytes"] == 4 and rows[0]["median_us"] > 0 for rows in results.values())


def test_horovod_training_backend_code_runs_over_hvdlite_torch(world, tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "train.json"
    result = world(2, BENCH / "train.py", "--backend", "horovod", "--model", "cnn",
                   *SMALL_TRAINING, "--json", str(out), timeout=120, env=RECORDER).expect_ok()
    assert {"init", "broadcast_parameters", "DistributedOptimizer"} <= horovod_calls(result), \
        result
    measured = json.loads(out.read_text())
    assert measured["backend"] == "horovod" and measured["ranks"] == 2, measured
    assert measured["results"]["samples_per_s"] > 0, measured


@pytest.mark.timeout(300)
def test_horovod_backend_runs_real_horovod_where_installed(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("horovod.torch", reason="Horovod is not installed (it does not build "
                                                "here); the tests above run the backend's code "
                                                "over hvdlite.torch instead")
    horovodrun = shutil.which("horovodrun", path=str(Path(sys.executable).parent)) or \
        shutil.which("horovodrun")
    if horovodrun is None:
        pytest.skip("horovod.torch imports but horovodrun is not installed")
    out = tmp_path / "horovod.json"
    env = {k: v for k, v in os.environ.items() if k != "BENCH_HOROVOD_MODULE"}
    done = subprocess.run([horovodrun, "-np", "2", sys.executable, str(BENCH / "collectives.py"),
                           "--backend", "horovod", "--sizes", "4", "--min-seconds", "0.05",
                           "--json", str(out)],
                          capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    measured = json.loads(out.read_text())["results"]
    assert measured["allreduce"][0]["busbw_GBps"] >= 0, measured


def run_on_namespace_hosts(script, *args, timeout):
    """Runs a bench/ script that builds the namespace cluster; skips, saying
    why, where this machine cannot host one. Returns its pid and stdout."""
    bench = subprocess.Popen([sys.executable, str(BENCH / script), *map(str, args)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = bench.communicate(timeout=timeout)
    finally:
        bench.kill()
    if "cannot host the namespace cluster" in stderr:
        pytest.skip(stderr.strip().splitlines()[-1])
    assert bench.returncode == 0, stdout + stderr
    return bench.pid, stdout


def namespaces_left(pid):
    """The network namespaces that the benchmark process `pid` made (its
    cluster names them after it) and left behind."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    left = {line.split()[0] for line in listed.splitlines() if line.strip()}
    return left & {f"hvdl{pid % 100000}{host}" for host in "LABC"}


@pytest.mark.timeout(120)
def test_multihost_benchmark_runs_open_mpi_across_namespace_hosts(tmp_path):
    # The MPI launch path of bench/multihost.py (mpirun over the cluster's
    # ssh, TCP between the hosts) at 2 hosts x 1 rank and one size; Horovod
    # is measured or skipped with its reason, never left out silently.
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    pytest.importorskip("mpi4py")
    if not (Path(sys.executable).parent / "mpirun").exists() and shutil.which("mpirun") is None:
        pytest.skip("mpirun is not installed (make bench-deps)")
    out = tmp_path / "multihost.json"
    pid, stdout = run_on_namespace_hosts(
        "multihost.py", "--links", "1=2x1", "--libraries", "mpi,horovod", "--sizes", "4",
        "--min-seconds", "0.05", "--stream-seconds", "0.2", "--out", out, "--no-plot",
        timeout=100)
    records = json.loads(out.read_text())
    mpi = [r for r in records if r["library"] == "mpi"]
    assert [(r["hosts"], r["ranks_per_host"], r["bytes"]) for r in mpi] == [(2, 1, 4)], records
    assert mpi[0]["latency_us"] > 0 and mpi[0]["rtt_us"] > 0 and mpi[0]["link_gbit"] == 1
    assert ("horovod: not measured: " in stdout
            or any(r["library"] == "horovod" for r in records)), stdout
    assert not namespaces_left(pid)


@pytest.mark.timeout(120)
def test_training_multihost_benchmark_trains_across_namespace_hosts(tmp_path):
    # bench/training_multihost.py at its smallest: a tiny transformer, 2 hosts
    # x 1 rank, unshaped links, two steps; hvdlite, DDP with its PowerSGD hook
    # and hvdlite's PowerSGD (measured, or reported as missing from the build,
    # never left out), each against the 1-rank reference.
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    pytest.importorskip("torch")
    out = tmp_path / "training.json"
    pid, stdout = run_on_namespace_hosts(
        "training_multihost.py", "--models", "tiny", "--layouts", "2x1", "--rates", "0",
        "--variants", "hvdlite-flat,ddp-powersgd,hvdlite-powersgd", "--steps", "2",
        "--stream-seconds", "0.2", "--timeout", "80", "--out", out, "--no-plot", timeout=110)
    records = {r["variant"]: r for r in json.loads(out.read_text())["records"]}
    assert set(records) == {"reference", "hvdlite-flat", "ddp-powersgd", "hvdlite-powersgd"}
    reference = records["reference"]
    assert (reference["hosts"], reference["ranks_per_host"], reference["ranks"]) == (1, 1, 1)
    for variant in ("hvdlite-flat", "ddp-powersgd"):
        r = records[variant]
        assert (r["hosts"], r["ranks_per_host"], r["ranks"], r["steps"]) == (2, 1, 2, 2), r
        assert r["samples_per_s"] > 0 and r["rtt_us"] > 0, r
        assert r["efficiency"] == pytest.approx(r["samples_per_s"] / (2 * reference["samples_per_s"]))
    import hvdlite.torch as hvd
    psgd = records["hvdlite-powersgd"]
    if hasattr(hvd.Compression, "powersgd"):  # this build has it: measured, not reported missing
        assert psgd["samples_per_s"] > 0 and psgd["ranks"] == 2, psgd
    else:
        assert psgd["unavailable"].startswith("not available in this build"), psgd
    for label in (r"hvdlite flat ring", r"DDP gloo \+ PowerSGD hook"):
        assert re.search(rf"\| {label} \| [0-9.]+ \([0-9.]+\) \|", stdout), stdout
    assert not namespaces_left(pid)


def test_sharded_memory_benchmark_counts_state_per_rank_for_each_method(tmp_path):
    # The harness of `make bench-sharded` on a tiny model: every job runs, and
    # at 2 ranks stage 2 holds half of unsharded's optimizer state and gradients.
    pytest.importorskip("torch")
    out = tmp_path / "sharded.json"
    command = [sys.executable, str(BENCH / "sharded_memory.py"), "--size", "tiny", "--ranks", "2",
               "--methods", "hvdlite,hvdlite-stage2,zero", "--steps", "1", "--warmup", "2",
               "--no-plot", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout + done.stderr
    records = {(r["method"], r["ranks"]): r for r in json.loads(out.read_text())["records"]}
    assert set(records) == {(m, 2) for m in ("hvdlite", "hvdlite-stage2", "zero")}, records
    assert not [r for r in records.values() if "failed" in r], records
    unsharded, sharded = records[("hvdlite", 2)]["per_rank"], records[("hvdlite-stage2", 2)]["per_rank"]
    for key in ("optimizer_state", "gradients"):
        for rank in range(2):
            assert sharded[key][rank] == pytest.approx(unsharded[key][rank] / 2, rel=0.02), (key, sharded)
