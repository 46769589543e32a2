"""Horovod's `horovod.torch.mpi_ops` module: the basics and every collective
in one namespace, for code that imports from it directly."""
from hvdlite.common import *  # noqa: F401,F403  (init, rank, size, ops, process sets, errors)
from hvdlite.common import __all__ as _common_all
from hvdlite.torch.collectives import (
    allgather_async, allreduce_, allreduce_async, allreduce_async_, alltoall_async, barrier,
    broadcast_, broadcast_async, broadcast_async_, grouped_allgather_async, grouped_allreduce_,
    grouped_allreduce_async, grouped_allreduce_async_, grouped_reducescatter_async, join, poll,
    reducescatter_async, sparse_allreduce_async, synchronize)
from hvdlite.torch.autograd_ops import (
    HorovodAllgather, HorovodAllreduce, HorovodAlltoall, HorovodBroadcast,
    HorovodGroupedAllgather, HorovodGroupedAllreduce, HorovodGroupedReducescatter,
    HorovodReducescatter, allgather, allreduce, alltoall, broadcast, grouped_allgather,
    grouped_allreduce, grouped_reducescatter, reducescatter)
from hvdlite.torch.compression import Compression

__all__ = [
    *_common_all,
    # The collectives.
    "allreduce", "allreduce_async", "allreduce_", "allreduce_async_", "grouped_allreduce",
    "grouped_allreduce_async", "grouped_allreduce_", "grouped_allreduce_async_", "allgather",
    "allgather_async", "grouped_allgather", "grouped_allgather_async", "broadcast",
    "broadcast_async", "broadcast_", "broadcast_async_", "alltoall", "alltoall_async",
    "reducescatter", "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async",
    "sparse_allreduce_async", "synchronize", "poll", "join", "barrier",
    # Horovod's autograd Functions behind the differentiable collectives.
    "HorovodAllreduce", "HorovodGroupedAllreduce", "HorovodAllgather", "HorovodGroupedAllgather",
    "HorovodBroadcast", "HorovodAlltoall", "HorovodReducescatter", "HorovodGroupedReducescatter",
    "Compression",
]
