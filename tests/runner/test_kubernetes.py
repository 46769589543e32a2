"""Kubernetes for real: hvdlite in pods laid out as the Kubeflow MPI Operator
and Kubeflow Trainer lay them out (kubeflow_pods.py: network-namespace pods,
the workers' sshd on port 2222 as the non-root mpiuser, /etc/mpi and the
operator's variables in the launcher, Trainer's PET_ variables), running the
commands of the manifests in examples/kubernetes/ with a test worker in place
of their training script; and those manifests, the Dockerfile and the docs
page checked against what runs here, so that none of them can drift."""
import functools
import json
import re
import secrets
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import run_launcher_command
from kubeflow_pods import (CONFIG_DIR, DISCOVER_HOSTS, HOME, HOSTFILE, SSH_CLIENT_CONFIG,
                           SSHD_CONFIG, TRAINER_PORT, KubeflowCluster, MPIJob, trainer_master)
from namespaces import HOSTS, running_cluster
from test_launch_local import wait_until

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "kubernetes"
WORKERS = Path(__file__).resolve().parent / "workers"
IMAGE_ROOT = "/opt/hvdlite"  # where the Dockerfile puts the repository
sys.path.insert(0, str(REPO / "tests" / "elastic" / "workers"))

from reference import DATA_X, DATA_Y, LEARNING_RATE, gradient, initial_weights  # noqa: E402


def manifest(name):
    return yaml.safe_load((EXAMPLES / name).read_text())


STATIC, ELASTIC, TRAINJOB = (manifest(name) for name in
                             ("mpijob.yaml", "mpijob-elastic.yaml", "trainjob.yaml"))


def mpijob(document):
    """The layout an MPIJob manifest asks of the operator."""
    spec = document["spec"]
    return MPIJob(document["metadata"]["name"], document["metadata"].get("namespace", "default"),
                  spec["mpiReplicaSpecs"]["Worker"]["replicas"], spec["slotsPerWorker"])


