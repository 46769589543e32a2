"""Shared test harness: start N real ranks through hvdliterun, with a timeout,
and hand back what they printed."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


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

    def __repr__(self):
        return f"exit {self.returncode}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"


def run_ranks(np, script, *args, timeout=120, env=None, launcher_args=()):
    """Runs `python script args` on np ranks via hvdliterun; kills it after timeout s."""
    full_env = dict(os.environ)
    full_env.pop("PYTHONPATH", None)
    full_env.update(env or {})
    command = [sys.executable, "-m", "hvdlite.runner", "-np", str(np), *launcher_args,
               sys.executable, str(script), *map(str, args)]
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


@pytest.fixture
def world():
    """world(np, script, *args, timeout=..., env=...) -> RankResult."""
    return run_ranks
