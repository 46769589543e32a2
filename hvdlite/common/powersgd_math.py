"""PowerSGD's math, written once for every binding over a small array
interface (ArrayOps): NumPy on the host (hvdlite/numpy/powersgd.py, which
hvdlite.jax, hvdlite.tensorflow and hvdlite.keras cross to) and torch on the
gradients' device (hvdlite/torch/powersgd.py). Each binding keeps only its
step's entry point (how gradients arrive and leave) and its ArrayOps.

Note [One PowerSGD over two array libraries]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
NumPy and torch share slicing, in-place operators on views, `@`, `.T`,
`.shape` and `.sum(axis=..., keepdims=...)`, so the algorithm is written
once with those. What differs goes through ArrayOps: the collectives (torch's
are in place and asynchronous, NumPy's return new arrays), random draws (each
library's own generator, so a seed gives the Q's it always gave, and torch's
match DDP's hook), where results are written (torch writes the approximation
into the gradient, as DDP does; NumPy returns new arrays and leaves the
gradients alone), devices and copies.
"""
from hvdlite.common.ops import ReduceOp
from hvdlite.common.powersgd import PowerSGDBase


class ArrayOps:
    """What PowerSGDMath needs from one array library; a binding subclasses
    it and defines every method (hvdlite/numpy/powersgd.py NumpyArrays,
    hvdlite/torch/powersgd.py TorchArrays):

    compressible(grad): True for 2 or more dimensions, not empty, a dtype
        the binding compresses.
    element_count(array): its number of elements.
    with_error(matrix, error): a new array matrix + error (on matrix's device).
    kept(matrix): matrix as the error memory may use it after approximate()
        ran (a copy where approximate() writes into matrix).
    approximate(p, q, matrix): P Q^T in matrix's dtype (torch: written into matrix).
    residual(kept, approximation, share): kept - share * approximation (may reuse kept).
    grouped_allreduce(arrays, name, op, prescale_factor, postscale_factor,
        process_set): the reduced arrays in order (collective; may reduce in place).
    broadcast_object(obj, root_rank, name, process_set): root_rank's obj (collective).
    generator(seed), standard_normal(generator, shape, like): the library's
        seeded draws, like's dtype, on the host.
    cast_like(array, like): array on like's device, of its dtype, writable
        without touching the state it came from.
    qr(matrix): an orthonormal basis of matrix's columns (torch: written into
        matrix), or None where the library has no QR for its dtype.
    column_norm(column, epsilon, tiny): max(|column| + epsilon, tiny).
    tiny(matrix): the smallest positive normal number of its dtype.
    copy(array): a copy sharing nothing; snapshot(array): what state_dict()
        gives (NumPy: a copy; torch: the tensor itself).
    to_host(array), zeros(shape, dtype), host_vector(values): host arrays
        (host_vector: float64).
    divided(total, count): total / count in total's dtype (may reuse total).
    """


def orthogonalize(arrays, matrix, epsilon):
    """The columns of an n x r matrix made orthonormal, in place, with DDP's
    choice of method: Gram-Schmidt for r <= 2 (and where the library has no
    QR, torch's half types), else QR, faster for more columns.

    Args:
        arrays (ArrayOps): matrix's library.
        matrix: n x r, overwritten.
        epsilon (float): added to column norms in Gram-Schmidt.

    Returns:
        the orthonormal matrix (matrix itself, or NumPy's QR's new array).
    """
    if matrix.shape[1] > 2:
        basis = arrays.qr(matrix)
        if basis is not None:
            return basis
    tiny = arrays.tiny(matrix)
    for i in range(matrix.shape[1]):
        column = matrix[:, i:i + 1]
        # A zero column (a gradient no rank used this step) stays zero, not NaN.
        column /= arrays.column_norm(column, epsilon, tiny)
        if i + 1 < matrix.shape[1]:
            rest = matrix[:, i + 1:]
            rest -= column * (column * rest).sum(axis=0, keepdims=True)
    return matrix


