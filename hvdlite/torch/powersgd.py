"""PowerSGD: low-rank gradient compression with error feedback (Vogels et al.,
2019), as PyTorch DDP's powerSGD_hook runs it, for hvd.DistributedOptimizer.

    compression = hvd.Compression.powersgd(rank=4, start_iter=10)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)

Each step, every gradient worth compressing, seen as an n x m matrix M
(its first dimension by the rest), goes as two thin matrices instead:

    M += error                      (error feedback: what earlier steps left out)
    P = M Q                         Q: m x r, seeded normal at first, then last step's (warm start)
    allreduce P (sum); orthogonalise P
    Q = M^T P; allreduce Q (average)
    M ~ P Q^T;  error = M - P Q^T

so a rank sends (n + m) r numbers instead of n m. Gradients with one
dimension, or too small to gain min_compression_rate, are allreduced as
they are. All P's go in one grouped allreduce, all Q's in the next, and the
uncompressed gradients in a third beside the P's: two round trips per step,
however many parameters there are.

Unlike the casting compressors, PowerSGD needs a whole step's gradients and
keeps state between steps, so it is an object per optimizer (not a class
with static methods), and the optimizer hands it the step (reduce()) instead
of calling compress/decompress per tensor.
"""
import torch

from hvdlite.common.powersgd_math import ArrayOps, PowerSGDMath, orthogonalize
from hvdlite.numpy.objects import broadcast_object
from hvdlite.torch.collectives import grouped_allreduce_async_, synchronize

_NOT_PER_TENSOR = ("PowerSGD compresses a whole step's gradients and keeps state between steps: "
                   "pass it as DistributedOptimizer(..., compression=...) of hvdlite.torch, not "
                   "to a single collective")
_NO_QR = (torch.float16, torch.bfloat16)  # QR has no half kernels: Gram-Schmidt instead


class TorchArrays(ArrayOps):
    """PowerSGD's math on torch tensors, on the gradients' device: the
    approximation is written into the gradient, as DDP's hook writes it, and
    the collectives reduce in place. Nothing reads a value back from the
    device but sync()."""

    def compressible(self, grad):
        return grad.dim() >= 2 and grad.is_floating_point() and grad.numel() > 0

    def element_count(self, array):
        return array.numel()

    def with_error(self, matrix, error):
        return matrix + error.to(matrix.device)

    def kept(self, matrix):
        return matrix.clone()  # approximate() overwrites the gradient

    def approximate(self, p, q, matrix):
        return torch.matmul(p, q.t(), out=matrix)

    def residual(self, kept, approximation, share):
        return kept.sub_(approximation, alpha=share)

    def grouped_allreduce(self, arrays, name, op, prescale_factor, postscale_factor, process_set):
        return synchronize(grouped_allreduce_async_(
            arrays, name=name, op=op, prescale_factor=prescale_factor,
            postscale_factor=postscale_factor, process_set=process_set))

    def broadcast_object(self, obj, root_rank, name, process_set):
        return broadcast_object(obj, root_rank, name=name, process_set=process_set)

    def generator(self, seed):
        return torch.Generator().manual_seed(seed)

    def standard_normal(self, generator, shape, like):
        return torch.randn(*shape, generator=generator, dtype=like.dtype)

    def cast_like(self, array, like):
        return array.to(device=like.device, dtype=like.dtype)

    def qr(self, matrix):
        return None if matrix.dtype in _NO_QR else matrix.copy_(torch.linalg.qr(matrix).Q)

    def column_norm(self, column, epsilon, tiny):
        # On the device: no value is read back.
        return (torch.linalg.vector_norm(column) + epsilon).clamp_min(tiny)

    def tiny(self, matrix):
        return torch.finfo(matrix.dtype).tiny

    def copy(self, array):
        return array.clone()

    def snapshot(self, array):
        return array

    def to_host(self, array):
        return array.cpu()

    def zeros(self, shape, dtype):
        return torch.zeros(shape, dtype=dtype)

    def host_vector(self, values):
        return torch.tensor(values, dtype=torch.float64)

    def divided(self, total, count):
        return total.div_(count)


class PowerSGD(PowerSGDMath):
    """hvd.Compression.powersgd(...): PowerSGD for one DistributedOptimizer.

    rank: columns of P and Q (DDP's matrix_approximation_rank); lower sends less.
    start_iter: steps of plain allreduce before compressing (DDP's start_powerSGD_iter).
    min_compression_rate: compress an n x m gradient only if n m > rate (n + m) rank.
    error_feedback: add what compression left out to the next step's gradient.
    warm_start: start each step's power iteration from the last step's Q.
    orthogonalization_epsilon: added to column norms in Gram-Schmidt.
    seed: the seed of the first Q's (the same on every rank, as it must be).

    Supports op=hvd.Average (gradient_predivide_factor included) and hvd.Sum.
    Its state (the step count, Q's and the error memory, by parameter name)
    is part of the optimizer's state_dict(), so elastic TorchState commits and
    restores it. Settings and shared rules: hvdlite/common/powersgd.py; the
    math: hvdlite/common/powersgd_math.py, over TorchArrays.
    """

    not_per_tensor = _NOT_PER_TENSOR
    arrays = TorchArrays()

    # --- used by DistributedOptimizer

    def compressing(self):
        """True once the warm-up steps of plain allreduce are over."""
        return self.iter >= self.start_iter

    def end_step(self):
        self.iter += 1

    def reduce(self, names, grads, name, op, prescale, postscale, process_set):
        """Reduces one step's gradients over process_set in place: grads[i]
        belongs to the parameter called names[i], and the collectives are
        named after `name`. op is Average or Sum (check_op); prescale and
        postscale apply to the uncompressed gradients and to the Q's."""
        options = dict(op=op, prescale_factor=prescale, postscale_factor=postscale,
                       process_set=process_set)
        shapes = [self._matrix_shape(g) for g in grads]
        plain = [g for g, shape in zip(grads, shapes) if shape is None]
        matrices = [(k, i, g.view(shape))
                    for i, (k, g, shape) in enumerate(zip(names, grads, shapes)) if shape is not None]
        plain_handle = (grouped_allreduce_async_(plain, name=f"{name}.uncompressed", **options)
                        if plain else None)
        if matrices:
            self._reduce_matrices(matrices, name, options)
        if plain_handle is not None:
            synchronize(plain_handle)



def _orthogonalize(matrix, epsilon):
    """Orthonormalises the columns of an n x r tensor in place (hvdlite.common.powersgd_math)."""
    orthogonalize(PowerSGD.arrays, matrix, epsilon)
