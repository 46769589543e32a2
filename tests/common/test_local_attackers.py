"""Another user on the same host attacks a job while it starts: silent
connections and a forged handshake on the ranks' data ports (Note [Concurrent
handshakes], csrc/transport/tcp/acceptor.h), and files planted under
shared-memory names (Note [Segment names], csrc/transport/shm/segment.h). The
job must start on time and compute the right allreduce anyway.

The attacker is this test process, on loopback. The job's last rank waits for
a go file, so every attack is in place while the other ranks are listening."""
import contextlib
import os
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

psutil = pytest.importorskip("psutil")

from conftest import REPO  # noqa: E402

WORKER = Path(__file__).parent / "workers" / "late_rank.py"
OTHER_UID = 54321  # no one's: stands for another user of the host


@contextlib.contextmanager
def late_job(tmp_path, np, env=None, timeout=90):
    """Starts `np` ranks of late_rank.py under hvdliterun, the last one held
    back; yields a Job. Stops the launcher (and so its ranks) if the test ends
    early."""
    go = tmp_path / "go"
    full_env = dict(os.environ, HVDLITE_TEST_LATE_RANK=str(np - 1), HVDLITE_TEST_GO_FILE=str(go))
    full_env.pop("PYTHONPATH", None)
    full_env.update(env or {})
    launcher = subprocess.Popen(
        [sys.executable, "-m", "hvdlite.runner", "-np", str(np), "--start-timeout", "60",
         sys.executable, str(WORKER)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env,
        cwd=str(REPO / "tests"))
    job = Job(launcher, go, timeout)
    try:
        yield job
    finally:
        if launcher.poll() is None:
            launcher.terminate()
            try:
                launcher.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                launcher.kill()
                launcher.communicate()


class Job:
    def __init__(self, launcher, go, timeout):
        self.launcher, self.go, self.timeout = launcher, go, timeout
        self.released_at = None

    def rank_process(self, rank, within=30):
        """The psutil.Process of `rank`, once the launcher has started it."""
        give_up = time.time() + within
        while time.time() < give_up:
            for child in psutil.Process(self.launcher.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if child.environ().get("HVDLITE_RANK") == str(rank):
                        return child
            time.sleep(0.05)
        pytest.fail(f"rank {rank} did not start within {within} s")

    def data_port(self, rank, within=30):
        """The port `rank` listens on for its data links (its only listener)."""
        process = self.rank_process(rank)
        give_up = time.time() + within
        while time.time() < give_up:
            with contextlib.suppress(psutil.Error):
                for connection in process.net_connections(kind="tcp"):
                    if connection.status == psutil.CONN_LISTEN:
                        return connection.laddr.port
            time.sleep(0.05)
        pytest.fail(f"rank {rank} did not listen within {within} s")

    def release(self):
        """Lets the held-back rank call init()."""
        self.released_at = time.time()
        self.go.write_text("go")

    def finish(self):
        stdout, stderr = self.launcher.communicate(timeout=self.timeout)
        return self.launcher.returncode, stdout, stderr


def _init_times(stdout):
    return [float(t) for t in re.findall(r"init returned at ([0-9.]+)", stdout)]


def _forged_handshake(port, outcome):
    """Connects first, claims rank 1 without the secret, and records the verdict byte."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=40) as stranger:
            outcome["address"] = "127.0.0.1:%d" % stranger.getsockname()[1]
            greeting = b""
            while len(greeting) < 24:
                chunk = stranger.recv(24 - len(greeting))
                if not chunk:
                    break
                greeting += chunk
            outcome["greeting"] = greeting
            stranger.sendall((1).to_bytes(4, "big") + secrets.token_bytes(16 + 32))
            outcome["verdict"] = stranger.recv(1)
    except OSError as error:
        outcome["error"] = error


def test_silent_connections_and_a_forged_rank_do_not_hold_up_start_up(tmp_path):
    silent = []
    outcome = {}
    try:
        with late_job(tmp_path, 3, env={"HVDLITE_LOG_LEVEL": "info"}) as job:
            ports = [job.data_port(0), job.data_port(1)]
            stranger = threading.Thread(target=_forged_handshake, args=(ports[0], outcome))
            stranger.start()
            time.sleep(0.2)  # the stranger's connection comes first
            for port in ports:
                # Dozens, yet with the stranger and the real ranks fewer than
                # the acceptor's 32 pending, which would evict the stranger
                # (the oldest) before it is greeted (eviction: test_tcp_failures).
                for _ in range(25):
                    silent.append(socket.create_connection(("127.0.0.1", port), timeout=10))
            job.release()
            returncode, stdout, stderr = job.finish()
            stranger.join(timeout=30)
    finally:
        for connection in silent:
            connection.close()
    assert returncode == 0, stdout + stderr
    assert stdout.count("allreduce OK") == 3, stdout + stderr
    # One silent connection handled at a time would cost 5 s (10 s before).
    started = max(_init_times(stdout)) - job.released_at
    assert started < 4.5, f"init took {started:.1f} s after the last rank came\n{stderr}"
    assert outcome.get("greeting", b"")[:4] == b"HVDM", outcome
    # Not linked as rank 1 (the job's allreduces above are right), and said so
    # in rank 0's log. Refused with a verdict when rank 0 read the forged reply
    # before the mesh was complete; on a loaded machine the real ranks may
    # complete it first, and rank 0 then drops the unfinished handshake.
    if outcome.get("verdict") == b"\x00":
        assert f"dropped a connection from {outcome['address']} to the data port: it claimed " \
               "to be rank 1 but failed authentication" in stderr, stderr
    else:
        assert outcome.get("verdict") == b"", outcome  # closed: no verdict, not accepted
        assert f"dropped a connection from {outcome['address']} that was still in its " \
               "handshake when the mesh was complete" in stderr, stderr


def _sanitized(text):
    return "".join(c if c.isalnum() or c == "-" else "_" for c in text)


def _todays_name(job_id, members, made_before=0):
    """The deterministic name main's shm_transport.cc gave a set's segment."""
    digest = 1469598103934665603
    for rank in members:
        digest = ((digest ^ rank) * 1099511628211) % 2**64
    return f"hvdlite-{_sanitized(job_id)}-r0-{digest:016x}-{len(members)}-{made_before}"


def test_pre_created_shared_memory_names_do_not_stop_the_job(tmp_path):
    planted = []
    try:
        with late_job(tmp_path, 3) as job:
            job_id = job.rank_process(0).environ()["HVDLITE_JOB_ID"]
            # Today's predictable names, as a directory: the creator can
            # neither remove nor replace it (as on a /dev/shm without the
            # sticky bit, or a file of another user where it has one).
            for members in ([0, 1, 2], [0, 1], [1, 2], [0, 2]):
                for made_before in range(3):
                    path = Path("/dev/shm") / _todays_name(job_id, members, made_before)
                    path.mkdir()
                    planted.append(path)
            # Guesses of the random part, as another user's open segments.
            for _ in range(20):
                path = Path("/dev/shm") / f"hvdlite-{_sanitized(job_id)}-r0-{secrets.token_hex(16)}"
                path.write_bytes(b"\0" * 4096)
                os.chmod(path, 0o666)
                if os.getuid() == 0:
                    os.chown(path, OTHER_UID, -1)
                planted.append(path)
            job.release()
            returncode, stdout, stderr = job.finish()
    finally:
        for path in planted:
            with contextlib.suppress(OSError):
                path.rmdir() if path.is_dir() else path.unlink()
    assert returncode == 0, stdout + stderr
    assert stdout.count("allreduce OK") == 3, stdout + stderr
    leftovers = [p for p in os.listdir("/dev/shm") if p.startswith(f"hvdlite-{_sanitized(job_id)}-")]
    assert not leftovers, leftovers
