"""hvd.DistributedOptimizer: Horovod's one entry point for three optimizers,
chosen by op and sharding_stage. Adasum combines the ranks' parameter updates
(adasum_optimizer.py); every other op reduces gradients, by allreduce
(optimizer.py) or, sharded, by reducescatter (sharded_optimizer.py).
A module of its own so that no optimizer imports another it need not."""
import torch

from hvdlite.common.ops import ReduceOp, resolve_op
from hvdlite.common.powersgd import refuse_unconfigured
from hvdlite.common.process_sets import global_process_set
from hvdlite.common.sharding import check_stage, refuse_unshardable
from hvdlite.torch.adasum_optimizer import AdasumOptimizer, _DistributedAdasumOptimizer
from hvdlite.torch.compression import Compression
from hvdlite.torch.optimizer import AveragingOptimizer, _DistributedOptimizer, check_arguments
from hvdlite.torch.powersgd import PowerSGD
from hvdlite.torch.sharded_optimizer import ShardedOptimizer


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=ReduceOp.Average,
                         gradient_predivide_factor=1.0, num_groups=0, groups=None,
                         sparse_as_dense=False, process_set=global_process_set,
                         sharding_stage=0):
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
        sharding_stage (int): 0 (default): every rank holds the whole optimizer state.
            1: each rank keeps the optimizer state of its rows of each parameter only
            (1/N of it): gradients are reduce-scattered, each rank updates its rows, and
            step() allgathers the parameters. 2: as 1, and each full gradient is freed once
            its reducescatter is done, so a rank holds only its reduced rows. The wrapped
            optimizer must update each element on its own (SGD, Adam, AdamW, ...); see
            docs/torch.md, "Sharded optimizer state".

    Returns:
        torch.optim.Optimizer: an instance of the optimizer's own class, sharing its parameter
        groups and state (`state_dict()`, LR schedulers and `isinstance` work as before).

    Raises:
        ValueError: `optimizer` is not a torch.optim.Optimizer, is already distributed, or
            an argument is out of range (e.g. backward_passes_per_step < 1); with
            sharding_stage > 0: an optimizer that is not elementwise (LBFGS, LAMB-like),
            Adasum, PowerSGD, or parameters that differ across ranks.

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
    sharding_stage = check_stage(sharding_stage)
    if sharding_stage:
        return _sharded(optimizer, named_parameters, compression, backward_passes_per_step, op,
                        gradient_predivide_factor, num_groups, groups, sparse_as_dense,
                        process_set, sharding_stage)
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


def _sharded(optimizer, named_parameters, compression, backward_passes_per_step, op,
             gradient_predivide_factor, num_groups, groups, sparse_as_dense, process_set, stage):
    """DistributedOptimizer with sharding_stage 1 or 2, after the checks that
    only sharding makes."""
    where = f"hvdlite.torch.DistributedOptimizer(sharding_stage={stage})"
    refuse_unshardable(optimizer, where)
    if op == ReduceOp.Adasum:
        raise ValueError(f"{where}: op=hvd.Adasum combines whole parameter updates, which no "
                         "rank has when each updates its rows; use op=hvd.Average or hvd.Sum")
    if isinstance(compression, PowerSGD):
        raise ValueError(f"{where}: PowerSGD compression allreduces low-rank factors of whole "
                         "gradient matrices, and a reduce-scatter of rows does not compose with "
                         "it; use Compression.none, .fp16 or .bf16, or sharding_stage=0")
    groups = check_arguments(op, gradient_predivide_factor, backward_passes_per_step, num_groups,
                             groups)
    return ShardedOptimizer(optimizer, named_parameters, compression, backward_passes_per_step,
                            op, gradient_predivide_factor, groups, sparse_as_dense, process_set,
                            stage)
