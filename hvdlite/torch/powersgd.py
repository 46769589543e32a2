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

from hvdlite.common.ops import ReduceOp
from hvdlite.common.powersgd import PowerSGDBase
from hvdlite.numpy.objects import broadcast_object
from hvdlite.torch.async_ops import grouped_allreduce_async_, synchronize

_NOT_PER_TENSOR = ("PowerSGD compresses a whole step's gradients and keeps state between steps: "
                   "pass it as DistributedOptimizer(..., compression=...) of hvdlite.torch, not "
                   "to a single collective")


class PowerSGD(PowerSGDBase):
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
    restores it. Settings and shared rules: hvdlite/common/powersgd.py.
    """

    not_per_tensor = _NOT_PER_TENSOR

    # --- used by DistributedOptimizer

    def compressing(self):
        """True once the warm-up steps of plain allreduce are over."""
        return self.iter >= self.start_iter

    def end_step(self):
        self.iter += 1

    def _matrix_shape(self, grad):
        """(n, m) when grad is worth compressing (DDP's rule), else None."""
        if grad.dim() < 2 or not grad.is_floating_point() or grad.numel() == 0:
            return None
        n, m = grad.shape[0], grad.numel() // grad.shape[0]
        return (n, m) if self.worth_compressing(n, m) else None

    def reduce(self, names, grads, name, op, prescale, postscale, process_set):
        """Reduces one step's gradients over process_set in place: grads[i]
        belongs to the parameter called names[i], and the collectives are
        named after `name`. op is Average or Sum (check_op); prescale and
        postscale apply to the uncompressed gradients and to the Q's."""
        options = dict(op=op, prescale_factor=prescale, postscale_factor=postscale,
                       process_set=process_set)
        shapes = [self._matrix_shape(g) for g in grads]
        plain = [g for g, shape in zip(grads, shapes) if shape is None]
        matrices = [(k, g.view(shape)) for k, g, shape in zip(names, grads, shapes)
                    if shape is not None]
        plain_handle = (grouped_allreduce_async_(plain, name=f"{name}.uncompressed", **options)
                        if plain else None)
        if matrices:
            self._reduce_matrices(matrices, name, options)
        if plain_handle is not None:
            synchronize(plain_handle)

    def _reduce_matrices(self, matrices, name, options):
        if self.error_feedback:
            for key, m in matrices:
                if key in self.errors:
                    m.add_(self.errors[key].to(m.device))
        # M changes to P Q^T in place below; the error needs M itself.
        inputs = [m.clone() for _, m in matrices] if self.error_feedback else None
        qs = self._starting_qs(matrices)
        ps = [m @ q for (_, m), q in zip(matrices, qs)]
        # A sum, not an average: P is orthogonalised next, which undoes any
        # scale (a predivide still guards half types against overflow).
        synchronize(grouped_allreduce_async_(
            ps, name=f"{name}.P", op=ReduceOp.Sum, prescale_factor=options["prescale_factor"],
            process_set=options["process_set"]))
        for p in ps:
            _orthogonalize(p, self.orthogonalization_epsilon)
        for (_, m), p, q in zip(matrices, ps, qs):
            torch.matmul(m.t(), p, out=q)
        synchronize(grouped_allreduce_async_(qs, name=f"{name}.Q", **options))
        # Sum approximates the sum of the ranks' gradients; each rank's error
        # is then its share of what was left out, so that the errors of all
        # ranks add up to it, as they do for Average. The error is of the
        # gradients themselves, not of their scaled reduction (hvdlite.keras
        # postscales by the passes it sums).
        share = 1.0 if options["op"] == ReduceOp.Average else 1.0 / options["process_set"].size()
        share /= options["prescale_factor"] * options["postscale_factor"]
        for index, ((key, m), p, q) in enumerate(zip(matrices, ps, qs)):
            torch.matmul(p, q.t(), out=m)
            if self.error_feedback:
                self.errors[key] = inputs[index].sub_(m, alpha=share)
            if self.warm_start:
                self.qs[key] = q

    def _starting_qs(self, matrices):
        """This step's orthonormal Q's: last step's (warm start), or new ones
        from a seeded normal distribution, drawn in parameter order from one
        seed per draw, as DDP's hook draws them for a bucket."""
        fresh = [(key, m) for key, m in matrices if key not in self.qs]
        if fresh:
            generator = torch.Generator().manual_seed(self._next_seed())
            for key, m in fresh:
                self.qs[key] = torch.randn(m.shape[1], min(*m.shape, self.rank),
                                           generator=generator, dtype=m.dtype)
        qs = [self.qs[key].to(m.device) for key, m in matrices]
        for q in qs:
            _orthogonalize(q, self.orthogonalization_epsilon)
        if not self.warm_start:
            self.qs = {}
        return qs

    # --- state: committed and restored with the optimizer's

    def state_dict(self):
        """The state's tensors themselves, not copies, as torch optimizers'
        state_dict() gives them (TorchState copies what it commits)."""
        return {"iter": self.iter, "seed_draws": self._seed_draws, "rank": self.rank,
                "errors": dict(self.errors), "qs": dict(self.qs)}

    def load_state_dict(self, state):
        """Tensors may be on any device: they move to their gradient's when used."""
        self._load_state(state, lambda v: v.clone())

    def sync(self, root_rank, name, process_set):
        """Makes the state the same on every rank of process_set (collective;
        after an elastic reset, when new ranks join): root_rank's step count,
        seed draws and Q's (equal on the ranks that trained), and as every
        rank's error memory the average over the ranks that have one.
        Only the errors' sum over the ranks enters the next step (P and Q are
        linear in the gradients), so averaging keeps what compression left
        out, where copying root_rank's would add its local deviation."""
        state = self.state_dict()
        state["errors"] = {}
        state["qs"] = {k: v.cpu() for k, v in state["qs"].items()}
        shapes = {k: (tuple(v.shape), v.dtype) for k, v in self.errors.items()}
        shared = broadcast_object({"state": state, "shapes": shapes}, root_rank,
                                  name=f"{name}.state", process_set=process_set)
        names = sorted(shared["shapes"])
        # On the CPU: a rank that joins has no error memory, nor a device for it.
        errors = [self.errors[k].cpu() if k in self.errors else torch.zeros(shape, dtype=dtype)
                  for k, (shape, dtype) in ((k, shared["shapes"][k]) for k in names)]
        held = torch.tensor([float(k in self.errors) for k in names], dtype=torch.float64)
        self.load_state_dict(shared["state"])
        if not names:
            return
        errors_handle = grouped_allreduce_async_(errors, name=f"{name}.errors", op=ReduceOp.Sum,
                                                 process_set=process_set)
        held_handle = grouped_allreduce_async_([held], name=f"{name}.holders", op=ReduceOp.Sum,
                                               process_set=process_set)
        totals = synchronize(errors_handle)
        (holders,) = synchronize(held_handle)
        for k, total, count in zip(names, totals, holders.tolist()):
            self.errors[k] = total.div_(count)


def _orthogonalize(matrix, epsilon):
    """Orthonormalises the columns of an n x r matrix in place, with DDP's
    choice of method: Gram-Schmidt for r <= 2 or half types (QR has no half
    kernels), else QR, faster for more columns."""
    if matrix.shape[1] <= 2 or matrix.dtype in (torch.float16, torch.bfloat16):
        _gram_schmidt(matrix, epsilon)
    else:
        matrix.copy_(torch.linalg.qr(matrix).Q)


def _gram_schmidt(matrix, epsilon):
    # A zero column (a gradient that is all zeros: a parameter no rank used
    # this step) stays zero instead of becoming NaN, without reading the norm
    # back from the device.
    tiny = torch.finfo(matrix.dtype).tiny
    for i in range(matrix.shape[1]):
        column = matrix[:, i:i + 1]
        column.div_((torch.linalg.vector_norm(column) + epsilon).clamp_min(tiny))
        if i + 1 < matrix.shape[1]:
            rest = matrix[:, i + 1:]
            rest.sub_(column * (column * rest).sum(dim=0, keepdim=True))
