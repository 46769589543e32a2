"""hvd.DistributedOptimizer: Horovod's one entry point for two optimizers,
chosen by op. Adasum combines the ranks' parameter updates
(adasum_optimizer.py); every other op reduces gradients (optimizer.py).
A module of its own so that neither optimizer imports the other."""
import torch

from hvdlite.common.ops import ReduceOp, resolve_op
from hvdlite.common.powersgd import refuse_unconfigured
from hvdlite.common.process_sets import global_process_set
from hvdlite.torch.adasum_optimizer import AdasumOptimizer, _DistributedAdasumOptimizer
from hvdlite.torch.compression import Compression
from hvdlite.torch.optimizer import AveragingOptimizer, _DistributedOptimizer
from hvdlite.torch.powersgd import PowerSGD


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=ReduceOp.Average,
                         gradient_predivide_factor=1.0, num_groups=0, groups=None,
                         sparse_as_dense=False, process_set=global_process_set):
    """Wraps a torch.optim optimizer so that `step()` applies gradients averaged over the ranks.

    Horovod's `hvd.DistributedOptimizer`: each gradient's allreduce starts from its hook
    during backward, so communication overlaps the rest of backward; `step()` waits for them.

    Args:
        optimizer (torch.optim.Optimizer): any optimizer, LBFGS included.
        named_parameters (Iterable[tuple[str, torch.nn.Parameter]] | None):
            `model.named_parameters()`, to name each allreduce after its parameter.
        compression: `Compression.none`, `.fp16` or `.bf16`: the type on the wire; or
            `Compression.powersgd(rank=..., ...)`: low-rank approximations with error
            feedback (op Average or Sum; see docs/torch.md, "Low-rank compression").
        backward_passes_per_step (int): N backward passes accumulate locally (their sum)
            before one allreduce per gradient and one update.
        op (ReduceOp): `Average`, `Sum`, or `Adasum` (Horovod's Adasum optimizer).
        gradient_predivide_factor (float): divide by f before the sum and by size/f after.
        num_groups (int): split the parameters into this many grouped allreduces.
        groups (int | list[list[torch.nn.Parameter]] | None): the groups, or their number.
        sparse_as_dense (bool): allreduce sparse gradients densely instead of allgathering.
        process_set (ProcessSet): average over these ranks only.

    Returns:
        torch.optim.Optimizer: an instance of the optimizer's own class, sharing its parameter
        groups and state (`state_dict()`, LR schedulers and `isinstance` work as before).

    Raises:
        ValueError: `optimizer` is not a torch.optim.Optimizer, is already distributed, or
            an argument is out of range (e.g. backward_passes_per_step < 1).

    Example:
        ```python
        optimizer = hvd.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size()),
            named_parameters=model.named_parameters())
        ```
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(f"DistributedOptimizer wraps a torch.optim.Optimizer, got "
                         f"{type(optimizer).__name__}")
    if isinstance(optimizer, (_DistributedOptimizer, _DistributedAdasumOptimizer)):
        raise ValueError("this optimizer is already a DistributedOptimizer; wrap the plain one")
    refuse_unconfigured(compression)
    op = resolve_op(op)
    if op == ReduceOp.Adasum and isinstance(compression, PowerSGD):
        raise ValueError("PowerSGD compression does not combine with op=hvd.Adasum: Adasum "
                         "combines whole updates, not low-rank approximations; use "
                         "op=hvd.Average or hvd.Sum")
    if op == ReduceOp.Adasum:  # combines parameter updates, not gradients
        return AdasumOptimizer(optimizer, named_parameters, compression, backward_passes_per_step,
                               gradient_predivide_factor, process_set)
    return AveragingOptimizer(optimizer, named_parameters, compression, backward_passes_per_step,
                              op, gradient_predivide_factor, num_groups, groups, sparse_as_dense,
                              process_set)
