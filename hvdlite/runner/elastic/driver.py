"""The elastic driver: keeps a job running at between min_np and max_np
workers while hosts come and go and workers fail, for every worker source
(source.py: hvdliterun's processes, Ray actors, Spark tasks).

It runs on its caller's thread as a loop over the source's events (worker
ends, signals) with a look at the hosts every discovery interval and at
the workers' requests for a new round (Note [Elastic rounds] in
hvdlite/store/rounds.py). Whenever the set of workers must change it
publishes a new round; the workers re-form the job from there themselves.
What a failure means is failures.py's (Note [Failure rules]).
"""
import logging
import signal
import time
from dataclasses import dataclass, field

from hvdlite.runner.elastic.discovery import DiscoveryError
from hvdlite.runner.elastic.exclusion import silent_hosts
from hvdlite.runner.elastic.failures import FailureRules
from hvdlite.runner.failure_rule import FAILURE_SETTLE_S, STOP_GRACE_S, SupervisionLoop
from hvdlite.runner.elastic.planner import plan_round
from hvdlite.store.rounds import Round, failure_key, late_joiner_key, latest_key, \
    read_failure_record, rendezvous_abort_key, reset_key, round_key, training_over_key

# A worker that is not part of the newest round should notice and leave on
# its own (at its next commit); after this long it is stopped.
LEAVE_GRACE_S = 10.0
# A request for a new round usually races with the end of the worker that
# caused it: wait this long, so that one new round covers both.
RESET_SETTLE_S = 0.3
# ...and this long while a worker that joined the round has not entered
# hvd.elastic.run: the others' request is most likely its failure.
LATE_JOINER_SETTLE_S = 10.0
# How long the loop waits for a worker's end or a signal before it looks at
# the store again; PENDING_POLL_S while a new round is pending (Note [Quick
# while a round is pending]).
POLL_S = 0.1
PENDING_POLL_S = 0.01
STOPPED_EXIT_CODE = 1


@dataclass
class Outcome:
    """How the job ended."""
    exit_code: int  # hvdliterun's exit code
    formed: bool = True  # a first round was published
    stop_reason: str = None  # why the driver stopped the job, if it did
    reset_limit_reached: bool = False  # it stopped because of the reset limit
    failure: object = None  # the failed Worker whose exit code the job takes, if one
    final: list = field(default_factory=list)  # the newest round's workers, in rank order


