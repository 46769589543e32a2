"""The ranks of one job: start them on this host and on remote hosts,
signal them, clean up (see processes.py for how no rank outlives its job)."""
import os
import shlex
import signal
import socket
import subprocess
import threading

from hvdlite.runner.environment import rank_environment
from hvdlite.runner.hosts import is_local
from hvdlite.runner.output import RankOutput
from hvdlite.runner.processes import LaunchError, Rank, signal_group, terminate_with_parent
from hvdlite.runner.remote import RemoteHost, forwarded_environment, placement_layouts, \
    reachable_address


class Job:
    """Starts `command` as the ranks of `placements` (hosts.HostPlacement):
    ranks on this host directly, those of each remote host through one ssh
    command (remote.RemoteHost). Reports each exit, in the order they
    happen, on `events` as ("exit", Rank)."""

    def __init__(self, command, placements, environment, console, events,
                 output_directory=None, verbose=False, remote_options=None):
        self.command = command
        self.size = sum(p.local_size for p in placements)
        self.ranks = []
        self._placements = placements
        self._environment = environment
        self._console = console
        self._events = events
        self._output_directory = output_directory
        self._verbose = verbose
        self._remote_options = remote_options
        self._remote_hosts = []

    def start(self):
        """Starts every rank; on failure stops the ones already started and
        raises LaunchError."""
        local = [p for p in self._placements if is_local(p.name)]
        for placement in self._placements:
            if placement in local:
                continue
            host = RemoteHost(placement.name, self.command,
                              forwarded_environment(self._environment), self._remote_options,
                              self._console, self._events, self._output_directory,
                              self._verbose, size=self.size)
            try:
                host.start(os.getcwd(), placement_layouts(placement))
            except OSError as error:
                self.kill()
                self.wait()
                raise LaunchError(f"cannot run ssh to reach host {placement.name}: "
                                  f"{error.strerror or error}; install an ssh client "
                                  f"(e.g. openssh-client)", exit_code=127) from error
            self._remote_hosts.append(host)
            self.ranks += host.ranks.values()
        for placement in local:
            self._start_local(placement)
        self.ranks.sort(key=lambda rank: rank.rank)

    def running(self):
        return [rank for rank in self.ranks if rank.returncode is None]

    def signal(self, signum):
        """Sends `signum` to every rank's process group, including the groups
        of ranks that already exited, so that nothing they started outlives
        the job."""
        for rank in self.ranks:
            if not isinstance(rank.process, subprocess.Popen):
                continue
            signal_group(rank.pid, signum)
        for host in self._remote_hosts:
            host.signal(signum)

    def kill(self):
        self.signal(signal.SIGKILL)

    def wait(self, output_timeout_s=5.0):
        """Waits for every rank and for the end of its output."""
        for host in self._remote_hosts:
            host.wait(output_timeout_s + 10)
        for rank in self.ranks:
            rank.process.wait()
        for rank in self.ranks:
            rank.output.join(output_timeout_s)

    def _start_local(self, placement):
        environment = dict(self._environment)
        if self._remote_hosts:
            environment["HVDLITE_BIND_ADDR"] = reachable_address(self._remote_hosts,
                                                                 self._remote_options)
        for local_rank, rank in enumerate(placement.ranks):
            try:
                self.ranks.append(self._spawn(placement, local_rank, environment))
            except OSError as error:
                self.kill()
                self.wait()
                raise LaunchError(
                    f"cannot start rank {rank}: {shlex.join(self.command)}: "
                    f"{error.strerror or error}. Check the command and your PATH.",
                    exit_code=127 if isinstance(error, FileNotFoundError) else 126,
                ) from error

    def _spawn(self, placement, local_rank, environment):
        rank = placement.ranks[local_rank]
        env = dict(environment)
        env.update(rank_environment(rank=rank, size=self.size, local_rank=local_rank,
                                    local_size=placement.local_size,
                                    cross_rank=placement.cross_ranks[local_rank],
                                    cross_size=placement.cross_sizes[local_rank],
                                    hostname=socket.gethostname()))
        return start_local_process(rank, socket.gethostname(), self.command, env, self._console,
                                   self._events, self._output_directory, self._verbose)


def start_local_process(label, host, command, env, console, events, output_directory=None,
                        verbose=False, kind="rank"):
    """Starts `command` on this machine in its own process group, forwards its
    output prefixed with `label` (the rank, or an elastic worker's number),
    and puts ("exit", Rank) on `events` when it exits. Raises OSError when
    the command cannot be started."""
    output = RankOutput(label, console, output_directory)
    process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True, preexec_fn=terminate_with_parent)
    if verbose:
        console.message(f"started {kind} {label} on {host} (pid {process.pid}): "
                        f"{shlex.join(command)}")
    output.start(process.stdout, process.stderr)
    started = Rank(label, host, process, output)
    threading.Thread(target=_report_exit, args=(started, events),
                     name=f"hvdlite-rank{label}-wait", daemon=True).start()
    return started


def _report_exit(rank, events):
    rank.process.wait()
    events.put(("exit", rank))
