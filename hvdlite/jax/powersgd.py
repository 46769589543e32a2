"""PowerSGD for hvdlite.jax's DistributedOptimizer: low-rank gradient
compression with error feedback (Vogels et al., 2019), the algorithm of
hvdlite.torch's Compression.powersgd and PyTorch DDP's powerSGD_hook.

    tx = hvd.DistributedOptimizer(optax.sgd(0.1),
                                  compression=hvd.Compression.powersgd(rank=4, start_iter=10))

Each step, every float32 or float64 gradient worth compressing, seen as an
n x m matrix M (its first dimension by the rest), goes as two thin matrices:

    M += error                      (what earlier steps left out)
    P = M Q                         Q: m x r, seeded normal at first, then last step's
    allreduce P (sum); orthogonalise P
    Q = M^T P; allreduce Q (the optimizer's op)
    M ~ P Q^T;  error = M - P Q^T

Other gradients are allreduced as they are, beside the P's.

Note [PowerSGD on the host]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
A step's gradients cross to the host in one call (an ordered io_callback
inside jax.jit, Note [Host callback] in collectives.py; a direct call
eagerly), where this runs in NumPy with hvdlite.numpy's collectives. The
state between steps (the step count, each gradient's Q and error memory) is
this object's, on the host, as torch's is its optimizer's: inside jit it
could only live in optax's state, and then the warm-up (plain allreduce for
start_iter steps) would need lax.cond around collectives, which every rank
must run in the same order. The price is the crossing (0.5-3 ms a step on
CPU, docs/jax.md) and the matrix products on the host's CPU.
"""
import jax
import jax.numpy as jnp
import numpy as np

from hvdlite.common.ops import ReduceOp
from hvdlite.common.powersgd import PowerSGDBase
from hvdlite.jax.host_call import call_host, like
from hvdlite.numpy import grouped_allreduce

