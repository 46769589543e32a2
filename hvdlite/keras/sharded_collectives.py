"""The collectives of Keras' sharded optimizer (sharded_optimizer.py), on the
backend's own tensors: each gradient reduce-scattered, each updated shard
allgathered, small sums allreduced. Eagerly and inside the compiled train
step (tf.function, Keras' jitted JAX step): every list is queued before any
of it is awaited, so the core fuses them as it fuses allreduces (TensorFlow:
independent ops of one graph, which TF runs concurrently; torch: async
handles; JAX: one crossing for the list, Note [Host callback] in
hvdlite/jax/collectives.py).

Each function takes a list of tensors and a list of names fixed by the
caller (the same on every rank and every step, so the response cache skips
negotiation), and returns backend tensors; the caller reshapes them.
"""
import numpy as np

from hvdlite.common.ops import ReduceOp
from hvdlite.keras import backends
from hvdlite.numpy import collectives as host


def reducescatter_each(tensors, names, op, prescale, postscale, process_set, compression):
    """Each tensor reduced over the set, this rank's rows of it returned (its
    first dimension split as Note [Sharding by rows] says); `compression`
    (the backend's fp16/bf16/none) is the wire type."""
    return _BY_BACKEND[backends.current().name].reducescatter_each(
        tensors, names, op, prescale, postscale, process_set, compression)


def allgather_each(tensors, full_rows, names, process_set):
    """Each rank's rows of each tensor joined in rank order; `full_rows[i]`
    is the sum of every rank's rows of tensors[i] (shapes inside a compiled
    step are fixed when it is traced, and ranks may own different counts)."""
    return _BY_BACKEND[backends.current().name].allgather_each(tensors, full_rows, names,
                                                                process_set)


def sum_each(tensors, names, process_set):
    """Each (1-element) tensor summed over the set."""
    return _BY_BACKEND[backends.current().name].sum_each(tensors, names, process_set)


class _TensorFlow:
    @staticmethod
    def reducescatter_each(tensors, names, op, prescale, postscale, process_set, compression):
        from hvdlite.tensorflow import ops
        return [ops.reducescatter(t, compression=compression, op=op, name=n,
                                  process_set=process_set, prescale_factor=prescale,
                                  postscale_factor=postscale)
                for t, n in zip(tensors, names)]

    @staticmethod
    def allgather_each(tensors, full_rows, names, process_set):
        from hvdlite.tensorflow import ops
        return [ops.allgather(t, name=n, process_set=process_set) for t, n in zip(tensors, names)]

    @staticmethod
    def sum_each(tensors, names, process_set):
        from hvdlite.tensorflow import ops
        return [ops.allreduce(t, op=ReduceOp.Sum, name=n, process_set=process_set)
                for t, n in zip(tensors, names)]


class _Torch:
    @staticmethod
    def reducescatter_each(tensors, names, op, prescale, postscale, process_set, compression):
        from hvdlite.torch import async_ops
        compressed = [compression.compress(t.contiguous()) for t in tensors]
        handles = [async_ops.reducescatter_async(sent, name=n, op=op, process_set=process_set,
                                                 prescale_factor=prescale,
                                                 postscale_factor=postscale)
                   for (sent, _), n in zip(compressed, names)]
        return [compression.decompress(async_ops.synchronize(h), ctx)
                for h, (_, ctx) in zip(handles, compressed)]

    @staticmethod
    def allgather_each(tensors, full_rows, names, process_set):
        from hvdlite.torch import async_ops
        handles = [async_ops.allgather_async(t.contiguous(), name=n, process_set=process_set)
                   for t, n in zip(tensors, names)]
        return [async_ops.synchronize(h) for h in handles]

    @staticmethod
    def sum_each(tensors, names, process_set):
        from hvdlite.torch import async_ops
        handles = [async_ops.allreduce_async(t.contiguous(), name=n, op=ReduceOp.Sum,
                                             process_set=process_set)
                   for t, n in zip(tensors, names)]
        return [async_ops.synchronize(h) for h in handles]


class _Jax:
    """One crossing per list, through hvdlite.jax's `cross` (the FFI custom
    call inside jit, or its io_callback fallback; NumPy eagerly)."""

    @staticmethod
    def _shape(array, rows):
        import jax
        return jax.ShapeDtypeStruct((rows,) + tuple(array.shape[1:]), array.dtype)

    @staticmethod
    def reducescatter_each(tensors, names, op, prescale, postscale, process_set, compression):
        import jax.numpy as jnp
        from hvdlite.common import requests
        from hvdlite.common.sharding import row_range
        from hvdlite.jax.collectives import cross
        if not tensors:
            return []
        compressed = [compression.compress(jnp.asarray(t)) for t in tensors]
        sent = [array for array, _ in compressed]
        reduce_op, _, _, _ = requests.reduction(op, None, prescale, postscale, process_set,
                                                "reducescatter")
        size, rank = process_set.size(), process_set.rank()
        shapes = [_Jax._shape(a, row_range(a.shape[0], size, rank)[1]) for a in sent]

        def on_host(*arrays):
            handles = [host.reducescatter_async(a, n, op, prescale, postscale, process_set)
                       for a, n in zip(arrays, names)]
            return [host.synchronize(h) for h in handles]

        reduced = cross(on_host, shapes, sent, requests.REDUCESCATTER, names, reduce_op=reduce_op,
                        prescale=prescale, postscale=postscale, process_set=process_set)
        return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, compressed)]

    @staticmethod
    def allgather_each(tensors, full_rows, names, process_set):
        import jax.numpy as jnp
        from hvdlite.common import requests
        from hvdlite.jax.collectives import cross
        if not tensors:
            return []
        arrays = [jnp.asarray(t) for t in tensors]

        def on_host(*values):
            handles = [host.allgather_async(np.ascontiguousarray(v), n, process_set)
                       for v, n in zip(values, names)]
            return [host.synchronize(h) for h in handles]

        return cross(on_host, [_Jax._shape(a, rows) for a, rows in zip(arrays, full_rows)],
                     arrays, requests.ALLGATHER, names, process_set=process_set)

    @staticmethod
    def sum_each(tensors, names, process_set):
        from hvdlite.jax import collectives
        return collectives.allreduce_many(tensors, names, op=ReduceOp.Sum,
                                          process_set=process_set)


_BY_BACKEND = {"tensorflow": _TensorFlow, "torch": _Torch, "jax": _Jax}
