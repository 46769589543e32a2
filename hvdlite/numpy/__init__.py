"""Every collective on NumPy arrays, without a deep-learning framework.

The same API as hvdlite.torch (Horovod's), on np.ndarray: the reference the
core is tested with, and a binding for NumPy and JAX users.

hvdlite.numpy is also the host layer that the other bindings build on where
they work on host memory: picklable objects, elastic state, sharded
checkpoints, PowerSGD and collectives on host arrays (the layer map of the
Architecture page).
"""
from hvdlite.common import *  # noqa: F401,F403
from hvdlite.common import __all__ as _common_all
from hvdlite.numpy.collectives import (
    allreduce, allreduce_async, allreduce_, allreduce_async_,
    grouped_allreduce, grouped_allreduce_async,
    allgather, allgather_async, broadcast, broadcast_async, alltoall, alltoall_async,
    reducescatter, reducescatter_async, barrier, join, synchronize, poll)
from hvdlite.numpy import elastic

__all__ = [*_common_all,
    "allreduce", "allreduce_async", "allreduce_", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_async",
    "allgather", "allgather_async", "broadcast", "broadcast_async", "alltoall",
    "alltoall_async", "reducescatter", "reducescatter_async", "barrier", "join",
    "synchronize", "poll", "elastic",
]
