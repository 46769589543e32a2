"""hvdlite on a Ray cluster: ranks are Ray actors (Horovod's horovod.ray API).

    from hvdlite.ray import RayExecutor
    executor = RayExecutor(RayExecutor.create_settings(), num_workers=4)
    executor.start()
    results = executor.run(train)   # train() calls hvdlite.torch.init() etc.
    executor.shutdown()

Needs `pip install hvdlite[ray]`. See docs/ray.md.
"""
try:
    import ray  # noqa: F401
except ImportError as error:
    raise ImportError(f"hvdlite.ray needs Ray ({error}): pip install 'hvdlite[ray]'") from error

from hvdlite.ray.executor import RayExecutor  # noqa: E402
from hvdlite.ray.worker import BaseHvdliteWorker  # noqa: E402
from hvdlite.runner.cluster import WorkerError  # noqa: E402

BaseHorovodWorker = BaseHvdliteWorker

__all__ = ["BaseHorovodWorker", "BaseHvdliteWorker", "RayExecutor", "WorkerError"]
