"""hvdlite.spark.run: an hvdlite job as one Spark barrier stage (Horovod's
horovod.spark.run). The driver runs the rendezvous store and watches the
tasks register; task.py is what runs on the executors."""
import re
import sys
import threading
import time

from hvdlite.common import config
from hvdlite.runner.cluster import ClusterStore, WorkerError, rank_environments
from hvdlite.runner.failure_rule import CAUSE, CONSEQUENCE, Ending, StaticSupervision, \
    failure_line
from hvdlite.spark import task as task_module



def run(fn, args=(), kwargs={}, num_proc=None, start_timeout=None, env=None, stdout=None,
        stderr=None, verbose=1, use_mpi=None, use_gloo=None, nics=None):
    """Runs `fn(*args, **kwargs)` on `num_proc` ranks, one Spark barrier task each.

    Args:
        fn (Callable): pickled and called in each task; it calls `hvd.init()`.
        args (tuple): positional arguments for `fn`.
        kwargs (dict): keyword arguments for `fn`.
        num_proc (int | None): ranks (default: the SparkContext's default parallelism).
        start_timeout (float | None): seconds for every task to start and register with the
            driver (default HVDLITE_SPARK_START_TIMEOUT or 600).
        env (dict | None): extra environment variables for the ranks.
        stdout: a stream for each rank's prints, each line prefixed "[rank]<stdout>:" as by
            hvdliterun; without it the prints stay in the executors' logs.
        stderr: the same for the ranks' stderr.
        verbose (int): how much the driver says.
        use_mpi (bool | None): must stay unset: Spark tasks are not started by mpirun.
        use_gloo (bool | None): accepted for Horovod compatibility; the ranks always use
            hvdlite's own transports.
        nics (list[str] | None): interfaces the ranks listen on.

    Returns:
        list: `fn`'s results in rank order.

    Raises:
        ValueError: `use_mpi=True`, or no active SparkContext.
        TimeoutError: some tasks did not start within `start_timeout` (it names them; the
            stage is cancelled).
        WorkerError: a rank failed: its error, and Spark's reason for the stage.

    Example:
        ```python
        results = hvdlite.spark.run(train, args=(config,), num_proc=4)
        ```
    """
    if use_mpi:
        raise ValueError("hvdlite.spark.run(use_mpi=True): Spark tasks are not started by "
                         "mpirun, so MPI is not available; leave use_mpi unset (the ranks "
                         "use hvdlite's TCP/shared-memory transports)")
    context = active_context("run")
    num_proc = num_proc or context.defaultParallelism
    start_timeout = start_timeout_s(start_timeout)
    store = job_store(context, start_timeout)
    try:
        spec = task_module.TaskSpec.for_job(fn, args, kwargs, store, env, nics, stdout, stderr)
        rows = _Stage(context, spec, num_proc, verbose).run(store, start_timeout)
    finally:
        store.close()
    return results_in_order(sorted(rows, key=lambda row: row[0]), stdout, stderr)


def start_timeout_s(start_timeout):
    """The start_timeout given, else HVDLITE_SPARK_START_TIMEOUT or Horovod's
    HOROVOD_SPARK_START_TIMEOUT, else horovod.spark's 600 s."""
    if start_timeout:
        return float(start_timeout)
    return config.get("HVDLITE_SPARK_START_TIMEOUT")


def active_context(caller):
    try:
        from pyspark import SparkContext
    except ImportError as error:
        raise ImportError(f"hvdlite.spark.{caller} needs pyspark ({error}): pip install "
                          f"'hvdlite[spark]'") from error
    context = SparkContext._active_spark_context
    if context is None:
        raise ValueError(f"hvdlite.spark.{caller} needs an active SparkContext: create a "
                         f"SparkSession first")
    return context


def job_store(context, start_timeout):
    """The job's rendezvous store, at the address executors reach the driver
    (loopback in local mode, where the executor is the driver's process)."""
    return ClusterStore(context.getConf().get("spark.driver.host"),
                        start_timeout=start_timeout,
                        single_host=context.master.startswith("local"))


def results_in_order(rows, stdout, stderr):
    """rows: (task, result, stdout text, stderr text) in rank order; writes
    the output to the streams given and returns the results."""
    for rank, (_, _, out, err) in enumerate(rows):
        forward_output(stdout, rank, "stdout", out)
        forward_output(stderr, rank, "stderr", err)
    return [result for _, result, _, _ in rows]


def _layout_of(tasks, round_):
    return rank_environments(tasks, round_)


