"""hvdlite on a Ray cluster: ranks are Ray actors (Horovod's horovod.ray API).

    from hvdlite.ray import RayExecutor
    executor = RayExecutor(RayExecutor.create_settings(), num_workers=4)
    executor.start()
    results = executor.run(train)   # train() calls hvdlite.torch.init() etc.
    executor.shutdown()

Needs `pip install hvdlite[ray]`. See README "Running on Ray".
"""
from hvdlite.ray.executor import RayExecutor
from hvdlite.ray.worker import BaseHvdliteWorker
from hvdlite.runner.cluster import WorkerError

BaseHorovodWorker = BaseHvdliteWorker

__all__ = ["BaseHorovodWorker", "BaseHvdliteWorker", "RayExecutor", "WorkerError"]
