"""hvdlite.spark.run_elastic: an elastic hvdlite job on Spark.

Unlike run(), the stage is not a barrier stage: max_np ordinary tasks, each
one elastic worker, so that Spark re-runs a task that failed (its executor
was lost, its process killed) up to spark.task.maxFailures times while the
others go on. The driver admits the workers that registered into rounds
(Note [Elastic rounds] in hvdlite/store/rounds.py) between min_np and max_np:

    {job}/spark/registrations        how many workers registered (a counter)
    {job}/spark/registration/{n}     the n-th: "worker id host"
    {job}/spark/alive/{id}           the worker's heartbeat (a counter, every second)
    {job}/spark/admitted/{id}        the first round the worker joins
    {job}/spark/done/{id}            the worker's function returned
    {job}/spark/closed               training is over: late workers return at once

A worker whose heartbeat stops for HEARTBEAT_TIMEOUT_S is lost; the
survivors restore their last commit (hvd.elastic.run) and the driver
publishes a round without it, and one with its re-run task once that registers.
"""
import socket
import sys
import threading
import time

from hvdlite.common import defaults
from hvdlite.runner.cluster import ElasticRounds, WorkerError
from hvdlite.spark import task as task_module
from hvdlite.spark.runner import active_context, job_store, results_in_order, stage_reason, \
    start_timeout_s
from hvdlite.store import StoreClient

HEARTBEAT_S = 1.0
HEARTBEAT_TIMEOUT_S = 4.0
# The first round waits for num_proc workers, or for this long after min_np
# registered, so that a job does not start small only because tasks start
# a moment apart.
FIRST_ROUND_SETTLE_S = 2.0
_POLL_S = 0.2


def run_elastic(fn, args=(), kwargs={}, num_proc=None, min_np=None, max_np=None,
                start_timeout=None, elastic_timeout=None, reset_limit=None, env=None,
                stdout=None, stderr=None, verbose=1, nics=None):
    """Runs fn(*args, **kwargs), which uses hvd.elastic.run, as an elastic job
    of between min_np and max_np ranks (default num_proc for both; num_proc
    defaults to the default parallelism); returns the results of the final
    round's ranks in rank order. A failed worker's task is re-run by Spark
    (spark.task.maxFailures) and rejoins the job."""
    context = active_context("run_elastic")
    num_proc = num_proc or context.defaultParallelism
    min_np, max_np = min_np or num_proc, max_np or num_proc
    if not 1 <= min_np <= max_np:
        raise ValueError(f"run_elastic: need 1 <= min_np <= max_np, got min_np={min_np}, "
                         f"max_np={max_np}")
    start_timeout = start_timeout_s(start_timeout)
    store = job_store(context, start_timeout)
    try:
        spec = task_module.TaskSpec.for_job(fn, args, kwargs, store, env, nics, stdout, stderr)
        driver = _Driver(store, min(num_proc, max_np), min_np, max_np,
                         float(elastic_timeout or defaults.ELASTIC_TIMEOUT_S), reset_limit, start_timeout, verbose)
        rows = driver.run(context, spec, max_np)
    finally:
        store.close()
    by_worker = {row[0]: row for row in rows}
    return results_in_order([by_worker[worker] for worker in driver.final_order], stdout,
                            stderr)


