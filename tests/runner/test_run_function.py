"""Tests hvdlite.run (hvdlite/runner/function.py, function_job.py, task.py):
a Python function started as the ranks of a real job, its results in rank
order, its output, its failures, an interrupt of the caller, hosts over ssh,
mpirun and an elastic job."""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import hvdlite
from conftest import mpirun_path
from hvdlite.runner import RankFailedError
from namespaces import running_cluster
from test_launch_local import is_alive, wait_until

WORKERS = Path(__file__).resolve().parent / "workers"
DRIVER = WORKERS / "run_function.py"


def allreduce_report(scale, offset=0.0, label="x"):
    """Runs on every rank: a real allreduce, and where the rank ran."""
    import hvdlite.numpy as hvd
    hvd.init()
    total = hvd.allreduce(np.arange(3.0) * (hvd.rank() + 1) * scale + offset, op=hvd.Sum,
                          name="run_total")
    print(f"{label} rank {hvd.rank()} of {hvd.size()}", flush=True)
    return {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
            "local_size": hvd.local_size(), "pid": os.getpid(),
            "job": os.environ["HVDLITE_JOB_ID"], "total": total}


def expected_total(size, scale, offset=0.0):
    return sum(np.arange(3.0) * (rank + 1) * scale + offset for rank in range(size))


def assert_gone(pids, job_ids=()):
    """No rank process and no shared-memory segment of the jobs is left."""
    assert wait_until(lambda: not any(is_alive(pid) for pid in pids), 5), pids
    leftovers = [name for name in os.listdir("/dev/shm")
                 if any(job in name for job in job_ids)]
    assert leftovers == []


@pytest.mark.timeout(90)
@pytest.mark.parametrize("size", [1, 2, 3])
def test_results_come_back_in_rank_order_with_args_and_kwargs(size, capsys):
    results = hvdlite.run(allreduce_report, args=(2.0,), kwargs={"offset": 1.0, "label": "hi"},
                          np=size)
    assert [r["rank"] for r in results] == list(range(size))
    for result in results:
        assert result["size"] == size
        np.testing.assert_allclose(result["total"], expected_total(size, 2.0, 1.0))
    out = capsys.readouterr().out
    for rank in range(size):  # each rank's output, prefixed as hvdliterun does
        assert f"[{rank}]<stdout>:hi rank {rank} of {size}" in out
    assert_gone([r["pid"] for r in results], [results[0]["job"]])


def make_closure(weights):
    bias = 0.5

    def weighted_sum(x):
        import hvdlite.numpy as hvd
        hvd.init()
        return float(hvd.allreduce(weights * x + bias, op=hvd.Sum).sum())

    return weighted_sum


@pytest.mark.timeout(60)
def test_a_closure_over_local_values_runs_on_every_rank():
    weights = np.array([1.0, 2.0, 3.0])
    results = hvdlite.runner.run(make_closure(weights), args=(2.0,), num_proc=2)
    assert results == [pytest.approx(2 * (weights * 2.0 + 0.5).sum())] * 2


@pytest.mark.timeout(60)
def test_local_slots_and_output_files(tmp_path):
    logs = tmp_path / "logs"
    results = hvdlite.run(allreduce_report, args=(1.0,), np=3, hosts="localhost:3",
                          output_filename=str(logs))
    assert [(r["rank"], r["local_rank"], r["local_size"]) for r in results] == \
        [(0, 0, 3), (1, 1, 3), (2, 2, 3)]
    for rank in range(3):
        assert (logs / f"rank.{rank}" / "stdout").read_text() == f"x rank {rank} of 3\n"


def raise_on(rank_to_fail):
    import hvdlite.numpy as hvd
    hvd.init()
    print(f"pid {os.getpid()} {os.environ['HVDLITE_JOB_ID']}", flush=True)
    if hvd.rank() == rank_to_fail:
        raise KeyError(f"no such key on rank {hvd.rank()}")
    time.sleep(60)  # the others must be stopped, not wait for this


def pids_and_jobs(text):
    found = re.findall(r"<stdout>:pid (\d+) (\S+)", text)
    return [int(pid) for pid, _ in found], sorted({job for _, job in found})


