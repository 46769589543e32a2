"""PowerSGD in NumPy on the host: low-rank gradient compression with error
feedback (Vogels et al., 2019), the algorithm of hvdlite.torch's
Compression.powersgd and PyTorch DDP's powerSGD_hook, for the bindings whose
gradients live in a compiled graph (hvdlite.jax, hvdlite.tensorflow and so
hvdlite.keras on those backends). Each binding adds its crossing to the
host; what crosses is one step's gradients as NumPy arrays.

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
A step's gradients cross to the host in one call (jax: an ordered
io_callback inside jit, Note [Host callback] in hvdlite/jax/collectives.py;
TensorFlow: a stateful tf.numpy_function inside tf.function; either called
directly when eager), where this runs in NumPy with hvdlite.numpy's
collectives. The state between steps (the step count, each gradient's Q and
error memory) is this object's, on the host, as torch's is its optimizer's:
inside a compiled step it could only live in the framework's variables, and
then the warm-up (plain allreduce for start_iter steps) would need a
conditional around collectives, which every rank must run in the same order.
The price is the crossing (0.5-3 ms a step on CPU, docs/jax.md) and the
matrix products on the host's CPU.

Note [One BLAS thread on the host]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The matrix products run with one BLAS thread. They are thin (n x m times
m x rank), so more threads gain little, and they run while the framework's
own thread pool is parked and other ranks share the cores. OpenBLAS, which
NumPy's wheels bring, keeps its worker threads spinning for a while after
each product. With its default of one thread per core, that spinning fought
TensorFlow's and XLA's threads and the other rank: on 2 ranks on 2 cores, a
Keras step's host part took 63 ms, and 4 ms with one thread
(examples/keras/synthetic_benchmark.py --compression powersgd, JAX backend;
1,780 -> 13,400 samples/s). threadpoolctl sets the limit around each step and
puts the user's setting back after it.
"""
import numpy as np
from threadpoolctl import ThreadpoolController

from hvdlite.common.ops import ReduceOp
from hvdlite.common.powersgd import PowerSGDBase
from hvdlite.numpy.collectives import grouped_allreduce
from hvdlite.numpy.objects import broadcast_object

_COMPRESSED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_blas = None  # a ThreadpoolController, made on first use (it looks for the loaded libraries)


def _one_blas_thread():
    """A context with NumPy's BLAS on one thread (Note [One BLAS thread on the host])."""
    global _blas
    if _blas is None:
        _blas = ThreadpoolController()
    return _blas.limit(limits=1, user_api="blas")


