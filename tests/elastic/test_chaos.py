"""A bounded chaos test: random SIGKILLs of the workers of an elastic job
(four one-slot hosts on loopback, a cooldown range, so that hosts come
back) during 18 s of a job that trains for at least 25 s.
However the kills fall (in a step, a rendezvous, a sync, while hosts cool
down or return), the job must finish with exit code 0 and identical
weights equal to one process's, report every kill, and leave nothing
behind. The script keeps a top-level broadcast from a static job: every
worker that joins the running job (a host back from its cooldown) runs it
alone (Note [Late joiners] in hvdlite/common/late_joiners.py), which must
never cost the job."""
import os
import random
import re
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

WORKERS = Path(__file__).parent / "workers"
sys.path.insert(0, str(WORKERS))

from elastic_jobs import assert_trained, finals  # noqa: E402

FOUR_HOSTS = "127.0.0.1:1,127.0.0.2:1,127.0.0.3:1,127.0.0.4:1"
STEPS = 250
STEP_TIME_S = 0.1  # so the job trains for at least STEPS * STEP_TIME_S = 25 s
KILLING_S = 18.0  # ...and no kill can come after a worker has finished
# A kill every 2-4 s: 4 to 9 in KILLING_S (fewer while a re-formed job is
# below three workers), of which the test needs 3.
KILL_EVERY_S = (2.0, 4.0)


def live_workers(pid_dir):
    """{worker number: pid} of this job's workers that still run. A pid is
    only trusted while its process's command line names pid_dir: a pid
    reused by another process is never signalled."""
    found = {}
    for path in Path(pid_dir).iterdir():
        if path.suffix == ".tmp":
            continue
        pid = int(path.read_text())
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if str(pid_dir).encode() in command and state != "Z":
            found[int(path.name)] = pid
    return found


def kill_at_random(pid_dir, stop, kills, rng):
    """Every KILL_EVERY_S for KILLING_S, SIGKILLs a random worker while at
    least three run (the job's --min-np is 2)."""
    deadline = time.monotonic() + KILLING_S
    while not stop.wait(rng.uniform(*KILL_EVERY_S)) and time.monotonic() < deadline:
        alive = live_workers(pid_dir)
        if len(alive) < 3:
            continue
        number, pid = rng.choice(sorted(alive.items()))
        os.kill(pid, signal.SIGKILL)
        kills.append(number)


@pytest.mark.timeout(240)
def test_random_kills_during_an_elastic_run_end_with_identical_weights(world, tmp_path):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    stop, kills = threading.Event(), []
    killer = threading.Thread(target=kill_at_random,
                              args=(pid_dir, stop, kills, random.Random(33)), daemon=True)
    killer.start()
    try:
        result = world(4, WORKERS / "numpy_elastic.py", "--steps", STEPS, "--step-time",
                       STEP_TIME_S, "--pid-dir", pid_dir, "--broadcast-first", timeout=200,
                       launcher_args=["--min-np", "2", "-H", FOUR_HOSTS,
                                      "--blacklist-cooldown-range", "2", "4",
                                      "--elastic-timeout", "60", "--discovery-interval", "0.2",
                                      "--start-timeout", "20"])
    finally:
        stop.set()
        killer.join()
    assert result.returncode == 0, (kills, result)
    assert len(kills) >= 3, (kills, result)
    for number in kills:
        assert re.search(rf"worker {number} \(rank \d+ of round \d+, host 127\.0\.0\.\d, pid "
                         rf"\d+\) was killed by signal 9 \(SIGKILL\)", result.stderr), \
            (number, result)
    started = sorted(int(path.name) for path in pid_dir.iterdir())
    reports = finals(result, started)
    assert reports and not set(reports) & set(kills), (kills, result)
    assert "which joined round" in result.stderr, result  # a host came back: a late joiner
    assert "the job stops" not in result.stderr, result
    assert_trained(reports, STEPS, len(reports))
    # Nothing is left: no worker, no shared-memory segment of the job.
    assert not live_workers(pid_dir), result
    job = next(iter(reports.values()))["job"]
    assert not [name for name in os.listdir("/dev/shm") if name.startswith(f"hvdlite-{job}")]
