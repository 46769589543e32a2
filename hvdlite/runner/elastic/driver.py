"""The elastic driver: keeps a job running at between --min-np and --max-np
ranks while hosts come and go and workers fail.

It runs on the launcher's main thread as a loop over events (worker exits,
signals) with a poll of the discovery script every --discovery-interval
seconds and of the workers' reset requests (Note [Elastic rounds] in
hvdlite/store/rounds.py). Whenever the set of workers must change it
publishes a new round; the workers re-form the job from there themselves.
"""
import logging
import queue
import signal
import time

from hvdlite.runner.elastic.discovery import DiscoveryError
from hvdlite.runner.elastic.exclusion import HostExclusions, silent_hosts
from hvdlite.runner.elastic.planner import plan_round
from hvdlite.store.rounds import Round, failure_key, latest_key, rendezvous_abort_key, \
    reset_key, round_key
from hvdlite.runner.elastic.workers import host_identity
from hvdlite.runner.output import stderr_pointer

# A worker that is not part of the newest round should notice and exit on its
# own; after this long it is terminated.
LEAVE_GRACE_S = 10.0
# After a failure or a stop, the workers get SIGTERM and this long to exit.
STOP_GRACE_S = 5.0
# A reset request often races with the exit of the worker that caused it:
# wait this long, so that one new round covers both.
RESET_SETTLE_S = 0.3
# A script error usually hits every worker at the same point: after one, the
# re-form waits this long for the others' exits (Note [Script errors]).
SCRIPT_ERROR_SETTLE_S = 2.0
STDERR_DRAIN_S = 1.0
STOPPED_EXIT_CODE = 1