_COMPRESSED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class PowerSGD(PowerSGDBase):
    """hvd.Compression.powersgd(...): PowerSGD for one hvdlite.jax DistributedOptimizer.

    Settings (rank, start_iter, min_compression_rate, error_feedback,
    warm_start, orthogonalization_epsilon, seed) and their checks are
    hvdlite.common.powersgd.PowerSGDBase's. Supports op=hvd.Average (gradient_predivide_factor included) and hvd.Sum.
    Only float32 and float64 gradients are compressed; others are allreduced
    as they are. Its state (step count, Q's and error memory, by gradient
    path) is `state_dict()` / `load_state_dict()` on the host
    (Note [PowerSGD on the host]).
    """

    not_per_tensor = ("PowerSGD compresses a whole step's gradients and keeps state between steps: "
                      "pass it as DistributedOptimizer(..., compression=...) of hvdlite.jax, not "
                      "to a single collective")
    _bound = False  # taken by a DistributedOptimizer (bind())

    def _reset_state(self):
        super()._reset_state()
        self._accumulated, self._passes = None, 0  # this step's passes so far (reduce_pass)

    def bind(self):
        """Ties this state to the one DistributedOptimizer being made: two sharing
        it would mix their error memories. (An optax transformation is a tuple,
        so the optimizer itself cannot be remembered; each call makes a new one.)

        Raises:
            ValueError: when an earlier DistributedOptimizer call took it.
        """
        if self._bound:
            raise ValueError("this PowerSGD compression already belongs to another "
                             "DistributedOptimizer; create one hvd.Compression.powersgd(...) "
                             "per optimizer")
        self._bound = True

    def reduce(self, grads, names, name, op, prescale, postscale, process_set):
        """One step's gradients reduced over process_set, eagerly or inside jit.

        Args:
            grads (list[jax.Array]): the step's gradients.
            names (list[str]): each gradient's path, the key of its state.
            name (str): starts the names of the step's collectives.
            op (ReduceOp): Average or Sum (check_op).
            prescale (float): scales the inputs of the uncompressed gradients, P's and Q's.
            postscale (float): scales the reduced uncompressed gradients and Q's.
            process_set (ProcessSet): the ranks that take part.

        Returns:
            list[jax.Array]: the reduced (approximated) gradients, shapes and dtypes kept.
        """
        if not grads:
            return []

        def on_host(*arrays):
            return self._reduce_on_host([np.array(a) for a in arrays], names, name, op, prescale,
                                        postscale, process_set)

        return call_host(on_host, [like(g) for g in grads], *grads)

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
            if self._accumulated is None:
                self._accumulated = arrays
            else:
                self._accumulated = [a + b for a, b in zip(self._accumulated, arrays)]
            self._passes += 1
            if self._passes < passes:
                return [np.zeros_like(a) for a in arrays] + [np.bool_(False)]
            step = self._accumulated
            if average_passes:
                step = [(a / passes).astype(a.dtype) for a in step]
            self._accumulated, self._passes = None, 0
            return self._reduce_on_host(step, names, name, op, prescale, postscale,
                                        process_set) + [np.bool_(True)]

        shapes = [like(g) for g in grads] + [jax.ShapeDtypeStruct((), jnp.bool_)]
        out = call_host(on_host, shapes, *grads)
        return list(out[:-1]), out[-1]

    def _matrix_shape(self, grad):
        """(n, m) when grad is worth compressing (DDP's rule), else None."""
        if grad.ndim < 2 or grad.dtype not in _COMPRESSED_DTYPES or grad.size == 0:
            return None
        n, m = grad.shape[0], grad.size // grad.shape[0]
        return (n, m) if self.worth_compressing(n, m) else None

    def _reduce_on_host(self, grads, names, name, op, prescale, postscale, process_set):
        options = dict(op=op, prescale_factor=prescale, postscale_factor=postscale,
                       process_set=process_set)
        compressing = self.iter >= self.start_iter
        self.iter += 1
        shapes = [self._matrix_shape(g) if compressing else None for g in grads]
        plain = [i for i, shape in enumerate(shapes) if shape is None]
        out = list(grads)
        if plain:
            reduced = grouped_allreduce([grads[i] for i in plain], name=f"{name}.uncompressed",
                                        **options)
            for i, r in zip(plain, reduced):
                out[i] = r
        matrices = [(names[i], i, grads[i].reshape(shape)) for i, shape in enumerate(shapes)
                    if shape is not None]
        if matrices:
            for i, approximation in self._reduce_matrices(matrices, name, options):
                out[i] = approximation.reshape(grads[i].shape)
        return out

    def _reduce_matrices(self, matrices, name, options):
        inputs = []
        for key, _, m in matrices:
            if self.error_feedback and key in self.errors:
                m = m + self.errors[key]
            inputs.append(m)
        qs = self._starting_qs(matrices)
        ps = [m @ q for m, q in zip(inputs, qs)]
        # A sum, not an average: P is orthogonalised next, which undoes any scale.
        ps = grouped_allreduce(ps, name=f"{name}.P", op=ReduceOp.Sum,
                               prescale_factor=options["prescale_factor"],
                               process_set=options["process_set"])
        ps = [_orthogonalize(p, self.orthogonalization_epsilon) for p in ps]
        qs = grouped_allreduce([m.T @ p for m, p in zip(inputs, ps)], name=f"{name}.Q", **options)
        # Sum approximates the sum of the ranks' gradients; each rank's error
        # is its share of what was left out, so the ranks' errors add up to it.
        share = 1.0 if options["op"] == ReduceOp.Average else 1.0 / options["process_set"].size()
        results = []
        for (key, index, _), m, p, q in zip(matrices, inputs, ps, qs):
            approximation = p @ q.T
            if self.error_feedback:
                self.errors[key] = m - share * approximation
            if self.warm_start:
                self.qs[key] = q
            results.append((index, approximation.astype(m.dtype)))
        return results

    def _starting_qs(self, matrices):
        """This step's orthonormal Q's: last step's (warm start), or new ones
        from a seeded normal distribution, one seed per batch of new Q's drawn
        in gradient order, the same on every rank."""
        fresh = [(key, m) for key, _, m in matrices if key not in self.qs]
        if fresh:
            generator = np.random.default_rng(self._next_seed())
            for key, m in fresh:
                self.qs[key] = generator.standard_normal(
                    (m.shape[1], min(*m.shape, self.rank))).astype(m.dtype)
        qs = [_orthogonalize(self.qs[key].astype(m.dtype), self.orthogonalization_epsilon)
              for key, _, m in matrices]
        if not self.warm_start:
            self.qs = {}
        return qs

    # --- state, for checkpoints

    def state_dict(self):
        """The state on the host: step count, seed draws, rank, error memory and Q's.

        Returns:
            dict: copies of the NumPy arrays, by gradient path.
        """
        return {"iter": self.iter, "seed_draws": self._seed_draws, "rank": self.rank,
                "errors": {k: v.copy() for k, v in self.errors.items()},
                "qs": {k: v.copy() for k, v in self.qs.items()}}

    def load_state_dict(self, state):
        """Restores what state_dict() returned.

        Args:
            state (dict): from state_dict(), of a PowerSGD of the same rank.

        Raises:
            ValueError: when its Q's have another rank's columns.
        """
        self._load_state(state, np.array)


def _orthogonalize(matrix, epsilon):
    """The columns of an n x r matrix made orthonormal (a new array): Gram-Schmidt
    for r <= 2, as DDP's hook does, else QR."""
    if matrix.shape[1] > 2:
        return np.linalg.qr(matrix)[0].astype(matrix.dtype)
    out = np.array(matrix, copy=True)
    tiny = np.finfo(out.dtype).tiny
    for i in range(out.shape[1]):
        column = out[:, i:i + 1]
        column /= max(float(np.linalg.norm(column)) + epsilon, tiny)  # a zero column stays zero
        if i + 1 < out.shape[1]:
            out[:, i + 1:] -= column * (column * out[:, i + 1:]).sum(axis=0, keepdims=True)
    return out
