"""Tests hvdlite/runner/launch.py on one host, by running `python -m
hvdlite.runner` on the small scripts in workers/."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WORKERS = Path(__file__).resolve().parent / "workers"


def is_alive(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_until(condition, timeout):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def recorded_pids(pid_dir):
    pids = []
    for path in Path(pid_dir).glob("rank.*"):
        if not path.name.endswith(".tmp"):
            pids += [int(pid) for pid in path.read_text().split()]
    return pids


class Launcher:
    """Starts hvdliterun and cleans up after it, whatever the test did."""

    def __init__(self):
        self.processes = []
        self.pid_dirs = []

    def start(self, *args):
        env = dict(os.environ, PYTHONPATH=str(REPO))
        process = subprocess.Popen([sys.executable, "-m", "hvdlite.runner", *map(str, args)],
                                   cwd=REPO, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        self.processes.append(process)
        return process

    def run(self, *args, timeout=30):
        """Runs hvdliterun to the end; returns (exit code, stdout, stderr)."""
        process = self.start(*args)
        out, err = process.communicate(timeout=timeout)
        return process.returncode, out.decode(), err.decode()

    def cleanup(self):
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
        for pid_dir in self.pid_dirs:
            for pid in recorded_pids(pid_dir):
                if is_alive(pid):
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def launcher():
    launcher = Launcher()
    yield launcher
    launcher.cleanup()


@pytest.fixture
def pid_dir(tmp_path, launcher):
    directory = tmp_path / "pids"
    directory.mkdir()
    launcher.pid_dirs.append(directory)
    return directory


def rank_lines(text, stream="stdout"):
    """{rank: [lines]} from hvdliterun's prefixed output."""
    lines = {}
    for line in text.splitlines():
        match = re.match(rf"\[(\d+)\]<{stream}>:(.*)$", line)
        if match:
            lines.setdefault(int(match.group(1)), []).append(match.group(2))
    return lines


@pytest.mark.timeout(60)
@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_each_rank_gets_its_place_in_the_job(launcher, size):
    code, out, err = launcher.run("-np", size, sys.executable, WORKERS / "print_env.py",
                                  "--verbose", "-np", "7")
    assert code == 0, err
    reports = {rank: json.loads(lines[0]) for rank, lines in rank_lines(out).items()}
    assert sorted(reports) == list(range(size))
    secrets_seen = {report["env"]["HVDLITE_SECRET"] for report in reports.values()}
    assert len(secrets_seen) == 1 and len(secrets_seen.pop()) == 32
    for rank, report in reports.items():
        env = report["env"]
        expected = {"RANK": rank, "SIZE": size, "LOCAL_RANK": rank, "LOCAL_SIZE": size,
                    "CROSS_RANK": 0, "CROSS_SIZE": 1}
        for name, value in expected.items():
            assert env[f"HVDLITE_{name}"] == env[f"HOROVOD_{name}"] == str(value), name
        assert env["HVDLITE_HOSTNAME"] == env["HOROVOD_HOSTNAME"] != ""
        assert env["HVDLITE_STORE_ADDR"] == env["HVDLITE_BIND_ADDR"] == "127.0.0.1"
        assert env["HVDLITE_JOB_ID"] == reports[0]["env"]["HVDLITE_JOB_ID"]
        assert env["PYTHONUNBUFFERED"] == "1"
        # The command's own flags reach it untouched, and the store works.
        assert report["argv"] == ["--verbose", "-np", "7"]
        assert report["neighbour_pid"] == str(reports[(rank + 1) % size]["pid"])
        assert report["secret_on_command_lines"] == []
    assert sorted(report["arrived"] for report in reports.values()) == list(range(1, size + 1))


@pytest.mark.timeout(60)
def test_verbose_never_prints_the_secret(launcher):
    code, out, err = launcher.run("-np", 2, "--verbose", sys.executable, "-c",
                                  "import os; print(os.environ['HVDLITE_SECRET'])")
    assert code == 0, err
    secret = rank_lines(out)[0][0]
    assert "started rank 1" in err and "rendezvous store on 127.0.0.1:" in err
    assert secret not in err


