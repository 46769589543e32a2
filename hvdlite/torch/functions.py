"""Making ranks start identical: broadcast of model parameters, optimizer
state and Python objects; allgather of Python objects."""
import collections.abc

import torch

from hvdlite.common import basics, late_joiners
from hvdlite.common.process_sets import global_process_set
from hvdlite.numpy import objects
from hvdlite.torch.mpi_ops import broadcast_async_, synchronize
from hvdlite.torch.optimizer import COMPRESSION_STATE


def broadcast_parameters(params, root_rank, prefix="", process_set=global_process_set):
    """Copies root_rank's tensors into every rank's, in place.

    Args:
        params: a state_dict (`model.state_dict()`: parameters and buffers), or an iterable
            of (name, tensor) pairs (`model.named_parameters()`) or of tensors.
        root_rank (int): the global rank whose values every rank gets.
        prefix (str): put before each name, to tell apart broadcasts in flight together.
        process_set (ProcessSet): the ranks that take part (default: all).

    Raises:
        ValueError: for tensors the collectives cannot take (dtype, device).
        HvdliteInternalError: when a broadcast fails at run time.

    Example:
        ```python
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        ```
    """
    if isinstance(params, collections.abc.Mapping):
        items = sorted(params.items())
    elif isinstance(params, collections.abc.Iterable):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError(f"broadcast_parameters: invalid params of type {type(params).__name__}; "
                         "pass model.state_dict() or model.named_parameters()")
    for name, tensor in items:
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"broadcast_parameters: {name!r} is a {type(tensor).__name__}, not "
                             "a torch.Tensor")
    handles = []
    with torch.no_grad():
        for name, tensor in items:
            tensor_name = None if name is None else f"broadcast_parameters.{prefix}{name}"
            handles.append(broadcast_async_(tensor.detach(), root_rank, name=tensor_name,
                                            process_set=process_set))
        for handle in handles:
            synchronize(handle)


class _TensorSlot:
    """Stands for the index-th tensor of an optimizer state in the structure
    root_rank sends: the tensor itself follows as a broadcast."""

    def __init__(self, index, shape, dtype):
        self.index = index
        self.shape = tuple(shape)
        self.dtype = dtype


