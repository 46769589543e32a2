"""Averages a list of gradients over the ranks with TensorFlow's ops: the
engine of DistributedGradientTape and the Keras DistributedOptimizer on the
TensorFlow backend (the policy is hvdlite/common/gradient_reducer.py)."""
import tensorflow as tf

from hvdlite.common import gradient_reducer
from hvdlite.tensorflow import collectives
from hvdlite.tensorflow.compression import Compression


class GradientReducer(gradient_reducer.GradientReducer):
    """Horovod's gradient options, applied to (gradient, variable) lists of
    TensorFlow tensors (tf.IndexedSlices included)."""

    def default_compression(self):
        return Compression.none

    def scale(self, grad, factor):
        if isinstance(grad, tf.IndexedSlices):
            return tf.IndexedSlices(grad.values * tf.cast(factor, grad.values.dtype),
                                    grad.indices, grad.dense_shape)
        return grad * tf.cast(factor, grad.dtype)

    def densify(self, grad):
        return tf.convert_to_tensor(grad) if isinstance(grad, tf.IndexedSlices) else grad

    def is_sparse(self, grad):
        return isinstance(grad, tf.IndexedSlices)

    def allreduce_each(self, grads, names):
        prescale, postscale = self._scales()
        return [collectives.allreduce(grad, op=self.op, compression=self.compression,
                              prescale_factor=prescale, postscale_factor=postscale, name=name,
                              process_set=self.process_set)
                for grad, name in zip(grads, names)]

    def grouped_allreduce(self, grads, name):
        prescale, postscale = self._scales()
        return collectives.grouped_allreduce(grads, op=self.op, compression=self.compression,
                                     prescale_factor=prescale, postscale_factor=postscale,
                                     name=name, process_set=self.process_set)

    def reduce_with_powersgd(self, grads, names, name, prescale, postscale):
        # One stateful tf.numpy_function for the step (hvdlite/tensorflow/powersgd.py).
        return self.step_compression.reduce(grads, names, name, self.op, prescale, postscale,
                                            self.process_set)
