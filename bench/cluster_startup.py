"""Job start-up overhead: from the call that starts a job to the end of its
first allreduce on every rank, under hvdliterun, RayExecutor and
hvdlite.spark.run, on this machine (NumPy ranks, so no framework import is
counted).

    python bench/cluster_startup.py --engines hvdliterun ray spark --np 2 --repeat 3

Ray: a local two-node cluster (ray.cluster_utils, the ranks split over its two nodes);
"start+run" times RayExecutor.start() and run(), "run" times run() alone on
started actors (each run() re-initialises hvdlite on them). Spark: master
local-cluster[np,1,1024], the session made before timing. The clock is the
machine's (time.time() in every process). Prints one JSON line per engine:
the median and each repeat, in seconds.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

FIRST_ALLREDUCE = """
import time, numpy as np, hvdlite.numpy as hvd
hvd.init(); hvd.allreduce(np.ones(4, np.float32), name="first")
print("done", repr(time.time()), flush=True); hvd.shutdown()
"""


def first_allreduce():
    """Runs on a rank: init, one allreduce; returns when it ended."""
    import numpy as np

    import hvdlite.numpy as hvd
    hvd.init()
    hvd.allreduce(np.ones(4, np.float32), name="first")
    ended = time.time()
    hvd.shutdown()
    return ended


def hvdliterun(np_, repeat):
    times = []
    for _ in range(repeat):
        start = time.time()
        done = subprocess.run([sys.executable, "-m", "hvdlite.runner", "-np", str(np_),
                               sys.executable, "-c", FIRST_ALLREDUCE],
                              capture_output=True, text=True, check=True, timeout=120)
        ends = [float(line.split()[-1]) for line in done.stdout.splitlines() if "done" in line]
        times.append(max(ends) - start)
    return {"hvdliterun": times}


def ray_engine(np_, repeat):
    import ray
    from ray.cluster_utils import Cluster

    from hvdlite.ray import RayExecutor
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": np_ - np_ // 2})
    try:
        cluster.add_node(num_cpus=np_ // 2)
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        start_and_run, run_only = [], []
        for _ in range(repeat):
            start = time.time()
            executor = RayExecutor(RayExecutor.create_settings(), num_workers=np_)
            executor.start()
            try:
                start_and_run.append(max(executor.run(first_allreduce)) - start)
                start = time.time()
                run_only.append(max(executor.run(first_allreduce)) - start)
            finally:
                executor.shutdown()
        return {"ray start+run": start_and_run, "ray run": run_only}
    finally:
        ray.shutdown()
        cluster.shutdown()


def spark_engine(np_, repeat):
    from pyspark import cloudpickle
    from pyspark.sql import SparkSession

    import hvdlite.spark
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (SparkSession.builder.master(f"local-cluster[{np_},1,1024]")
               .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    try:
        hvdlite.spark.run(first_allreduce, num_proc=np_)  # Python workers started once
        times = []
        for _ in range(repeat):
            start = time.time()
            times.append(max(hvdlite.spark.run(first_allreduce, num_proc=np_)) - start)
        return {"spark run": times}
    finally:
        session.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", nargs="+", default=["hvdliterun", "ray", "spark"])
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    engines = {"hvdliterun": hvdliterun, "ray": ray_engine, "spark": spark_engine}
    for name in args.engines:
        for label, times in engines[name](args.np, args.repeat).items():
            print(json.dumps({"engine": label, "np": args.np,
                              "median_s": round(statistics.median(times), 3),
                              "runs_s": [round(t, 3) for t in times]}), flush=True)


if __name__ == "__main__":
    main()
