"""Tests hvdlite/runner/mpi.py's mpirun command lines (the runs themselves
are in test_foreign_launchers.py)."""
import os

from hvdlite.runner.arguments import parse_args
from hvdlite.runner.hosts import parse_host_list
from hvdlite.runner.mpi import mpirun_command

VARIABLES = {"HVDLITE_SECRET", "HVDLITE_STORE_ADDR", "PATH"}


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
