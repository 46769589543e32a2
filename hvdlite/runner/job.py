"""The ranks of one job on this host: start them, signal them, clean up.

Each rank runs in its own session (process group), so a signal sent to the
group also reaches whatever the rank started itself, and a Ctrl-C in the
launcher's terminal reaches the ranks only through the launcher. On Linux a
rank also gets SIGTERM if the launcher itself dies without cleaning up (kill -9),
so no rank outlives its job.
"""
import ctypes
import os
import shlex
import signal
import subprocess
import sys
import threading

from hvdlite.runner.environment import rank_environment
from hvdlite.runner.output import RankOutput


class LaunchError(RuntimeError):
    """A rank could not be started. `exit_code` is what the launcher exits with."""

    def __init__(self, message, exit_code):
        super().__init__(message)
        self.exit_code = exit_code


class Rank:
    """One started rank: its process and its output forwarding."""

    def __init__(self, rank, host, process, output):
        self.rank = rank
        self.host = host
        self.process = process
        self.output = output

    @property
    def pid(self):
        return self.process.pid

    @property
    def returncode(self):
        return self.process.returncode

    def describe_exit(self):
        """E.g. "exited with code 3" or "was killed by signal 9 (SIGKILL)"."""
        code = self.returncode
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = "unknown signal"
            return f"was killed by signal {-code} ({name})"
        return f"exited with code {code}"

    def exit_code(self):
        """The returncode as a shell reports it: 128 + signal number for a signal."""
        code = self.returncode
        return 128 - code if code < 0 else code


class Job:
    """Starts `size` ranks of `command` on this host and reports each exit,
    in the order they happen, on `events` as ("exit", Rank)."""

    def __init__(self, command, size, environment, hostname, console, events,
                 output_directory=None, verbose=False):
        self.command = command
        self.size = size
        self.ranks = []
        self._environment = environment
        self._hostname = hostname
        self._console = console
        self._events = events
        self._output_directory = output_directory
        self._verbose = verbose

    def start(self):
        """Starts every rank; on failure stops the ones already started and
        raises LaunchError."""
        for rank in range(self.size):
            try:
                self.ranks.append(self._spawn(rank))
            except OSError as error:
                self.kill()
                self.wait()
                raise LaunchError(
                    f"cannot start rank {rank}: {shlex.join(self.command)}: "
                    f"{error.strerror or error}. Check the command and your PATH.",
                    exit_code=127 if isinstance(error, FileNotFoundError) else 126,
                ) from error

    def running(self):
        return [rank for rank in self.ranks if rank.returncode is None]

    def signal(self, signum):
        """Sends `signum` to every rank's process group, including the groups
        of ranks that already exited, so that nothing they started outlives
        the job."""
        for rank in self.ranks:
            _signal_group(rank.pid, signum)

    def kill(self):
        self.signal(signal.SIGKILL)

    def wait(self, output_timeout_s=5.0):
        """Waits for every rank and for the end of its output."""
        for rank in self.ranks:
            rank.process.wait()
        for rank in self.ranks:
            rank.output.join(output_timeout_s)

    def _spawn(self, rank):
        env = dict(self._environment)
        env.update(rank_environment(rank=rank, size=self.size, local_rank=rank,
                                    local_size=self.size, cross_rank=0, cross_size=1,
                                    hostname=self._hostname))
        output = RankOutput(rank, self._console, self._output_directory)
        process = subprocess.Popen(self.command, env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   start_new_session=True, preexec_fn=_terminate_with_parent)
        if self._verbose:
            self._console.message(f"started rank {rank} on {self._hostname} "
                                  f"(pid {process.pid}): {shlex.join(self.command)}")
        output.start(process.stdout, process.stderr)
        started = Rank(rank, self._hostname, process, output)
        threading.Thread(target=self._report_exit, args=(started,),
                         name=f"hvdlite-rank{rank}-wait", daemon=True).start()
        return started

    def _report_exit(self, rank):
        rank.process.wait()
        self._events.put(("exit", rank))


_PR_SET_PDEATHSIG = 1


def _terminate_with_parent():
    """Runs in the child between fork and exec: ask the kernel for SIGTERM when
    the launcher dies. Ranks are spawned from the launcher's main thread, which
    lives as long as the launcher (the kernel ties this to the forking thread)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _signal_group(pgid, signum):
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # the whole group is gone already
