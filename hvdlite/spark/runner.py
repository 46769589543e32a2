"""hvdlite.spark.run: an hvdlite job as one Spark barrier stage (Horovod's
horovod.spark.run). The driver runs the rendezvous store and watches the
tasks register; task.py is what runs on the executors."""
import re
import sys
import threading
import time

from hvdlite.common import config
from hvdlite.runner.cluster import ClusterStore, WorkerError, rank_environments
from hvdlite.spark import task as task_module

_POLL_S = 0.2


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
    """The barrier stage of one run(), collected on a thread of its own so
    that the driver can watch the tasks register (and cancel the stage)."""

    def __init__(self, context, spec, num_proc, verbose):
        self._context = context
        self._spec = spec
        self._num_proc = num_proc
        self._verbose = verbose
        self._group = f"hvdlite-{spec.job_id}"
        self._rows = None
        self._error = None

    def run(self, store, start_timeout):
        thread = threading.Thread(target=self._collect, name="hvdlite-spark-stage",
                                  daemon=True)
        thread.start()
        deadline = time.monotonic() + start_timeout
        missing = list(range(self._num_proc))
        while thread.is_alive():
            thread.join(_POLL_S)
            if missing:
                missing = [i for i in missing if store.client.try_get(
                    task_module.registered_key(self._spec.job_id, i)) is None]
                if not missing and self._verbose >= 2:
                    print(f"hvdlite.spark: all {self._num_proc} tasks registered",
                          file=sys.stderr, flush=True)
                if missing and time.monotonic() >= deadline:
                    self._context.cancelJobGroup(self._group)
                    thread.join()
                    raise TimeoutError(
                        f"hvdlite.spark.run: task(s) {', '.join(map(str, missing))} of "
                        f"{self._num_proc} never registered with the driver within "
                        f"start_timeout={start_timeout:g} s, so the job could not start. A "
                        f"barrier stage needs all {self._num_proc} tasks running at once: "
                        f"the cluster has {self._context.defaultParallelism} task slot(s); "
                        f"lower num_proc or add executors")
        if self._error is not None:
            raise self._failure(store)
        return self._rows

    def _collect(self):
        spec, layout_of = self._spec, _layout_of
        self._context.setJobGroup(self._group, f"hvdlite job {spec.job_id} "
                                  f"({self._num_proc} ranks)", interruptOnCancel=True)
        rdd = self._context.parallelize(range(self._num_proc), self._num_proc)
        try:
            self._rows = rdd.barrier().mapPartitions(
                lambda _: task_module.run_task(spec, layout_of)).collect()
        except Exception as error:  # py4j / pyspark errors, whatever the version
            self._error = error

    def _failure(self, store):
        """WorkerError for the rank that caused the failure (not one that only
        lost its peers), with the reason Spark gave for the stage."""
        reports = {}
        for index in range(self._num_proc):
            text = store.client.try_get(task_module.error_key(self._spec.job_id, index))
            if text is not None:
                reports[index] = text.decode("utf-8", "replace").split("\n", 2)
        stage = stage_reason(str(self._error))
        if not reports:
            return WorkerError("?", "a Spark executor", f"the barrier stage failed: "
                               f"{stage}")
        index = min(reports, key=lambda i: (reports[i][0] != "cause", i))
        host = store.client.try_get(task_module.registered_key(self._spec.job_id, index))
        error = WorkerError(index, f"Spark executor host {host.decode() if host else '?'}",
                            f"{reports[index][1]} (Spark: {stage})")
        error.traceback = reports[index][2] if len(reports[index]) > 2 else ""
        return error


def stage_reason(text):
    match = re.search(r"(Job aborted due to stage failure:[^\n]*|Job \d+ cancelled[^\n]*)", text)
    return match.group(1).strip() if match else text.strip().splitlines()[0]


def forward_output(stream, rank, name, text):
    if stream is None or not text:
        return
    for line in text.splitlines():
        stream.write(f"[{rank}]<{name}>:{line}\n")
    stream.flush()