class _Driver:
    def __init__(self, store, num_proc, min_np, max_np, elastic_timeout, reset_limit,
                 start_timeout, verbose):
        self._verbose = verbose
        self._num_proc = num_proc
        self._enough_since = None  # when min_np workers had registered
        self._store = store
        self._client = store.client
        self._job = store.job_id
        self._rounds = ElasticRounds(store)
        self._min_np, self._max_np = min_np, max_np
        self._elastic_timeout = elastic_timeout
        self._reset_limit = reset_limit
        self._start_timeout = start_timeout
        self._registered = []  # (worker id, host), in registration order
        self._seen = 0
        self._beats = {}  # worker id -> (last counter, when it changed)
        self._order = []  # the newest round's workers, in rank order
        self._resets = 0
        self._short_since = None
        self.final_order = []

    def run(self, context, spec, num_tasks):
        rows, failure = [], []

        def collect():
            rdd = context.parallelize(range(num_tasks), num_tasks)
            try:
                rows.extend(rdd.mapPartitions(lambda _: run_worker(spec)).collect())
            except Exception as error:  # py4j / pyspark errors
                failure.append(error)

        stage = threading.Thread(target=collect, name="hvdlite-spark-elastic", daemon=True)
        stage.start()
        started = time.monotonic()
        while stage.is_alive():
            stage.join(_POLL_S)
            if not self._closed():
                self._step(started)
        if failure:
            raise self._failure(failure[0])
        return rows

    def _step(self, started):
        self._read_registrations()
        now = time.monotonic()
        lost = [w for w in self._order if self._lost(w, now)]
        done = [w for w in self._order if self._client.try_get(self._key("done", w))]
        if done:
            # A worker of the newest round finished: training is over.
            self.final_order = list(self._order)
            self._client.set(f"{self._job}/spark/closed", "1")
            return
        live = [w for w in self._order if w not in lost]
        waiting = [w for w, _ in self._registered if w not in self._order and not
                   self._lost(w, now)][:self._max_np - len(live)]
        if self._rounds.number is None:
            if len(waiting) >= self._min_np and self._enough_since is None:
                self._enough_since = now
            if len(waiting) >= self._num_proc or self._enough_since is not None and \
                    now - self._enough_since >= FIRST_ROUND_SETTLE_S:
                self._publish(waiting)
            elif now - started > self._start_timeout:
                raise TimeoutError(f"run_elastic: only {len(waiting)} worker task(s) "
                                   f"registered within start_timeout={self._start_timeout:g} "
                                   f"s, fewer than min_np={self._min_np}")
            return
        if lost or waiting or self._rounds.reset_requested():
            if len(live) + len(waiting) < self._min_np:
                self._wait_for_workers(now, len(live) + len(waiting))
                return
            self._short_since = None
            if self._reset_limit is not None and self._resets >= self._reset_limit:
                raise RuntimeError(f"run_elastic: the job needs to re-form but has been reset "
                                   f"{self._resets} time(s), the reset_limit")
            self._resets += 1
            self._order = live
            self._publish(waiting)

    def _publish(self, new):
        self._order = self._order + new
        hosts = dict(self._registered)
        number = self._rounds.publish([(w, hosts[w]) for w in self._order])
        for worker in new:
            self._client.set(self._key("admitted", worker), str(number))
        if self._verbose >= 2:
            print(f"hvdlite.spark: round {number}: " + ", ".join(
                f"rank {rank}: worker {worker} on {hosts[worker]}"
                for rank, worker in enumerate(self._order)), file=sys.stderr, flush=True)

    def _wait_for_workers(self, now, have):
        if self._short_since is None:
            self._short_since = now
        elif now - self._short_since > self._elastic_timeout:
            raise RuntimeError(f"run_elastic: {have} worker(s) left, fewer than min_np="
                               f"{self._min_np}, for elastic_timeout={self._elastic_timeout:g} s")

    def _read_registrations(self):
        count = int(self._client.try_get(f"{self._job}/spark/registrations") or 0)
        while self._seen < count:
            self._seen += 1
            worker, host = self._client.get(f"{self._job}/spark/registration/{self._seen}") \
                .decode().split(" ", 1)
            self._registered.append((worker, host))

    def _lost(self, worker, now):
        beat = int(self._client.try_get(self._key("alive", worker)) or 0)
        last, since = self._beats.get(worker, (None, now))
        if beat != last:
            self._beats[worker] = (beat, now)
            return False
        return now - since > HEARTBEAT_TIMEOUT_S

    def _failure(self, error):
        """WorkerError for the last worker that raised (the one Spark gave up
        on), with Spark's reason for the stage."""
        reason = (f"the elastic job's stage failed after the task retries Spark allows "
                  f"(spark.task.maxFailures); Spark: {stage_reason(str(error))}")
        self._read_registrations()
        for worker, host in reversed(self._registered):
            report = self._client.try_get(task_module.error_key(self._job, worker))
            if report is not None:
                text = report.decode("utf-8", "replace").split("\n", 2)[1]
                return WorkerError(f"(worker {worker})", f"Spark executor host {host}",
                                   f"{text}; {reason}")
        return WorkerError("?", "a Spark executor", reason)

    def _closed(self):
        return bool(self.final_order)

    def _key(self, kind, worker):
        return f"{self._job}/spark/{kind}/{worker}"


def run_worker(spec):
    """The body of one elastic worker's task: register, beat, wait to be
    admitted into a round, run fn with the elastic environment."""
    from pyspark import TaskContext
    context = TaskContext.get()
    worker = f"{context.partitionId()}.{context.attemptNumber()}"
    host = socket.gethostname()  # the executor's: its workers are local to each other
    job = spec.job_id
    with StoreClient(spec.store_addr, spec.store_port, spec.secret,
                     timeout=spec.start_timeout) as store:
        beating = threading.Event()
        beat = threading.Thread(target=_heartbeat, args=(spec, worker, beating), daemon=True)
        beat.start()
        try:
            number = store.add(f"{job}/spark/registrations", 1)
            store.set(f"{job}/spark/registration/{number}", f"{worker} {host}")
            first_round = _wait_admitted(store, job, worker)
            if first_round is None:
                return []
            env = task_module.job_environment(spec)
            env.update({"HVDLITE_ELASTIC": "1", "HVDLITE_ELASTIC_WORKER_ID": worker,
                        "HVDLITE_ELASTIC_FIRST_ROUND": first_round})
            env.update(spec.env or {})
            with task_module.environment_set(env):
                result, out, err = task_module.call(spec)
            store.set(f"{job}/spark/done/{worker}", "1")
            return [(worker, result, out, err)]
        except BaseException as error:
            store.set(task_module.error_key(job, worker), task_module.describe(error))
            raise
        finally:
            beating.set()


def _wait_admitted(store, job, worker):
    """The first round's number (a str), or None when training ended first."""
    while True:
        admitted = store.try_get(f"{job}/spark/admitted/{worker}")
        if admitted is not None:
            return admitted.decode()
        if store.try_get(f"{job}/spark/closed") is not None:
            return None
        time.sleep(_POLL_S)


def _heartbeat(spec, worker, stop):
    with StoreClient(spec.store_addr, spec.store_port, spec.secret,
                     timeout=spec.start_timeout) as store:
        while not stop.wait(HEARTBEAT_S):
            store.add(f"{spec.job_id}/spark/alive/{worker}", 1)