class _Stage:
    """The barrier stage of one run(), collected on a thread of its own
    while the driver watches its tasks under Note [One failure rule]
    (hvdlite/runner/failure_rule.py): each task registers, then ends
    with its rows or an error report in the store."""

    def __init__(self, context, spec, num_proc, verbose):
        self.context = context
        self.spec = spec
        self.num_proc = num_proc
        self.verbose = verbose
        self._group = f"hvdlite-{spec.job_id}"
        self._rows = None
        self.error = None

    def run(self, store, start_timeout):
        thread = threading.Thread(target=self._collect, name="hvdlite-spark-stage",
                                  daemon=True)
        thread.start()
        source = _TaskSource(self, thread, store.client, start_timeout)
        outcome = StaticSupervision(source).run()
        thread.join()
        if outcome.failure is not None:
            raise source.worker_error(outcome.failure)
        return self._rows

    def _collect(self):
        spec, layout_of = self.spec, _layout_of
        self.context.setJobGroup(self._group, f"hvdlite job {spec.job_id} "
                                  f"({self.num_proc} ranks)", interruptOnCancel=True)
        rdd = self.context.parallelize(range(self.num_proc), self.num_proc)
        try:
            self._rows = rdd.barrier().mapPartitions(
                lambda _: task_module.run_task(spec, layout_of)).collect()
        except Exception as error:  # py4j / pyspark errors, whatever the version
            self.error = error

    def cancel(self):
        self.context.cancelJobGroup(self._group)


class _Task:
    """One barrier task, as StaticSupervision reads a worker."""

    def __init__(self, rank):
        self.rank = rank
        self.host = "?"  # the executor host it registered from
        self.ending = None
        self.reported = False  # it wrote an error report (task.describe) before it ended
        self.traceback = ""


class _TaskSource:
    """The tasks of one _Stage: a task ends when its error report reaches the
    store, or with the stage."""

    def __init__(self, stage, thread, client, start_timeout):
        self._stage = stage
        self._thread = thread
        self._client = client
        self._start_timeout = start_timeout
        self._start_deadline = time.monotonic() + start_timeout
        self._tasks = [_Task(rank) for rank in range(stage.num_proc)]
        self._unregistered = list(self._tasks)

    def workers(self):
        return self._tasks

    def next_event(self, timeout):
        self._thread.join(timeout)
        stage_over = not self._thread.is_alive()  # asked first: its reports are all in
        self._watch_registrations()
        running = [task for task in self._tasks if task.ending is None]
        for task in running:
            report = self._client.try_get(task_module.error_key(self._stage.spec.job_id,
                                                                task.rank))
            if report is not None:
                task.ending, task.traceback = ending_of_report(report)
                task.reported = True
                return "exit", task
        if stage_over and running:
            # Spark ended the stage: with every task's rows, or stopping the
            # others of a failed task (a barrier stage's tasks stop together).
            task, ok = running[0], self._stage.error is None
            task.ending = Ending(ok, "returned" if ok else "was stopped by Spark",
                                 certainty=CONSEQUENCE)
            return "exit", task
        return None

    def _watch_registrations(self):
        if not self._unregistered:
            return
        job_id, stage = self._stage.spec.job_id, self._stage
        for task in list(self._unregistered):
            host = self._client.try_get(task_module.registered_key(job_id, task.rank))
            if host is not None:
                task.host = host.decode()
                self._unregistered.remove(task)
        if not self._unregistered and stage.verbose >= 2:
            print(f"hvdlite.spark: all {stage.num_proc} tasks registered", file=sys.stderr,
                  flush=True)
        if self._unregistered and time.monotonic() >= self._start_deadline and \
                self._thread.is_alive():
            stage.cancel()
            self._thread.join()
            start_timeout = self._start_timeout
            raise TimeoutError(
                f"hvdlite.spark.run: task(s) "
                f"{', '.join(str(t.rank) for t in self._unregistered)} of {stage.num_proc} "
                f"never registered with the driver within start_timeout={start_timeout:g} s, "
                f"so the job could not start. A barrier stage needs all {stage.num_proc} "
                f"tasks running at once: the cluster has "
                f"{stage.context.defaultParallelism} task slot(s); lower num_proc or add "
                f"executors")

    def stop(self, tasks, signum=None):
        if tasks:
            self._stage.cancel()

    def kill_all(self):
        self._stage.cancel()

    def describe_failure(self, task, others):
        return failure_line(f"rank {task.rank}", f"Spark executor host {task.host}",
                            task.ending.what)

    def worker_error(self, task):
        """WorkerError for the root-cause task, with the reason Spark gave."""
        stage = stage_reason(str(self._stage.error)) if self._stage.error else \
            "the stage was cancelled"
        if not task.reported:  # no task said why: Spark's reason is all there is
            return WorkerError("?", "a Spark executor", f"failed: the barrier stage failed: "
                                                       f"{stage}")
        error = WorkerError(task.rank, f"Spark executor host {task.host}",
                            f"{task.ending.what} (Spark: {stage})")
        error.traceback = task.traceback
        return error


def ending_of_report(report):
    """(Ending, traceback) of a task whose error report (task.describe) is
    `report`: a CONSEQUENCE when it raised HvdliteInternalError."""
    kind, text, traceback = (report.decode("utf-8", "replace").split("\n", 2) + [""])[:3]
    return Ending(False, f"raised {text}", exit_code=1,
                  certainty=CONSEQUENCE if kind == "consequence" else CAUSE), traceback


def stage_reason(text):
    match = re.search(r"(Job aborted due to stage failure:[^\n]*|Job \d+ cancelled[^\n]*)", text)
    return match.group(1).strip() if match else text.strip().splitlines()[0]


def forward_output(stream, rank, name, text):
    if stream is None or not text:
        return
    for line in text.splitlines():
        stream.write(f"[{rank}]<{name}>:{line}\n")
    stream.flush()

