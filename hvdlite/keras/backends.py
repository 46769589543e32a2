"""Keras 3's backend tensors routed to the hvdlite binding of the same
framework: TensorFlow tensors to hvdlite.tensorflow's ops, torch tensors to
hvdlite.torch, JAX arrays (also traced ones, inside the JAX backend's jitted
train step) to hvdlite.jax. hvdlite.keras keeps one API and asks current()
for the tensor-level pieces; only the chosen backend's framework is imported.
"""
import functools

import numpy as np

from hvdlite.common.gradient_reducer import GradientReducer, normalize_name
from hvdlite.common.process_sets import global_process_set
from hvdlite.keras import flavour
from hvdlite.numpy import collectives as host

BACKENDS = ("tensorflow", "torch", "jax")


def to_numpy(variable):
    """A Keras variable's (or tensor's) value as a NumPy array of its own."""
    import keras
    value = getattr(variable, "value", variable)
    return np.array(keras.ops.convert_to_numpy(value), copy=True)


def broadcast_keras_variables(variables, root_rank, process_set=global_process_set,
                              local_variables=None):
    """Assigns root_rank's values to Keras 3 variables on every rank, except
    local_variables: every value crosses as NumPy, queued at once (fused)."""
    local = {id(v) for v in local_variables or ()}
    chosen = [v for v in variables if id(v) not in local]
    handles = [host.broadcast_async(to_numpy(v), root_rank,
                                    f"broadcast_variables.{i}.{normalize_name(v.path)}",
                                    process_set)
               for i, v in enumerate(chosen)]
    for variable, handle in zip(chosen, handles):
        variable.assign(host.synchronize(handle))


class _TorchReducer(GradientReducer):
    """Gradients as torch tensors (CPU or CUDA), through hvdlite.torch: all
    queued, then awaited, so that the core fuses them."""

    def default_compression(self):
        from hvdlite.torch.compression import Compression
        return Compression.none

    def allreduce_each(self, grads, names):
        from hvdlite.torch import collectives
        prescale, postscale = self._scales()
        compressed = [self.compression.compress(g) for g in grads]
        handles = [collectives.allreduce_async(sent, name=name, op=self.op,
                                             prescale_factor=prescale, postscale_factor=postscale,
                                             process_set=self.process_set)
                   for (sent, _), name in zip(compressed, names)]
        return [self.compression.decompress(collectives.synchronize(h), ctx)
                for h, (_, ctx) in zip(handles, compressed)]

    def grouped_allreduce(self, grads, name):
        from hvdlite.torch import collectives
        prescale, postscale = self._scales()
        compressed = [self.compression.compress(g) for g in grads]
        handle = collectives.grouped_allreduce_async(
            [sent for sent, _ in compressed], name=name, op=self.op, prescale_factor=prescale,
            postscale_factor=postscale, process_set=self.process_set)
        return [self.compression.decompress(r, ctx)
                for r, (_, ctx) in zip(collectives.synchronize(handle), compressed)]

    def reduce_with_powersgd(self, grads, names, name, prescale, postscale):
        # hvdlite.torch's PowerSGD, on the gradients' device; it reduces in
        # place, and Keras' gradients may be its own buffers: copies.
        import torch
        from hvdlite.torch import collectives
        powersgd = self.step_compression
        grads = [g.detach().clone(memory_format=torch.contiguous_format) for g in grads]
        if powersgd.compressing():
            powersgd.reduce(names, grads, name, self.op, prescale, postscale, self.process_set)
        else:
            collectives.synchronize(collectives.grouped_allreduce_async_(
                grads, name=f"{name}.uncompressed", op=self.op, prescale_factor=prescale,
                postscale_factor=postscale, process_set=self.process_set))
        powersgd.end_step()  # warm-up steps count too
        return grads


class _JaxReducer(GradientReducer):
    """Gradients as JAX arrays, usually traced inside the jitted train step:
    one crossing into the core for all of them, an XLA FFI custom call (Note
    [Host callback] in hvdlite/jax/collectives.py)."""

    def default_compression(self):
        from hvdlite.jax.compression import Compression
        return Compression.none

    def allreduce_each(self, grads, names):
        from hvdlite.jax import collectives
        prescale, postscale = self._scales()
        return collectives.allreduce_many(grads, names, op=self.op, prescale_factor=prescale,
                                          postscale_factor=postscale,
                                          process_set=self.process_set,
                                          compression=self.compression)

    def grouped_allreduce(self, grads, name):
        from hvdlite.jax import collectives
        prescale, postscale = self._scales()
        return collectives.grouped_allreduce(grads, name=name, op=self.op,
                                             prescale_factor=prescale,
                                             postscale_factor=postscale,
                                             process_set=self.process_set,
                                             compression=self.compression)

    def reduce_with_powersgd(self, grads, names, name, prescale, postscale):
        # One ordered io_callback for the step, also inside Keras' jitted
        # train step (hvdlite/jax/powersgd.py).
        return self.step_compression.reduce(grads, names, name, self.op, prescale, postscale,
                                            self.process_set)


class Backend:
    """What hvdlite.keras needs from one Keras backend."""

    def __init__(self, name, reducer, compression, allreduce, allgather, broadcast,
                 broadcast_variables):
        self.name = name
        self.reducer = reducer                    # a GradientReducer subclass
        self.compression = compression            # hvd.Compression for this backend
        self.allreduce = allreduce                # backend tensor in, backend tensor out
        self.allgather = allgather
        self.broadcast = broadcast
        self.broadcast_variables = broadcast_variables


def _tensorflow():
    from hvdlite.tensorflow import collectives, functions
    from hvdlite.tensorflow.compression import Compression
    from hvdlite.tensorflow.gradient_reducer import GradientReducer as TensorFlowReducer

    def broadcast_variables(variables, root_rank, process_set, local_variables):
        functions.broadcast_variables(variables, root_rank, process_set=process_set,
                                      local_variables=local_variables)

    return Backend("tensorflow", TensorFlowReducer, Compression, collectives.allreduce,
                   collectives.allgather, collectives.broadcast, broadcast_variables)


def _torch():
    from hvdlite.torch import autograd_ops
    from hvdlite.torch.compression import Compression
    return Backend("torch", _TorchReducer, Compression, autograd_ops.allreduce,
                   autograd_ops.allgather, autograd_ops.broadcast, broadcast_keras_variables)


def _jax():
    from hvdlite.jax import collectives
    from hvdlite.jax.compression import Compression
    return Backend("jax", _JaxReducer, Compression, collectives.allreduce, collectives.allgather,
                   collectives.broadcast, broadcast_keras_variables)


@functools.lru_cache(maxsize=None)
def current():
    """The Backend of the Keras in use (decided once, as Keras decides its
    backend once, at import)."""
    name = flavour.backend()
    if name not in BACKENDS:
        raise ValueError(f"hvdlite.keras serves Keras' {', '.join(BACKENDS)} backends, but "
                         f"KERAS_BACKEND is {name!r}; set KERAS_BACKEND to one of them")
    return {"tensorflow": _tensorflow, "torch": _torch, "jax": _jax}[name]()