def _split_tensors(value, tensors):
    """Returns `value` with every tensor replaced by a _TensorSlot (appended to tensors)."""
    if isinstance(value, torch.Tensor):
        tensors.append(value.detach().cpu().contiguous())
        return _TensorSlot(len(tensors) - 1, value.shape, value.dtype)
    if isinstance(value, dict):
        return type(value)((k, _split_tensors(v, tensors)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(_split_tensors(v, tensors) for v in value)
    return value


def _fill_tensors(value, tensors):
    if isinstance(value, _TensorSlot):
        return tensors[value.index]
    if isinstance(value, dict):
        return type(value)((k, _fill_tensors(v, tensors)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(_fill_tensors(v, tensors) for v in value)
    return value


def broadcast_optimizer_state(optimizer, root_rank, prefix="Parameter.",
                              process_set=global_process_set):
    """Gives every rank root_rank's optimizer state: each state tensor (momentum,
    Adam's moments, step counts...), every non-tensor entry (ints, floats,
    None, tuples) and every hyper-parameter of every parameter group (lr as an
    LR scheduler left it, betas, weight_decay...), with their Python types.

    Works with any torch.optim optimizer (LBFGS included), a DistributedOptimizer
    included, whatever state exists on either side: parameters that have no
    state on root_rank (no gradient yet) have none afterwards on any rank. As
    in Horovod, a root_rank optimizer with no state at all first creates it by
    one step of the wrapped optimizer with zero gradients (not for LBFGS, whose
    step needs a closure); unlike Horovod's, that step leaves the parameters as
    they were (weight decay does not move them). As in Horovod, on every rank
    whose optimizer had no state, each trainable parameter without a gradient
    is left a zero `.grad` (Note [Zero gradients after the broadcast]).

    Args:
        optimizer (torch.optim.Optimizer): updated in place on every rank.
        root_rank (int): the rank whose state every rank gets.
        prefix (str): starts the names of the broadcasts.
        process_set (ProcessSet): the ranks that take part (default: all).

    Raises:
        ValueError: when `optimizer` is not a torch.optim.Optimizer.

    Example:
        ```python
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        ```
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(f"broadcast_optimizer_state expects a torch.optim.Optimizer, got "
                         f"{type(optimizer).__name__}")
    # Alone, a late joiner is its own root, as in a one-rank job (Note [Late joiners]).
    is_root = basics.rank() == root_rank or late_joiners.alone()
    sharded_broadcast = getattr(optimizer, "broadcast_sharded_state", None)
    if sharded_broadcast is not None:  # sharding_stage > 0: no rank holds the whole state
        sharded_broadcast(root_rank, prefix, process_set)
        return
    sync_compression = getattr(optimizer, "sync_compression_state", None)
    if sync_compression is not None:
        # PowerSGD's error memory is each rank's own: averaged, not copied
        # (PowerSGD.sync), so it stays out of the broadcast below.
        sync_compression(root_rank, f"broadcast_optimizer_state.{prefix}compression", process_set)
    had_state = bool(optimizer.state)
    if is_root:
        _create_state(optimizer)
    state = broadcast_state_dict(
        _without_compression_state(optimizer.state_dict()) if is_root else None, root_rank,
        f"broadcast_optimizer_state.{prefix}", process_set)
    if not is_root:
        # load_state_dict checks that the parameter groups match this rank's
        # model and moves the state to each parameter's dtype and device.
        optimizer.load_state_dict(state)
    if not had_state and not isinstance(optimizer, torch.optim.LBFGS):
        _give_zero_gradients(optimizer)


def broadcast_state_dict(state_dict, root_rank, name, process_set=global_process_set):
    """root_rank's `state_dict` (any structure of dicts, lists and tuples) on
    every rank: its tensors broadcast (on the CPU), everything else pickled.
    Other ranks pass None; root gets its own back."""
    # Alone, a late joiner is its own root, as in a one-rank job (Note [Late joiners]).
    is_root = basics.rank() == root_rank or late_joiners.alone()
    root_tensors = []
    structure = _split_tensors(state_dict, root_tensors) if is_root else None
    # The structure is small (shapes, dtypes and hyper-parameters); the tensors follow.
    structure = objects.broadcast_object(structure, root_rank, name=f"{name}structure",
                                         process_set=process_set)
    if is_root:
        tensors = root_tensors
    else:
        slots = []
        _collect_slots(structure, slots)
        tensors = [torch.empty(slot.shape, dtype=slot.dtype)
                   for slot in sorted(slots, key=lambda s: s.index)]
    handles = [broadcast_async_(tensor, root_rank, name=f"{name}{i}", process_set=process_set)
               for i, tensor in enumerate(tensors)]
    for handle in handles:
        synchronize(handle)
    return state_dict if is_root else _fill_tensors(structure, tensors)


def _without_compression_state(state_dict):
    return {k: v for k, v in state_dict.items() if k != COMPRESSION_STATE}


def _create_state(optimizer):
    """Creates an optimizer's state the way Horovod does when it has none: one
    step with zero gradients. The step is the user's optimizer class's own
    (a DistributedOptimizer's would communicate on this rank alone); the
    parameters and gradients are put back afterwards."""
    if optimizer.state or isinstance(optimizer, torch.optim.LBFGS):
        return
    own_class = next(c for c in type(optimizer).__mro__ if not c.__module__.startswith("hvdlite."))
    params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    saved = [(p, p.detach().clone(), p.grad) for p in params]
    with torch.no_grad():
        for p in params:
            p.grad = _zero_gradient(optimizer, p)
        try:
            own_class.step(optimizer)
        finally:
            for p, value, grad in saved:
                p.copy_(value)
                p.grad = grad


def _give_zero_gradients(optimizer):
    """Note [Zero gradients after the broadcast]: Horovod creates missing state
    by a zero-gradient step on every rank whose optimizer has none, and leaves
    those zero tensors in .grad. Scripts and Horovod's own tests read them
    (test_broadcast_state_no_grad broadcasts one), so each trainable parameter
    without a gradient gets a zero one here, on every such rank whatever its
    rank. A gradient the caller already computed stays (Horovod overwrites it
    with zeros; that would discard work). The state and parameters are not
    touched: _create_state put the parameters back after its step."""
    with torch.no_grad():
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad and p.grad is None:
                    p.grad = _zero_gradient(optimizer, p)


def _zero_gradient(optimizer, param):
    """A zero gradient for `param` in the layout `optimizer` takes (SparseAdam: sparse)."""
    zeros = torch.zeros_like(param)
    return zeros.to_sparse() if isinstance(optimizer, torch.optim.SparseAdam) else zeros


def _collect_slots(value, slots):
    if isinstance(value, _TensorSlot):
        slots.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _collect_slots(v, slots)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _collect_slots(v, slots)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns root_rank's `obj` on every rank.

    Args:
        obj: any picklable object (only root's is used).
        root_rank (int): the global rank whose object every rank gets.
        name (str | None): as in `allreduce`.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        A copy of root's object.
    """
    return objects.broadcast_object(obj, root_rank, name=name, process_set=process_set)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns every rank's `obj`, in rank order.

    Args:
        obj: any picklable object.
        name (str | None): as in `allreduce`.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        list: one object per rank of the set.
    """
    return objects.allgather_object(obj, name=name, process_set=process_set)