@pytest.mark.timeout(60)
def test_output_is_prefixed_by_rank_and_written_to_files(launcher, tmp_path):
    logs = tmp_path / "logs"
    code, out, err = launcher.run("-np", 3, "--output-filename", logs,
                                  sys.executable, WORKERS / "print_output.py")
    assert code == 0, err
    stdout, stderr = rank_lines(out), rank_lines(err, "stderr")
    for rank in range(3):
        # Every long line arrived whole, with its own rank's prefix.
        assert stdout[rank][:100] == [str(rank) * 3000] * 100
        assert stdout[rank][100:] == [f"hello from rank {rank}",
                                      f"no newline at the end from rank {rank}"]
        assert stderr[rank] == [f"warning from rank {rank}", "bad byte \ufffd here"]
        written = (logs / f"rank.{rank}" / "stdout").read_bytes()
        assert written.endswith(f"hello from rank {rank}\nno newline at the end "
                                f"from rank {rank}".encode())
        assert (logs / f"rank.{rank}" / "stderr").read_bytes() == (
            f"warning from rank {rank}\nbad byte \xff here\n".encode("latin-1"))
    assert "<stderr>" not in out and "<stdout>" not in err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how, exit_code, message", [
    ("exit3", 3, "exited with code 3 (its stderr is above, lines [1]<stderr>); stopping the "
                 "other 3 ranks."),
    ("sigkill", 137, "was killed by signal 9 (SIGKILL) (its stderr is above, lines "
                     "[1]<stderr>); stopping the other 3 ranks."),
])
def test_a_failing_rank_stops_the_job(launcher, pid_dir, how, exit_code, message):
    started = time.monotonic()
    code, out, err = launcher.run("-np", 4, sys.executable, WORKERS / "stay_or_fail.py",
                                  pid_dir, "--child", "--fail", f"1:{how}")
    assert code == exit_code, err
    assert time.monotonic() - started < 15  # the others sleep 60 s
    summaries = [line for line in err.splitlines() if line.startswith("hvdliterun: rank")]
    assert len(summaries) == 1, err
    rank1_pid = int((pid_dir / "rank.1").read_text().split()[0])
    assert summaries[0] == f"hvdliterun: rank 1 (host {socket.gethostname()}, " \
                           f"pid {rank1_pid}) {message}"
    # Once, as the rank wrote it, not again below the launcher's line.
    assert [line for line in err.splitlines() if "failing on purpose" in line] == [
        "[1]<stderr>:rank 1 is failing on purpose"]
    pids = recorded_pids(pid_dir)
    assert len(pids) == 8  # 4 ranks and their children
    assert wait_until(lambda: not any(map(is_alive, pids)), timeout=5)


@pytest.mark.timeout(60)
def test_the_launcher_removes_shared_memory_a_killed_job_left(launcher):
    code, out, err = launcher.run("-np", 2, sys.executable, WORKERS / "leave_segment_and_die.py")
    assert code == 137, err
    created = [line.split("created ", 1)[1] for line in out.splitlines() if "created " in line]
    assert len(created) == 2, out
    left = [path for path in created if os.path.exists(path)]
    for path in left:  # the test's own cleanup, so a failure leaks nothing either
        os.remove(path)
    assert not left, f"the launcher left {left} in /dev/shm"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_launcher_stops_every_rank(launcher, pid_dir, signum):
    process = launcher.start("-np", 3, sys.executable, WORKERS / "stay_or_fail.py",
                             pid_dir, "--child")
    assert wait_until(lambda: len(recorded_pids(pid_dir)) == 6, timeout=30)
    process.send_signal(signum)
    _, err = process.communicate(timeout=15)
    assert process.returncode == 128 + signum
    assert f"received {signal.Signals(signum).name}; stopping 3 rank(s)" in err.decode()
    assert wait_until(lambda: not any(map(is_alive, recorded_pids(pid_dir))), timeout=5)


@pytest.mark.timeout(60)
def test_ranks_do_not_outlive_a_launcher_killed_with_sigkill(launcher, pid_dir):
    process = launcher.start("-np", 2, sys.executable, WORKERS / "stay_or_fail.py", pid_dir)
    assert wait_until(lambda: len(recorded_pids(pid_dir)) == 2, timeout=30)
    process.kill()  # no chance to clean up: the kernel's parent-death signal must
    process.communicate(timeout=15)
    assert wait_until(lambda: not any(map(is_alive, recorded_pids(pid_dir))), timeout=5)