@pytest.mark.timeout(60)
def test_a_rank_that_raises_fails_the_call_with_its_traceback(capsys):
    started = time.monotonic()
    with pytest.raises(RankFailedError) as failure:
        hvdlite.run(raise_on, args=(1,), np=3)
    assert time.monotonic() - started < 20  # the other ranks did not sleep it out
    error = failure.value
    assert (error.rank, error.host) == (1, os.uname().nodename)
    assert "rank 1 (host " in str(error)
    assert "raised KeyError: 'no such key on rank 1'" in str(error)
    assert "in raise_on" in error.remote_traceback
    assert isinstance(error.__cause__, KeyError)  # the original exception, unpickled
    assert error.exception.args == ("no such key on rank 1",)
    pids, jobs = pids_and_jobs(capsys.readouterr().out)
    assert len(pids) == 3
    assert_gone(pids, jobs)


def kill_rank_1():
    print(f"pid {os.getpid()} {os.environ['HVDLITE_JOB_ID']}", flush=True)
    if os.environ["HVDLITE_RANK"] == "1":
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)


@pytest.mark.timeout(60)
def test_a_rank_killed_by_a_signal_fails_the_call(capsys):
    started = time.monotonic()
    with pytest.raises(RankFailedError, match=r"rank 1 \(host .*\) was killed by signal 9 "
                                              r"\(SIGKILL\); the other ranks were stopped"):
        hvdlite.run(kill_rank_1, np=2)
    assert time.monotonic() - started < 20
    pids, jobs = pids_and_jobs(capsys.readouterr().out)
    assert len(pids) == 2
    assert_gone(pids, jobs)


def return_a_lock():
    return threading.Lock()


@pytest.mark.timeout(60)
def test_an_unpicklable_result_names_the_rank_and_the_type():
    with pytest.raises(RankFailedError, match=r"rank \d \(host .*\) returned a value of type "
                                              r"lock that cannot be pickled") as failure:
        hvdlite.run(return_a_lock, np=2)
    assert isinstance(failure.value.__cause__, TypeError)


def test_an_unpicklable_function_or_bad_arguments_fail_before_any_rank_starts():
    lock = threading.Lock()
    with pytest.raises(TypeError, match="cannot pickle the function '.*<lambda>'"):
        hvdlite.run(lambda: lock, np=2)
    with pytest.raises(TypeError, match=r"cannot pickle keyword argument 'guard' \(of type "
                                        r"lock\)"):
        hvdlite.run(print, kwargs={"guard": lock}, np=2)
    with pytest.raises(ValueError, match="more than the 1 slot"):
        hvdlite.run(print, np=2, hosts="localhost:1")
    with pytest.raises(ValueError, match="--mpi: not allowed with argument --gloo"):
        hvdlite.run(print, np=2, use_mpi=True, use_gloo=True)


@pytest.mark.timeout(60)
def test_an_interrupted_caller_stops_every_rank():
    process = subprocess.Popen([sys.executable, DRIVER, "sleep", "2"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=WORKERS)
    lines = []
    try:
        for line in process.stdout:
            lines.append(line)
            if len(pids_and_jobs("".join(lines))[0]) == 2:
                break
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=20)
    finally:
        process.kill()
    pids, jobs = pids_and_jobs("".join(lines))
    assert len(pids) == 2, (lines, process.stderr)
    assert "interrupted: hvdlite.run was stopped by SIGINT; every rank was stopped" in out, err
    assert process.returncode == 0, err
    assert_gone(pids, jobs)


@pytest.mark.timeout(120)
def test_ranks_on_two_hosts_over_ssh(tmp_path):
    # One driver process in the launcher's network namespace calls run().
    with running_cluster(tmp_path) as cluster:
        done = subprocess.run(cluster.launcher_command(sys.executable, DRIVER, "hosts",
                                                       "hostA:2,hostB:1"),
                              capture_output=True, text=True, timeout=90, cwd=WORKERS)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.split("results ", 1)[1])
    assert [(r["rank"], r["hostname"], r["local_rank"]) for r in results] == \
        [(0, "hostA", 0), (1, "hostA", 1), (2, "hostB", 0)]
    for result in results:
        np.testing.assert_allclose(result["total"], np.arange(4.0) * (1 + 2 + 3) * 10.0)
    assert "[2]<stdout>:on hostB" in done.stdout  # a remote rank's output reached the caller


