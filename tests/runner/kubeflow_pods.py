"""Pods laid out as the Kubeflow MPI Operator (v2beta1 MPIJob) and Kubeflow
Trainer (TrainJob, torch runtime) lay them out, on the network-namespace
hosts of namespaces.py, for tests/runner/test_kubernetes.py.

What the MPI Operator gives an MPIJob `<job>` in namespace `<ns>` (its
controller, pkg/controller/mpi_job_controller.go, and its base image,
build/base/Dockerfile):
- the launcher pod, called `<job>-launcher`: the job's ConfigMap at /etc/mpi,
  with `hostfile` (Open MPI's format: one `<job>-worker-<i>.<job>.<ns>.svc
  slots=<slotsPerWorker>` line per worker) and `discover_hosts.sh` (one
  `echo <job>-worker-<i>.<job>.<ns>.svc` per *running* worker, no slots,
  rewritten as workers come and go); and the variables K_MPI_JOB_ROLE=launcher,
  OMPI_MCA_orte_default_hostfile=/etc/mpi/hostfile,
  OMPI_MCA_orte_keep_fqdn_hostnames=true, OMPI_MCA_plm_rsh_args and
  OMPI_MCA_orte_set_default_slots=<slotsPerWorker>;
- worker pods `<job>-worker-<i>`: `/usr/sbin/sshd -De -f /home/mpiuser/.sshd_config`
  as the image's non-root user `mpiuser` on port 2222 (that file: PidFile
  in the home folder, the job's key as host key, StrictModes no, Port 2222),
  K_MPI_JOB_ROLE=worker;
- every pod: the job's ssh Secret at sshAuthMountPath (id_rsa, an ECDSA P-521
  key in PEM, id_rsa.pub, authorized_keys): root-owned 0644 files on a
  read-only mount; the image's /etc/ssh/ssh_config (Port 2222, no host key
  checking, known hosts thrown away); names resolved by the job's headless
  Service (here /etc/hosts).
Kubeflow Trainer starts `<trainjob>-node-0-<i>` pods whose torchrun reads
PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK (the pod's completion index),
PET_MASTER_ADDR=<trainjob>-node-0-0.<trainjob> and PET_MASTER_PORT=29400
(pkg/runtime/framework/plugins/torch/torch.go).

A pod here is a process tree in a host's network namespace with UTS and mount
namespaces of its own: its /etc is an overlay of this machine's /etc with the
pod's files on top (passwd and group naming mpiuser, hosts, ssh_config),
/etc/mpi and ~/.ssh are read-only bind mounts, /home and /dev/shm are its
own. Nothing on the machine changes: no account is added (mpiuser is a uid
that no account of this machine has, named only in the pods' /etc/passwd),
and every mount goes with the pod's last process.
"""
import grp
import os
import pwd
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from namespaces import HOSTS, LAUNCHER_ADDR, Cluster, Unavailable, _run

CONFIG_DIR = "/etc/mpi"  # where the operator mounts the job's ConfigMap
HOSTFILE = f"{CONFIG_DIR}/hostfile"
DISCOVER_HOSTS = f"{CONFIG_DIR}/discover_hosts.sh"
SSH_PORT = 2222  # the operator's base image: sshd and ssh both use it
USER = "mpiuser"
HOME = f"/home/{USER}"
TRAINER_PORT = 29400  # Kubeflow Trainer's PET_MASTER_PORT
# The image's ssh set-up (examples/kubernetes/Dockerfile writes the same).
SSH_CLIENT_CONFIG = ("Host *\n    StrictHostKeyChecking no\n    UserKnownHostsFile /dev/null\n"
                     f"    Port {SSH_PORT}\n")
SSHD_CONFIG = (f"PidFile {HOME}/sshd.pid\nHostKey {HOME}/.ssh/id_rsa\nStrictModes no\n"
               f"Port {SSH_PORT}\n")


@dataclass
class MPIJob:
    """What of an MPIJob manifest decides the pods' names and the hostfile."""
    name: str
    namespace: str
    workers: int
    slots: int

    def worker(self, index):
        return f"{self.name}-worker-{index}"

    def worker_address(self, index):
        """The name the job's headless Service gives worker `index`."""
        return f"{self.worker(index)}.{self.name}.{self.namespace}.svc"

    @property
    def launcher(self):
        return f"{self.name}-launcher"

    def hostfile(self):
        return "".join(f"{self.worker_address(i)} slots={self.slots}\n"
                       for i in range(self.workers))

    def discover_hosts(self, running):
        return "#!/bin/sh\n" + "".join(f"echo {self.worker_address(i)}\n" for i in running)

    def launcher_environment(self):
        return {"K_MPI_JOB_ROLE": "launcher",
                "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
                "OMPI_MCA_orte_default_hostfile": HOSTFILE,
                "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
                "OMPI_MCA_orte_set_default_slots": str(self.slots)}


def trainer_node(trainjob, index):
    return f"{trainjob}-node-0-{index}"


def trainer_master(trainjob):
    return f"{trainer_node(trainjob, 0)}.{trainjob}"


