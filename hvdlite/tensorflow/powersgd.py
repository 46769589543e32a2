"""PowerSGD for hvdlite.tensorflow's DistributedGradientTape and
DistributedOptimizer, and so for hvdlite.keras on the TensorFlow backend:
low-rank gradient compression with error feedback, the algorithm of
hvdlite.torch's Compression.powersgd and PyTorch DDP's powerSGD_hook.

    tape = hvd.DistributedGradientTape(tape, compression=hvd.Compression.powersgd(rank=4))

The algorithm and its state are hvdlite/numpy/powersgd.py's, in NumPy
on the host (Note [PowerSGD on the host] there); this module crosses to it
from TensorFlow in one stateful tf.numpy_function per step, so a
tf.function keeps it, in order, however it optimises the graph.
"""
import tensorflow as tf

from hvdlite.numpy.powersgd import HostPowerSGD


class PowerSGD(HostPowerSGD):
    """hvd.Compression.powersgd(...): PowerSGD for one optimizer or gradient
    tape; settings, supported ops and state are HostPowerSGD's (by variable
    path; hvdlite.keras' elastic KerasState commits the state)."""

    not_per_tensor = ("PowerSGD compresses a whole step's gradients and keeps state between steps: "
                      "pass it as compression= of DistributedGradientTape or DistributedOptimizer, "
                      "not to a single collective")

    def reduce(self, grads, names, name, op, prescale, postscale, process_set):
        """One step's dense gradients reduced over process_set, eagerly or in a tf.function.

        Args:
            grads (list[tf.Tensor]): the step's gradients.
            names (list[str]): each gradient's variable path, the key of its state.
            name, op, prescale, postscale, process_set: as for HostPowerSGD.reduce_arrays().

        Returns:
            list[tf.Tensor]: the reduced (approximated) gradients, shapes and dtypes kept.
        """
        if not grads:
            return []
        reduced = tf.numpy_function(
            self.step_function(names, name, op, prescale, postscale, process_set), grads,
            Tout=[g.dtype for g in grads], stateful=True, name="hvdlite_powersgd")
        for grad, out in zip(grads, reduced):
            out.set_shape(grad.shape)
        return list(reduced)
