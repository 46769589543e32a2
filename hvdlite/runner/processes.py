"""Started ranks and their process groups.

Each rank runs in its own session (process group), so a signal sent to the
group also reaches whatever the rank started itself, and a Ctrl-C in the
launcher's terminal reaches the ranks only through the launcher. On Linux a
rank also gets SIGTERM if its parent (launcher or agent) dies without
cleaning up (kill -9), so no rank outlives its job.
"""
import ctypes
import os
import signal
import sys

from hvdlite.runner.failure_rule import CAUSE, UNKNOWN, Ending


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
        self.ending = None  # failure_rule.Ending, set by the supervisor once it exited

    @property
    def pid(self):
        return self.process.pid

    @property
    def returncode(self):
        return self.process.returncode

    def killed_by_signal(self):
        """True when a signal ended the process (not a lost host: that has no signal)."""
        code = self.returncode
        return code is not None and code < 0 and not getattr(self.process, "failure", None)

    def describe_exit(self):
        """E.g. "exited with code 3" or "was killed by signal 9 (SIGKILL)"."""
        failure = getattr(self.process, "failure", None)
        if failure:
            return f"was lost: {failure}"
        code = self.returncode
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = "unknown signal"
            return f"was killed by signal {-code} ({name})"
        return f"exited with code {code}"

    def exit_ending(self, details=""):
        """How it ended, as Note [One failure rule] reads it: a signal or a
        lost host is surely its own failure, an exit code may be a peer's."""
        if self.returncode == 0:
            return Ending(True, self.describe_exit())
        lost = getattr(self.process, "failure", None)
        return Ending(False, self.describe_exit(), exit_code=self.exit_code(), details=details,
                      certainty=CAUSE if self.killed_by_signal() or lost else UNKNOWN)

    def exit_code(self):
        """The returncode as a shell reports it: 128 + signal number for a signal."""
        code = self.returncode
        return 128 - code if code < 0 else code


_PR_SET_PDEATHSIG = 1


def terminate_with_parent():
    """Runs in the child between fork and exec: ask the kernel for SIGTERM when
    the launcher dies. Ranks are spawned from the launcher's main thread, which
    lives as long as the launcher (the kernel ties this to the forking thread)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def signal_group(pgid, signum):
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # the whole group is gone already