def _free_uid(start=20000):
    """A number no account or group of this machine has, for the pods' mpiuser."""
    taken = {entry.pw_uid for entry in pwd.getpwall()} | {entry.gr_gid for entry in grp.getgrall()}
    return next(uid for uid in range(start, start + len(taken) + 1) if uid not in taken)


class KubeflowCluster(Cluster):
    """namespaces.Cluster's network with the pods of MPIJobs `jobs` on it:
    each job's launcher pod in the `launcher` namespace, worker i of every
    job on the i-th host (one sshd there, named after the first job's
    worker, answers for all of them); and the nodes of TrainJob `trainjob`
    on the same hosts, started by node_command()."""

    def __init__(self, directory, jobs, trainjob):
        super().__init__(directory)
        for job in jobs:
            if job.workers != len(HOSTS):
                raise ValueError(f"MPIJob {job.name} has {job.workers} workers; this cluster "
                                 f"has {len(HOSTS)} hosts for them")
        self.jobs = {job.name: job for job in jobs}
        self.trainjob = trainjob
        self.workers = list(HOSTS)  # worker i runs on host self.workers[i]
        self.uid = _free_uid()

    # --- set-up (namespaces.Cluster.start calls these) ----------------------

    def _make_keys(self):
        if shutil.which("setpriv") is None:
            raise Unavailable("needs setpriv (util-linux) to run the pods as mpiuser")
        d = self.directory
        d.chmod(0o755)  # mpiuser reads the pods' files below it
        secret = d / "ssh-secret"
        secret.mkdir()
        # The operator's Secret: an ECDSA P-521 key in PEM, under RSA's file names.
        _run("ssh-keygen", "-q", "-t", "ecdsa", "-b", "521", "-m", "PEM", "-N", "",
             "-C", "", "-f", str(secret / "id_rsa"))
        shutil.copy(secret / "id_rsa.pub", secret / "authorized_keys")
        for item in secret.iterdir():
            item.chmod(0o644)  # the Secret volume's default mode; owned by root
        names = {LAUNCHER_ADDR: [job.launcher for job in self.jobs.values()]}
        for index, host in enumerate(self.workers):
            names[HOSTS[host]] = [name for job in self.jobs.values()
                                  for name in (job.worker_address(index), job.worker(index))]
        names[HOSTS[self.workers[0]]].append(trainer_master(self.trainjob))
        hosts = "127.0.0.1 localhost\n" + "".join(
            f"{address} {' '.join(aliases)}\n" for address, aliases in names.items())
        for job in self.jobs.values():
            self.config(job).mkdir(parents=True)
            self.write_config(job, "hostfile", job.hostfile(), 0o444)
            self.set_running_workers(job, range(job.workers))
            self._make_pod(job.launcher, hosts)
        first = next(iter(self.jobs.values()))
        for pod in [*map(first.worker, range(first.workers)),
                    *(trainer_node(self.trainjob, i) for i in range(len(HOSTS)))]:
            self._make_pod(pod, hosts)

    def _make_pod(self, pod, hosts):
        """The pod's /etc layer (over this machine's), overlay work folder and /home."""
        root = self.directory / "pods" / pod
        etc = root / "etc"
        (etc / "ssh").mkdir(parents=True)
        (etc / "mpi").mkdir()  # the ConfigMap's mount point (used in launchers)
        (root / "overlay-work").mkdir()
        (root / "staged").mkdir()  # where _visible_to_mpiuser() stages what it shows
        uid = self.uid
        (etc / "passwd").write_text(Path("/etc/passwd").read_text()
                                    + f"{USER}:x:{uid}:{uid}::{HOME}:/bin/sh\n")
        (etc / "group").write_text(Path("/etc/group").read_text() + f"{USER}:x:{uid}:\n")
        (etc / "hosts").write_text(hosts)
        # The pods' /etc/hosts is their cluster DNS. A name or address beyond
        # it (c10d looks up every peer's) fails at once on the pod's loopback,
        # instead of after seconds of waiting for a server it cannot reach.
        (etc / "resolv.conf").write_text("nameserver 127.0.0.1\n")
        (etc / "ssh" / "ssh_config").write_text(SSH_CLIENT_CONFIG)
        home = root / "home"
        (home / USER / ".ssh").mkdir(parents=True)  # the Secret's mount point
        (home / USER / ".sshd_config").write_text(SSHD_CONFIG)
        for path in (home / USER, home / USER / ".ssh", home / USER / ".sshd_config"):
            os.chown(path, uid, uid)
        for path in (root, home, etc, root / "overlay-work"):
            path.chmod(0o755)

    def _start_sshd(self, sshd, name):
        pod = self._first_job.worker(self.workers.index(name))
        self._daemons.append(subprocess.Popen(
            self.pod_command(name, pod, {"K_MPI_JOB_ROLE": "worker"},
                             [sshd, "-De", "-f", f"{HOME}/.sshd_config"]),
            stdout=subprocess.DEVNULL,
            stderr=open(self.directory / f"sshd_{name}.log", "wb")))

    def _ssh_probe(self, name):
        job, index = self._first_job, self.workers.index(name)
        return (self.launcher_command(job, "ssh", job.worker_address(index), "hostname"),
                job.worker(index), f"sshd of pod {job.worker(index)} on port {SSH_PORT}")

    # --- use -----------------------------------------------------------------

    @property
    def _first_job(self):
        return next(iter(self.jobs.values()))

    def config(self, job):
        """The folder of `job`'s ConfigMap, mounted at /etc/mpi in its launcher."""
        return self.directory / "config" / job.name

    def write_config(self, job, name, text, mode):
        """Replaces a file of `job`'s ConfigMap in one step, as the kubelet does."""
        staged = self.config(job) / f".{name}.new"
        staged.write_text(text)
        staged.chmod(mode)
        staged.rename(self.config(job) / name)

    def set_running_workers(self, job, indices):
        """discover_hosts.sh as the operator writes it once these workers run."""
        self.write_config(job, "discover_hosts.sh", job.discover_hosts(indices), 0o555)

    def launcher_command(self, job, *command, env=None):
        """`command` in `job`'s launcher pod as mpiuser, with the operator's
        variables (and `env`) in its environment."""
        variables = {**job.launcher_environment(), **(env or {})}
        return self.pod_command("launcher", job.launcher, variables, command,
                                mounts=("ssh", ("config", job)))

    def node_command(self, index, env, command):
        """`command` in Kubeflow Trainer's node `index` (as root, the
        runtime's default), on the index-th host."""
        return self.pod_command(self.workers[index], trainer_node(self.trainjob, index),
                                env, command, user=None, mounts=())

    def pod_command(self, namespace, pod, env, command, user=USER, mounts=("ssh",)):
        """`command` run as `user` (None: root) in pod `pod`, on the network
        namespace `namespace` ("launcher" or a host of namespaces.HOSTS);
        `mounts`: "ssh" (the jobs' ssh Secret at ~/.ssh), ("config", job)
        (job's ConfigMap at /etc/mpi)."""
        root = self.directory / "pods" / pod
        setup = [f"mount -t overlay pod-etc -o lowerdir=/etc,upperdir={root / 'etc'},"
                 f"workdir={root / 'overlay-work'} /etc",
                 f"mount --bind {root / 'home'} /home"]
        for mount in mounts:
            source, target = ((self.directory / "ssh-secret", f"{HOME}/.ssh") if mount == "ssh"
                              else (self.config(mount[1]), CONFIG_DIR))
            setup += [f"mount --bind {source} {target}", f"mount -o remount,bind,ro {target}"]
        setup += _visible_to_mpiuser(root / "staged")
        setup += ["mount -t tmpfs -o size=64m pod-shm /dev/shm", f"hostname {pod}"]
        # A container's environment: the image's PATH (hvdlite's Python
        # first, as in an image that installed it) and the pod's variables.
        variables = {"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
                     "HOME": HOME if user else "/root", "HOSTNAME": pod, **env}
        run_as = (["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups"]
                  if user else [])
        line = " && ".join(setup) + " && exec " + shlex.join(
            [*run_as, "env", "-i", *(f"{k}={v}" for k, v in variables.items()),
             *map(str, command)])
        return ["ip", "netns", "exec", self.namespaces[namespace], "unshare", "--uts",
                "--mount", "--propagation", "private", "sh", "-c", line]