class ElasticDriver(SupervisionLoop):
    def __init__(self, settings, source, store, job_id, report):
        """settings: ElasticSettings; source: a WorkerSource; store: a
        StoreClient of the job's store; report(text, level): says something
        to the user (hvdliterun's console, a logger)."""
        self._settings = settings
        self._source = source
        self._store = store
        self._job_id = job_id
        self._report = report
        self._failures = FailureRules(settings.cooldown_range, source, report,
                                      late_joiner=self._outside_run)
        self._exclusions = self._failures.exclusions
        self._hosts = {}
        self._next_discovery = 0.0
        self._round = None
        self._order = []  # workers of the newest round, in rank order
        self._resets = 0
        self._reform_reason = None
        self._reform_after = 0.0
        self._short_since = None  # when a re-form first found too few slots
        self._leave_deadlines = {}  # worker -> when it is stopped
        self._finishing = False  # a worker of the newest round finished
        self._final_failure = None  # a worker that failed after that
        self._stop = None  # the Outcome decided by a stop
        self._kill_at = None
        self._exited = set()  # workers whose end was handled

    # --- the loop -------------------------------------------------------

    def run(self):
        """Runs the job to its end; returns its Outcome."""
        if not self._start_first_round():
            return self._stop
        self._supervise(self._source)
        return self._outcome()

    # Note [Quick while a round is pending]
    # Once a worker has failed, the new round waits for the survivors' requests
    # (or their ends) in the store, which the loop reads once a wait for an
    # event times out. At POLL_S that wait was a tenth of a second of every
    # recovery (bench/elastic_recovery.py: 0.100-0.105 s of 0.2-0.7 s from a
    # kill to the next step). While a round is pending the loop looks every
    # PENDING_POLL_S instead: a store read each time, for the few hundred
    # milliseconds until the round is published; otherwise it stays at POLL_S.
    def _poll_interval(self):
        pending = self._reform_reason is not None and self._stop is None
        return PENDING_POLL_S if pending else POLL_S

    def _over(self):
        """Every worker's end was handled (not merely happened: its event
        says how it ended), nothing else of the job runs, and no new round
        is due."""
        ended = len(self._exited) == len(self._source.workers()) and not self._source.busy()
        return ended and (self._reform_reason is None or self._stop is not None)

    def _tick(self):
        now = time.monotonic()
        if self._kill_at is not None and now >= self._kill_at:
            self._source.kill_all()
            self._kill_at = None
        if self._stop is not None:
            return
        for worker, deadline in list(self._leave_deadlines.items()):
            if now >= deadline:
                del self._leave_deadlines[worker]
                self._source.stop([worker])
        if now >= self._next_discovery:
            self._look_at_hosts()
        self._poll_reset_requests()
        if self._reform_reason is not None and self._ends_handled() and \
                (now >= self._reform_after or self._round_settled()):
            self._reform()

    # --- rounds ---------------------------------------------------------

    def _start_first_round(self):
        settings = self._settings
        deadline = time.monotonic() + settings.start_wait
        enough_since = None
        while True:
            try:
                self._hosts = self._source.find_hosts()
            except DiscoveryError as error:
                return self._stop_before_start(f"error: {error}")
            # Every usable slot up to max_np, as Horovod's first round: a job
            # that starts smaller re-forms at once to grow, which costs a
            # reset (--reset-limit) and a rendezvous. num_proc only says how
            # many slots are worth waiting for.
            plan = plan_round(self._hosts, [], self._exclusions.is_excluded, settings.max_np)
            now = time.monotonic()
            usable_hosts = [h for h in self._hosts if not self._exclusions.is_excluded(h)]
            if plan.size >= settings.min_np and len(usable_hosts) >= settings.min_start_hosts:
                enough_since = enough_since or now
                settled = now - enough_since >= self._source.first_round_settle_s
                if settled or settings.num_proc is not None and plan.size >= settings.num_proc:
                    break
            if now >= deadline:
                wanted = settings.spell("min_np")
                if settings.min_start_hosts > 1:
                    wanted += f" on at least {settings.min_start_hosts} hosts"
                return self._stop_before_start(
                    f"discovery found {plan.size} slot(s) ({self._describe_hosts()}), fewer than "
                    f"{wanted}, within {settings.spell('start_wait')}; not starting")
            if self._interrupted_while_waiting(settings.discovery_interval):
                return False
        self._next_discovery = time.monotonic() + settings.discovery_interval
        self._publish(0, plan)
        return True

    def _reform(self):
        """Publishes the next round, or waits for slots, or stops the job."""
        self._give_up_silent_hosts()
        if self._failures.pending():
            verdict = self._failures.judge(self._order, self._round.number)
            if verdict is not None:
                self._stop_job(verdict.message, exit_code=verdict.worker.ending.exit_code,
                               failure=verdict.worker)
                return
        plan = plan_round(self._hosts, self._running_in_order(), self._exclusions.is_excluded,
                          self._settings.max_np, self._failures.slot_excluded)
        if plan.size < self._settings.min_np:
            self._wait_for_slots(plan)
            return
        self._short_since = None
        if self._resets >= self._settings.reset_limit:
            self._stop_job(f"the job needs to re-form ({self._reform_reason}), but it has "
                           f"already been reset {self._resets} time(s), the limit "
                           f"({self._settings.spell('reset_limit')}); stopping")
            self._stop.reset_limit_reached = True
            return
        self._resets += 1
        reason, self._reform_reason = self._reform_reason, None
        self._report(f"re-forming the job at {plan.size} rank(s) (round "
                     f"{self._round.number + 1}): {reason}", logging.WARNING)
        self._publish(self._round.number + 1, plan)

    def _wait_for_slots(self, plan):
        now, settings = time.monotonic(), self._settings
        if self._short_since is None:
            self._short_since = now
            self._report(f"only {plan.size} slot(s) are usable ({self._describe_hosts()}), "
                         f"fewer than {settings.spell('min_np')}; waiting up to "
                         f"{settings.spell('elastic_timeout')} for more", logging.WARNING)
        elif now - self._short_since >= settings.elastic_timeout:
            self._stop_job(f"fewer than {settings.spell('min_np')} slots have been usable "
                           f"for {settings.elastic_timeout:g} s ({self._describe_hosts()}); "
                           f"stopping the job")

    def _publish(self, number, plan):
        self._source.before_round(number)
        started = [self._source.start(host, slot, number) for host, slot in plan.start]
        self._order = plan.keep + started
        for rank, worker in enumerate(self._order):
            worker.rank = rank
        self._round = Round.assign(number, [(w.id, w.identity) for w in self._order],
                                   self._source.bind_addresses(self._order))
        self._store.set(round_key(self._job_id, number), self._round.to_json())
        self._store.set(latest_key(self._job_id), str(number))
        if number > 0:
            self._abort_rendezvous(number - 1, f"round {number} replaced it")
        for worker in plan.leave:
            worker.leaving = True
            self._leave_deadlines[worker] = time.monotonic() + LEAVE_GRACE_S
        # Every round at info; with --verbose, whatever the level.
        layout = ", ".join(f"rank {i}: worker {w.name} on {self._source.host_name(w.host)}"
                           for i, w in enumerate(self._order))
        self._report(f"round {number}: {layout}",
                     logging.WARNING if self._settings.verbose else logging.INFO)

    def _running_in_order(self):
        return [w for w in self._order if w.alive() and not w.leaving]

    def _request_reform(self, reason, settle=0.0, first_hand=False):
        """first_hand: the reason itself (a worker's end), which replaces a
        pending consequence of it (a survivor's request for a new round)."""
        if self._reform_reason is None:
            self._reform_reason = reason
            self._reform_after = time.monotonic() + settle
        elif first_hand:
            self._reform_reason = reason
            self._reform_after = max(self._reform_after, time.monotonic() + settle)

    def _ends_handled(self):
        """Every worker of the newest round that ended has had its end
        handled (its event comes within a loop or two): a round is never
        planned, nor its failures judged, without a failure that happened."""
        return all(w.alive() or w in self._exited for w in self._order)

    def _round_settled(self):
        """Every worker of the newest round has ended or asked for a new
        round: nothing more is to be learnt by waiting (Note [Failure rules])."""
        number = self._round.number
        return all(w in self._exited or w.leaving or
                   self._store.try_get(failure_key(self._job_id, number, w.id)) is not None
                   for w in self._order)

    # --- what the driver watches ---------------------------------------

    def _look_at_hosts(self):
        self._next_discovery = time.monotonic() + self._settings.discovery_interval
        try:
            hosts = self._source.find_hosts()
        except DiscoveryError as error:
            self._report(f"warning: {error}; keeping the last known hosts", logging.WARNING)
            return
        changed = hosts != self._hosts
        self._hosts = hosts
        if self._finishing or self._reform_reason is not None:
            return
        plan = plan_round(hosts, self._running_in_order(), self._exclusions.is_excluded,
                          self._settings.max_np, self._failures.slot_excluded)
        if plan.start or plan.leave:
            self._request_reform(f"{self._why_reform(changed, plan)} ({self._describe_hosts()})")

    def _why_reform(self, changed, plan):
        if changed:
            return f"{self._source.host_kind}s changed"
        # Only a host excluded before (a failure) can be back from a cooldown.
        returned = sorted({self._source.host_name(host) for host, _ in plan.start
                           if self._exclusions.failures(host)})
        if returned:
            return (f"the cooldown of excluded {self._source.host_kind}(s) "
                    f"{', '.join(returned)} ended")
        return "slots the running round does not use are free"

    def _poll_reset_requests(self):
        if self._reform_reason is not None or self._round is None:
            return
        requests = self._store.try_get(reset_key(self._job_id, self._round.number))
        if requests is None or int(requests) == 0:
            return
        if self._finishing:
            # Nobody would take part in a new round: training is over.
            self._stop_job("a worker failed a collective and asked for a new round after "
                           "another had finished training; stopping. Every rank must run the "
                           "same number of steps")
            return
        # A late joiner that failed is usually the peer lost, still exiting:
        # wait for its end, or its own request from inside run() (the round
        # then settles), rather than plan a round with it in (Note [Late
        # joiners] in hvdlite/common/late_joiners.py).
        joining = any(w.alive() and self._outside_run(w) for w in self._order)
        self._request_reform("a worker lost its peers and asked for a new round",
                             settle=LATE_JOINER_SETTLE_S if joining else RESET_SETTLE_S)

    # Note [Silent hosts]
    # A host whose link is cut (power, cable, a blackholed port) does not end
    # its workers' ssh connections: ssh notices only after its own
    # ServerAlive probes (~15 s), and its worker processes look alive. The
    # survivors notice first: their links fail within
    # HVDLITE_PEER_TIMEOUT_SECONDS with "lost host X", which they send along
    # with their reset requests (membership.note_failure). Before re-forming,
    # the driver gives up each host that a worker of another host reports
    # lost and whose own workers of the round sent no request of their own:
    # the driver cannot hear from it either. It excludes the host (as it
    # would after a failure: discovery may still list it), has the source
    # cut it off, and counts its workers as ended at once, so that the next
    # round goes on without them and nothing waits for them. (Two hosts that
    # lose only each other both ask for a reset, so neither is silent; the
    # job re-forms with both, as it does for any failure.) Only workers the
    # source can give up (over ssh) are: the driver's own machine is never
    # silent to it, and a worker there that hangs is no cut link.
    def _give_up_silent_hosts(self):
        reports = []  # (worker, the host it runs on as the core names it, its error, hosts lost)
        for worker in self._order:
            record = self._store.try_get(failure_key(self._job_id, self._round.number, worker.id))
            if record:
                error, lost = read_failure_record(record)
                reports.append((worker, worker.identity, error, lost))
        for name, (reporter, error) in silent_hosts(reports).items():
            lost = [w for w in self._order if w.identity == name and w.alive() and
                    self._source.can_give_up(w)]
            if lost:
                self._give_up_host(lost, reporter, error)

    def _give_up_host(self, workers, reporter, error):
        host = workers[0].host
        cooldown = self._exclusions.record_failure(host)
        excluded = "for good" if cooldown is None else f"for {cooldown:.0f} s"
        reason = (f"host {host} stopped answering: rank {reporter.rank} of round "
                  f"{self._round.number} (worker {reporter.name} on {reporter.host}) reports "
                  f"\"{error}\"")
        self._report(f"{reason}; excluding host {host} {excluded}, even while discovery lists "
                     f"it, and giving up its worker(s) {', '.join(str(w.name) for w in workers)} "
                     f"without waiting for them (Note [Silent hosts])", logging.WARNING)
        for worker in workers:
            worker.given_up = True
        self._source.give_up(workers, reason)
        self._reform_reason = f"host {host} stopped answering"

    def _abort_rendezvous(self, number, reason):
        """Workers still in the core's rendezvous of round `number` give up
        at once (Note [Rendezvous abort] in csrc/transport/tcp/mesh.h); the
        first reason given is the one they report."""
        key = rendezvous_abort_key(self._job_id, number)
        if self._store.try_get(key) is None:
            self._store.set(key, reason)

    def _on_exit(self, worker):
        self._exited.add(worker)
        self._leave_deadlines.pop(worker, None)
        self._source.ended(worker)
        if worker.leaving and self._settings.verbose:
            self._report(f"{worker.describe()} left the job: {worker.ending.what}",
                         logging.WARNING)
        if self._stop is not None or worker.leaving or worker.given_up:
            return
        if worker.ending.ok:
            if worker in self._order and not self._finishing:
                self._training_over(worker)
            return
        if self._finishing:
            self._final_failure = self._final_failure or worker
            self._report_failure(worker, "; it failed after another worker had finished")
            return
        what = self._report_failure(worker)
        self._failures.record(worker)
        if worker.id in self._round.placements:
            # Its peers may be waiting for it in the core's rendezvous.
            self._abort_rendezvous(self._round.number, what)
        self._request_reform(f"{worker.describe()} failed", settle=FAILURE_SETTLE_S,
                             first_hand=True)

    # Note [Training over]
    # A worker of the newest round that finishes (exit 0, its function
    # returned) ends training: no round is published after it, as in
    # Horovod. But the newest round may have been published just before,
    # with new workers in it (a host discovered as the survivors made their
    # last commit), and those wait in membership._all_ready for survivors
    # that are gone. So the driver says in the store that training is over
    # (training_over_key, which names the worker); every worker waiting for
    # a round sees it and leaves the job with exit code 0 (LeftJob), for
    # every worker source. Horovod likewise stops the job once a worker has
    # succeeded and the round's workers have checked in. A worker that
    # instead fails a collective after that is an error of the script (ranks
    # ran different numbers of steps): _poll_reset_requests stops the job.
    def _training_over(self, worker):
        self._finishing = True
        self._reform_reason = None
        self._store.set(training_over_key(self._job_id),
                        f"worker {worker.name} finished training")
        self._source.training_over()

    def _outside_run(self, worker):
        """Whether `worker` is (or ended as) a late joiner that had not
        entered hvd.elastic.run (Note [Late joiners] in
        hvdlite/common/late_joiners.py)."""
        return self._store.try_get(late_joiner_key(self._job_id, worker.id)) == b"1"

    def _report_failure(self, worker, consequence=""):
        """Says how `worker` ended; returns that sentence without the details."""
        placement = self._round.placements.get(worker.id) if self._round else None
        where = f"rank {placement.rank} of round {self._round.number}, " if placement else ""
        what = f"worker {worker.name} ({where}{worker.where()}) {worker.ending.what}"
        self._report(f"{what}{consequence}{worker.ending.details}.", logging.WARNING)
        return what

    def _on_signal(self, signum):
        name = signal.Signals(signum).name
        if self._stop is not None:
            self._report(f"received {name} while stopping; killing all workers.",
                         logging.WARNING)
            self._source.kill_all()
            return
        alive = [w for w in self._source.workers() if w.alive()]
        self._stop_job(f"received {name}; stopping {len(alive)} worker(s)",
                       exit_code=128 + signum, signum=signum)

    def _interrupted_while_waiting(self, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            event = self._source.next_event(min(POLL_S, seconds))
            if event is not None and event[0] == "signal":
                self._stop = Outcome(128 + event[1], formed=False)
                return True
        return False

    # --- the end --------------------------------------------------------

    def _stop_job(self, message, exit_code=STOPPED_EXIT_CODE, signum=signal.SIGTERM,
                  failure=None):
        self._report(message + ".", logging.WARNING)
        self._stop = Outcome(exit_code, stop_reason=message, failure=failure,
                             final=list(self._order))
        self._reform_reason = None
        self._source.stop([w for w in self._source.workers() if w.alive()], signum)
        self._kill_at = time.monotonic() + STOP_GRACE_S

    def _stop_before_start(self, message):
        self._report(message, logging.WARNING)
        self._stop = Outcome(STOPPED_EXIT_CODE, formed=False, stop_reason=message)
        return False

    def _outcome(self):
        if self._stop is not None:
            return self._stop
        if self._final_failure is not None:
            return Outcome(self._final_failure.ending.exit_code, failure=self._final_failure,
                           final=list(self._order))
        return Outcome(0, final=list(self._order))

    def _describe_hosts(self):
        name = self._source.host_name
        parts = [f"{name(host)}:{slots}" for host, slots in self._hosts.items()]
        excluded = self._exclusions.excluded()
        text = ", ".join(parts) if parts else f"no {self._source.host_kind}s"
        if excluded:
            text += "; excluded after failures: " + ", ".join(map(name, excluded))
        return text
