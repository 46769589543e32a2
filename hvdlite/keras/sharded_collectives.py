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
from hvdlite.common.ops import ReduceOp
from hvdlite.keras import backends


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
        from hvdlite.tensorflow import collectives
        return [collectives.reducescatter(t, compression=compression, op=op, name=n,
                                  process_set=process_set, prescale_factor=prescale,
                                  postscale_factor=postscale)
                for t, n in zip(tensors, names)]

    @staticmethod
    def allgather_each(tensors, full_rows, names, process_set):
        from hvdlite.tensorflow import collectives
        return [collectives.allgather(t, name=n, process_set=process_set) for t, n in zip(tensors, names)]

    @staticmethod
    def sum_each(tensors, names, process_set):
        from hvdlite.tensorflow import collectives
        return [collectives.allreduce(t, op=ReduceOp.Sum, name=n, process_set=process_set)
                for t, n in zip(tensors, names)]


class _Torch:
    @staticmethod
    def reducescatter_each(tensors, names, op, prescale, postscale, process_set, compression):
        from hvdlite.torch import collectives
        compressed = [compression.compress(t.contiguous()) for t in tensors]
        handles = [collectives.reducescatter_async(sent, name=n, op=op, process_set=process_set,
                                                 prescale_factor=prescale,
                                                 postscale_factor=postscale)
                   for (sent, _), n in zip(compressed, names)]
        return [compression.decompress(collectives.synchronize(h), ctx)
                for h, (_, ctx) in zip(handles, compressed)]

    @staticmethod
    def allgather_each(tensors, full_rows, names, process_set):
        from hvdlite.torch import collectives
        handles = [collectives.allgather_async(t.contiguous(), name=n, process_set=process_set)
                   for t, n in zip(tensors, names)]
        return [collectives.synchronize(h) for h in handles]

    @staticmethod
    def sum_each(tensors, names, process_set):
        from hvdlite.torch import collectives
        handles = [collectives.allreduce_async(t.contiguous(), name=n, op=ReduceOp.Sum,
                                             process_set=process_set)
                   for t, n in zip(tensors, names)]
        return [collectives.synchronize(h) for h in handles]


class _Jax:
    """hvdlite.jax's: one crossing per list (the FFI custom call inside jit,
    or its io_callback fallback; NumPy eagerly)."""

    @staticmethod
    def reducescatter_each(tensors, names, op, prescale, postscale, process_set, compression):
        from hvdlite.jax import collectives
        return collectives.reducescatter_many(tensors, names, op, prescale, postscale,
                                              process_set, compression)

    @staticmethod
    def allgather_each(tensors, full_rows, names, process_set):
        from hvdlite.jax import collectives
        return collectives.allgather_many(tensors, names, full_rows, process_set)

    @staticmethod
    def sum_each(tensors, names, process_set):
        from hvdlite.jax import collectives
        return collectives.allreduce_many(tensors, names, op=ReduceOp.Sum,
                                          process_set=process_set)


_BY_BACKEND = {"tensorflow": _TensorFlow, "torch": _Torch, "jax": _Jax}
