"""Tests hvdlite/runner/mpi.py's mpirun command lines (most runs are in
test_foreign_launchers.py; here, one with the user's own binding)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hvdlite.runner.arguments import parse_args
from hvdlite.runner.hosts import parse_host_list
from hvdlite.runner.mpi import mpirun_command

VARIABLES = {"HVDLITE_SECRET", "HVDLITE_STORE_ADDR", "PATH"}
BIN = Path(sys.executable).parent
WORKER = Path(__file__).resolve().parent / "workers" / "layout_allreduce.py"


def command_for(argv, kind):
    args = parse_args(argv)
    return mpirun_command(args, parse_host_list(args.hosts), VARIABLES, "mpirun", kind)


def test_open_mpi_gets_hosts_slots_ssh_options_and_variables_by_name():
    command = command_for(["-np", "6", "-H", "a:4,b:2", "--mpi", "-p", "2222", "-i", "/k",
                           "--output-filename", "logs", "python", "train.py"], ("openmpi", 5))
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    assert command == ["mpirun", "-np", "6", "--host", "a:4,b:2", "--map-by", "slot",
                       "--bind-to", "none", *root, "--prtemca", "plm_ssh_args",
                       "-p 2222 -i /k", "--output", "dir=logs", "-x", "HVDLITE_SECRET", "-x", "HVDLITE_STORE_ADDR",
                       "-x", "PATH", "python", "train.py"]
    older = command_for(["-np", "2", "-H", "a:2", "-p", "2222", "python", "t.py"],
                        ("openmpi", 4))
    assert older[older.index("--mca"):older.index("--mca") + 3] == [
        "--mca", "plm_rsh_args", "-p 2222"]


def test_mpich_gets_hosts_and_a_variable_list():
    command = command_for(["-np", "3", "-H", "a:2,b:1", "--mpi", "python", "t.py"],
                          ("mpich", None))
    assert command == ["mpirun", "-np", "3", "-hosts", "a:2,b:1", "-genvlist",
                       "HVDLITE_SECRET,HVDLITE_STORE_ADDR,PATH", "python", "t.py"]


def test_a_users_placement_options_replace_hvdliteruns_defaults():
    def placement(mpi_args=None, binding_args=None):
        """The command after the host list, without --allow-run-as-root."""
        argv = ["-np", "2", "-H", "a:2", "--mpi"] + \
            (["--mpi-args", mpi_args] if mpi_args else []) + \
            (["--binding-args", binding_args] if binding_args else []) + ["python", "t.py"]
        command = command_for(argv, ("openmpi", 5))
        return [w for w in command[command.index("a:2") + 1:] if w != "--allow-run-as-root"]

    def between(command):  # what stands between the host list and the variables
        return command[:command.index("-x")]

    # Nothing given: every slot a rank, no binding.
    assert between(placement()) == ["--map-by", "slot", "--bind-to", "none"]
    # The example: the user's binding, once, after our mapping.
    command = placement("--bind-to none")
    assert command.count("--bind-to") == 1 and between(command) == ["--map-by", "slot"], command
    assert command[-4:] == ["--bind-to", "none", "python", "t.py"], command
    command = placement("--bind-to=core --map-by ppr:1:node")
    assert between(command) == [] and command.count("--map-by") == 1, command
    # A rankfile places and binds; -npernode (Open MPI 4) places.
    assert between(placement("-rf ranks.txt")) == []
    assert between(placement("-npernode 1")) == ["--bind-to", "none"]
    # --binding-args replaces both, as in Horovod.
    assert between(placement(binding_args="--rankfile r.txt")) == ["--rankfile", "r.txt"]


@pytest.mark.timeout(120)
def test_hvdliterun_mpi_runs_with_the_users_binding():
    # Before, mpirun refused the job: "bind-to listed more than once".
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HVDLITE_", "HOROVOD_", "OMPI_"))}
    env["PATH"] = f"{BIN}:{env['PATH']}"
    result = subprocess.run(
        [sys.executable, "-m", "hvdlite.runner", "--mpi", "-np", "2", "--mpi-args=--bind-to none",
         sys.executable, str(WORKER)], env=env, cwd=WORKER.parent, capture_output=True, text=True,
        timeout=100)
    assert result.returncode == 0, result.stdout + result.stderr
    reports = sorted((json.loads(line[line.index("{"):]) for line in result.stdout.splitlines()
                      if "{" in line), key=lambda report: report["rank"])
    assert [r["rank"] for r in reports] == [0, 1], result.stdout
    assert all(r["total"] == (np.arange(6) * 3).tolist() for r in reports), reports
