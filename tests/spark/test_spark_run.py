"""hvdlite.spark.run on a real Spark cluster on this machine: master
local-cluster[2,1,1024] (two executor JVMs with one task slot each, each with
its own Python workers); one SparkSession for the whole module, always stopped."""
import io
import os
import re
import shutil
import signal
import sys
import time

import numpy as np
import pytest

pytest.importorskip("pyspark", reason="needs pyspark (pip install hvdlite[spark]; "
                                      "make venv installs it)")
if shutil.which("java") is None:
    pytest.skip("Spark needs java on PATH (Java 17; e.g. apt-get install openjdk-17-jre)",
                allow_module_level=True)

from pyspark import cloudpickle  # noqa: E402

import hvdlite.spark  # noqa: E402
from hvdlite.spark import WorkerError  # noqa: E402
from failure_shape import failure_pattern  # noqa: E402

# The functions below run in the executors' Python workers, which cannot
# import this test module: ship them by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = None
    try:
        session = (SparkSession.builder.master("local-cluster[2,1,1024]")
                   .appName("hvdlite-tests")
                   # A failed task is re-run once (run_elastic's workers rejoin);
                   # a barrier stage is never retried whatever this says.
                   .config("spark.task.maxFailures", "2")
                   .config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false")
                   .getOrCreate())
        session.sparkContext.setLogLevel("ERROR")
        yield session
    finally:
        if session is not None:
            session.stop()
        stop_gateway()


def stop_gateway():
    """Ends the driver JVM too: stop() leaves it running, idle, until Python
    exits, which is the end of the whole test run. It exits when its stdin
    closes (pyspark's launch_gateway)."""
    from pyspark import SparkContext
    gateway = SparkContext._gateway
    if gateway is None:
        return
    SparkContext._gateway = SparkContext._jvm = None
    gateway.shutdown()
    gateway.proc.stdin.close()
    gateway.proc.wait(timeout=60)


def layout_and_allreduce(scale):
    import hvdlite.numpy as hvd
    hvd.init()
    summed = hvd.allreduce(np.arange(4, dtype=np.float64) * scale * (hvd.rank() + 1),
                           op=hvd.Sum, name="spark_sum")
    print(f"rank {hvd.rank()} says hello")
    return {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
            "local_size": hvd.local_size(), "pid": os.getpid(), "sum": summed.tolist()}


def test_results_come_back_in_rank_order(spark):
    out = io.StringIO()
    results = hvdlite.spark.run(layout_and_allreduce, args=(2.0,), stdout=out,
                                start_timeout=120)
    assert [r["rank"] for r in results] == [0, 1]  # num_proc: the default parallelism
    assert all(r["size"] == 2 for r in results)
    assert all(r["sum"] == (np.arange(4) * 2.0 * 3).tolist() for r in results)
    # Both executors run on this host: their ranks are local to each other.
    assert [(r["local_rank"], r["local_size"]) for r in results] == [(0, 2), (1, 2)]
    assert results[0]["pid"] != results[1]["pid"]
    assert out.getvalue().splitlines() == ["[0]<stdout>:rank 0 says hello",
                                           "[1]<stdout>:rank 1 says hello"]


def fail_on_rank_one():
    import hvdlite.numpy as hvd
    hvd.init()
    if hvd.rank() == 1:
        raise KeyError("missing shard 7")
    hvd.allreduce(np.ones(3), name="spark_never")


def test_a_failing_task_fails_run_naming_the_rank(spark):
    # The shape every launcher reports a failure in (tests/runner/test_failure_rule.py).
    with pytest.raises(WorkerError, match=failure_pattern(
            1, "spark", r"raised KeyError: 'missing shard 7' \(Spark: Job aborted due to "
                        r"stage failure")):
        hvdlite.spark.run(fail_on_rank_one, num_proc=2, start_timeout=120)
    # The session is still usable: the next job runs.
    assert [r["rank"] for r in hvdlite.spark.run(layout_and_allreduce, args=(1.0,),
                                                  start_timeout=120)] == [0, 1]


def test_start_timeout_names_the_tasks_that_never_registered(spark):
    # Three barrier tasks cannot all start on two slots.
    with pytest.raises(TimeoutError, match=r"task\(s\) 0, 1, 2 of 3 never registered with "
                                           r"the driver within start_timeout=5 s.*2 task "
                                           r"slot\(s\)"):
        hvdlite.spark.run(layout_and_allreduce, args=(1.0,), num_proc=3, start_timeout=5)


