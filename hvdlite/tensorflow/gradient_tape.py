"""DistributedGradientTape: a tf.GradientTape whose gradient() averages over the ranks."""
import tensorflow as tf

from hvdlite.common.process_sets import global_process_set
from hvdlite.common.gradient_reducer import layer_variables
from hvdlite.tensorflow.gradient_reducer import GradientReducer
from hvdlite.tensorflow.collectives import do_not_convert


class DistributedGradientTape(tf.GradientTape):
    """A recorded tape whose `gradient()` returns gradients reduced over the ranks (averaged).

    Wrap the tape after the `with tf.GradientTape() as tape:` block. Sources registered with
    `register_local_source()` keep their local gradient, divided by the number of ranks
    unless `scale_local_gradients=False` (as in Horovod).

    Args:
        gradtape (tf.GradientTape): the recorded tape.
        device_dense (str): accepted for Horovod compatibility.
        device_sparse (str): accepted for Horovod compatibility.
        compression: `Compression.none` or `.fp16`: the type on the wire; or
            `Compression.powersgd(...)`, low-rank with error feedback (one instance per tape).
        sparse_as_dense (bool): allreduce tf.IndexedSlices densely instead of allgathering.
        op (ReduceOp | None): `Average` (default), `Sum` or `Adasum`.
        gradient_predivide_factor (float): divide by f before the sum and by size/f after.
        num_groups (int): fuse the gradients into this many grouped allreduces.
        groups (int | list | None): the groups (lists of variables), or their number.
        process_set (ProcessSet): reduce over these ranks only.
        scale_local_gradients (bool): divide local sources' gradients by the number of ranks.

    Raises:
        ValueError: `gradtape` is not a tf.GradientTape.

    Example:
        ```python
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        ```
    """

    def __init__(self, gradtape, device_dense="", device_sparse="", compression=None,
                 sparse_as_dense=False, op=None, gradient_predivide_factor=1.0, num_groups=0,
                 groups=None, process_set=global_process_set, scale_local_gradients=True):
        if not isinstance(gradtape, tf.GradientTape):
            raise ValueError(f"DistributedGradientTape wraps a tf.GradientTape, got {type(gradtape)}")
        # Share the wrapped tape's recording state, so that it also works as a context manager.
        self.__dict__.update(gradtape.__dict__)
        self._hvdlite_reducer = GradientReducer(
            compression=compression, sparse_as_dense=sparse_as_dense, op=op,
            gradient_predivide_factor=gradient_predivide_factor, num_groups=num_groups,
            groups=groups, process_set=process_set, prefix="DistributedGradientTape",
            scale_local_gradients=scale_local_gradients,
            # A tape is made anew each step; PowerSGD's state carries over to the next.
            owns_compression=False)

    def register_local_source(self, source):
        """Keeps the gradient of `source` on this rank: it is not averaged.

        Args:
            source (tf.Variable): a variable the tape watches.
        """
        self._hvdlite_reducer.register_local(source)

    @do_not_convert
    def gradient(self, target, sources, output_gradients=None, **kwargs):
        """`tf.GradientTape.gradient`, each gradient averaged (or reduced by `op`) over the ranks.

        Args:
            target: the tensor(s) to differentiate.
            sources: the variables (any nesting); gradients of local sources stay on this rank.
            output_gradients: as `tf.GradientTape.gradient`.
            **kwargs: as `tf.GradientTape.gradient` (e.g. unconnected_gradients).

        Returns:
            The reduced gradients, nested as `sources`.

        Raises:
            HvdliteInternalError: when a reduction fails at run time (eagerly; inside tf.function
                TensorFlow raises its own error with the same text).
        """
        grads = super().gradient(target, sources, output_gradients, **kwargs)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)
        reduced = self._hvdlite_reducer.reduce(flat_grads, flat_sources)
        return tf.nest.pack_sequence_as(grads, reduced, expand_composites=False)


class PartialDistributedGradientTape(DistributedGradientTape):
    """Like DistributedGradientTape, but the variables of `local_layers` keep
    their local gradients (model parallelism).

    Args:
        gradtape (tf.GradientTape): the tape to wrap.
        device_dense (str): accepted for Horovod compatibility.
        device_sparse (str): accepted for Horovod compatibility.
        compression: `Compression.none` or `.fp16`.
        sparse_as_dense (bool): allreduce tf.IndexedSlices gradients densely.
        op (ReduceOp | None): `Average` (default), `Sum` or `Adasum`.
        gradient_predivide_factor (float): divide by f before the sum and by size/f after.
        num_groups (int): fuse the gradients into this many grouped allreduces.
        groups (int | list | None): the groups (lists of variables), or their number.
        process_set (ProcessSet): average over these ranks only.
        local_layers (Layer | list | None): a layer or a list of layers whose variables
            keep their gradients on each rank.
        scale_local_gradients (bool): divide the local gradients by the number of ranks.
    """

    def __init__(self, gradtape, device_dense="", device_sparse="", compression=None,
                 sparse_as_dense=False, op=None, gradient_predivide_factor=1.0, num_groups=0,
                 groups=None, process_set=global_process_set, local_layers=None,
                 scale_local_gradients=True):
        super().__init__(gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
                         gradient_predivide_factor, num_groups, groups, process_set,
                         scale_local_gradients)
        for variable in layer_variables(local_layers, "PartialDistributedGradientTape"):
            self.register_local_source(variable)