class HostPowerSGD(PowerSGDBase):
    """PowerSGD on NumPy arrays; a binding's subclass crosses to it.

    Settings (rank, start_iter, min_compression_rate, error_feedback,
    warm_start, orthogonalization_epsilon, seed) and their checks are
    hvdlite.common.powersgd.PowerSGDBase's. Supports op=hvd.Average
    (gradient_predivide_factor included) and hvd.Sum. Only float32 and float64
    gradients are compressed; others are allreduced as they are. Its state
    (step count, Q's and error memory, by gradient name) is `state_dict()` /
    `load_state_dict()` on the host (Note [PowerSGD on the host]).
    """

    def _reset_state(self):
        super()._reset_state()
        self._accumulated, self._passes = None, 0  # this step's passes so far (add_pass)

    def reduce_arrays(self, grads, names, name, op, prescale, postscale, process_set):
        """One step's gradients reduced over process_set (collective).

        Args:
            grads (list[np.ndarray]): the step's gradients (not changed).
            names (list[str]): each gradient's name, the key of its state.
            name (str): starts the names of the step's collectives.
            op (ReduceOp): Average or Sum (check_op).
            prescale (float): scales the inputs of the uncompressed gradients, P's and Q's.
            postscale (float): scales the reduced uncompressed gradients and Q's.
            process_set (ProcessSet): the ranks that take part.

        Returns:
            list[np.ndarray]: the reduced (approximated) gradients, shapes and dtypes kept.
        """
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
            with _one_blas_thread():
                reduced = self._reduce_matrices(matrices, name, options)
            for i, approximation in reduced:
                out[i] = approximation.reshape(grads[i].shape)
        return out

    def step_function(self, names, name, op, prescale, postscale, process_set):
        """reduce_arrays() for these settings, as a function of the step's
        arrays only: what a binding's crossing to the host calls.

        Args:
            names, name, op, prescale, postscale, process_set: as for reduce_arrays().

        Returns:
            Callable: `f(*arrays) -> list[np.ndarray]`.
        """
        def reduce_step(*arrays):
            return self.reduce_arrays([np.array(a) for a in arrays], names, name, op, prescale,
                                      postscale, process_set)
        return reduce_step

    def add_pass(self, grads, passes, average_passes):
        """Adds one of `passes` backward passes to the step's gradients.

        Args:
            grads (list[np.ndarray]): this pass's gradients.
            passes (int): backward passes per step (>= 1).
            average_passes (bool): the step's gradients are the passes' mean, not their sum.

        Returns:
            list[np.ndarray] | None: the step's gradients after its last pass, else None.
        """
        if self._accumulated is None:
            self._accumulated = list(grads)
        else:
            self._accumulated = [a + b for a, b in zip(self._accumulated, grads)]
        self._passes += 1
        if self._passes < passes:
            return None
        step = self._accumulated
        if average_passes:
            step = [(a / passes).astype(a.dtype) for a in step]
        self._accumulated, self._passes = None, 0
        return step

    def _matrix_shape(self, grad):
        """(n, m) when grad is worth compressing (DDP's rule), else None."""
        if grad.ndim < 2 or grad.dtype not in _COMPRESSED_DTYPES or grad.size == 0:
            return None
        n, m = grad.shape[0], grad.size // grad.shape[0]
        return (n, m) if self.worth_compressing(n, m) else None

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
        # The error is of the gradients themselves, not of their scaled
        # reduction (hvdlite.keras postscales by the passes it sums).
        share = 1.0 if options["op"] == ReduceOp.Average else 1.0 / options["process_set"].size()
        share /= options["prescale_factor"] * options["postscale_factor"]
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

    # --- state, for checkpoints and elastic jobs

    def state_dict(self):
        """The state on the host: step count, seed draws, rank, error memory and Q's.

        Returns:
            dict: copies of the NumPy arrays, by gradient name.
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

    def sync(self, root_rank, name, process_set):
        """Makes the state the same on every rank of process_set (collective;
        an elastic job calls it after ranks joined): root_rank's step count,
        seed draws and Q's (equal on the ranks that trained), and as every
        rank's error memory the mean over the ranks that hold one. Only the
        errors' sum over the ranks enters the next step (P and Q are linear in
        the gradients), so the mean keeps what compression left out, where
        copying root_rank's would add its local deviation. As
        hvdlite.torch's PowerSGD.sync.

        Args:
            root_rank (int): whose step count, seeds and Q's every rank takes.
            name (str): starts the names of the collectives.
            process_set (ProcessSet): the ranks that take part.
        """
        state = self.state_dict()
        state["errors"] = {}
        shapes = {k: (v.shape, v.dtype.str) for k, v in self.errors.items()}
        shared = broadcast_object({"state": state, "shapes": shapes}, root_rank,
                                  name=f"{name}.state", process_set=process_set)
        names = sorted(shared["shapes"])
        errors = [self.errors[k] if k in self.errors else np.zeros(shape, np.dtype(dtype))
                  for k, (shape, dtype) in ((k, shared["shapes"][k]) for k in names)]
        held = np.array([float(k in self.errors) for k in names])
        self.load_state_dict(shared["state"])
        if not names:
            return
        totals = grouped_allreduce(errors, name=f"{name}.errors", op=ReduceOp.Sum,
                                   process_set=process_set)
        (holders,) = grouped_allreduce([held], name=f"{name}.holders", op=ReduceOp.Sum,
                                       process_set=process_set)
        for k, total, count in zip(names, totals, holders):
            self.errors[k] = (total / count).astype(total.dtype)


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