class PowerSGDMath(PowerSGDBase):
    """The algorithm and its state over `arrays` (an ArrayOps), for a
    binding's PowerSGD to derive from (Note [One PowerSGD over two array
    libraries]). Matrices are (gradient name, index, n x m matrix) triples."""

    arrays = None  # the binding's ArrayOps

    def _matrix_shape(self, grad):
        """(n, m) when grad is worth compressing (DDP's rule), else None."""
        if not self.arrays.compressible(grad):
            return None
        n = grad.shape[0]
        m = self.arrays.element_count(grad) // n
        return (n, m) if self.worth_compressing(n, m) else None

    def _reduce_matrices(self, matrices, name, options):
        """One step of the power iteration over every matrix (collective).

        Returns:
            list: (index, approximation) per matrix.
        """
        arrays = self.arrays
        inputs = []
        for key, _, m in matrices:
            if self.error_feedback:
                m = arrays.with_error(m, self.errors[key]) if key in self.errors else arrays.kept(m)
            inputs.append(m)
        qs = self._starting_qs(matrices)
        # A sum, not an average: P is orthogonalised next, which undoes any
        # scale (a predivide still guards half types against overflow).
        ps = arrays.grouped_allreduce([m @ q for m, q in zip(inputs, qs)], f"{name}.P",
                                      ReduceOp.Sum, options["prescale_factor"], 1.0,
                                      options["process_set"])
        ps = [orthogonalize(arrays, p, self.orthogonalization_epsilon) for p in ps]
        qs = arrays.grouped_allreduce([m.T @ p for m, p in zip(inputs, ps)], f"{name}.Q",
                                      options["op"], options["prescale_factor"],
                                      options["postscale_factor"], options["process_set"])
        # Sum approximates the sum of the ranks' gradients; each rank's error
        # is then its share of what was left out, so that the errors of all
        # ranks add up to it, as they do for Average. The error is of the
        # gradients themselves, not of their scaled reduction (hvdlite.keras
        # postscales by the passes it sums).
        share = 1.0 if options["op"] == ReduceOp.Average else 1.0 / options["process_set"].size()
        share /= options["prescale_factor"] * options["postscale_factor"]
        results = []
        for (key, index, m), kept, p, q in zip(matrices, inputs, ps, qs):
            approximation = arrays.approximate(p, q, m)
            if self.error_feedback:
                self.errors[key] = arrays.residual(kept, approximation, share)
            if self.warm_start:
                self.qs[key] = q
            results.append((index, approximation))
        return results

    def _starting_qs(self, matrices):
        """This step's orthonormal Q's: last step's (warm start), or new ones
        from a seeded normal distribution, drawn in gradient order from one
        seed per draw, the same on every rank, as DDP's hook draws them for a
        bucket."""
        arrays = self.arrays
        fresh = [(key, m) for key, _, m in matrices if key not in self.qs]
        if fresh:
            generator = arrays.generator(self._next_seed())
            for key, m in fresh:
                self.qs[key] = arrays.standard_normal(
                    generator, (m.shape[1], min(*m.shape, self.rank)), m)
        qs = [orthogonalize(arrays, arrays.cast_like(self.qs[key], m),
                            self.orthogonalization_epsilon)
              for key, _, m in matrices]
        if not self.warm_start:
            self.qs = {}
        return qs

    # --- state, for checkpoints and elastic jobs

    def state_dict(self):
        """The state: step count, seed draws, rank, error memory and Q's by
        gradient name (NumPy: copies; torch: the tensors themselves, as torch
        optimizers' state_dict() gives them; TorchState copies what it commits).

        Returns:
            dict: the state, for load_state_dict().
        """
        return {"iter": self.iter, "seed_draws": self._seed_draws, "rank": self.rank,
                "errors": {k: self.arrays.snapshot(v) for k, v in self.errors.items()},
                "qs": {k: self.arrays.snapshot(v) for k, v in self.qs.items()}}

    def load_state_dict(self, state):
        """Restores what state_dict() returned (copying its arrays; torch
        tensors may be on any device: they move to their gradient's when used).

        Args:
            state (dict): from state_dict(), of a PowerSGD of the same rank.

        Raises:
            ValueError: when its Q's have another rank's columns.
        """
        self._load_state(state, self.arrays.copy)

    def sync(self, root_rank, name, process_set):
        """Makes the state the same on every rank of process_set (collective;
        an elastic job calls it after ranks joined): root_rank's step count,
        seed draws and Q's (equal on the ranks that trained), and as every
        rank's error memory the mean over the ranks that hold one. Only the
        errors' sum over the ranks enters the next step (P and Q are linear in
        the gradients), so the mean keeps what compression left out, where
        copying root_rank's would add its local deviation.

        Args:
            root_rank (int): whose step count, seeds and Q's every rank takes.
            name (str): starts the names of the collectives.
            process_set (ProcessSet): the ranks that take part.
        """
        arrays = self.arrays
        state = self.state_dict()
        state["errors"] = {}
        state["qs"] = {k: arrays.to_host(v) for k, v in state["qs"].items()}
        shapes = {k: (tuple(v.shape), v.dtype) for k, v in self.errors.items()}
        shared = arrays.broadcast_object({"state": state, "shapes": shapes}, root_rank,
                                         f"{name}.state", process_set)
        names = sorted(shared["shapes"])
        # On the host: a rank that joins has no error memory, nor a device for it.
        errors = [arrays.to_host(self.errors[k]) if k in self.errors else arrays.zeros(*shape)
                  for k, shape in ((k, shared["shapes"][k]) for k in names)]
        held = arrays.host_vector([float(k in self.errors) for k in names])
        self.load_state_dict(shared["state"])
        if not names:
            return
        totals = arrays.grouped_allreduce(errors, f"{name}.errors", ReduceOp.Sum, 1.0, 1.0,
                                          process_set)
        (holders,) = arrays.grouped_allreduce([held], f"{name}.holders", ReduceOp.Sum, 1.0, 1.0,
                                              process_set)
        for k, total, count in zip(names, totals, holders.tolist()):
            self.errors[k] = arrays.divided(total, count)
