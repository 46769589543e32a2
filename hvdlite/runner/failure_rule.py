"""The one rule by which every launcher decides, when workers fail, which
failure it reports, how long it waits for the others of the moment and how
long the rest get to stop (Note [One failure rule]); the event loop of every
job's supervisor (SupervisionLoop), and the one that runs a static job's
workers under the rule (StaticSupervision).

Note [One failure rule]
Whatever starts the workers (hvdliterun's or hvdlite.run's processes, Ray
actors, Spark tasks) and whether the job is static or elastic:

1. A worker fails when it ends without finishing: an exit code, a signal,
   a lost host, a Ray actor that died or raised, a Spark task that raised.
2. A failure rarely comes alone. When a rank crashes, its peers find it
   gone within milliseconds and fail too, and their ends reach the
   launcher in whatever order its threads, Ray or Spark deliver them: on a
   loaded machine a peer's often comes first. So the failures of one
   moment are judged together: the launcher decides once every worker has
   ended, or FAILURE_SETTLE_S after the first failure, whichever comes
   first (the elastic driver also once every worker asked for a new round);
   a static job at once when a CAUSE is among them, since by rule 3 no
   later failure can come before it.
3. The root cause among them is the first in this order of certainty
   (Ending.certainty), ties by order of arrival:
     CAUSE        it ended by itself: killed by a signal, its actor or host
                  was lost, it raised an error of its own;
     UNKNOWN      it exited with a code: a script's own error and a lost
                  peer read alike from outside the process;
     CONSEQUENCE  it raised HvdliteInternalError: a collective failed
                  because another worker was gone.
4. A static job then stops: the others are asked to stop (SIGTERM, a
   cancelled stage) and are killed after STOP_GRACE_S; a signal to the
   launcher stops them with that signal and SIGNAL_GRACE_S, a second one
   kills them. The root cause is reported in one shape,
   "rank R (WHERE) WHAT", and the job takes its exit code. An elastic job
   instead applies Note [Failure rules] (elastic/failures.py) to the
   failures judged, and stops in the same way when those rules say so.

One rule, so that a crash is named the same way whichever launcher ran it,
and a peer that merely lost the crashed rank is never reported as the cause.
"""
import signal
import time
from dataclasses import dataclass

# Rule 3's order of certainty.
CAUSE, UNKNOWN, CONSEQUENCE = 0, 1, 2
# Rule 2: how long after the first failure the others of the moment are awaited.
FAILURE_SETTLE_S = 2.0
# Rule 4: after a stop, the workers get this long to end before they are killed.
STOP_GRACE_S = 5.0
# ...and this long after a signal to the launcher, forwarded to them.
SIGNAL_GRACE_S = 10.0
# How often the static loop looks at the clock when nothing happens.
_POLL_S = 0.1


@dataclass
class Ending:
    """How a worker ended."""
    ok: bool  # it finished (exit code 0, its function returned, it left the job)
    what: str  # "exited with code 3", "was killed by signal 9 (SIGKILL)", "raised ValueError: x"
    exit_code: int = 0  # what hvdliterun exits with when this ending decides the job's
    details: str = ""  # where to read more, e.g. " (its stderr is above, lines [2]<stderr>)"
    certainty: int = UNKNOWN  # how surely a failure is its own (rule 3)


def raised(error):
    """The Ending of a worker whose function raised `error`: a CONSEQUENCE
    when it is an HvdliteInternalError (a collective lost a peer)."""
    from hvdlite.common.exceptions import HvdliteInternalError
    consequence = isinstance(error, HvdliteInternalError)
    return Ending(False, f"raised {type(error).__name__}: {error}", exit_code=1,
                  certainty=CONSEQUENCE if consequence else CAUSE)


def failure_line(who, where, what):
    """Rule 4's shape, for every launcher: "rank 1 (host h, pid 42) exited
    with code 3", "rank 2 (Ray node 10.0.0.7 (8f3c0a1b2d4e)) raised KeyError: 'x'"."""
    return f"{who} ({where}) {what}"


