"""A throwaway cluster on one machine for the multi-host launcher tests.

Three network namespaces on one bridge: `launcher` (10.77.0.1, where
hvdliterun runs) and `hostA`/`hostB` (10.77.0.2/3), each running its own
sshd in its own UTS namespace so that it really is called hostA/hostB, and
in its own mount namespace with a private /dev/shm, as a separate machine has
(it goes away with the host's last process).
Keys, sshd configs and an ssh client config live in a temporary folder; a
small `ssh` wrapper on PATH makes hvdliterun's ssh read that config, so the
machine's own ssh set-up and /etc/hosts are never touched. The bridge is
called eth0, like the hosts' ends, so that `--network-interface eth0` names
an interface on every host. `close()` kills every process in the namespaces
and deletes them.

The benchmarks across hosts (bench/multihost_net.py) build the same cluster
in a venv without pytest (make bench-deps installs none), so only
running_cluster, which skips a test, imports it, when it has to.
"""
import contextlib
import fcntl
import os
import shutil
import subprocess
import time
from pathlib import Path

SUBNET = "10.77.0"
HOSTS = {"hostA": f"{SUBNET}.2", "hostB": f"{SUBNET}.3"}
UNREACHABLE = {"hostC": f"{SUBNET}.9"}  # in the ssh config, but nobody has it
LAUNCHER_ADDR = f"{SUBNET}.1"


class Unavailable(RuntimeError):
    """This machine cannot host the cluster; the message says why."""


def _run(*command, check=True, timeout=60):
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}): "
                           f"{result.stderr.strip()}")
    return result


