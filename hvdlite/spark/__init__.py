"""hvdlite on a Spark cluster: each rank is a task of one barrier stage
(Horovod's horovod.spark API).

    import hvdlite.spark
    results = hvdlite.spark.run(train, args=(config,), num_proc=4)

Needs `pip install hvdlite[spark]` and Java. See README "Running on Spark".
"""
from hvdlite.runner.cluster import WorkerError
from hvdlite.spark.runner import run

__all__ = ["WorkerError", "run"]
