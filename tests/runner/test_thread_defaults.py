"""Thread pools of ranks that share a host (hvdlite/common/threads.py, Note
[Threads per rank]): the rule, a rank's environment under hvdliterun (this
host and the ssh agent), hvdlite.run and an elastic job, the user's own
setting kept, and init() setting them itself under a launcher that did not."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hvdlite
from hvdlite.common.threads import CHOSEN_VARIABLE, host_cores, thread_defaults
from hvdlite.runner.secret import make_job_id, make_secret
from hvdlite.store import StoreServer
from test_agent import CONTROL_PREFIX, AgentSession

REPO = Path(__file__).resolve().parents[2]
SHARE = str(max(1, host_cores() // 2))  # each of 2 ranks on this host
THREAD_NAMES = ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", CHOSEN_VARIABLE)
# A rank that joins the job (init() logs what was chosen) and prints its variables.
RANK = ("import json, os, hvdlite; hvdlite.init(); "
        f"print('threads', json.dumps({{n: os.environ.get(n) for n in {THREAD_NAMES!r}}}), "
        "flush=True); hvdlite.shutdown()")


def user_environment(**variables):
    env = {key: value for key, value in os.environ.items() if key not in THREAD_NAMES}
    env.update(PYTHONPATH=str(REPO), HVDLITE_LOG_LEVEL="info", **variables)
    return env


def printed_threads(output):
    return [json.loads(line.split("threads ", 1)[1]) for line in output.splitlines()
            if "threads {" in line]


def run_launcher(*args, env, timeout=60):
    done = subprocess.run([sys.executable, "-m", "hvdlite.runner", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_the_rule():
    assert thread_defaults(2, {}, cores=8) == {
        "OMP_NUM_THREADS": "4", "TF_NUM_INTRAOP_THREADS": "4", CHOSEN_VARIABLE: "8,2"}
    assert thread_defaults(4, {}, cores=2)["OMP_NUM_THREADS"] == "1"  # at least one
    assert thread_defaults(1, {}, cores=8) == {}  # alone on its host: the machine is its own
    assert thread_defaults(2, {"OMP_NUM_THREADS": "3"}, cores=8) == {}  # someone chose
    kept = thread_defaults(2, {"TF_NUM_INTRAOP_THREADS": "2"}, cores=8)
    assert "TF_NUM_INTRAOP_THREADS" not in kept and kept["OMP_NUM_THREADS"] == "4"


@pytest.mark.timeout(90)
def test_hvdliterun_gives_each_rank_its_share_and_keeps_the_users():
    done = run_launcher("-np", "2", sys.executable, "-c", RANK, env=user_environment())
    ranks = printed_threads(done.stdout)
    assert len(ranks) == 2, done.stdout + done.stderr
    for rank in ranks:
        assert rank == {"OMP_NUM_THREADS": SHARE, "TF_NUM_INTRAOP_THREADS": SHARE,
                        CHOSEN_VARIABLE: f"{host_cores()},2"}
    assert done.stderr.count(f"2 ranks share the {host_cores()} cores of this host: "
                             f"OMP_NUM_THREADS={SHARE}") == 1, done.stderr  # rank 0, once

    done = run_launcher("-np", "2", sys.executable, "-c", RANK,
                        env=user_environment(OMP_NUM_THREADS="3"))
    assert printed_threads(done.stdout) == [
        {"OMP_NUM_THREADS": "3", "TF_NUM_INTRAOP_THREADS": None, CHOSEN_VARIABLE: None}] * 2
    assert "ranks share the" not in done.stderr


@pytest.mark.timeout(90)
def test_an_elastic_worker_gets_the_share_of_its_hosts_slots(tmp_path):
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho localhost:2\n")
    script.chmod(0o755)
    worker = ("import json, os; "
              f"print('threads', json.dumps({{n: os.environ.get(n) for n in {THREAD_NAMES!r}}}))")
    done = run_launcher("-np", "2", "--min-np", "2", "--host-discovery-script", str(script),
                        sys.executable, "-c", worker, env=user_environment())
    assert [rank["OMP_NUM_THREADS"] for rank in printed_threads(done.stdout)] == [SHARE] * 2


def _threads_of_rank():
    return {name: os.environ.get(name) for name in THREAD_NAMES}


@pytest.mark.timeout(90)
def test_hvdlite_run_gives_each_rank_its_share(monkeypatch):
    for name in THREAD_NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    assert hvdlite.run(_threads_of_rank, np=2) == [
        {"OMP_NUM_THREADS": SHARE, "TF_NUM_INTRAOP_THREADS": SHARE,
         CHOSEN_VARIABLE: f"{host_cores()},2"}] * 2


@pytest.mark.timeout(60)
def test_the_ssh_agent_gives_its_hosts_share(tmp_path):
    """The agent counts the cores of the host it runs on (here this one)."""
    secret, job_id = make_secret(), make_job_id()
    worker = ("import json, os; "
              f"print(json.dumps({{n: os.environ.get(n) for n in {THREAD_NAMES!r}}}), flush=True)")
    with StoreServer(secret, host="127.0.0.1") as store:
        spec = {"command": [sys.executable, "-c", worker], "cwd": str(tmp_path),
                "size": 2, "more_ranks": False,
                "env": {"HVDLITE_SECRET": secret, "HVDLITE_JOB_ID": job_id},
                "store_port": store.port, "store_candidates": ["127.0.0.1"],
                "connect_timeout": 10, "network_interfaces": None,
                "ranks": [{"rank": rank, "local_rank": rank, "local_size": 2, "cross_rank": 0,
                           "cross_size": 1} for rank in (0, 1)]}
        agent = AgentSession(spec)
        try:
            # In any order: the agent drains a rank's stderr before reporting
            # its exit, not its stdout (agent._report_exit), so rank 1's exit
            # may come before either rank's line.
            def rank_1_exit(line):
                if not line.startswith(CONTROL_PREFIX):
                    return None
                message = json.loads(line[len(CONTROL_PREFIX):])
                return message if message["kind"] == "exit" and message["rank"] == 1 else None

            wanted = {"[0]<stdout>:", "[1]<stdout>:", "exit"}
            while wanted:
                line = agent.expect(lambda line: rank_1_exit(line) is not None
                                    or line[:len("[0]<stdout>:")] in wanted)
                exit_message = rank_1_exit(line)
                if exit_message is not None:
                    assert exit_message["returncode"] == 0
                    wanted.discard("exit")
                    continue
                assert json.loads(line.split(":", 1)[1])["OMP_NUM_THREADS"] == SHARE
                wanted.discard(line[:len("[0]<stdout>:")])
        finally:
            if agent.process.poll() is None:
                agent.process.kill()
                agent.process.wait()


@pytest.mark.timeout(60)
def test_init_sets_them_itself_under_another_launcher():
    """mpirun or srun set nothing: init() sets the variables and narrows the
    pools already loaded (NumPy's BLAS here)."""
    code = ("import os, numpy, threadpoolctl\n"
            "from hvdlite.common import threads\n"
            "threads.apply_at_init(rank=0, local_size=2)\n"
            f"assert os.environ['OMP_NUM_THREADS'] == {SHARE!r}\n"
            "pools = threadpoolctl.threadpool_info()\n"
            "assert pools, 'numpy loaded no BLAS threadpoolctl sees'\n"
            f"assert all(pool['num_threads'] == {int(SHARE)} for pool in pools), pools\n")
    done = subprocess.run([sys.executable, "-c", code], env=user_environment(),
                          capture_output=True, text=True, timeout=50)
    assert done.returncode == 0, done.stderr
    assert f"OMP_NUM_THREADS={SHARE}" in done.stderr