class Judgement:
    """The failures of one moment, judged together (rules 2 and 3)."""

    def __init__(self):
        self._settle_s = FAILURE_SETTLE_S
        self._failed = []  # workers with a failed .ending, in order of arrival
        self._first_at = None

    def record(self, worker):
        if self._first_at is None:
            self._first_at = time.monotonic()
        self._failed.append(worker)

    def pending(self):
        return bool(self._failed)

    def due(self, all_ended):
        """Whether to decide now: every worker ended, a CAUSE is in (the
        root cause then, whatever comes later), or the settle time passed."""
        if not self._failed:
            return False
        return all_ended or any(w.ending.certainty == CAUSE for w in self._failed) or \
            time.monotonic() - self._first_at >= self._settle_s

    def root_cause(self):
        """The most certain failure (rule 3), the earliest of those."""
        failed = self._failed
        return min(failed, key=lambda w: w.ending.certainty) if failed else None

    def take(self):
        """The root cause of the pending failures, which are then forgotten."""
        cause, self._failed, self._first_at = self.root_cause(), [], None
        return cause


def root_cause(failed):
    """Rule 3 over failures in order of arrival, all at once."""
    judgement = Judgement()
    for worker in failed:
        judgement.record(worker)
    return judgement.root_cause()


@dataclass
class StaticOutcome:
    """How a static job ended."""
    exit_code: int
    failure: object = None  # the worker whose failure stopped the job (its root cause)
    interrupt: int = None  # the signal that stopped the launcher


class SupervisionLoop:
    """The loop of every job's supervisor (StaticSupervision here, the
    elastic driver's ElasticDriver): each wait for a WorkerSource event
    (_poll_interval() seconds) ends in _on_exit(worker), _on_signal(signum)
    or nothing, then _tick() looks at the clock, until _over()."""

    def _supervise(self, source):
        while not self._over():
            event = source.next_event(self._poll_interval())
            if event is not None:
                kind, value = event
                if kind == "exit":
                    self._on_exit(value)
                elif kind == "signal":
                    self._on_signal(value)
            self._tick()


class StaticSupervision(SupervisionLoop):
    """Runs a static job's workers to their end under Note [One failure
    rule]. `source` is what WorkerSource (elastic/source.py) offers for
    workers that already run: workers(), next_event(timeout), stop(workers,
    signum), kill_all(), and describe_failure(worker, others) -> the line
    that reports the root cause (with what stopping the others means there).
    `report(text)`: says it (None: the caller raises it instead)."""

    def __init__(self, source, report=None):
        self._source = source
        self._report = report
        self._judgement = Judgement()
        self._failure = None
        self._interrupt = None
        self._kill_at = None
        self._ended = set()

    def run(self):
        """Returns the StaticOutcome once every worker ended."""
        self._supervise(self._source)
        return self._outcome()

    def _over(self):
        return len(self._ended) >= len(self._source.workers())

    def _poll_interval(self):
        return _POLL_S

    def _stopping(self):
        return self._failure is not None or self._interrupt is not None

    def _on_exit(self, worker):
        self._ended.add(worker)
        if not worker.ending.ok and not self._stopping():
            self._judgement.record(worker)

    def _tick(self):
        if self._judgement.due(self._over()) and not self._stopping():
            self._stop_for(self._judgement.take())
        if self._kill_at is not None and time.monotonic() >= self._kill_at:
            self._source.kill_all()
            self._kill_at = None

    def _stop_for(self, failure):
        self._failure = failure
        others = [w for w in self._source.workers() if w not in self._ended]
        # Stopped first: what the failed worker left behind may hold its output open.
        self._source.stop(others, signal.SIGTERM)
        self._kill_at = time.monotonic() + STOP_GRACE_S
        self._say(self._source.describe_failure(failure, len(others)))

    def _on_signal(self, signum):
        name = signal.Signals(signum).name
        if self._stopping():
            self._say(f"received {name} while stopping; killing all ranks.")
            self._source.kill_all()
            self._kill_at = None
            return
        self._interrupt = signum
        running = [w for w in self._source.workers() if w not in self._ended]
        self._say(f"received {name}; stopping {len(running)} rank(s) (send it again to kill "
                  f"them at once).")
        self._source.stop(running, signum)
        self._kill_at = time.monotonic() + SIGNAL_GRACE_S

    def _say(self, text):
        if self._report is not None:
            self._report(text)

    def _outcome(self):
        if self._failure is not None:
            return StaticOutcome(self._failure.ending.exit_code, failure=self._failure)
        if self._interrupt is not None:
            return StaticOutcome(128 + self._interrupt, interrupt=self._interrupt)
        return StaticOutcome(0)