def _outermost_closed_folder(path):
    """The outermost folder above `path` that other users cannot enter, or None."""
    return next((folder for folder in reversed(path.parents)
                 if not folder.stat().st_mode & 0o001), None)


def _visible_to_mpiuser(stage):
    """Mount commands that let mpiuser run this Python, hvdlite and the test
    workers, as it could in an image that installed them: the interpreter's
    install, the venv (hvdliterun, mpirun on the pods' PATH) and the checkout
    (the editable install's sources, tests/) may sit below a folder closed to
    other users: pyenv's in /root (mode 0700), a clone in a home folder
    (0700). Each such folder is replaced in the pod by an empty tmpfs, and
    each path below it is put back at its own path, by way of `stage` (bound
    first: the tmpfs hides the originals)."""
    repository = Path(__file__).resolve().parents[2]
    wanted = sorted({Path(sys.base_prefix).resolve(), Path(sys.prefix).absolute(),
                     Path(sys.prefix).resolve(), repository})
    # Only the outermost of nested paths: binding it brings those inside along.
    wanted = [path for path in wanted if not any(other in path.parents for other in wanted)]
    hidden = {path: _outermost_closed_folder(path) for path in wanted}
    shown = [path for path in wanted if hidden[path] is not None]
    commands = [f"mkdir -p {stage / str(index)} && mount --bind {path} {stage / str(index)}"
                for index, path in enumerate(shown)]
    for folder in sorted({hidden[path] for path in shown}):
        commands.append(f"mount -t tmpfs -o mode=0755,size=1m pod-{folder.name or 'root'} "
                        f"{folder}")
    for index, path in enumerate(shown):
        commands += [f"mkdir -p {path}", f"mount --bind {stage / str(index)} {path}"]
    return commands
