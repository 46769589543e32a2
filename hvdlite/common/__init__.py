"""Framework-independent parts shared by every binding: init/rank/size, process
sets, reduce ops, exceptions."""
from hvdlite.common.basics import (
    shutdown, is_initialized, rank, size, local_rank, local_size, cross_rank,
    cross_size, is_homogeneous, start_timeline, stop_timeline, mpi_built, mpi_enabled,
    mpi_threads_supported, gloo_built, gloo_enabled, tcp_built, nccl_built, ddl_built,
    ccl_built, cuda_built, rocm_built, gpu_libraries)
from hvdlite.common.exceptions import (
    HvdliteInternalError, HorovodInternalError, HostsUpdatedInterrupt, CollectiveMismatchError,
    DivergenceError, PeerLostError, StallTimeoutError, ShutdownError, CallSite, RankCall)
from hvdlite.common.ops import ReduceOp, Sum, Average, Min, Max, Product, Adasum
from hvdlite.common.process_sets import (
    ProcessSet, global_process_set, add_process_set, remove_process_set)
from hvdlite.common.startup import init

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "is_homogeneous", "start_timeline", "stop_timeline",
    "mpi_built", "mpi_enabled", "mpi_threads_supported", "gloo_built", "gloo_enabled",
    "tcp_built", "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built", "gpu_libraries",
    "HvdliteInternalError", "HorovodInternalError", "HostsUpdatedInterrupt",
    "CollectiveMismatchError", "DivergenceError", "PeerLostError", "StallTimeoutError", "ShutdownError",
    "CallSite", "RankCall",
    "ReduceOp", "Sum", "Average", "Min", "Max", "Product", "Adasum",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
]
