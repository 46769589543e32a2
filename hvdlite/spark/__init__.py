"""hvdlite on a Spark cluster: each rank is a task of one barrier stage
(Horovod's horovod.spark API).

    import hvdlite.spark
    results = hvdlite.spark.run(train, args=(config,), num_proc=4)
    results = hvdlite.spark.run_elastic(train, num_proc=4, min_np=2, max_np=4)

Needs `pip install hvdlite[spark]` and Java. See docs/spark.md.
"""
from hvdlite.runner.cluster import WorkerError
from hvdlite.spark.elastic import run_elastic
from hvdlite.spark.runner import run

__all__ = ["WorkerError", "run", "run_elastic"]
