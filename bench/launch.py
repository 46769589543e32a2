"""Starting a benchmark script on N ranks under each backend's launcher
(hvdliterun for hvdlite and gloo, mpirun for MPI, horovodrun for Horovod) and
reading back its JSON."""
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from backends import MPIRUN_BACKENDS

HERE = Path(__file__).resolve().parent


def available_backends():
    found = ["hvdlite"]
    if importlib.util.find_spec("torch") is not None:
        found += ["hvdlite-torch", "gloo"]
    if mpirun() is not None and _hvdlite_has_mpi():
        found.append("hvdlite-mpi")
    if importlib.util.find_spec("mpi4py") is not None and mpirun() is not None:
        found.append("mpi")
    if importlib.util.find_spec("horovod") is not None and horovodrun() is not None:
        found.append("horovod")
    return found


def _hvdlite_has_mpi():
    from hvdlite.common import basics
    return basics.mpi_built()


def _launcher(name):
    """The launcher installed beside this Python (a venv's), else on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


def mpirun():
    return _launcher("mpirun")


def horovodrun():
    return _launcher("horovodrun")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(backend, script, np_, extra, timeout):
    """Runs script on np_ ranks under the backend's launcher; returns its JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        args = [str(HERE / script), "--backend", backend, "--json", str(out), *extra]
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        if backend in MPIRUN_BACKENDS:
            command = [mpirun(), "--oversubscribe", "-np", str(np_), sys.executable, *args]
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            if backend == "hvdlite-mpi":
                env["HVDLITE_CPU_OPERATIONS"] = "mpi"  # one host defaults to shared memory
        elif backend == "horovod":
            command = [horovodrun(), "-np", str(np_), sys.executable, *args]
        else:
            command = [sys.executable, "-m", "hvdlite.runner", "-np", str(np_), sys.executable, *args]
            env["BENCH_GLOO_PORT"] = str(free_port())
        print(f"$ {' '.join(command)}", flush=True)
        done = subprocess.run(command, env=env, timeout=timeout, cwd=str(HERE))
        if done.returncode != 0 or not out.exists():
            print(f"  {backend} {script} failed (exit {done.returncode}); left out", flush=True)
            return None
        return json.loads(out.read_text())
