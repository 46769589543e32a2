"""DistributedGradientTape: a tf.GradientTape whose gradient() averages over the ranks."""
import tensorflow as tf

from hvdlite.common.process_sets import global_process_set
from hvdlite.tensorflow.gradient_reducer import GradientReducer
from hvdlite.tensorflow.ops import do_not_convert


class DistributedGradientTape(tf.GradientTape):
    """Wraps a recorded tape: `tape = hvd.DistributedGradientTape(tape)` after the
    `with tf.GradientTape() as tape:` block, then `tape.gradient(loss, vars)`
    returns gradients reduced over the ranks (default: averaged)."""

    def __init__(self, gradtape, device_dense="", device_sparse="", compression=None,
                 sparse_as_dense=False, op=None, gradient_predivide_factor=1.0, num_groups=0,
                 groups=None, process_set=global_process_set):
        if not isinstance(gradtape, tf.GradientTape):
            raise ValueError(f"DistributedGradientTape wraps a tf.GradientTape, got {type(gradtape)}")
        # Share the wrapped tape's recording state, so that it also works as a context manager.
        self.__dict__.update(gradtape.__dict__)
        self._hvdlite_reducer = GradientReducer(
            compression=compression, sparse_as_dense=sparse_as_dense, op=op,
            gradient_predivide_factor=gradient_predivide_factor, num_groups=num_groups,
            groups=groups, process_set=process_set, prefix="DistributedGradientTape")

    def _reduce_filter(self, sources):
        return [True] * len(sources)

    @do_not_convert
    def gradient(self, target, sources, output_gradients=None, **kwargs):
        grads = super().gradient(target, sources, output_gradients, **kwargs)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)
        keep = self._reduce_filter(flat_sources)
        shared = [i for i, k in enumerate(keep) if k]
        reduced = self._hvdlite_reducer.reduce([flat_grads[i] for i in shared],
                                               [flat_sources[i] for i in shared])
        for i, r in zip(shared, reduced):
            flat_grads[i] = r
        return tf.nest.pack_sequence_as(grads, flat_grads, expand_composites=False)


class PartialDistributedGradientTape(DistributedGradientTape):
    """Like DistributedGradientTape, but the variables of `local_layers` (layers or
    a list of layers) keep their local gradients (model parallelism)."""

    def __init__(self, gradtape, device_dense="", device_sparse="", compression=None,
                 sparse_as_dense=False, op=None, gradient_predivide_factor=1.0, num_groups=0,
                 groups=None, process_set=global_process_set, local_layers=None):
        super().__init__(gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
                         gradient_predivide_factor, num_groups, groups, process_set)
        if local_layers is None:
            local_layers = []
        elif not isinstance(local_layers, (list, tuple)):
            local_layers = [local_layers]
        self._hvdlite_local = {id(v) for layer in local_layers for v in layer.trainable_weights}

    def _reduce_filter(self, sources):
        return [id(s) not in self._hvdlite_local for s in sources]
