"""What the elastic driver makes of failed workers: which hosts they
exclude, and when the job must stop instead of re-forming
(Note [Failure rules]).

Note [Failure rules]
A worker fails when it ends without finishing, however it does: an exit
code (an exception, sys.exit), a signal (the OOM killer, SIGKILL), a lost
ssh host, a Ray actor that died or raised, a Spark task that failed.

1. A failure excludes the worker's host (a discovered host, a Ray node, a
   Spark executor), as Horovod does: for good, or with a cooldown range
   for a cooldown of 2 to 3 LOW seconds, doubling with each further failure
   there up to HIGH (Note [Cooldown length] in exclusion.py).
   Its other workers leave the job with it. An exit code counts like a
   signal: a failure that repeats on one host (a bad disk, a step that
   always fails there) must not re-form the job forever, and one that
   would repeat everywhere is caught by rule 2.
2. When every worker of the newest round has failed, nobody is left to
   train and a new round would fail alike (a typo, a missing file): the
   job stops at once, with the first of those failures' exit code and
   output.
3. When every host of the newest round has had a failure (e.g. the one
   host of `localhost:4`), nothing of the round can go on: the job stops
   at once too (Horovod stops when all its hosts are blacklisted).
4. A late joiner that failed before it entered hvd.elastic.run (Note [Late
   joiners] in hvdlite/common/late_joiners.py: a collective it could not
   compute alone, or anything else in the script's top level) tells about
   the script or its own start, not its host, whose other workers train
   on: only its slot is excluded, with the same cooldown rules, and the
   others re-form without it. Rule 2 still counts it.

The failures of one moment are judged together, and "the first failure"
above is their root cause, as in a static job (Note [One failure rule] in
hvdlite/runner/failure_rule.py): the driver decides once every worker of
the round has ended or asked for a new round (survivors ask within
seconds, when their collectives fail), or FAILURE_SETTLE_S after the
first failure, whichever comes first. Beyond these rules,
--reset-limit (default defaults.RESET_LIMIT) bounds the re-forms of any
cause (driver.py).
"""
import logging

from hvdlite.runner.elastic.exclusion import HostExclusions
from hvdlite.runner.failure_rule import root_cause


class Verdict:
    """The job must stop: why, and the failure whose exit code it takes."""

    def __init__(self, message, worker):
        self.message = message
        self.worker = worker


class FailureRules:
    def __init__(self, cooldown_range, source, report, late_joiner=lambda worker: False):
        """late_joiner(worker): whether it failed before entering run() in a
        round where the others were inside it (rule 4)."""
        self.exclusions = HostExclusions(cooldown_range)
        self.slot_exclusions = HostExclusions(cooldown_range)  # (host, slot) -> rule 4
        self._late_joiner = late_joiner
        self._source = source
        self._report = report
        self._failed = []  # every failed worker, in the order they ended
        self._pending = []  # failures not judged yet

    def record(self, worker):
        """`worker`, running in the job, ended without finishing."""
        self._failed.append(worker)
        self._pending.append(worker)

    def pending(self):
        return bool(self._pending)

    def judge(self, order, round_number):
        """Applies the rules to the pending failures, with `order` the
        newest round's workers; returns a Verdict when the job must stop,
        else None (the failed hosts are excluded)."""
        pending, self._pending = self._pending, []
        failed = [w for w in self._failed if w in order]
        if order and len(failed) == len(order):
            first = root_cause(failed)
            return Verdict(f"every worker of round {round_number} failed, so a new round "
                           f"would fail alike: the job stops with the exit code of the "
                           f"first failure, {first.describe()}, which {first.ending.what}"
                           f"{first.ending.details}", first)
        late = [w for w in pending if self._late_joiner(w)]
        for worker in late:
            self._exclude_slot(worker)
        pending = [w for w in pending if w not in late]
        for host in dict.fromkeys(w.host for w in pending):
            self._exclude(host, [w for w in pending if w.host == host])
        hosts = dict.fromkeys(w.host for w in order)
        if pending and all(self.exclusions.is_excluded(host) for host in hosts):
            first = root_cause([w for w in self._failed if w in pending])
            kind = self._source.host_kind
            return Verdict(f"every {kind} of round {round_number} "
                           f"({', '.join(map(self._source.host_name, hosts))}) has had a "
                           f"failed worker and is excluded, so nothing of the round can go "
                           f"on: the job stops with the exit code of the first failure, "
                           f"{first.describe()}, which {first.ending.what}"
                           f"{first.ending.details}", first)
        return None

    def slot_excluded(self, host, slot):
        return self.slot_exclusions.is_excluded((host, slot))

    def _exclude_slot(self, worker):
        cooldown = self.slot_exclusions.record_failure((worker.host, worker.slot))
        how_long = "from the job" if cooldown is None else f"for {cooldown:.0f} s"
        self._report(f"excluding slot {worker.slot} of {self._source.host_kind} "
                     f"{self._source.host_name(worker.host)} {how_long}: worker {worker.name} "
                     f"failed there before entering hvd.elastic.run, as a worker that joined "
                     f"the running job (see its output); the others go on without it",
                     logging.WARNING)

    def _exclude(self, host, workers):
        cooldown = self.exclusions.record_failure(host)
        how_long = "from the job" if cooldown is None else f"for {cooldown:.0f} s"
        names = ", ".join(str(w.name) for w in workers)
        self._report(f"excluding {self._source.host_kind} {self._source.host_name(host)} "
                     f"{how_long}: worker{'s' if len(workers) > 1 else ''} {names} failed there",
                     logging.WARNING)