def steps_until_regrown(steps, kill_step):
    """Commits one step at a time, recording the job's size; the first
    attempt of task 1 kills itself in step kill_step, so the job shrinks, and
    runs until Spark's re-run of that task has rejoined and a step ran with
    it (or 3000 steps)."""
    import hvdlite.numpy as hvd
    hvd.init()
    state = hvd.elastic.ObjectState(step=0, sizes=[])
    worker = os.environ["HVDLITE_ELASTIC_WORKER_ID"]

    @hvd.elastic.run
    def train(state):
        # Until a step after `steps` ran at 2 ranks again.
        while not (state.step >= steps and state.sizes[-1:] == [2]) and state.step < 3000:
            size = int(hvd.allreduce(np.ones(1), op=hvd.Sum, name="count")[0])
            if worker == "1.0" and state.step == kill_step:
                os.kill(os.getpid(), signal.SIGKILL)
            state.sizes.append(size)
            state.step += 1
            state.commit()
            time.sleep(0.02)

    train(state)
    return {"rank": hvd.rank(), "size": hvd.size(), "worker": worker, "step": state.step,
            "sizes": state.sizes}


def test_run_elastic_rejoins_a_killed_task_keeping_the_committed_state(spark, capfd):
    # The killed task's executor is excluded for 2 s (Note [Cooldown length]:
    # 2 to 3 LOW, at most HIGH); Spark's re-run
    # of the task (on that executor: the other one's slot is taken) joins the
    # job once the cooldown has ended.
    results = hvdlite.spark.run_elastic(steps_until_regrown, args=(20, 5), num_proc=2,
                                        min_np=1, max_np=2, start_timeout=120,
                                        elastic_timeout=60, cooldown_range=(1, 2))
    err = capfd.readouterr().err
    assert [(r["rank"], r["size"]) for r in results] == [(0, 2), (1, 2)], err
    # Task 1's second attempt took the killed one's place.
    assert [r["worker"] for r in results] == ["0.0", "1.1"], err
    assert re.search(r"excluding Spark executor \S+ for 2 s: worker 1\.0 failed there", err), err
    assert "the cooldown of excluded Spark executor(s)" in err, err
    sizes = results[0]["sizes"]
    assert results[0]["step"] >= 20 and len(sizes) == results[0]["step"]  # no step lost
    assert results[1]["sizes"] == sizes  # the new worker got the committed state
    assert sizes[:5] == [2] * 5 and sizes[-1] == 2


def steps_failing_on_task_one(steps, fail_step):
    """Commits `steps` steps, recording the job's size; every attempt of
    task 1 raises when it reaches step `fail_step`."""
    import hvdlite.numpy as hvd
    hvd.init()
    state = hvd.elastic.ObjectState(step=0, sizes=[])
    worker = os.environ["HVDLITE_ELASTIC_WORKER_ID"]

    @hvd.elastic.run
    def train(state):
        while state.step < steps:
            if worker.startswith("1.") and state.step == fail_step:
                raise OSError(f"cannot read shard {worker}")
            size = int(hvd.allreduce(np.ones(1), op=hvd.Sum, name="count")[0])
            state.sizes.append(size)
            state.step += 1
            state.commit()
            time.sleep(0.02)

    train(state)
    return {"rank": hvd.rank(), "size": hvd.size(), "worker": worker, "sizes": state.sizes}


def test_run_elastic_excludes_the_executor_of_a_failing_task_and_finishes_without_it(
        spark, capfd):
    # Task 1 raises; its executor is excluded for good (no cooldown range), so
    # Spark's re-run of the task there is never admitted (it returns when
    # training ends), and the job finishes on the other executor.
    started = time.monotonic()
    results = hvdlite.spark.run_elastic(steps_failing_on_task_one, args=(25, 5), num_proc=2,
                                        min_np=1, max_np=2, start_timeout=120,
                                        elastic_timeout=60)
    err = capfd.readouterr().err
    assert [(r["rank"], r["size"], r["worker"]) for r in results] == [(0, 1, "0.0")], err
    # Steps 0-4 at 2 ranks; step 5 failed there and was done again alone.
    assert results[0]["sizes"] == [2] * 5 + [1] * 20, err
    assert re.search(r"worker 1\.0 \(rank \d of round 0, Spark executor (\S+)\) raised OSError: "
                     r"cannot read shard 1\.0\.", err), err
    assert re.search(r"excluding Spark executor \S+ from the job: worker 1\.0 failed there",
                     err), err
    assert "worker 1.1" not in err, err  # never admitted: no round has it
    assert time.monotonic() - started < 90, err
