"""Watches a running job: stops it when a rank fails or the launcher is
signalled, and decides the launcher's exit code."""
import queue
import signal
import time

from hvdlite.runner.output import stderr_pointer

# After a rank failed, the others get SIGTERM and this long to exit.
FAILURE_GRACE_S = 5.0
# After SIGINT/SIGTERM, the ranks get the same signal and this long to exit.
SIGNAL_GRACE_S = 10.0
# How long to wait for a failed rank's last stderr lines before reporting it, so that
# they come before the report.
STDERR_DRAIN_S = 1.0
# Note [The rank that failed first]
# A rank that crashes (killed by a signal) is often followed within
# milliseconds by its peers, which find it gone and exit with an error of
# their own. Their exit events reach this thread in whatever order the
# waiting threads run, and on a loaded machine a peer's can come first, so
# the report would name a consequence instead of the cause. Exits that come
# within this long of the first failure are judged together, and one killed
# by a signal is reported as the failure.
SIMULTANEOUS_EXITS_S = 0.2


class Supervisor:
    """Reads ("exit", Rank) and ("signal", signum) events until every rank
    has exited, and returns the launcher's exit code:
      0 when every rank exited 0; the code of the FIRST rank that failed
      (128 + signal number if it was killed); 128 + signum when the launcher
      itself was interrupted.
    """

    def __init__(self, job, console, events):
        self._job = job
        self._console = console
        self._events = events
        self._failed = None
        self._interrupt = None
        self._kill_at = None

    def run(self):
        exited = 0
        self._held = []  # events read while gathering simultaneous exits, in order
        while exited < len(self._job.ranks):
            kind, value = self._next_event()
            if kind == "exit":
                together = [value]
                if value.returncode != 0 and not self._stopping():
                    together += self._exits_within(SIMULTANEOUS_EXITS_S)
                exited += len(together)
                # A signal's victim first (Note [The rank that failed first]); else in order.
                for rank in sorted(together, key=lambda r: not r.killed_by_signal()):
                    self._on_exit(rank)
            elif kind == "signal":
                self._on_signal(value)
            if self._kill_at is not None and time.monotonic() >= self._kill_at:
                self._job.kill()
                self._kill_at = None
        return self._exit_code()

    def _next_event(self):
        if self._held:
            return self._held.pop(0)
        try:
            return self._events.get(timeout=0.1)
        except queue.Empty:
            return None, None

    def _exits_within(self, seconds):
        """The ranks whose exits arrive in the next `seconds`; other events are
        held for run(), in order."""
        ranks, until = [], time.monotonic() + seconds
        while (left := until - time.monotonic()) > 0:
            try:
                kind, value = self._events.get(timeout=left)
            except queue.Empty:
                break
            if kind == "exit":
                ranks.append(value)
            else:
                self._held.append((kind, value))
        return ranks

    @property
    def first_failure(self):
        """The rank (processes.Rank) whose failure stopped the job, or None."""
        return self._failed

    def _stopping(self):
        return self._failed is not None or self._interrupt is not None

    def _on_exit(self, rank):
        if rank.returncode == 0 or self._stopping():
            return
        self._failed = rank
        others = len(self._job.running())
        # Also ends what the failed rank left behind, which may hold its
        # stderr open.
        self._job.signal(signal.SIGTERM)
        self._kill_at = time.monotonic() + FAILURE_GRACE_S
        self._report_failure(rank, others)

    def _report_failure(self, rank, others):
        rank.output.join_stderr(STDERR_DRAIN_S)
        stopping = ""
        if others:
            stopping = f"; stopping the other {others} rank{'s' if others > 1 else ''}"
        where = f"host {rank.host}" + (f", pid {rank.pid}" if rank.pid else "")
        self._console.message(f"rank {rank.rank} ({where}) {rank.describe_exit()}"
                              f"{stderr_pointer(rank.rank, rank.output)}{stopping}.")

    def _on_signal(self, signum):
        name = signal.Signals(signum).name
        if self._stopping():
            self._console.message(f"received {name} while stopping; killing all ranks.")
            self._job.kill()
            self._kill_at = None
            return
        self._interrupt = signum
        running = len(self._job.running())
        self._console.message(f"received {name}; stopping {running} rank(s) "
                              f"(send it again to kill them at once).")
        self._job.signal(signum)
        self._kill_at = time.monotonic() + SIGNAL_GRACE_S

    def _exit_code(self):
        if self._failed is not None:
            return self._failed.exit_code()
        if self._interrupt is not None:
            return 128 + self._interrupt
        return 0
