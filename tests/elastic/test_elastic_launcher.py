"""hvdliterun in elastic mode: what it says and how it ends when discovery
fails, names a host it cannot use, or the launcher is interrupted."""
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

WORKERS = Path(__file__).parent / "workers"
REPO = Path(__file__).resolve().parents[2]


def launch(*args):
    return subprocess.Popen([sys.executable, "-m", "hvdlite.runner", *map(str, args)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process, timeout=60):
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"hvdliterun did not end within {timeout} s:\n{out}\n{err}")
    return process.returncode, out, err


def script(tmp_path, body):
    path = tmp_path / "discover.sh"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def test_failing_discovery_script_stops_before_starting(tmp_path):
    discover = script(tmp_path, "echo 'no allocation found' >&2; exit 4")
    code, _, err = finish(launch("--min-np", "2", "--host-discovery-script", discover,
                                 sys.executable, "-c", "pass"))
    assert code == 1, err
    assert "exited with code 4: no allocation found" in err, err


def test_too_few_slots_at_start_waits_then_says_so(tmp_path):
    discover = script(tmp_path, "echo 127.0.0.1:1")
    code, _, err = finish(launch("--min-np", "2", "--host-discovery-script", discover,
                                 "--elastic-timeout", "0.5", "--discovery-interval", "0.1",
                                 sys.executable, "-c", "pass"))
    assert code == 1, err
    assert "discovery found 1 slot(s) (127.0.0.1:1), fewer than --min-np 2" in err, err


def test_unreachable_remote_host_is_named_and_stops_the_job_at_once(tmp_path):
    # Remote hosts are reached over ssh (tests/elastic/test_remote_elastic.py).
    # Both workers of the only host are lost: nothing is left to re-form with,
    # so the job stops with ssh's code at once, not after --elastic-timeout.
    discover = script(tmp_path, "echo far-away-host.invalid:2")
    started = time.monotonic()
    code, _, err = finish(launch("-np", "2", "--min-np", "1", "--host-discovery-script", discover,
                                 "--start-timeout", "5", sys.executable, "-c", "pass"))
    assert time.monotonic() - started < 30, err
    assert code == 255, err
    for worker in (0, 1):
        assert f"worker {worker} (rank {worker} of round 0, host far-away-host.invalid) was " \
               f"lost: cannot reach host far-away-host.invalid over ssh" in err, err
    assert "every worker of round 0 failed, so a new round would fail alike: the job stops " \
           "with the exit code of the first failure, worker 0 (host far-away-host.invalid)" \
           in err, err


def test_sigterm_stops_every_worker(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    worker = tmp_path / "sleeper.py"
    worker.write_text(
        "import os, pathlib, sys, time\n"
        f"pathlib.Path({str(pids)!r}, str(os.getpid())).touch()\n"
        "time.sleep(120)\n")
    process = launch("-np", "2", "--min-np", "2", sys.executable, worker)
    deadline = time.monotonic() + 30
    while len(list(pids.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(list(pids.iterdir())) == 2
    process.send_signal(signal.SIGTERM)
    code, _, err = finish(process, timeout=30)
    assert code == 128 + signal.SIGTERM, err
    assert "received SIGTERM; stopping 2 worker(s)" in err, err
    for pid in pids.iterdir():
        assert not os.path.exists(f"/proc/{pid.name}") or \
            open(f"/proc/{pid.name}/stat").read().rpartition(")")[2].split()[0] == "Z"


def test_every_worker_failing_with_a_script_error_stops_the_job_at_once(tmp_path):
    # A typo fails on any host: once every worker of the round has failed, the
    # job ends with the first one's code and output (Note [Failure rules]),
    # not after --elastic-timeout waiting for hosts.
    worker = tmp_path / "typo.py"
    worker.write_text(
        "import sys\n"
        "print('preparing data', file=sys.stderr, flush=True)\n"
        "try:\n"
        "    modle.fit()\n"
        "except NameError as error:\n"
        "    print(f'typo: {error}', file=sys.stderr, flush=True)\n"
        "    sys.exit(7)\n")
    started = time.monotonic()
    code, _, err = finish(launch("--min-np", "2", "-H", "127.0.0.1:1,127.0.0.2:1",
                                 sys.executable, worker), timeout=60)
    assert time.monotonic() - started < 15, err
    assert code == 7, err
    assert "every worker of round 0 failed, so a new round would fail alike" in err, err
    assert "exited with code 7" in err, err
    # Each worker's error once, in its own output above the launcher's summary.
    before, _, after = err.rpartition("every worker of round 0")
    assert before.count("typo: name 'modle' is not defined") == 2 and "typo" not in after, err
    assert re.search(r"which exited with code 7 \(its stderr is above, lines \[[01]\]<stderr>\)",
                     after), err
    # Judged together: no host is excluded on the way to the stop.
    assert "excluding host" not in err and "re-forming" not in err, err
