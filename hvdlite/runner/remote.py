"""The launcher's side of one remote host: a single ssh command runs
`python -m hvdlite.runner.agent` there, which starts that host's ranks (see
agent.py for what travels over the connection)."""
import json
import math
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import collections
from dataclasses import dataclass

from hvdlite.store import network
from hvdlite.runner.agent import CONTROL_PREFIX
from hvdlite.runner.processes import Rank, signal_group, terminate_with_parent
from hvdlite.runner.output import RankOutput

_RANK_LINE = re.compile(rb"^\[(\d+)\]<(stdout|stderr)>:")
# Variables that describe the launcher's own machine or session, not the job;
# among them which of ITS devices its process may see: another host has GPUs
# of its own, numbered its own way, and its scheduler (Slurm, Kubernetes) sets
# their visibility there (horovodrun does not forward these either).
_NOT_FORWARDED = {"HOSTNAME", "HOST", "PWD", "OLDPWD", "SHLVL", "_", "DISPLAY", "TERM",
                  "TMPDIR", "XAUTHORITY", "SSH_AUTH_SOCK", "SSH_CLIENT", "SSH_CONNECTION",
                  "SSH_TTY", "LS_COLORS", "MAIL", "LOGNAME", "USER", "HOME", "SHELL",
                  "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                  "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"}
# After `kill`, how long the agent gets to report before its ssh is cut.
KILL_GRACE_S = 5.0


@dataclass
class RemoteOptions:
    """What every host's ssh command and agent need."""
    store_candidates: list
    store_port: int
    connect_timeout: float
    network_interfaces: list = None
    ssh_port: int = None
    ssh_identity_file: str = None


def ssh_command(host, options):
    """The ssh command line; it holds no secret (that goes through stdin)."""
    command = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new",
               "-o", f"ConnectTimeout={max(1, math.ceil(options.connect_timeout))}",
               "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]
    if options.ssh_port:
        command += ["-p", str(options.ssh_port)]
    if options.ssh_identity_file:
        command += ["-i", options.ssh_identity_file]
    agent = f"exec {shlex.quote(sys.executable)} -m hvdlite.runner.agent"
    return command + [host, agent]


def forwarded_environment(environ):
    """The launcher's environment as remote ranks get it, as horovodrun does:
    all of it (NCCL_* included) but what describes the launcher's own machine
    (_NOT_FORWARDED: its host name, session and visible GPUs)."""
    return {key: value for key, value in environ.items()
            if key not in _NOT_FORWARDED and not key.startswith("BASH_FUNC_")}


class RemoteProcess:
    """Stands in for a Popen of a rank on another host: the pid and exit
    status come from the agent; `failure` says why the rank was lost if the
    host's connection ended before it reported."""

    def __init__(self):
        self.pid = None
        self.returncode = None
        self.failure = None
        self._done = threading.Event()

    def poll(self):
        return self.returncode

    def finish(self, returncode, failure=None):
        if self._done.is_set():
            return False
        self.returncode, self.failure = returncode, failure
        self._done.set()
        return True

    def wait(self, timeout=None):
        self._done.wait(timeout)
        return self.returncode


def placement_layouts(placement):
    """The agent's description of each rank of a static job's placement."""
    return [{"rank": rank, "local_rank": index, "local_size": placement.local_size,
             "cross_rank": placement.cross_ranks[index],
             "cross_size": placement.cross_sizes[index]}
            for index, rank in enumerate(placement.ranks)]


def reachable_address(remote_hosts, options):
    """The address of this host that remote hosts reach: that of
    --network-interface, or the one the first remote host to connect reached
    the store at (waiting for its agent to say so)."""
    if options.network_interfaces:
        return network.interface_address(options.network_interfaces)
    for host in remote_hosts:
        host.ready.wait(options.connect_timeout + 5)
        if host.store_addr:
            return host.store_addr
    return options.store_candidates[0]


class RemoteHost:
    """Runs ranks on one remote host through one ssh connection and its agent,
    and reports each exit on `events`, like local ranks do.

    A static job starts all of the host's ranks at once (size: the job's);
    with more_ranks (elastic jobs) add_rank() starts further ones over the
    open connection, and close() tells the agent that none will follow, so
    that it ends once its ranks have."""

    def __init__(self, name, command, environment, options, console, events,
                 output_directory=None, verbose=False, size=None, more_ranks=False):
        self.name = name
        self.ready = threading.Event()
        self.store_addr = None
        self.ranks = {}  # output label -> processes.Rank
        self._command = command
        self._size = size
        self._more_ranks = more_ranks
        self._environment = environment
        self._options = options
        self._console = console
        self._events = events
        self._output_directory = output_directory
        self._verbose = verbose
        self._ssh = None
        self._stdin_lock = threading.Lock()
        self._ranks_lock = threading.Lock()
        self._ended = False  # the connection ended: no rank can start any more
        self._reached_at = None  # when the agent said it reached the store
        self._ssh_errors = collections.deque(maxlen=10)
        self._agent_error = None
        self._given_up = None  # why give_up() was called
        self._threads = []

    def start(self, cwd, layouts):
        """Opens the connection and starts the ranks of `layouts` (agent.py
        says what a layout holds; its "rank" labels the rank's output).
        Raises OSError when ssh cannot be run."""
        spec = {"command": self._command, "cwd": cwd, "size": self._size,
                "more_ranks": self._more_ranks,
                "env": self._environment, "store_port": self._options.store_port,
                "store_candidates": self._options.store_candidates,
                "connect_timeout": self._options.connect_timeout,
                "network_interfaces": self._options.network_interfaces,
                "ranks": layouts}
        for layout in layouts:
            self._add(layout["rank"])
        command = ssh_command(self.name, self._options)
        if self._verbose:
            labels = ",".join(str(layout["rank"]) for layout in layouts)
            self._console.message(f"host {self.name}: ranks {labels} via "
                                  f"{shlex.join(command)}")
        self._ssh = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True,
                                     preexec_fn=terminate_with_parent)
        self._write((json.dumps(spec) + "\n").encode("utf-8"))
        for target in (self._read_stdout, self._read_stderr):
            thread = threading.Thread(target=target, name=f"hvdlite-ssh-{self.name}",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)

    def add_rank(self, layout):
        """Starts one more rank (more_ranks only); returns its processes.Rank.
        If the connection has ended meanwhile, the rank is reported lost."""
        rank = self._add(layout["rank"])
        if self.ended():
            self._finish(rank, 1, failure=self._lost_reason())
        else:
            self._write(f"start {json.dumps(layout)}\n".encode("utf-8"))
        return rank

    def ended(self):
        with self._ranks_lock:
            return self._ended

    def close(self):
        """No more ranks will start here: the agent ends once its ranks have
        (or stops them, if any still run)."""
        with self._stdin_lock:
            if self._ssh is not None and not self._ssh.stdin.closed:
                try:
                    self._ssh.stdin.close()
                except OSError:
                    pass

    def _add(self, label):
        rank = Rank(label, self.name, RemoteProcess(),
                    RankOutput(label, self._console, self._output_directory))
        with self._ranks_lock:
            self.ranks[label] = rank
        return rank

    def signal(self, signum, rank=None):
        """Sends `signum` to every rank of this host (SIGKILL: and cuts the
        connection if the agent does not answer), or to the rank labelled `rank`."""
        if rank is not None:
            self._write(f"signal {signum} {rank}\n".encode())
            return
        self._write(b"kill\n" if signum == signal.SIGKILL else f"signal {signum}\n".encode())
        if signum == signal.SIGKILL and self._ssh is not None:
            # If the agent cannot answer (host frozen, network gone), cutting
            # the connection makes it stop its ranks when it notices.
            timer = threading.Timer(KILL_GRACE_S, self._cut)
            timer.daemon = True
            timer.start()

    def give_up(self, reason):
        """The host stopped answering while its connection still looks open
        (a cut link: ssh would notice only after its ServerAlive probes):
        kills this machine's ssh client and reports every rank lost with
        `reason` at once."""
        with self._ranks_lock:
            self._ended = True
            self._given_up = reason
            ranks = list(self.ranks.values())
        self._cut()
        for rank in ranks:
            self._finish(rank, 1, failure=reason)

    def wait(self, timeout):
        if self._ssh is None:
            return
        try:
            self._ssh.wait(timeout)
        except subprocess.TimeoutExpired:
            self._cut()
            self._ssh.wait()
        for thread in self._threads:
            thread.join(timeout)

    def _cut(self):
        if self._ssh.poll() is None:
            signal_group(self._ssh.pid, signal.SIGKILL)

    def _write(self, data):
        with self._stdin_lock:
            try:
                self._ssh.stdin.write(data)
                self._ssh.stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass  # the connection is gone; _read_stdout reports it

    def _read_stdout(self):
        for raw in iter(self._ssh.stdout.readline, b""):
            match = _RANK_LINE.match(raw)
            if match and int(match.group(1)) in self.ranks:
                rank = self.ranks[int(match.group(1))]
                rank.output.write_line(match.group(2).decode(), raw[match.end():])
            elif raw.startswith(CONTROL_PREFIX.encode()):
                try:
                    self._on_control(json.loads(raw[len(CONTROL_PREFIX):]))
                except (ValueError, KeyError) as error:
                    self._console.message(f"host {self.name}: garbled message from the "
                                          f"agent ({error}): {raw[:200]!r}")
            else:
                self._console.write_line("stdout", raw.rstrip(b"\n").decode("utf-8", "replace"))
        self._ssh.wait()
        self._on_connection_end()

    def _read_stderr(self):
        # Only ssh itself and the remote shell write here (e.g. "Connection refused").
        for raw in iter(self._ssh.stderr.readline, b""):
            # ssh ends some of its messages with "\r\n".
            text = raw.rstrip(b"\r\n").decode("utf-8", "replace")
            self._ssh_errors.append(text)
            self._console.message(f"host {self.name}: {text}")

    def _on_control(self, message):
        kind = message["kind"]
        if kind == "ready":
            self._reached_at = time.monotonic()
            self.store_addr = message["store_addr"]
            if self._verbose:
                self._console.message(f"host {self.name} ({message['hostname']}) reached the "
                                      f"store at {message['store_addr']}; its ranks listen "
                                      f"on {message['bind_addr']}")
            self.ready.set()
        elif kind == "started":
            self.ranks[message["rank"]].process.pid = message["pid"]
        elif kind == "exit":
            self._finish(self.ranks[message["rank"]], message["returncode"])
        elif kind == "start_failed" and self._more_ranks:
            # The agent goes on with its other ranks; only this one is lost.
            self._finish(self.ranks[message["rank"]], 127,
                         failure=f"cannot start it on host {self.name}: {message['message']}")
        elif kind in ("error", "start_failed"):
            self._agent_error = message["message"]

    def _on_connection_end(self):
        """The ssh command ended: every rank that did not report is lost."""
        self.ready.set()
        for thread in self._threads[1:]:
            thread.join(2.0)
        code = self._ssh.returncode
        with self._ranks_lock:
            self._ended = True
            ranks = list(self.ranks.values())
        exit_code, reason = (code if code and code > 0 else 1), self._lost_reason()
        for rank in ranks:
            self._finish(rank, exit_code, failure=reason)
        for rank in ranks:
            rank.output.close()

    # Note [Lost hosts]
    # ssh exits 255 both when it cannot connect and when an open connection
    # dies (ServerAliveInterval: no answer for ~15 s). Only the first is a
    # set-up problem worth the advice about host names, ports and keys; a
    # host whose agent had reached the store was working, and is lost.
    def _lost_reason(self):
        code = self._ssh.returncode if self._ssh is not None else None
        if self._given_up:
            return self._given_up
        if self._agent_error:
            return f"the agent on host {self.name} failed: {self._agent_error}"
        details = "; ".join(self._ssh_errors) or "no message from ssh"
        if code == 255 and self._reached_at is not None:
            # ssh had worked: this is no set-up problem (Note [Lost hosts]).
            ran = time.monotonic() - self._reached_at
            return (f"host {self.name} was lost {ran:.0f} s after its agent started: the ssh "
                    f"connection ended ({details}); the host went down or the network to "
                    f"it failed")
        if code == 255:
            return (f"cannot reach host {self.name} over ssh ({details}); check the host "
                    f"name, -p/--ssh-port, -i/--ssh-identity-file and that "
                    f"`ssh {self.name} true` works without a password")
        if code in (126, 127):
            return (f"host {self.name} cannot run {sys.executable} -m hvdlite.runner.agent "
                    f"(exit code {code}); install hvdlite in a Python at that same path "
                    f"on every host")
        reason = f"the ssh connection to host {self.name} ended (exit code {code})"
        if self._ssh_errors:
            reason += f": {'; '.join(self._ssh_errors)}"
        return reason

    def _finish(self, rank, returncode, failure=None):
        if rank.process.finish(returncode, failure):
            self._events.put(("exit", rank))
