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

from hvdlite.common.powersgd_math import ArrayOps, PowerSGDMath
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


class NumpyArrays(ArrayOps):
    """PowerSGD's math on NumPy arrays: new arrays out, the gradients left as they are."""

    def compressible(self, grad):
        return grad.ndim >= 2 and grad.dtype in _COMPRESSED_DTYPES and grad.size > 0

    def element_count(self, array):
        return array.size

    def with_error(self, matrix, error):
        return matrix + error

    def kept(self, matrix):
        return matrix  # approximate() writes a new array

    def approximate(self, p, q, matrix):
        return (p @ q.T).astype(matrix.dtype)

    def residual(self, kept, approximation, share):
        return kept - share * approximation

    def grouped_allreduce(self, arrays, name, op, prescale_factor, postscale_factor, process_set):
        return grouped_allreduce(arrays, name=name, op=op, prescale_factor=prescale_factor,
                                 postscale_factor=postscale_factor, process_set=process_set)

    def broadcast_object(self, obj, root_rank, name, process_set):
        return broadcast_object(obj, root_rank, name=name, process_set=process_set)

    def generator(self, seed):
        return np.random.default_rng(seed)

    def standard_normal(self, generator, shape, like):
        return generator.standard_normal(shape).astype(like.dtype)

    def cast_like(self, array, like):
        return array.astype(like.dtype)  # a copy: orthogonalize() writes into it

    def qr(self, matrix):
        return np.linalg.qr(matrix)[0].astype(matrix.dtype)

    def column_norm(self, column, epsilon, tiny):
        return max(float(np.linalg.norm(column)) + epsilon, tiny)

    def tiny(self, matrix):
        return np.finfo(matrix.dtype).tiny

    def copy(self, array):
        return np.array(array, copy=True)

    def snapshot(self, array):
        return array.copy()

    def to_host(self, array):
        return array

    def zeros(self, shape, dtype):
        return np.zeros(shape, np.dtype(dtype))

    def host_vector(self, values):
        return np.array(values, dtype=np.float64)

    def divided(self, total, count):
        return (total / count).astype(total.dtype)


class HostPowerSGD(PowerSGDMath):
    """PowerSGD on NumPy arrays; a binding's subclass crosses to it.

    Settings (rank, start_iter, min_compression_rate, error_feedback,
    warm_start, orthogonalization_epsilon, seed) and their checks are
    hvdlite.common.powersgd.PowerSGDBase's, the math
    hvdlite.common.powersgd_math's. Supports op=hvd.Average
    (gradient_predivide_factor included) and hvd.Sum. Only float32 and float64
    gradients are compressed; others are allreduced as they are. Its state
    (step count, Q's and error memory, by gradient name) is `state_dict()` /
    `load_state_dict()` on the host (Note [PowerSGD on the host]).
    """

    arrays = NumpyArrays()
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
