"""hvdlite for JAX: collectives on JAX arrays (eagerly and inside jax.jit),
pytree helpers and a DistributedOptimizer for optax.

    import hvdlite.jax as hvd
    hvd.init()
    params = hvd.broadcast_parameters(params, root_rank=0)
    tx = hvd.DistributedOptimizer(optax.sgd(0.01 * hvd.size()))

    @jax.jit
    def step(params, opt_state, batch):
        grads = jax.grad(loss)(params, batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

Inside jit the collectives reach the core through an XLA FFI custom call
compiled on first use, or an ordered host callback where that cannot be used
(jit_path() says which; Note [Host callback] in collectives.py).
"""
from hvdlite.common import *  # noqa: F401,F403  (init, rank, size, process sets, ops, errors)
from hvdlite.common import __all__ as _common_all
from hvdlite.jax.collectives import (
    allreduce, grouped_allreduce, allgather, broadcast, alltoall, reducescatter, barrier, join)
from hvdlite.jax.compression import Compression
from hvdlite.jax.ffi import hvdlite_error, jit_path
from hvdlite.jax.functions import (
    allgather_object, allreduce_gradients, broadcast_object, broadcast_parameters)
from hvdlite.jax.optimizer import DistributedOptimizer, sharded_clip_by_global_norm
from hvdlite.jax import elastic

__all__ = [*_common_all,
    "allreduce", "grouped_allreduce", "allgather", "broadcast", "alltoall", "reducescatter",
    "barrier", "join", "jit_path", "hvdlite_error", "Compression", "allreduce_gradients", "broadcast_parameters",
    "broadcast_object", "allgather_object", "DistributedOptimizer", "sharded_clip_by_global_norm",
    "elastic",
]
