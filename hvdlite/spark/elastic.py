"""hvdlite.spark.run_elastic: an elastic hvdlite job on Spark. Spark tasks
are a worker source (hvdlite/runner/elastic/source.py) for the elastic
driver that hvdliterun uses, with the same rounds, failure rules and
limits (Note [Failure rules] in hvdlite/runner/elastic/failures.py).

Unlike run(), the stage is not a barrier stage: max_np ordinary tasks,
each one elastic worker, so that Spark re-runs a task that failed (its
executor was lost, its process killed) up to spark.task.maxFailures times
while the others go on. A task registers in the job's store and waits to
be admitted into a round; the driver cannot start workers, so a Spark
executor's slots are the workers registered there (running or waiting),
and starting a worker admits a waiting one. A failed worker excludes its
executor (named host/JVM pid):

    {job}/spark/registrations        how many workers registered (a counter)
    {job}/spark/registration/{n}     the n-th: JSON (worker id, host, executor, task attempt)
    {job}/spark/alive/{id}           the worker's heartbeat (a counter, every second)
    {job}/spark/admitted/{id}        the first round the worker joins
    {job}/spark/done/{id}            the worker's function returned
    {job}/spark/left/{id}            the worker is not part of the newest round and left
    {job}/spark/closed               training is over: waiting workers return at once

A worker whose heartbeat stops for HEARTBEAT_TIMEOUT_S is lost. What the
tasks run is elastic_task.py.
"""
import json
import logging
import threading
import time

from hvdlite.common import defaults, logs
from hvdlite.runner.cluster import WorkerError
from hvdlite.runner.elastic.driver import ElasticDriver
from hvdlite.runner.elastic.settings import ElasticSettings
from hvdlite.runner.elastic.source import Ending, Worker, WorkerSource
from hvdlite.runner.failure_rule import CAUSE
from hvdlite.spark import task as task_module
from hvdlite.spark.elastic_task import POLL_S, closed_key, key, registration_key, \
    registrations_key, run_worker
from hvdlite.spark.runner import active_context, ending_of_report, job_store, \
    results_in_order, stage_reason, start_timeout_s

HEARTBEAT_TIMEOUT_S = 4.0
# The first round waits for num_proc workers, or for this long after min_np
# registered, so that a job does not start small only because tasks start
# a moment apart.
FIRST_ROUND_SETTLE_S = 2.0
# How run_elastic's arguments are spelled in the driver's messages.
SPELLING = {"min_np": "min_np={}", "max_np": "max_np={}", "reset_limit": "reset_limit={}",
            "elastic_timeout": "elastic_timeout={:g} s", "start_wait": "start_timeout={:g} s"}