class ElasticDriver:
    def __init__(self, options, discovery, pool, store, job_id, console, events):
        self._options = options  # the parsed hvdliterun arguments
        self._discovery = discovery
        self._pool = pool
        self._store = store  # a StoreClient of the job's store
        self._job_id = job_id
        self._console = console
        self._events = events
        self._exclusions = HostExclusions(options.blacklist_cooldown_range)
        self._hosts = {}
        self._next_discovery = 0.0
        self._round = None
        self._order = []  # workers of the newest round, in rank order
        self._resets = 0
        self._reform_reason = None
        self._reform_after = 0.0
        self._short_since = None  # when a re-form first found too few slots
        self._leave_deadlines = {}  # worker -> time it gets SIGTERM
        self._finishing = False  # a worker of the newest round exited 0
        self._final_failure = None  # a worker that failed while finishing
        self._stop_code = None
        self._kill_at = None
        self._exited = set()  # workers whose exit was handled
        self._script_errors = []  # workers that exited with a non-zero code, in order

    # --- the loop -------------------------------------------------------

    def run(self):
        """Runs the job to its end; returns the launcher's exit code."""
        if not self._start_first_round():
            return self._stop_code
        # Until every worker's exit was handled (not merely happened: its
        # event says how it ended), or while a new round is pending.
        while len(self._exited) < len(self._pool.workers) or \
                self._reform_reason is not None and self._stop_code is None:
            kind, value = self._next_event()
            if kind == "exit":
                self._on_exit(self._pool.of_process(value))
            elif kind == "signal":
                self._on_signal(value)
            self._tick()
        return self._exit_code()

    def _tick(self):
        now = time.monotonic()
        if self._kill_at is not None and now >= self._kill_at:
            self._pool.kill_all()
            self._kill_at = None
        if self._stop_code is not None:
            return
        for worker, deadline in list(self._leave_deadlines.items()):
            if now >= deadline:
                del self._leave_deadlines[worker]
                self._pool.signal([worker], signal.SIGTERM)
        if now >= self._next_discovery:
            self._poll_discovery()
        self._poll_reset_requests()
        if self._reform_reason is not None and now >= self._reform_after:
            self._reform()

    def _next_event(self):
        try:
            return self._events.get(timeout=0.1)
        except queue.Empty:
            return None, None

    # --- rounds ---------------------------------------------------------

    def _start_first_round(self):
        options = self._options
        deadline = time.monotonic() + options.elastic_timeout
        while True:
            try:
                self._hosts = self._discovery.find()
            except DiscoveryError as error:
                return self._stop_before_start(f"error: {error}")
            plan = plan_round(self._hosts, [], self._exclusions.is_excluded, options.num_proc)
            if plan.size >= options.min_np:
                break
            if time.monotonic() >= deadline:
                return self._stop_before_start(
                    f"discovery found {plan.size} slot(s) ({self._describe_hosts()}), fewer "
                    f"than --min-np {options.min_np}, within --elastic-timeout "
                    f"{options.elastic_timeout:g} s; not starting")
            if self._interrupted_while_waiting(options.discovery_interval):
                return False
        self._next_discovery = time.monotonic() + options.discovery_interval
        self._publish(0, plan)
        return True

    def _reform(self):
        """Publishes the next round, or waits for slots, or stops the job."""
        self._give_up_silent_hosts()
        plan = plan_round(self._hosts, self._running_in_order(), self._exclusions.is_excluded,
                          self._options.max_np)
        if plan.size < self._options.min_np:
            self._wait_for_slots(plan)
            return
        self._short_since = None
        limit = self._options.reset_limit
        if limit is not None and self._resets >= limit:
            self._stop(f"the job needs to re-form ({self._reform_reason}), but it has "
                       f"already been reset {self._resets} time(s), the --reset-limit; "
                       f"stopping")
            return
        self._resets += 1
        reason, self._reform_reason = self._reform_reason, None
        self._console.message(f"re-forming the job at {plan.size} rank(s) "
                              f"(round {self._round.number + 1}): {reason}")
        self._publish(self._round.number + 1, plan)

    def _wait_for_slots(self, plan):
        now = time.monotonic()
        if self._short_since is None:
            self._short_since = now
            self._console.message(
                f"only {plan.size} slot(s) are usable ({self._describe_hosts()}), fewer "
                f"than --min-np {self._options.min_np}; waiting up to "
                f"{self._options.elastic_timeout:g} s (--elastic-timeout) for discovery to "
                f"find more")
        elif now - self._short_since >= self._options.elastic_timeout:
            self._stop(f"fewer than --min-np {self._options.min_np} slots have been usable "
                       f"for {self._options.elastic_timeout:g} s ({self._describe_hosts()}); "
                       f"stopping the job")

    def _publish(self, number, plan):
        self._pool.remove_stale_segments(number)
        started = [self._pool.start(host, slot, number) for host, slot in plan.start]
        self._order = plan.keep + started
        self._round = Round.assign(number, [(w.id, host_identity(w.host)) for w in self._order],
                                   self._pool.bind_addresses(self._order))
        self._store.set(round_key(self._job_id, number), self._round.to_json())
        self._store.set(latest_key(self._job_id), str(number))
        if number > 0:
            self._abort_rendezvous(number - 1, f"round {number} replaced it")
        for worker in plan.leave:
            worker.leaving = True
            self._leave_deadlines[worker] = time.monotonic() + LEAVE_GRACE_S
        # Every round at info; with --verbose, whatever the level.
        layout = ", ".join(f"rank {i}: worker {w.number} on {w.host}"
                           for i, w in enumerate(self._order))
        self._console.message(f"round {number}: {layout}",
                              logging.WARNING if self._options.verbose else logging.INFO)

    def _running_in_order(self):
        return [w for w in self._order if w.alive() and not w.leaving]

    def _request_reform(self, reason, settle=0.0, first_hand=False):
        """first_hand: the reason itself (a worker's exit), which replaces a
        pending consequence of it (a survivor's reset request)."""
        if self._reform_reason is None:
            self._reform_reason = reason
            self._reform_after = time.monotonic() + settle
        elif first_hand:
            self._reform_reason = reason

    # --- what the driver watches ---------------------------------------

    def _poll_discovery(self):
        self._next_discovery = time.monotonic() + self._options.discovery_interval
        try:
            hosts = self._discovery.find()
        except DiscoveryError as error:
            self._console.message(f"warning: {error}; keeping the last known hosts")
            return
        changed = hosts != self._hosts
        self._hosts = hosts
        if self._finishing or self._reform_reason is not None:
            return
        plan = plan_round(hosts, self._running_in_order(), self._exclusions.is_excluded,
                          self._options.max_np)
        if plan.start or plan.leave:
            self._request_reform(f"{self._why_reform(changed, plan)} ({self._describe_hosts()})")

    def _why_reform(self, changed, plan):
        if changed:
            return "hosts changed"
        # Only a host excluded before (a lost worker) can be back from a cooldown.
        returned = sorted({host for host, _ in plan.start if self._exclusions.failures(host)})
        if returned:
            return f"the cooldown of excluded host(s) {', '.join(returned)} ended"
        return "slots the running round does not use are free"

    def _poll_reset_requests(self):
        if self._reform_reason is not None or self._round is None:
            return
        requests = self._store.try_get(reset_key(self._job_id, self._round.number))
        if requests is None or int(requests) == 0:
            return
        if self._finishing:
            # Nobody would take part in a new round: training is over.
            self._stop("a worker failed a collective and asked for a new round after "
                       "another had finished training; stopping. Every rank must run the "
                       "same number of steps")
            return
        self._request_reform("a worker lost its peers and asked for a new round",
                             settle=RESET_SETTLE_S)

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
    # would after a lost worker: discovery may still list it), kills its ssh
    # client, and counts its workers as lost at once, so that the next round
    # goes on without them and nothing waits for them. (Two hosts that lose
    # only each other both ask for a reset, so neither is silent; the job
    # re-forms with both, as it does for any failure.) The driver's own
    # machine is never silent to it: a worker there that hangs is no cut link.
    def _give_up_silent_hosts(self):
        reports = []  # (worker, the host it runs on as the core names it, its error)
        for worker in self._order:
            error = self._store.try_get(failure_key(self._job_id, self._round.number, worker.id))
            if error is not None:
                reports.append((worker, host_identity(worker.host),
                                error.decode("utf-8", "replace")))
        for name, (reporter, error) in silent_hosts(reports).items():
            lost = [w for w in self._order
                    if host_identity(w.host) == name and w.alive() and w.remote is not None]
            if lost:
                self._give_up_host(lost, reporter, error)

    def _give_up_host(self, workers, reporter, error):
        host = workers[0].host
        cooldown = self._exclusions.record_failure(host)
        excluded = "for good" if cooldown is None else f"for {cooldown:.0f} s"
        rank = self._round.placements[reporter.id].rank
        reason = (f"host {host} stopped answering: rank {rank} of round {self._round.number} "
                  f"(worker {reporter.number} on {reporter.host}) reports \"{error}\"")
        self._console.message(
            f"{reason}; excluding host {host} {excluded}, even while discovery lists it, and "
            f"giving up its worker(s) {', '.join(str(w.number) for w in workers)} without "
            f"waiting for them (Note [Silent hosts])")
        self._pool.give_up(workers, reason)
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
        self._pool.ended(worker)
        if worker.leaving and self._options.verbose:
            self._console.message(f"{worker.describe()} left the job: "
                                  f"{worker.process.describe_exit()}")
        if self._stop_code is not None or worker.leaving or worker.given_up:
            return
        process = worker.process
        if process.returncode == 0:
            if worker in self._order:
                self._finishing = True  # training is over: no more rounds
                self._reform_reason = None
            return
        if self._finishing:
            self._final_failure = self._final_failure or worker
            self._report_failure(worker, "after another worker had finished")
            return
        if not _lost(process):
            self._on_script_error(worker)
            return
        cooldown = self._exclusions.record_failure(worker.host)
        if cooldown is None:
            consequence = f"excluding host {worker.host} from the job"
        else:
            consequence = f"excluding host {worker.host} for {cooldown:.0f} s"
        what = self._report_failure(worker, consequence)
        if worker.id in self._round.placements:
            # Its peers may be waiting for it in the core's rendezvous.
            self._abort_rendezvous(self._round.number, what)
        self._request_reform(f"{worker.describe()} failed", first_hand=True)

    # Note [Script errors]
    # A worker that exits with a code (an exception, sys.exit) most likely
    # hit an error in the script that would fail on any host: its host stays
    # in the job (only a lost worker, killed by a signal or unreachable,
    # excludes its host, as in Horovod). When every worker of the newest
    # round has failed that way, nobody is left to train and a new round
    # would fail alike: the job stops at once with the first failure's exit
    # code and output (Horovod's driver stops when all workers failed),
    # instead of excluding every host and waiting --elastic-timeout for new
    # ones. Otherwise the re-form waits SCRIPT_ERROR_SETTLE_S, so that
    # workers failing together are seen together.
    def _on_script_error(self, worker):
        self._script_errors.append(worker)
        what = self._report_failure(worker, f"host {worker.host} stays in the job")
        if worker.id in self._round.placements:
            self._abort_rendezvous(self._round.number, what)
        failed = [w for w in self._script_errors if w in self._order]
        if len(failed) == len(self._order):
            first = failed[0]
            self._stop(f"every worker of round {self._round.number} failed: the script fails "
                       f"wherever it runs, so the job stops with the exit code of the first "
                       f"failure, {first.describe()}, which "
                       f"{first.process.describe_exit()}"
                       f"{stderr_pointer(first.number, first.process.output)}",
                       exit_code=first.process.exit_code())
            return
        self._request_reform(f"{worker.describe()} failed", settle=SCRIPT_ERROR_SETTLE_S,
                             first_hand=True)

    def _report_failure(self, worker, consequence):
        """Says how `worker` ended; returns that sentence without the consequence."""
        process = worker.process
        process.output.join_stderr(STDERR_DRAIN_S)
        rank = self._round.placements.get(worker.id) if self._round else None
        where = f"rank {rank.rank} of round {self._round.number}, " if rank else ""
        pid = f", pid {process.pid}" if process.pid is not None else ""
        what = f"worker {worker.number} ({where}host {worker.host}{pid}) {process.describe_exit()}"
        self._console.message(f"{what}; {consequence}"
                              f"{stderr_pointer(worker.number, process.output)}.")
        return what

    def _on_signal(self, signum):
        name = signal.Signals(signum).name
        if self._stop_code is not None:
            self._console.message(f"received {name} while stopping; killing all workers.")
            self._pool.kill_all()
            return
        self._stop(f"received {name}; stopping {len(self._pool.alive())} worker(s)",
                   exit_code=128 + signum, signum=signum)

    def _interrupted_while_waiting(self, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            kind, value = self._next_event()
            if kind == "signal":
                self._stop_code = 128 + value
                return True
        return False

    # --- the end --------------------------------------------------------

    def _stop(self, message, exit_code=STOPPED_EXIT_CODE, signum=signal.SIGTERM):
        self._console.message(message + ".")
        self._stop_code = exit_code
        self._reform_reason = None
        self._pool.signal(self._pool.alive(), signum)
        self._kill_at = time.monotonic() + STOP_GRACE_S

    def _stop_before_start(self, message):
        self._console.message(message)
        self._stop_code = STOPPED_EXIT_CODE
        return False

    def _exit_code(self):
        if self._stop_code is not None:
            return self._stop_code
        if self._final_failure is not None:
            return self._final_failure.process.exit_code()
        return 0

    def _describe_hosts(self):
        parts = [f"{host}:{slots}" for host, slots in self._hosts.items()]
        excluded = self._exclusions.excluded()
        text = ", ".join(parts) if parts else "no hosts"
        if excluded:
            text += "; excluded after failures: " + ", ".join(excluded)
        return text


def _lost(process):
    """A host-level failure: the worker was killed by a signal (the OOM
    killer, a machine going down, the tests' SIGKILL) or its host could not
    be reached or was lost (the process's `failure`)."""
    return bool(getattr(process.process, "failure", None)) or process.returncode < 0
