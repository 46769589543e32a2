"""The synchronous, differentiable collectives (Horovod's allreduce,
allgather, broadcast, alltoall, reducescatter and their grouped forms).

Each one runs through a torch.autograd.Function when a gradient can flow
(grad mode on and an input that requires grad), and straight through the
collectives otherwise, which saves autograd's overhead on the common path.
Every backward is its table row's gradient rule (Note [Horovod's gradients]
in hvdlite/common/collective_table.py), carried out by `_gradient` below.
"""
import torch

from hvdlite.common import basics, collective_table as table
from hvdlite.common.ops import Average, resolve_op
from hvdlite.common.process_sets import global_process_set
from hvdlite.common.requests import ALLGATHER, ALLREDUCE, BROADCAST, tensor_name
from hvdlite.torch import collectives, core_calls
from hvdlite.torch.collectives import synchronize
from hvdlite.torch.compression import Compression

__all__ = [
    "allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast", "alltoall",
    "reducescatter", "grouped_reducescatter",
    # Horovod's autograd Functions behind them.
    "HorovodAllreduce", "HorovodGroupedAllreduce", "HorovodAllgather", "HorovodGroupedAllgather",
    "HorovodBroadcast", "HorovodAlltoall", "HorovodReducescatter", "HorovodGroupedReducescatter",
]


def _needs_grad(tensors):
    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


def _set_rank_and_size(process_set):
    """(this rank's index in the set, set size); the global set when None."""
    if process_set is None or process_set.process_set_id == 0:
        return basics.rank(), basics.size()
    return process_set.rank(), process_set.size()


# --- the gradient rule of the table, in torch's terms

class _Forward:
    """What a collective's gradient rule needs of its forward call, kept on
    the autograd context: the table row, the set, whether it was a group,
    the reduction (op resolved, scale factors), each input's rows (a scalar
    counts as one), the root rank, the received splits."""

    def __init__(self, row, process_set, tensors=(), grouped=False, op=Average, prescale=1.0,
                 postscale=1.0, root_rank=None, received=None):
        self.row, self.process_set, self.grouped = row, process_set, grouped
        self.op, self.prescale, self.postscale = op, prescale, postscale
        self.rows = [t.shape[0] if t.dim() else 1 for t in tensors]
        self.scalar = [t.dim() == 0 for t in tensors]
        self.root_rank, self.received = root_rank, received


def _gradient(forward, grads):
    """The input gradients for the output gradients `grads` (one per member),
    by `forward.row.gradient`: its collective, then what is done with the
    result."""
    row = forward.row
    table.check_differentiable(row, forward.op, row.grouped_kind if forward.grouped else None)
    grads = _GRADIENT_COLLECTIVE[row.gradient.via, row.gradient.how](forward, list(grads))
    return _THEN[row.gradient.then](forward, grads)


def _reduced(forward, grads, op, prescale, postscale):
    if forward.grouped:
        return grouped_allreduce(grads, op=op, prescale_factor=prescale,
                                 postscale_factor=postscale, process_set=forward.process_set)
    return [allreduce(grads[0], op=op, prescale_factor=prescale, postscale_factor=postscale,
                      process_set=forward.process_set)]


def _gathered(forward, grads):
    if forward.grouped:
        return grouped_allgather(grads, process_set=forward.process_set)
    return [allgather(grads[0], process_set=forward.process_set)]


def _sent_back(forward, grads):
    return [alltoall(grads[0], splits=forward.received, process_set=forward.process_set)[0]]


_GRADIENT_COLLECTIVE = {
    ("allreduce", table.SAME_REDUCTION):
        lambda forward, grads: _reduced(forward, grads, forward.op, forward.prescale,
                                        forward.postscale),
    ("allreduce", table.AVERAGED): lambda forward, grads: _reduced(forward, grads, Average, 1.0,
                                                                   1.0),
    ("allgather", ""): _gathered,
    ("alltoall", table.RECEIVED_SPLITS): _sent_back,
}