def run_elastic(fn, args=(), kwargs={}, num_proc=None, min_np=None, max_np=None,
                start_timeout=None, elastic_timeout=None, reset_limit=None, env=None,
                stdout=None, stderr=None, verbose=1, nics=None, cooldown_range=None):
    """Runs `fn(*args, **kwargs)`, which uses `hvd.elastic.run`, as an elastic job on Spark.

    A failed worker excludes its executor, for good or, with `cooldown_range=(LOW, HIGH)`,
    for 2 to 3 LOW seconds, doubling with each further failure there up to HIGH (Note
    [Cooldown length] in hvdlite/runner/elastic/exclusion.py); Spark re-runs its task
    (spark.task.maxFailures), and the re-run joins the job where it runs on an executor that
    is not excluded.

    Args:
        fn (Callable): the training function; it calls `hvd.init()` and trains under
            `hvd.elastic.run`.
        args (tuple): positional arguments for `fn`.
        kwargs (dict): keyword arguments for `fn`.
        num_proc (int | None): default for min_np and max_np (default: the default
            parallelism).
        min_np (int | None): the fewest ranks to train with.
        max_np (int | None): the most ranks.
        start_timeout (float | None): seconds for the first tasks to start, as in `run`.
        elastic_timeout (float | None): seconds to wait for min_np ranks after a failure.
        reset_limit (int | None): the most re-formations (default 100).
        env (dict | None): extra environment variables for the ranks.
        stdout: a stream for each rank's prints, as in `run`.
        stderr: the same for the ranks' stderr.
        verbose (int): how much the driver says.
        nics (list[str] | None): interfaces the ranks listen on.
        cooldown_range (tuple | None): (LOW, HIGH) seconds a failed executor is excluded.

    Returns:
        list: the results of the final round's ranks, in rank order.

    Raises:
        ValueError: not 1 <= min_np <= max_np, or no active SparkContext.
        WorkerError: every worker of a round failed (names the first), or Spark gave up on a
            task (its last error and the stage's reason).
    """
    context = active_context("run_elastic")
    num_proc = num_proc or context.defaultParallelism
    min_np, max_np = min_np or num_proc, max_np or num_proc
    if not 1 <= min_np <= max_np:
        raise ValueError(f"run_elastic: need 1 <= min_np <= max_np, got min_np={min_np}, "
                         f"max_np={max_np}")
    start_timeout = start_timeout_s(start_timeout)
    elastic_timeout = float(elastic_timeout or defaults.ELASTIC_TIMEOUT_S)
    store = job_store(context, start_timeout)
    try:
        spec = task_module.TaskSpec.for_job(fn, args, kwargs, store, env, nics, stdout, stderr,
                                            elastic_timeout=elastic_timeout)
        source = SparkTaskSource(context, spec, store, max_np)
        settings = ElasticSettings(
            min_np=min_np, max_np=max_np, num_proc=min(num_proc, max_np),
            reset_limit=reset_limit, elastic_timeout=elastic_timeout, start_wait=start_timeout,
            cooldown_range=cooldown_range, discovery_interval=POLL_S, verbose=verbose >= 2,
            spelling=dict(SPELLING))
        source.begin()
        try:
            outcome = ElasticDriver(settings, source, store.client, store.job_id,
                                    _report).run()
        finally:
            source.end()
    finally:
        store.close()
    if outcome.failure is not None:
        worker = outcome.failure
        raise WorkerError(worker.rank, worker.where(), worker.ending.what)
    if outcome.stop_reason is not None:
        error = RuntimeError if outcome.formed else TimeoutError
        raise error(f"run_elastic: {outcome.stop_reason}")
    rows = {row[0]: row for row in source.rows}
    return results_in_order([rows[worker.id] for worker in outcome.final], stdout, stderr)


class SparkWorker(Worker):
    def __init__(self, registration, slot):
        super().__init__(registration["worker"], registration["worker"],
                         registration["executor"], slot, registration["host"])
        self.task_attempt = registration["task_attempt"]
        self.reason = None  # why it failed, in words

    def where(self):
        return f"Spark executor {self.host}"


