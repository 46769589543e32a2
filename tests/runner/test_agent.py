"""The ssh agent (hvdlite/runner/agent.py) as an elastic job drives it
("more_ranks"), spoken to directly over its stdin and stdout, without ssh:
workers started later by command, a signal to one of them, and the end of
stdin stopping the rest and removing the job's /dev/shm leftovers."""
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from hvdlite.runner.agent import CONTROL_PREFIX
from hvdlite.runner.secret import make_job_id, make_secret
from hvdlite.store import StoreServer

WORKER = "import os, time; print(os.environ['WORKER_NAME'], flush=True); time.sleep(60)"


class AgentSession:
    """An agent process and the lines it sends back, read on a thread."""

    def __init__(self, spec):
        self.process = subprocess.Popen([sys.executable, "-m", "hvdlite.runner.agent"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)
        self._lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.send(json.dumps(spec))

    def send(self, line):
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def expect(self, wanted, timeout=20):
        """Skips lines until one for which wanted(line) holds; returns it."""
        while True:
            try:
                line = self._lines.get(timeout=timeout)
            except queue.Empty:
                pytest.fail(f"the agent did not send the expected line within {timeout} s")
            if line is None:
                pytest.fail("the agent closed its output before sending the expected line")
            if wanted(line):
                return line

    def control(self, kind, **fields):
        def matches(line):
            if not line.startswith(CONTROL_PREFIX):
                return False
            message = json.loads(line[len(CONTROL_PREFIX):])
            return message["kind"] == kind and all(message[k] == v for k, v in fields.items())
        return json.loads(self.expect(matches)[len(CONTROL_PREFIX):])

    def _read(self):
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)


@pytest.mark.timeout(60)
def test_agent_starts_more_workers_signals_one_and_cleans_up_when_stdin_ends(tmp_path):
    secret, job_id = make_secret(), make_job_id()
    leftover = Path("/dev/shm", f"hvdlite-{job_id}-r0-leftover")
    with StoreServer(secret, host="127.0.0.1") as store:
        spec = {"command": [sys.executable, "-c", WORKER], "cwd": str(tmp_path),
                "size": None, "more_ranks": True,
                "env": {"HVDLITE_SECRET": secret, "HVDLITE_JOB_ID": job_id},
                "store_port": store.port, "store_candidates": ["127.0.0.1"],
                "connect_timeout": 10, "network_interfaces": None,
                "ranks": [{"rank": 4, "env": {"WORKER_NAME": "first"}}]}
        agent = AgentSession(spec)
        try:
            agent.control("ready", store_addr="127.0.0.1")
            agent.expect(lambda line: line == "[4]<stdout>:first")
            agent.send("start " + json.dumps({"rank": 7, "env": {"WORKER_NAME": "later"}}))
            later = agent.control("started", rank=7)
            agent.expect(lambda line: line == "[7]<stdout>:later")
            agent.send(f"signal {int(signal.SIGTERM)} 7")  # that worker only
            agent.control("exit", rank=7, returncode=-signal.SIGTERM)
            assert agent.process.poll() is None  # worker 4 still runs
            leftover.write_text("left behind")
            agent.process.stdin.close()  # no more workers: stop, clean up, end
            agent.control("exit", rank=4, returncode=-signal.SIGTERM)
            assert agent.process.wait(timeout=20) == 0
            assert not leftover.exists(), "the agent left the job's segment in /dev/shm"
            assert not os.path.exists(f"/proc/{later['pid']}/cmdline")
        finally:
            if agent.process.poll() is None:
                agent.process.kill()
                agent.process.wait()
            if leftover.exists():
                leftover.unlink()


@pytest.mark.timeout(60)
def test_agent_refuses_a_rogue_store_on_a_candidate_address(tmp_path):
    """A listener on one of the launcher's addresses that does not know the
    job's secret (docker0's 172.17.0.1 often exists on every host) is never
    taken for the store: with the real store also a candidate the agent picks
    it, and with only the rogue it fails saying why."""
    secret, job_id = make_secret(), make_job_id()
    attackers = Path(__file__).resolve().parents[1] / "store" / "attackers.py"
    with StoreServer(secret, host="127.0.0.1") as store:
        rogue = subprocess.Popen([sys.executable, str(attackers), "rogue", "127.0.0.2",
                                  str(store.port)], stdout=subprocess.PIPE, text=True)
        try:
            assert rogue.stdout.readline().startswith("listening")
            for candidates in (["127.0.0.2", "127.0.0.1"], ["127.0.0.2"]):
                spec = {"command": [sys.executable, "-c", WORKER], "cwd": str(tmp_path),
                        "size": None, "more_ranks": False,
                        "env": {"HVDLITE_SECRET": secret, "HVDLITE_JOB_ID": job_id},
                        "store_port": store.port, "store_candidates": candidates,
                        "connect_timeout": 10, "network_interfaces": None, "ranks": []}
                agent = AgentSession(spec)
                try:
                    if len(candidates) == 2:
                        agent.control("ready", store_addr="127.0.0.1")
                    else:
                        error = agent.control("error")
                        assert (f"the listener at 127.0.0.2:{store.port} answered as the "
                                f"rendezvous store but could not prove the job's secret"
                                ) in error["message"]
                    assert agent.process.wait(timeout=20) in (0, 1)
                finally:
                    if agent.process.poll() is None:
                        agent.process.kill()
                        agent.process.wait()
        finally:
            rogue.kill()
            rogue.wait(timeout=10)
            rogue.stdout.close()