def container(document, role):
    return document["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["containers"][0]


def launcher_line(document):
    found = container(document, "Launcher")
    return [*found.get("command", []), *found.get("args", [])]


def with_worker(line, worker, *args):
    """`line` with its `python SCRIPT ...` replaced by this Python running
    `worker` (the image's python and script are this checkout's)."""
    cut = line.index("python")
    return [*line[:cut], sys.executable, worker, *args]


def reference_sgd(steps, momentum=0.9):
    """(weights, momentum buffer) of reference.make_torch_model's SGD after
    `steps` full-batch steps in one process, computed with NumPy: no torch
    import in the test's process (seconds on a loaded machine), and a check
    of the ranks' torch against an independent reference."""
    weights, buffer = initial_weights(), None
    for _ in range(steps):
        grad = gradient(weights, DATA_X, DATA_Y)
        buffer = grad if buffer is None else momentum * buffer + grad
        weights = weights - LEARNING_RATE * buffer
    return weights, buffer


def flag(line, name):
    return line[line.index(name) + 1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    layout = functools.partial(KubeflowCluster, jobs=[mpijob(STATIC), mpijob(ELASTIC)],
                               trainjob=TRAINJOB["metadata"]["name"])
    with running_cluster(tmp_path_factory.mktemp("kubernetes"), layout) as cluster:
        yield cluster


# --- the manifests are what runs here ----------------------------------------

def test_the_mpijobs_ask_for_the_layout_the_pods_here_have():
    for document in (STATIC, ELASTIC):
        assert (document["apiVersion"], document["kind"]) == ("kubeflow.org/v2beta1", "MPIJob")
        spec = document["spec"]
        assert spec["mpiImplementation"] == "OpenMPI"  # `host slots=N` hostfile lines
        assert spec["sshAuthMountPath"] == f"{HOME}/.ssh"
        assert spec["launcherCreationPolicy"] == "WaitForWorkersReady"
        assert mpijob(document).workers == len(HOSTS)
        worker = container(document, "Worker")
        assert worker["command"] == ["/usr/sbin/sshd", "-De", "-f", f"{HOME}/.sshd_config"]
        # Launcher and workers run as the image's mpiuser.
        uids = {container(document, role)["securityContext"]["runAsUser"]
                for role in ("Launcher", "Worker")}
        assert uids == {1000}, uids
        assert "useradd --create-home --uid 1000 mpiuser" in (EXAMPLES / "Dockerfile").read_text()
        line = launcher_line(document)
        assert line[0] == "hvdliterun"
        script = line[line.index("python") + 1]
        assert (REPO / Path(script).relative_to(IMAGE_ROOT)).is_file(), script

    static = launcher_line(STATIC)
    assert flag(static, "--hostfile") == HOSTFILE
    assert int(flag(static, "-np")) == mpijob(STATIC).workers * mpijob(STATIC).slots
    elastic = launcher_line(ELASTIC)
    assert flag(elastic, "--host-discovery-script") == DISCOVER_HOSTS
    # The operator's discover_hosts.sh prints no slots: the flag must give slotsPerWorker.
    assert int(flag(elastic, "--slots-per-host")) == mpijob(ELASTIC).slots


def test_the_trainjob_leaves_torchruns_flags_to_trainers_variables():
    assert (TRAINJOB["apiVersion"], TRAINJOB["kind"]) == ("trainer.kubeflow.org/v1alpha1",
                                                          "TrainJob")
    assert TRAINJOB["spec"]["runtimeRef"]["name"] == "torch-distributed"
    trainer = TRAINJOB["spec"]["trainer"]
    assert trainer["numNodes"] == len(HOSTS)
    command = trainer["command"]
    assert command[0] == "torchrun" and command[1].endswith(".py"), command
    assert (REPO / Path(command[1]).relative_to(IMAGE_ROOT)).is_file(), command
    # torchrun's store answers anyone: the secret comes from a Kubernetes Secret.
    secret = {env["name"]: env for env in trainer["env"]}["HVDLITE_SECRET"]
    assert set(secret["valueFrom"]) == {"secretKeyRef"}
    assert not [env for env in trainer["env"] if env["name"].startswith("PET_")]


def test_the_image_and_the_docs_page_are_those_of_the_test():
    dockerfile = (EXAMPLES / "Dockerfile").read_text()
    for config in (SSH_CLIENT_CONFIG, SSHD_CONFIG):  # written with printf there
        assert config.replace("\n", "\\n") in dockerfile, config
    docs = (REPO / "docs" / "kubernetes.md").read_text()
    for name in ("mpijob.yaml", "mpijob-elastic.yaml", "trainjob.yaml", "Dockerfile"):
        text = (EXAMPLES / name).read_text()
        assert text in docs, f"docs/kubernetes.md does not show {name} as it is"


# --- running the manifests' commands in the pods -------------------------------

@pytest.mark.timeout(120)
@pytest.mark.parametrize("hostfile", ["given", "from the operator's variable"])
def test_hvdliterun_runs_on_the_operators_hostfile_as_mpiuser(cluster, hostfile):
    job = mpijob(STATIC)
    line = with_worker(launcher_line(STATIC), WORKERS / "layout_allreduce.py")
    if hostfile != "given":  # OMPI_MCA_orte_default_hostfile names it, as for mpirun
        cut = line.index("--hostfile")
        del line[cut:cut + 2]
    result = run_launcher_command(cluster.launcher_command(job, *line), "the MPIJob's hvdliterun",
                                  timeout=100).expect_ok()
    if hostfile != "given":
        assert f"no -H/--hostfile given: the hosts of {HOSTFILE} " \
               f"(OMPI_MCA_orte_default_hostfile, mpirun's default hostfile)" in result.stderr
    reports = {rank: json.loads(result.lines(rank)[-1]) for rank in range(4)}
    ranks = job.workers * job.slots
    expected = np.arange(6) * sum(range(1, ranks + 1))  # rank r gave arange(6) * (r + 1)
    for rank, report in reports.items():
        worker = rank // job.slots  # hostfile order, slotsPerWorker ranks each
        assert report["hostname"] == job.worker(worker), report
        assert (report["size"], report["local_rank"], report["local_size"]) == \
            (ranks, rank % job.slots, job.slots), report
        assert report["cross_rank"] == worker, report
        assert report["uid"] == cluster.uid, "a rank did not run as the pods' mpiuser"
        np.testing.assert_array_equal(report["total"], expected)
        assert report["secret_on_command_lines"] == [], report


@pytest.mark.timeout(120)
def test_mpirun_runs_on_the_operators_hostfile(cluster):
    """Open MPI 5's mpirun ignores the operator's OMPI_MCA_orte_default_hostfile
    (PRRTE replaced ORTE): the docs tell users to pass --hostfile."""
    job = mpijob(STATIC)
    line = ["mpirun", "--hostfile", HOSTFILE, "-np", str(job.workers * job.slots),
            sys.executable, WORKERS / "layout_allreduce.py"]
    assert "mpirun --hostfile /etc/mpi/hostfile -np 4 python" in \
        (REPO / "docs" / "kubernetes.md").read_text()
    result = run_launcher_command(cluster.launcher_command(job, *line), "the MPIJob's mpirun",
                                  timeout=100)
    assert result.returncode == 0, result
    reports = [json.loads(text) for text in result.stdout.splitlines() if text.startswith("{")]
    assert sorted(r["rank"] for r in reports) == list(range(4)), result
    for report in reports:
        assert report["hostname"] == job.worker(report["rank"] // job.slots), report
        assert report["uid"] == cluster.uid
        np.testing.assert_array_equal(report["total"], np.arange(6) * 10.0)


@pytest.mark.timeout(150)
def test_an_elastic_job_grows_when_the_operators_discovery_script_does(cluster):
    job = mpijob(ELASTIC)
    cluster.set_running_workers(job, [0])  # the launcher starts with one worker running
    try:
        line = with_worker(launcher_line(ELASTIC), WORKERS / "elastic_until_size.py",
                           "--size", job.workers * job.slots)
        # Test-only flags after hvdliterun: see rounds, run discovery often.
        line[1:1] = ["--verbose", "--discovery-interval", "0.3"]
        process = subprocess.Popen(cluster.launcher_command(job, *line), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        stdout, stderr = [], []
        readers = [threading.Thread(target=lines.extend, args=(stream,), daemon=True)
                   for lines, stream in ((stdout, process.stdout), (stderr, process.stderr))]
        for reader in readers:
            reader.start()
        try:
            # Once the first round trains on worker 0, the operator lists worker 1.
            first = f"rank 1: worker 1 on {job.worker_address(0)}"
            assert wait_until(lambda: any(first in text for text in stderr), timeout=60), \
                "".join(stderr)
            cluster.set_running_workers(job, [0, 1])
            process.wait(timeout=90)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the elastic job did not end within 90 s:\n{''.join(stderr)}")
        finally:
            process.kill()
            process.wait()
            for reader in readers:
                reader.join(10)
    finally:
        cluster.set_running_workers(job, range(job.workers))
    out = "".join(stdout)
    err = "".join(stderr)
    assert process.returncode == 0, (out, err)
    assert re.search(r"re-forming the job at 4 rank\(s\) \(round \d+\): hosts changed", err), err
    done = re.findall(r"^\[\d+\]<stdout>:done at step \d+ with (\d+) ranks$", out, re.M)
    assert done == ["4"] * 4, (out, err)


@pytest.mark.timeout(150)
def test_torchrun_with_kubeflow_trainers_variables_trains_as_one_process(cluster):
    trainer = TRAINJOB["spec"]["trainer"]
    nodes, per_node = trainer["numNodes"], trainer["numProcPerNode"]
    steps = 5
    command = [trainer["command"][0], WORKERS / "torch_sgd_steps.py", "--steps", steps]
    secret = secrets.token_hex(16)  # what the TrainJob's Secret holds
    processes = []
    try:
        for node in range(nodes):
            # What Trainer's torch plugin sets in node pod `node`.
            env = {"PET_NNODES": str(nodes), "PET_NPROC_PER_NODE": str(per_node),
                   "PET_NODE_RANK": str(node),
                   "PET_MASTER_ADDR": trainer_master(TRAINJOB["metadata"]["name"]),
                   "PET_MASTER_PORT": str(TRAINER_PORT), "HVDLITE_SECRET": secret,
                   "OMP_NUM_THREADS": "1"}
            processes.append(subprocess.Popen(cluster.node_command(node, env, command),
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                              text=True))
        outputs = [process.communicate(timeout=120) for process in processes]
    finally:
        for process in processes:
            process.kill()
            process.wait()
    for process, (out, err) in zip(processes, outputs):
        assert process.returncode == 0, (out, err)
    reports = [json.loads(text) for out, _ in outputs for text in out.splitlines()
               if text.startswith("{")]
    assert sorted(r["rank"] for r in reports) == list(range(nodes * per_node)), outputs
    weights, momentum = reference_sgd(steps)
    for report in reports:
        node = report["rank"] // per_node  # torchrun: node rank n has ranks n*per_node...
        assert report["hostname"] == f"{TRAINJOB['metadata']['name']}-node-0-{node}", report
        assert (report["size"], report["local_size"], report["cross_rank"]) == \
            (nodes * per_node, per_node, node), report
        np.testing.assert_allclose(report["weights"], weights, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(report["momentum"], momentum, rtol=1e-10, atol=1e-12)


def test_the_pods_change_nothing_on_this_machine(cluster):
    assert not Path(CONFIG_DIR).exists(), f"{CONFIG_DIR} exists outside the pods"
    assert "mpiuser" not in Path("/etc/passwd").read_text()