class SparkTaskSource(WorkerSource):
    host_kind = "Spark executor"
    first_round_settle_s = FIRST_ROUND_SETTLE_S

    def __init__(self, context, spec, store, num_tasks):
        self._context = context
        self._spec = spec
        self._client = store.client
        self._job = store.job_id
        self._num_tasks = num_tasks
        self._group = f"hvdlite-{store.job_id}"
        self._registered = []  # registrations (dicts), in order
        self._beats = {}  # worker id -> (last counter, when it changed)
        self._workers = {}  # worker id -> SparkWorker, once admitted
        self._stage = None
        self._failure = None  # what collect() raised
        self._cancelled = False
        self.rows = []  # (worker id, result, stdout, stderr) of each worker that returned

    # --- the stage ------------------------------------------------------

    def begin(self):
        self._stage = threading.Thread(target=self._collect, name="hvdlite-spark-elastic",
                                       daemon=True)
        self._stage.start()

    def end(self):
        if self._stage.is_alive():
            self.kill_all()
        self._stage.join()

    def _collect(self):
        spec = self._spec
        self._context.setJobGroup(self._group, f"hvdlite elastic job {spec.job_id}",
                                  interruptOnCancel=True)
        rdd = self._context.parallelize(range(self._num_tasks), self._num_tasks)
        try:
            self.rows = rdd.mapPartitions(lambda _: run_worker(spec)).collect()
        except Exception as error:  # py4j / pyspark errors
            self._failure = error

    def busy(self):
        return self._stage.is_alive()

    # --- WorkerSource ---------------------------------------------------

    def find_hosts(self):
        """{executor: its admitted workers still running, and its waiting
        ones}. A running worker's slot is renumbered to its place among its
        executor's running workers, so that the free slots the planner
        fills are exactly the waiting workers'."""
        self._read_registrations()
        now = time.monotonic()
        hosts = {}
        for registration in self._registered:
            worker, executor = registration["worker"], registration["executor"]
            admitted = self._workers.get(worker)
            if admitted is not None and admitted.alive():
                admitted.slot = hosts.get(executor, 0)
            elif admitted is not None or not self._waiting(worker, now):
                continue
            hosts[executor] = hosts.get(executor, 0) + 1
        return hosts

    def workers(self):
        return list(self._workers.values())

    def start(self, host, slot, first_round):
        now = time.monotonic()
        registration = next(r for r in self._registered if r["executor"] == host and
                            r["worker"] not in self._workers and
                            self._waiting(r["worker"], now))
        worker = SparkWorker(registration, slot)
        self._client.set(self._key("admitted", worker.id), str(first_round))
        self._workers[worker.id] = worker
        return worker

    def next_event(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            event = self._ending()
            if event is not None or time.monotonic() >= deadline:
                return event
            time.sleep(min(0.05, timeout))

    def stop(self, workers, signum=None):
        for worker in workers:
            self._context._jsc.sc().killTaskAttempt(worker.task_attempt, True,
                                                    "stopped by hvdlite's elastic driver")

    def kill_all(self):
        self._cancelled = True
        self._context.cancelJobGroup(self._group)

    def training_over(self):
        self._client.set(closed_key(self._job), "1")

    # --- watching the workers -------------------------------------------

    def _ending(self):
        """("exit", worker) for one admitted worker that ended, or None."""
        self._raise_if_spark_gave_up()
        now = time.monotonic()
        for worker in self._workers.values():
            if not worker.alive():
                continue
            report = self._client.try_get(task_module.error_key(self._job, worker.id))
            if self._client.try_get(self._key("done", worker.id)) is not None:
                worker.ending = Ending(True, "returned")
            elif self._client.try_get(self._key("left", worker.id)) is not None:
                worker.ending = Ending(True, "left the job")
            elif report is not None:
                worker.reason = report.decode("utf-8", "replace").split("\n", 2)[1]
                worker.ending, _ = ending_of_report(report)
            elif not self._beating(worker.id, now) or not self._stage.is_alive():
                worker.reason = (f"its heartbeat stopped for {HEARTBEAT_TIMEOUT_S:g} s: its "
                                 f"task was killed or its executor lost")
                worker.ending = Ending(False, f"was lost: {worker.reason}", exit_code=1,
                                       certainty=CAUSE)
            else:
                continue
            return "exit", worker
        return None

    def _raise_if_spark_gave_up(self):
        """The stage failed (Spark gave up re-running a task) while the
        driver did not cancel it: WorkerError for the last worker that
        raised, with Spark's reason for the stage."""
        if self._failure is None or self._cancelled:
            return
        reason = (f"the elastic job's stage failed after the task retries Spark allows "
                  f"(spark.task.maxFailures); Spark: {stage_reason(str(self._failure))}")
        self._read_registrations()
        for registration in reversed(self._registered):
            report = self._client.try_get(task_module.error_key(self._job,
                                                                registration["worker"]))
            if report is not None:
                ending, _ = ending_of_report(report)
                raise WorkerError(f"(worker {registration['worker']})",
                                  f"Spark executor {registration['executor']}",
                                  f"{ending.what}; {reason}")
        raise WorkerError("?", "a Spark executor", f"failed: {reason}")

    def _read_registrations(self):
        count = int(self._client.try_get(registrations_key(self._job)) or 0)
        while len(self._registered) < count:
            number = len(self._registered) + 1
            self._registered.append(json.loads(
                self._client.get(registration_key(self._job, number))))

    def _waiting(self, worker, now):
        """A registered worker that waits to be admitted: beating, not ended."""
        return self._beating(worker, now) and \
            self._client.try_get(task_module.error_key(self._job, worker)) is None

    def _beating(self, worker, now):
        beat = int(self._client.try_get(self._key("alive", worker)) or 0)
        last, since = self._beats.get(worker, (None, now))
        if beat != last:
            self._beats[worker] = (beat, now)
            return True
        return now - since <= HEARTBEAT_TIMEOUT_S

    def _key(self, kind, worker):
        return key(self._job, kind, worker)


def _report(text, level=logging.WARNING):
    logs.get("spark").log(level, f"run_elastic: {text}")
