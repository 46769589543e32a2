"""Attacks on the rendezvous store while a real 2-rank job starts: ranks
whose core (the C++ store client, csrc/transport/store/tcp_store_client.cc)
is pointed at a rogue store or through a tampering relay refuse with a clear
message, and silent connections to the store do not delay the job's start.
The attackers are processes on loopback (attackers.py)."""
import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hvdlite.store import StoreServer
from test_store import SECRET, attacker

HERE = Path(__file__).resolve().parent
WORKER = HERE / "workers" / "meet.py"


def clean_environment(**extra):
    """This process's environment without any launcher's variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HVDLITE_", "HOROVOD_", "OMPI_", "PMI", "SLURM_", "PMIX_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                         "PYTHONPATH")}
    env.update(extra)
    return env


def layout(rank, size=2):
    """The variables hvdliterun gives a rank on one host."""
    values = {"RANK": rank, "SIZE": size, "LOCAL_RANK": rank, "LOCAL_SIZE": size,
              "CROSS_RANK": 0, "CROSS_SIZE": 1}
    return {f"HVDLITE_{name}": str(value) for name, value in values.items()}


def start_ranks(envs):
    return [subprocess.Popen([sys.executable, str(WORKER)], env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(HERE))
            for env in envs]


def finish(ranks, timeout):
    """(return codes, stdouts, stderrs); kills what has not ended by `timeout`."""
    outputs = []
    deadline = time.monotonic() + timeout
    try:
        for rank in ranks:
            outputs.append(rank.communicate(timeout=max(1.0, deadline - time.monotonic())))
    finally:
        for rank in ranks:
            if rank.poll() is None:
                rank.kill()
                rank.communicate()
    return [r.returncode for r in ranks], [o for o, _ in outputs], [e for _, e in outputs]


def ranks_at(port, secret=SECRET):
    return [clean_environment(**layout(rank), HVDLITE_STORE_ADDR="127.0.0.1",
                              HVDLITE_STORE_PORT=str(port), HVDLITE_SECRET=secret,
                              HVDLITE_JOB_ID="storeattack", HVDLITE_START_TIMEOUT="20")
            for rank in range(2)]


@pytest.mark.timeout(120)
def test_ranks_refuse_a_rogue_store():
    with attacker("rogue") as (_, port):
        started = time.monotonic()
        codes, _, errors = finish(start_ranks(ranks_at(port)), timeout=60)
        assert codes == [1, 1], errors
        for error in errors:
            assert (f"the listener at 127.0.0.1:{port} answered as the rendezvous store but "
                    f"could not prove the job's secret") in error, error
        assert time.monotonic() - started < 30  # refused at once, not after a timeout


@pytest.mark.timeout(120)
@pytest.mark.parametrize("direction", ["to-client", "to-server"])
def test_ranks_detect_a_relay_that_flips_a_bit(direction):
    with StoreServer(SECRET, host="127.0.0.1") as server, \
            attacker("relay", server.port, direction, 0, "flip") as (_, port):
        codes, _, errors = finish(start_ranks(ranks_at(port)), timeout=60)
    assert codes == [1, 1], errors
    for error in errors:
        assert f"rendezvous store at 127.0.0.1:{port}" in error, error
        assert ("the connection was tampered with, or the peer does not know the job's "
                "secret") in error, error


@pytest.mark.timeout(120)
def test_silent_connections_do_not_delay_a_jobs_start():
    """Rank 0 hosts the store (an srun step with HVDLITE_STORE_ADDR/PORT set,
    hvdlite/common/rendezvous.py); as soon as it listens, 200 connections
    that trickle a byte a second are opened to it, more than the store lets
    wait (MAX_PENDING_HANDSHAKES), and reopened whenever it closes them."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    slurm = {"SLURM_STEP_ID": "0", "SLURM_NTASKS": "2", "SLURM_NODEID": "0",
             "SLURM_TASKS_PER_NODE": "2", "SLURM_JOB_ID": str(os.getpid()),
             "SLURM_NNODES": "1", "SLURM_JOB_NODELIST": "localhost"}
    envs = [clean_environment(**slurm, SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank),
                              HVDLITE_STORE_ADDR="127.0.0.1", HVDLITE_STORE_PORT=str(port),
                              HVDLITE_SECRET=SECRET, HVDLITE_START_TIMEOUT="30")
            for rank in range(2)]
    with attacker("loris", port, 200) as (loris, _):
        ranks = start_ranks(envs[:1])
        # Rank 1 starts once the strangers hold their connections to rank 0's store.
        ready, _, _ = select.select([loris.stdout], [], [], 60)
        assert ready and loris.stdout.readline().strip() == "ready"
        ranks += start_ranks(envs[1:])
        codes, outputs, errors = finish(ranks, timeout=90)
    assert codes == [0, 0], errors
    reports = [json.loads(out.strip().splitlines()[-1]) for out in outputs]
    assert [r["total"] for r in reports] == [[3.0] * 4] * 2
    # Start-up on an idle machine takes well under a second; the handshake
    # deadline is 5 s, so a rank held up by the strangers would take longer,
    # and one whose handshake they pushed out would have failed.
    assert reports[1]["seconds"] < 5.0, reports