def ensure_sshd():
    """Returns the sshd path, installing openssh-server with apt-get if needed."""
    found = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd")
                                     else None)
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise Unavailable("openssh-server is not installed and cannot be installed here "
                          "(needs root and apt-get)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    # Test modules run in parallel (make test: pytest -n 2) and apt-get takes
    # dpkg's lock: one installs, the other waits here and finds sshd.
    with open("/tmp/hvdlite-tests-apt.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for command in ([], ["apt-get", "install", "-y", "-q", "openssh-server"],
                        ["apt-get", "update", "-q"],
                        ["apt-get", "install", "-y", "-q", "openssh-server"]):
            if command:
                subprocess.run(command, capture_output=True, env=env, timeout=600)
            if os.path.exists("/usr/sbin/sshd"):
                return "/usr/sbin/sshd"
    raise Unavailable("`apt-get install openssh-server` did not provide /usr/sbin/sshd")


@contextlib.contextmanager
def running_cluster(directory, cluster_class=None):
    """A started Cluster (or `cluster_class`, a subclass that lays the hosts
    out its own way), closed afterwards; skips the test (saying why) on a
    machine that cannot host one."""
    cluster = (cluster_class or Cluster)(directory)
    try:
        cluster.start()
    except Unavailable as error:
        cluster.close()
        print(f"skipping the multi-host tests: {error}")
        import pytest
        pytest.skip(str(error))
    except BaseException:
        cluster.close()
        raise
    try:
        yield cluster
    finally:
        cluster.close()


class Cluster:
    def __init__(self, directory):
        self.directory = Path(directory)
        tag = f"{os.getpid() % 100000}"
        self.namespaces = {name: f"hvdl{tag}{name[-1] if name != 'launcher' else 'L'}"
                           for name in ("launcher", *HOSTS)}
        self._daemons = []
        self._created = []
        self.bin = self.directory / "bin"

    # --- set-up ------------------------------------------------------------

    def start(self):
        if os.geteuid() != 0:
            raise Unavailable("network namespaces need root")
        if shutil.which("ip") is None or shutil.which("unshare") is None:
            raise Unavailable("needs the `ip` (iproute2) and `unshare` commands")
        sshd = ensure_sshd()
        try:
            self._make_network()
        except RuntimeError as error:
            raise Unavailable(f"cannot create network namespaces: {error}") from error
        self._make_keys()
        for name in HOSTS:
            self._start_sshd(sshd, name)
        for name in HOSTS:
            self._wait_for_ssh(name)
        return self

    def _make_network(self):
        launcher = self.namespaces["launcher"]
        for namespace in self.namespaces.values():
            _run("ip", "netns", "add", namespace)
            self._created.append(namespace)
            _run("ip", "-n", namespace, "link", "set", "lo", "up")
        _run("ip", "-n", launcher, "link", "add", "eth0", "type", "bridge")
        _run("ip", "-n", launcher, "addr", "add", f"{LAUNCHER_ADDR}/24", "dev", "eth0")
        _run("ip", "-n", launcher, "link", "set", "eth0", "up")
        for index, (name, address) in enumerate(HOSTS.items()):
            namespace, port = self.namespaces[name], f"port{index}"
            _run("ip", "-n", launcher, "link", "add", port, "type", "veth",
                 "peer", "name", "eth0", "netns", namespace)
            _run("ip", "-n", launcher, "link", "set", port, "master", "eth0", "up")
            _run("ip", "-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
            _run("ip", "-n", namespace, "link", "set", "eth0", "up")

    def _make_keys(self):
        d = self.directory
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "id"))
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "host_key"))
        shutil.copy(d / "id.pub", d / "authorized_keys")
        hosts = "".join(f"Host {name}\n  HostName {address}\n"
                        for name, address in {**HOSTS, **UNREACHABLE}.items())
        (d / "ssh_config").write_text(
            hosts + f"Host *\n  User root\n  IdentityFile {d / 'id'}\n  IdentitiesOnly yes\n"
            f"  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n"
            f"  LogLevel ERROR\n  ConnectTimeout 3\n")
        self.bin.mkdir()
        wrapper = self.bin / "ssh"
        wrapper.write_text(f"#!/bin/sh\nexec {shutil.which('ssh')} -F {d / 'ssh_config'} \"$@\"\n")
        wrapper.chmod(0o755)

    def _start_sshd(self, sshd, name):
        d = self.directory
        config = d / f"sshd_{name}"
        config.write_text(
            f"ListenAddress {HOSTS[name]}\nHostKey {d / 'host_key'}\n"
            f"PidFile {d / f'sshd_{name}.pid'}\nAuthorizedKeysFile {d / 'authorized_keys'}\n"
            "PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "MaxStartups 100\nLogLevel ERROR\n")
        # sshd's empty privilege separation folder, which the openssh-server
        # package expects (it lives in /run, a tmpfs). It stays: another
        # cluster (a parallel test run) may be using it.
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        self._daemons.append(subprocess.Popen(
            ["ip", "netns", "exec", self.namespaces[name], "unshare", "--uts", "--mount", "sh",
             "-c", f"mount -t tmpfs -o size=64m hvdlite-test-shm /dev/shm && hostname {name} "
                   f"&& exec {sshd} -D -e -f {config}"],
            stdout=subprocess.DEVNULL, stderr=open(d / f"sshd_{name}.log", "wb")))

    def _wait_for_ssh(self, name, timeout=30):
        command, hostname, what = self._ssh_probe(name)
        deadline = time.monotonic() + timeout
        while True:
            result = _run(*command, check=False, timeout=15)
            if result.returncode == 0 and result.stdout.strip() == hostname:
                return
            if time.monotonic() > deadline:
                log = (self.directory / f"sshd_{name}.log").read_text(errors="replace")
                raise Unavailable(f"{what} does not answer: {result.stderr.strip()} "
                                  f"{log.strip()}")
            time.sleep(0.2)

    def _ssh_probe(self, name):
        """(command, the host name it prints once host `name`'s sshd answers,
        that sshd in words)."""
        return (self.launcher_command(self.bin / "ssh", name, "hostname"), name,
                f"sshd in the namespace of {name}")

    # --- use ---------------------------------------------------------------

    def launcher_command(self, *command):
        """`command` run in the launcher's namespace, with the ssh wrapper on PATH."""
        path = f"{self.bin}:{os.environ.get('PATH', '')}"
        return ["ip", "netns", "exec", self.namespaces["launcher"], "env", f"PATH={path}",
                *map(str, command)]

    def run_in_launcher(self, command, check=True, timeout=60):
        return _run(*self.launcher_command(*command), check=check, timeout=timeout)

    def run_on(self, host, command, timeout=30):
        """`command` (a shell line) run on `host` over ssh, as hvdliterun would."""
        return self.run_in_launcher([str(self.bin / "ssh"), host, command], timeout=timeout)

    def pids(self):
        """Every process in the cluster's namespaces."""
        pids = set()
        for namespace in self._created:
            pids |= self._pids_in(namespace)
        return pids

    def leftovers(self, host):
        """The processes on `host` other than its sshd listener: what a job
        (its agent, its workers) or an ssh session left running there. A
        set taken before a test is no reference: an earlier test's sessions
        may still be ending then."""
        listeners = {daemon.pid for daemon in self._daemons}
        return self._pids_in(self.namespaces[host]) - listeners

    def _pids_in(self, namespace):
        result = _run("ip", "netns", "pids", namespace, check=False)
        return {int(pid) for pid in result.stdout.split()}

    # --- tear-down ---------------------------------------------------------

    def close(self):
        for daemon in self._daemons:
            daemon.kill()
            daemon.wait()
        for _ in range(3):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)
        for namespace in self._created:
            _run("ip", "netns", "del", namespace, check=False)
