"""hvd.DistributedOptimizer: Horovod's one entry point for two optimizers,
chosen by op. Adasum combines the ranks' parameter updates
(adasum_optimizer.py); every other op reduces gradients (optimizer.py).
A module of its own so that neither optimizer imports the other."""
import torch

from hvdlite.common.ops import ReduceOp, resolve_op
from hvdlite.common.process_sets import global_process_set
from hvdlite.torch.adasum_optimizer import AdasumOptimizer, _DistributedAdasumOptimizer
from hvdlite.torch.compression import Compression
from hvdlite.torch.optimizer import AveragingOptimizer, _DistributedOptimizer
from hvdlite.torch.powersgd import PowerSGD


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=ReduceOp.Average,
                         gradient_predivide_factor=1.0, num_groups=0, groups=None,
                         sparse_as_dense=False, process_set=global_process_set):
    """Wraps a torch.optim optimizer so that step() applies gradients averaged
    over the ranks of process_set (Horovod's hvd.DistributedOptimizer).

    Each gradient's allreduce starts during backward. backward_passes_per_step=N
    accumulates N backward passes locally (their sum) before communicating.
    compression (Compression.none/fp16/bf16) sets the type on the wire;
    Compression.powersgd(rank=..., ...) sends low-rank approximations with
    error feedback (hvdlite/torch/powersgd.py; op Average or Sum);
    num_groups or groups fuse parameters into grouped allreduces; sparse
    gradients are allgathered, or densified with sparse_as_dense=True.
    op=hvd.Adasum gives Horovod's Adasum optimizer instead.
    The returned object is an instance of the optimizer's own class, sharing its
    parameter groups and state.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(f"DistributedOptimizer wraps a torch.optim.Optimizer, got "
                         f"{type(optimizer).__name__}")
    if isinstance(optimizer, (_DistributedOptimizer, _DistributedAdasumOptimizer)):
        raise ValueError("this optimizer is already a DistributedOptimizer; wrap the plain one")
    if compression is PowerSGD:
        raise ValueError("compression=hvd.Compression.powersgd needs its settings: pass "
                         "hvd.Compression.powersgd(rank=..., start_iter=...), an instance")
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
