"""PowerSGD for hvdlite.jax's DistributedOptimizer: low-rank gradient
compression with error feedback, the algorithm of hvdlite.torch's
Compression.powersgd and PyTorch DDP's powerSGD_hook.

    tx = hvd.DistributedOptimizer(optax.sgd(0.1),
                                  compression=hvd.Compression.powersgd(rank=4, start_iter=10))

The algorithm and its state are hvdlite/numpy/powersgd.py's, in NumPy
on the host (Note [PowerSGD on the host] there); this module crosses to it
from JAX, eagerly or inside jax.jit.
"""
import jax
import jax.numpy as jnp
import numpy as np

from hvdlite.numpy.powersgd import HostPowerSGD
from hvdlite.jax.host_call import call_host, like


class PowerSGD(HostPowerSGD):
    """hvd.Compression.powersgd(...): PowerSGD for one hvdlite.jax or
    hvdlite.keras (JAX backend) optimizer; settings, supported ops and state
    are HostPowerSGD's (by gradient path)."""

    not_per_tensor = ("PowerSGD compresses a whole step's gradients and keeps state between steps: "
                      "pass it as DistributedOptimizer(..., compression=...) of hvdlite.jax or "
                      "hvdlite.keras, not to a single collective")

    def reduce(self, grads, names, name, op, prescale, postscale, process_set):
        """One step's gradients reduced over process_set, eagerly or inside jit.

        Args:
            grads (list[jax.Array]): the step's gradients.
            names (list[str]): each gradient's path, the key of its state.
            name, op, prescale, postscale, process_set: as for HostPowerSGD.reduce_arrays().

        Returns:
            list[jax.Array]: the reduced (approximated) gradients, shapes and dtypes kept.
        """
        if not grads:
            return []
        return call_host(self.step_function(names, name, op, prescale, postscale, process_set),
                         [like(g) for g in grads], *grads)

    def reduce_pass(self, grads, names, name, op, prescale, postscale, process_set, passes,
                    average_passes):
        """One of `passes` backward passes per step: its gradients are added to
        the step's; the last pass reduces their sum (their mean with
        average_passes), the others send nothing.

        Args:
            grads, names, name, op, prescale, postscale, process_set: as for reduce().
            passes (int): backward passes per step (>= 1).
            average_passes (bool): reduce the passes' mean instead of their sum.

        Returns:
            (list[jax.Array], jax.Array): the reduced gradients (zeros but on a step's last
                pass) and whether this pass was the last (a bool scalar).
        """
        if passes == 1:
            return self.reduce(grads, names, name, op, prescale, postscale, process_set), True
        if not grads:
            return [], jnp.bool_(False)

        def on_host(*arrays):
            arrays = [np.array(a) for a in arrays]
            step = self.add_pass(arrays, passes, average_passes)
            if step is None:
                return [np.zeros_like(a) for a in arrays] + [np.bool_(False)]
            return self.reduce_arrays(step, names, name, op, prescale, postscale,
                                      process_set) + [np.bool_(True)]

        shapes = [like(g) for g in grads] + [jax.ShapeDtypeStruct((), jnp.bool_)]
        out = call_host(on_host, shapes, *grads)
        return list(out[:-1]), out[-1]
