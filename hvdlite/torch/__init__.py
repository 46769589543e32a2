"""hvdlite for PyTorch: Horovod's `horovod.torch` API.

    import hvdlite.torch as hvd
    hvd.init()
    total = hvd.allreduce(tensor, op=hvd.Sum)

Collectives take CPU tensors of every dtype the core supports (uint8, int8,
int16, uint16 (torch 2.3+), int32, int64, float16, bfloat16, float32, float64,
bool), contiguous or not; the synchronous ones are differentiable.
"""
from hvdlite.torch.mpi_ops import *  # noqa: F401,F403
from hvdlite.torch.mpi_ops import __all__ as _mpi_ops_all

__all__ = [*_mpi_ops_all]

# Training helpers built on the collectives (optimizer, broadcasts, SyncBatchNorm).
from hvdlite.torch.functions import (  # noqa: E402
    allgather_object, broadcast_object, broadcast_optimizer_state, broadcast_parameters)
from hvdlite.torch.distributed_optimizer import DistributedOptimizer  # noqa: E402
from hvdlite.torch.sync_batch_norm import SyncBatchNorm  # noqa: E402
from hvdlite.torch import elastic  # noqa: E402

__all__ += ["DistributedOptimizer", "broadcast_parameters", "broadcast_optimizer_state",
            "broadcast_object", "allgather_object", "SyncBatchNorm", "elastic"]