@pytest.mark.timeout(90)
def test_use_mpi_hands_the_job_to_mpirun(monkeypatch, capsys):
    mpirun = mpirun_path()
    monkeypatch.setenv("PATH", f"{Path(mpirun).parent}:{os.environ['PATH']}")
    results = hvdlite.run(allreduce_report, args=(3.0,), np=2, use_mpi=True)
    assert [r["rank"] for r in results] == [0, 1]
    for result in results:
        np.testing.assert_allclose(result["total"], expected_total(2, 3.0))
    assert "x rank 1 of 2" in capsys.readouterr().out  # mpirun's output reaches the caller


def elastic_training(hosts_file, steps, grow_at, shrink_at):
    """An elastic job's function: rank 0 adds host 127.0.0.3 to the discovery
    file at step `grow_at` and removes 127.0.0.2 at `shrink_at`; every rank
    trains full-batch linear regression and commits each step."""
    def train_elastic():
        import hvdlite.numpy as hvd
        hvd.init()
        state = hvd.elastic.ObjectState(step=0, weights=np.zeros(3), sizes=[])

        def change_hosts(edit):
            if hvd.rank() == 0:
                lines = Path(hosts_file).read_text().split()
                Path(hosts_file).write_text("\n".join(edit(lines)) + "\n")
            while True:  # commit() raises HostsUpdatedInterrupt once the job re-forms
                time.sleep(0.05)
                state.commit()

        @hvd.elastic.run
        def train(state):
            state.sizes = state.sizes + [hvd.size()]
            x, y = regression_data()
            while state.step < steps:
                shard = np.arange(hvd.rank(), len(x), hvd.size())
                gradient = hvd.allreduce(x[shard].T @ (x[shard] @ state.weights - y[shard]),
                                         op=hvd.Sum, name="gradient")
                state.weights = state.weights - 0.1 * gradient / len(x)
                state.step += 1
                state.commit()
                if state.step == grow_at and len(state.sizes) == 1:
                    change_hosts(lambda lines: lines + ["127.0.0.3:1"])
                if state.step == shrink_at and len(state.sizes) == 2:
                    change_hosts(lambda lines: [h for h in lines if not h.startswith("127.0.0.2")])

        train(state)
        return {"rank": hvd.rank(), "host": os.environ["HVDLITE_HOSTNAME"], "step": state.step,
                "sizes": state.sizes, "weights": state.weights}

    return train_elastic


def regression_data():
    x = np.random.default_rng(7).normal(size=(12, 3))
    return x, x @ np.array([1.0, -2.0, 0.5])


@pytest.mark.timeout(120)
def test_an_elastic_job_that_grows_and_shrinks_returns_the_final_rounds_results(tmp_path):
    hosts_file = tmp_path / "hosts"
    hosts_file.write_text("127.0.0.1:1\n127.0.0.2:1\n")
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat {hosts_file}\n")
    script.chmod(0o755)
    results = hvdlite.run(elastic_training(str(hosts_file), 9, 3, 6), min_np=2, max_np=3,
                          host_discovery_script=str(script), start_timeout=20,
                          discovery_interval=0.2)
    # Each worker's host is the name discovery printed, as in Horovod.
    assert [(r["rank"], r["host"]) for r in results] == [(0, "127.0.0.1"), (1, "127.0.0.3")]
    x, y = regression_data()
    weights = np.zeros(3)
    for _ in range(9):
        weights = weights - 0.1 * x.T @ (x @ weights - y) / len(x)
    for result in results:
        assert result["step"] == 9
        assert result["sizes"] == [2, 3, 2]
        np.testing.assert_allclose(result["weights"], weights, rtol=1e-12)