def _own_rows(forward, grads):
    """Each member's rows of its gathered gradient: every rank's row counts
    are gathered; this rank's block starts after those of the ranks before it."""
    counts = allgather(torch.tensor([forward.rows], dtype=torch.int64),
                       process_set=forward.process_set)
    index, _ = _set_rank_and_size(forward.process_set)
    offsets = counts[:index].sum(0).tolist() if index else [0] * len(grads)
    parts = [g.narrow(0, offset, rows) for g, offset, rows in zip(grads, offsets, forward.rows)]
    return [p.reshape(()) if scalar else p for p, scalar in zip(parts, forward.scalar)]


def _on_root(forward, grads):
    if basics.rank() != forward.root_rank:
        return [torch.zeros_like(g) for g in grads]
    return grads


def _scaled(forward, grads):
    scale = table.gradient_scale(forward.op, forward.prescale, forward.postscale,
                                 _set_rank_and_size(forward.process_set)[1])
    return [g * scale for g in grads] if scale != 1.0 else grads


_THEN = {table.AS_IS: lambda forward, grads: grads, table.OWN_ROWS: _own_rows,
         table.ON_ROOT: _on_root, table.SCALED: _scaled}


# --- allreduce

class HorovodAllreduce(torch.autograd.Function):
    """allreduce with a gradient (the allreduce of the output gradient)."""

    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set):
        """Runs `allreduce` for `apply`, keeping what backward needs."""
        reduced = collectives._allreduce_now(tensor, False, average, name, op, prescale_factor,
                                             postscale_factor, process_set)
        ctx.forward = _Forward(table.ALLREDUCE, process_set, op=resolve_op(op, average),
                               prescale=prescale_factor, postscale=postscale_factor)
        return reduced

    @staticmethod
    def backward(ctx, grad_output):
        """The gradient: the row's rule (an allreduce with the same op and scale factors)."""
        return (_gradient(ctx.forward, [grad_output])[0],) + (None,) * 6


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` across the ranks: their average by default. Differentiable.

    Args:
        tensor (torch.Tensor): CPU or CUDA, any supported dtype, contiguous or not.
        average (bool | None): Horovod's old switch: True is `op=Average`, False `op=Sum`.
        name (str | None): unique among operations in flight; unnamed ones are numbered, so
            every rank must issue them in the same order.
        compression: `Compression.none`, `.fp16` or `.bf16`: floats cast for the wire and back.
        op (ReduceOp | None): the reduction: `Average` when None and `average` is None; also
            `Sum`, `Min`, `Max`, `Product`, `Adasum`.
        prescale_factor (float): scales each rank's input first (e.g. 1/size with `Sum`).
        postscale_factor (float): scales the reduced result.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        torch.Tensor: a new tensor; `tensor` is unchanged (`allreduce_` reduces in place).

    Raises:
        ValueError: for bad arguments (dtype, device, op, process set), at the call.
        HorovodInternalError: when the collective fails at run time (ranks disagree, a peer is
            lost, shutdown).

    Example:
        ```python
        avg = hvd.allreduce(torch.tensor([float(hvd.rank())]))   # [0.5] on 2 ranks
        ```
    """
    if compression is Compression.none:  # Note [One call, else the general path] in collectives.py
        name = name or basics.auto_name("allreduce")  # tensor_name inlined: one frame less a call
        done = core_calls.tensor_call(ALLREDUCE, False, False, tensor, name, process_set, op,
                                      prescale_factor, postscale_factor, average)
        if done is not None:
            return done
    sent, ctx = compression.compress(tensor)
    if _needs_grad((sent,)):
        reduced = HorovodAllreduce.apply(sent, average, name, op, prescale_factor,
                                         postscale_factor, process_set)
    else:
        reduced = collectives._allreduce_now(sent, False, average, name, op, prescale_factor,
                                           postscale_factor, process_set)
    return compression.decompress(reduced, ctx)


class HorovodGroupedAllreduce(torch.autograd.Function):
    """grouped_allreduce with gradients (a grouped allreduce of them)."""

    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set,
                *tensors):
        """Runs `grouped_allreduce` for `apply`, keeping what backward needs."""
        reduced = tuple(synchronize(collectives.grouped_allreduce_async(
            tensors, average, name, op, prescale_factor, postscale_factor, process_set)))
        ctx.forward = _Forward(table.ALLREDUCE, process_set, grouped=True,
                               op=resolve_op(op, average), prescale=prescale_factor,
                               postscale=postscale_factor)
        return reduced

    @staticmethod
    def backward(ctx, *grad_outputs):
        """The gradients: the row's rule, as one group (a grouped allreduce)."""
        return (None,) * 6 + tuple(_gradient(ctx.forward, grad_outputs))


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces a list of tensors as one group (negotiated together, fused) and
    returns a list of new tensors. Differentiable.

    Args:
        tensors (list[torch.Tensor]): the group's members, CPU or CUDA.
        average (bool | None): Horovod's old switch: True is `op=Average`, False `op=Sum`.
        name (str | None): the group's name; unnamed groups are numbered.
        compression: `Compression.none`, `.fp16` or `.bf16`, for every member.
        op (ReduceOp | None): the reduction for every member (Average when None).
        prescale_factor (float): scales each input first.
        postscale_factor (float): scales each result.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        list[torch.Tensor]: the reduced tensors, in input order; the inputs are unchanged.

    Raises:
        ValueError: for bad arguments, at the call.
        HorovodInternalError: at run time, as `allreduce` raises it.
    """
    if compression is Compression.none:  # Note [One call, else the general path] in collectives.py
        name = tensor_name(name, "grouped_allreduce")
        done = core_calls.tensor_call(ALLREDUCE, False, True, tensors, name, process_set, op,
                                      prescale_factor, postscale_factor, average)
        if done is not None:
            return done
    compressed = [compression.compress(t) for t in tensors]
    sent = [t for t, _ in compressed]
    if _needs_grad(sent):
        reduced = HorovodGroupedAllreduce.apply(average, name, op, prescale_factor,
                                                postscale_factor, process_set, *sent)
    else:
        reduced = synchronize(collectives.grouped_allreduce_async(
            sent, average, name, op, prescale_factor, postscale_factor, process_set))
    return [compression.decompress(t, ctx) for t, (_, ctx) in zip(reduced, compressed)]


# --- allgather

class HorovodAllgather(torch.autograd.Function):
    """allgather with a gradient: the ranks' average of the output gradient,
    this rank's rows of it."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        """Runs `allgather` for `apply`, keeping what backward needs."""
        ctx.forward = _Forward(table.ALLGATHER, process_set, (tensor,))
        return synchronize(collectives.allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        """The gradient: the row's rule (this rank's rows of the averaged gradient)."""
        return _gradient(ctx.forward, [grad_output])[0], None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's `tensor` along the first dimension. Differentiable.

    Args:
        tensor (torch.Tensor): the same dtype and trailing dimensions on every rank; the first
            dimension may differ.
        name (str | None): as in `allreduce`.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        torch.Tensor: the ranks' rows in rank order.

    Raises:
        ValueError: for a dtype or device the collectives cannot take, at the call.
        HorovodInternalError: the ranks' dtypes or trailing dimensions differ, or a peer is
            lost.
    """
    name = tensor_name(name, "allgather")  # Note [One call, else the general path] in collectives.py
    done = core_calls.tensor_call(ALLGATHER, False, False, tensor, name, process_set)
    if done is not None:
        return done
    if _needs_grad((tensor,)):
        return HorovodAllgather.apply(tensor, name, process_set)
    return synchronize(collectives.allgather_async(tensor, name, process_set))


class HorovodGroupedAllgather(torch.autograd.Function):
    """grouped_allgather with gradients, as HorovodAllgather per tensor."""

    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        """Runs `grouped_allgather` for `apply`, keeping what backward needs."""
        ctx.forward = _Forward(table.ALLGATHER, process_set, tensors, grouped=True)
        return tuple(synchronize(collectives.grouped_allgather_async(tensors, name, process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        """The gradients: the row's rule per member, each collective as one group."""
        return (None, None) + tuple(_gradient(ctx.forward, grad_outputs))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """allgather of a list of tensors as one group. Differentiable.

    Args:
        tensors (Iterable[torch.Tensor]): each is concatenated along its first dimension.
        name (str | None): the group's name (numbered when None).
        process_set (ProcessSet): the ranks whose parts are gathered (default: all).

    Returns:
        list[torch.Tensor]: the gathered tensors, in input order.

    Raises:
        HorovodInternalError: at run time, as `allreduce` raises it.
    """
    tensors = list(tensors)
    if _needs_grad(tensors):
        return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))
    return synchronize(collectives.grouped_allgather_async(tensors, name, process_set))


# --- broadcast

class HorovodBroadcast(torch.autograd.Function):
    """broadcast with a gradient: the ranks' average of the output gradient
    goes to the root's input; the other ranks' inputs get zeros."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        """Runs `broadcast` for `apply`, keeping what backward needs."""
        ctx.forward = _Forward(table.BROADCAST, process_set, root_rank=root_rank)
        return synchronize(collectives.broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        """The gradient: the row's rule (the averaged gradient on root, zeros elsewhere)."""
        return _gradient(ctx.forward, [grad_output])[0], None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns `root_rank`'s `tensor` on every rank, as a new tensor. Differentiable.

    Args:
        tensor (torch.Tensor): the same shape and dtype on every rank.
        root_rank (int): a global rank, a member of `process_set`.
        name (str | None): as in `allreduce`.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        torch.Tensor: root's values (`broadcast_` writes them into `tensor` instead).

    Raises:
        ValueError: for bad arguments (e.g. a root outside the set), at the call.
        HorovodInternalError: at run time, as `allreduce` raises it.
    """
    name = tensor_name(name, "broadcast")  # Note [One call, else the general path] in collectives.py
    done = core_calls.tensor_call(BROADCAST, False, False, tensor, name, process_set, root_rank)
    if done is not None:
        return done
    if _needs_grad((tensor,)):
        return HorovodBroadcast.apply(tensor, root_rank, name, process_set)
    return synchronize(collectives.broadcast_async(tensor, root_rank, name, process_set))


# --- alltoall

class HorovodAlltoall(torch.autograd.Function):
    """alltoall with a gradient: each gradient row goes back to the rank it came from."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        """Runs `alltoall` for `apply`, keeping what backward needs."""
        output, received = synchronize(collectives.alltoall_async(tensor, splits, name,
                                                                  process_set))
        ctx.forward = _Forward(table.ALLTOALL, process_set, received=received)
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, _grad_received):
        """The gradient: the row's rule (sent back to the ranks its rows came from)."""
        return _gradient(ctx.forward, [grad_output])[0], None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends `splits[i]` rows of `tensor` to rank i and concatenates what each rank sent here.

    Differentiable.

    Args:
        tensor (torch.Tensor): the rows to send, in rank order.
        splits (Sequence[int] | torch.Tensor | None): rows for each rank of the set; None
            splits the first dimension evenly.
        name (str | None): as in `allreduce`.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        torch.Tensor | tuple[torch.Tensor, torch.Tensor]: as in Horovod, `(received tensor,
        received splits)` when `splits` is given, else the received tensor alone.

    Raises:
        ValueError: for bad arguments (splits that do not sum to the rows), at the call.
        HorovodInternalError: at run time, as `allreduce` raises it.

    Example:
        ```python
        out, received = hvd.alltoall(x, splits=[2, 1])   # 2 rows to rank 0, 1 to rank 1
        ```
    """
    if _needs_grad((tensor,)):
        output, received = HorovodAlltoall.apply(tensor, splits, name, process_set)
    else:
        output, received = synchronize(collectives.alltoall_async(tensor, splits, name,
                                                                process_set))
    return output if splits is None else (output, received)


# --- reducescatter

class HorovodReducescatter(torch.autograd.Function):
    """reducescatter with a gradient: every rank's output gradient gathered,
    scaled as Horovod does (Note [Horovod's gradients])."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        """Runs `reducescatter` for `apply`, keeping what backward needs."""
        reduced = synchronize(collectives.reducescatter_async(
            tensor, name, op, process_set, prescale_factor, postscale_factor))
        ctx.forward = _Forward(table.REDUCESCATTER, process_set, op=resolve_op(op),
                               prescale=prescale_factor, postscale=postscale_factor)
        return reduced

    @staticmethod
    def backward(ctx, grad_output):
        """The gradient: the row's rule (the allgathered gradient, scaled)."""
        return (_gradient(ctx.forward, [grad_output])[0],) + (None,) * 5


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` across the ranks and returns this rank's share of the first dimension.

    Differentiable; the first `rows % size` ranks get one row more.

    Args:
        tensor (torch.Tensor): the same shape and dtype on every rank.
        name (str | None): as in `allreduce`.
        compression: `Compression.none`, `.fp16` or `.bf16`.
        op (ReduceOp): `Average` (default), `Sum`, `Min`, `Max` or `Product`.
        process_set (ProcessSet): the ranks that take part (default: all).
        prescale_factor (float): multiplies the input before the reduction.
        postscale_factor (float): multiplies the result.

    Returns:
        torch.Tensor: this rank's rows of the reduced tensor.

    Raises:
        ValueError: for bad arguments (e.g. `op=Adasum`), at the call.
        HorovodInternalError: at run time, as `allreduce` raises it.
    """
    sent, ctx = compression.compress(tensor)
    if _needs_grad((sent,)):
        reduced = HorovodReducescatter.apply(sent, name, op, process_set, prescale_factor,
                                             postscale_factor)
    else:
        reduced = synchronize(collectives.reducescatter_async(
            sent, name, op, process_set, prescale_factor, postscale_factor))
    return compression.decompress(reduced, ctx)


class HorovodGroupedReducescatter(torch.autograd.Function):
    """grouped_reducescatter with gradients, as HorovodReducescatter per tensor."""

    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        """Runs `grouped_reducescatter` for `apply`, keeping what backward needs."""
        reduced = tuple(synchronize(collectives.grouped_reducescatter_async(
            tensors, name, op, process_set, prescale_factor, postscale_factor)))
        ctx.forward = _Forward(table.REDUCESCATTER, process_set, grouped=True,
                               op=resolve_op(op), prescale=prescale_factor,
                               postscale=postscale_factor)
        return reduced

    @staticmethod
    def backward(ctx, *grad_outputs):
        """The gradients: the row's rule per member, as one group (a grouped allgather)."""
        return (None,) * 5 + tuple(_gradient(ctx.forward, grad_outputs))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """reducescatter of a list of tensors as one group. Differentiable.

    Args:
        tensors (list[torch.Tensor]): each reduced, then split along its first dimension.
        name (str | None): the group's name; unnamed groups are numbered.
        compression: `Compression.none`, `.fp16` or `.bf16`, for every member.
        op (ReduceOp): `Average` (default), `Sum`, `Min`, `Max` or `Product`; the
            gradient is defined for `Sum` and `Average`.
        process_set (ProcessSet): the ranks of the group (default: all).
        prescale_factor (float): multiplies each input first.
        postscale_factor (float): multiplies each share.

    Returns:
        list[torch.Tensor]: this rank's share of each reduced tensor.

    Raises:
        HorovodInternalError: at run time, as `allreduce` raises it.
    """
    compressed = [compression.compress(t) for t in tensors]
    sent = [t for t, _ in compressed]
    if _needs_grad(sent):
        reduced = HorovodGroupedReducescatter.apply(name, op, process_set, prescale_factor,
                                                    postscale_factor, *sent)
    else:
        reduced = synchronize(collectives.grouped_reducescatter_async(
            sent, name, op, process_set, prescale_factor, postscale_factor))
    return [compression.decompress(t, ctx) for t, (_, ctx) in zip(reduced, compressed)]