@pytest.mark.timeout(60)
def test_a_second_ctrl_c_kills_ranks_that_ignore_the_first(launcher, pid_dir):
    process = launcher.start("-np", 2, sys.executable, WORKERS / "stay_or_fail.py",
                             pid_dir, "--ignore-signals")
    assert wait_until(lambda: len(recorded_pids(pid_dir)) == 2, timeout=30)
    process.send_signal(signal.SIGINT)
    time.sleep(0.5)
    assert process.poll() is None  # the ranks ignore SIGINT, so it waits
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=5)  # well before the 10 s grace period
    assert process.returncode == 130
    assert "killing all ranks" in err.decode()
    assert not any(map(is_alive, recorded_pids(pid_dir)))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("args, message", [
    ([], "the following arguments are required: -np"),
    (["-np", "2"], "missing the command to run"),
    (["-np", "0", "true"], "-np must be at least 1, got 0"),
    (["-np", "two", "true"], "invalid int value: 'two'"),
    (["-np", "2", "--bogus", "true"], "unrecognized arguments: --bogus"),
    (["-np", "2", "--start-timeout", "0", "true"], "--start-timeout must be positive"),
    (["-np", "2", "-H", "host1:two", "true"], "malformed host 'host1:two' in -H/--hosts"),
    (["-np", "3", "-H", "localhost:2", "true"], "-np 3 is more than the 2 slot(s)"),
    (["-np", "2", "--hostfile", "/nonexistent/hosts", "true"],
     "cannot read hostfile '/nonexistent/hosts': No such file or directory"),
    (["-np", "2", "--config-file", "/nonexistent/c.yaml", "true"],
     "cannot read --config-file '/nonexistent/c.yaml'"),
    (["-np", "2", sys.executable, "no_such_train.py"],
     "the script 'no_such_train.py' does not exist"),
])
def test_bad_input_exits_2_with_a_message(launcher, args, message):
    code, out, err = launcher.run(*args)
    assert code == 2
    assert message in err


@pytest.mark.timeout(60)
def test_a_command_that_does_not_exist_exits_127(launcher):
    code, _, err = launcher.run("-np", 2, "no-such-command-hvdlite")
    assert code == 127
    assert "cannot start rank 0: no-such-command-hvdlite: No such file or directory" in err


@pytest.mark.timeout(60)
def test_check_build_and_version(launcher):
    code, out, err = launcher.run("--check-build")
    assert code == 0, err
    assert out.startswith("hvdlite v")
    for line in ("Available Frameworks:", "    [X] NumPy", "Available Controllers:",
                 "    [X] TCP (Horovod's Gloo)", "Available Tensor Operations:"):
        assert line in out.splitlines()
    code, out, _ = launcher.run("--version")
    assert code == 0 and out.startswith("hvdlite ")


@pytest.mark.timeout(60)
def test_tuning_flags_reach_the_ranks(launcher):
    code, out, err = launcher.run("-np", 2, "-H", "localhost:3", "--fusion-threshold-mb", 1,
                                  "--log-level", "info", "--autotune",
                                  sys.executable, WORKERS / "print_env.py")
    assert code == 0, err
    printed = rank_lines(out)
    assert sorted(printed) == [0, 1], out  # a loop over no rank would check nothing
    for lines in printed.values():
        env = json.loads(lines[0])["env"]
        assert env["HVDLITE_FUSION_THRESHOLD"] == "1048576"
        assert env["HVDLITE_LOG_LEVEL"] == "info"
        assert env["HVDLITE_AUTOTUNE"] == "1"


@pytest.mark.timeout(60)
def test_ranks_that_do_not_meet_within_the_start_timeout_fail_the_job(launcher):
    script = ("import os, time\n"
              "import hvdlite.numpy as hvd\n"
              "if os.environ['HVDLITE_RANK'] == '1':\n"
              "    time.sleep(60)  # never reaches init()\n"
              "hvd.init()\n")
    started = time.monotonic()
    code, _, err = launcher.run("-np", 2, "--start-timeout", 2, sys.executable, "-c", script)
    assert code == 1, err
    assert time.monotonic() - started < 20
    summary = [line for line in err.splitlines() if line.startswith("hvdliterun: rank")]
    assert summary and summary[0].startswith("hvdliterun: rank 0 ") and \
        "exited with code 1 (its stderr is above, lines [0]<stderr>); stopping the other 1 " \
        "rank." in summary[0], err
    assert "waited 2000 ms for rank(s) 1 to publish their address" in err
