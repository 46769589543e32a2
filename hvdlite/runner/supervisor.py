"""Watches a running static job (hvdliterun's and hvdlite.run's processes)
under Note [One failure rule] in failure_rule.py: stops it when a rank
fails or the launcher is signalled, and decides the launcher's exit code."""
import queue

from hvdlite.runner.failure_rule import UNKNOWN, StaticSupervision, failure_line
from hvdlite.runner.output import stderr_pointer

# How long to wait for a failed rank's last stderr lines before reporting it, so that
# they come before the report.
STDERR_DRAIN_S = 1.0


class Supervisor:
    """Reads ("exit", Rank) and ("signal", signum) events until every rank
    has exited, and returns the launcher's exit code:
      0 when every rank exited 0; the code of the rank whose failure stopped
      the job (128 + signal number if it was killed; the root cause of
      Note [One failure rule]); 128 + signum when the launcher itself was
      interrupted.
    """

    def __init__(self, job, console, events, certainty_of=None):
        """certainty_of(rank number): what the rank said of its failure
        (hvdlite.run's failure record), else None."""
        self._source = _RankSource(job, events, certainty_of)
        self._console = console
        self._failed = None

    def run(self):
        outcome = StaticSupervision(self._source, self._console.message).run()
        self._failed = outcome.failure
        return outcome.exit_code

    @property
    def first_failure(self):
        """The rank (processes.Rank) whose failure stopped the job, or None."""
        return self._failed


class _RankSource:
    """The started ranks of a processes Job, as StaticSupervision reads them."""

    def __init__(self, job, events, certainty_of):
        self._job = job
        self._events = events
        self._certainty_of = certainty_of

    def workers(self):
        return self._job.ranks

    def next_event(self, timeout):
        try:
            kind, value = self._events.get(timeout=timeout)
        except queue.Empty:
            return None
        if kind == "exit":
            value.ending = value.exit_ending()
            said = self._certainty_of(value.rank) if self._certainty_of and \
                not value.ending.ok else None
            if said is not None and value.ending.certainty == UNKNOWN:
                value.ending.certainty = said  # it raised, and said what
        return kind, value

    def stop(self, ranks, signum):
        # Every group, the failed rank's too: what it left behind may hold its stderr open.
        self._job.signal(signum)

    def kill_all(self):
        self._job.kill()

    def describe_failure(self, rank, others):
        rank.output.join_stderr(STDERR_DRAIN_S)
        where = f"host {rank.host}" + (f", pid {rank.pid}" if rank.pid else "")
        stopping = f"; stopping the other {others} rank{'s' if others > 1 else ''}" \
            if others else ""
        details = stderr_pointer(rank.rank, rank.output)
        return failure_line(f"rank {rank.rank}", where, rank.ending.what) + f"{details}{stopping}."

