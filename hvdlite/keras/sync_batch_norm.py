"""SyncBatchNormalization: Keras' BatchNormalization with the batch statistics
of every rank's batch, so training matches one process on the whole batch."""
import warnings

import tensorflow as tf

from hvdlite.common.ops import ReduceOp
from hvdlite.common.process_sets import global_process_set
from hvdlite.keras import flavour
from hvdlite.tensorflow import collectives

keras = flavour.keras_module()


def global_moments(inputs, axes, keepdims, mask=None, shift=None, process_set=global_process_set):
    """Mean and variance over `axes` of every rank's `inputs` (rows of masked-out
    positions excluded): one allreduce of the sums, the sums of squares and the
    counts, so ranks may hold batches of different sizes. Sums are taken
    around `shift` (the moving mean, the same on every rank) so that the
    variance keeps its precision when the mean is large."""
    inputs = tf.convert_to_tensor(inputs)
    shift = tf.zeros([], inputs.dtype) if shift is None else tf.stop_gradient(
        tf.reshape(tf.cast(shift, inputs.dtype), _kept_shape(inputs, axes)))
    centered = inputs - shift
    if mask is None:
        weights = tf.ones_like(centered)
    else:
        weights = tf.broadcast_to(tf.expand_dims(tf.cast(mask, inputs.dtype), -1),
                                  tf.shape(inputs))
    sums = tf.stack([tf.reduce_sum(centered * weights, axes, keepdims=True),
                     tf.reduce_sum(tf.square(centered) * weights, axes, keepdims=True),
                     tf.reduce_sum(weights, axes, keepdims=True)])
    total = collectives.allreduce(sums, op=ReduceOp.Sum, process_set=process_set)
    count = tf.maximum(total[2], 1.0)
    shifted_mean = total[0] / count
    mean = shifted_mean + shift
    variance = tf.maximum(total[1] / count - tf.square(shifted_mean), 0.0)
    if not keepdims:
        mean, variance = tf.squeeze(mean, axes), tf.squeeze(variance, axes)
    return mean, variance


def _kept_shape(inputs, axes):
    """The shape of `inputs` reduced over `axes` with keepdims (a list of ints)."""
    rank = inputs.shape.rank
    axes = {a % rank for a in axes}
    return [1 if i in axes else -1 for i in range(rank)]


if flavour.legacy_keras():
    @keras.utils.register_keras_serializable(package="hvdlite")
    class SyncBatchNormalization(keras.layers.BatchNormalization):
        """Keras 2 BatchNormalization whose training statistics cover every rank's
        batch.

        Args:
            fused (bool | None): False or None: fused kernels cannot be synchronized
                (as in Horovod).
            **kwargs: BatchNormalization's arguments (axis, momentum, epsilon, ...).

        Raises:
            ValueError: for fused=True.
        """

        def __init__(self, fused=False, **kwargs):
            if fused:
                raise ValueError("SyncBatchNormalization does not support fused=True: a fused "
                                 "kernel computes its statistics where they cannot be "
                                 "synchronized; pass fused=False")
            super().__init__(fused=False, **kwargs)

        def _moments(self, inputs, reduction_axes, keep_dims, mask=None):
            return global_moments(inputs, reduction_axes, keep_dims, mask, self.moving_mean)
else:
    @keras.saving.register_keras_serializable(package="hvdlite")
    class SyncBatchNormalization(keras.layers.BatchNormalization):
        """Keras 3 BatchNormalization whose training statistics (and moving
        statistics) cover every rank's batch.

        Args:
            fused (bool | None): Keras 2's argument, ignored (Keras 3 has no fused
                kernel); True warns.
            synchronized (bool): accepted; always true here.
            virtual_batch_size: Keras 2's argument; only None is accepted.
            adjustment: Keras 2's argument; only None is accepted.
            **kwargs: BatchNormalization's arguments (axis, momentum, epsilon, ...).

        Raises:
            ValueError: for a virtual_batch_size or an adjustment.

        Example:
            ```python
            x = hvd.SyncBatchNormalization()(x)
            ```
        """

        def __init__(self, fused=None, synchronized=True, virtual_batch_size=None,
                     adjustment=None, **kwargs):
            if fused:
                warnings.warn("SyncBatchNormalization: fused=True is ignored; Keras 3 has no "
                              "fused batch normalization", stacklevel=2)
            if virtual_batch_size is not None or adjustment is not None:
                raise ValueError("SyncBatchNormalization: virtual_batch_size and adjustment are "
                                 "Keras 2 arguments that Keras 3's BatchNormalization dropped")
            # Keras' own synchronization goes through tf.distribute; hvdlite's is in _moments.
            super().__init__(synchronized=False, **kwargs)

        def _moments(self, inputs, mask):
            return global_moments(inputs, self._reduction_axes, False, mask, self.moving_mean)

        def get_config(self):
            """The layer's config, marked synchronized, so that a saved model reloads as one.

            Returns:
                dict: BatchNormalization's config with `synchronized=True`.
            """
            return {**super().get_config(), "synchronized": True}
