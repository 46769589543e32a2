"""Collectives on torch tensors as the core runs them: *_async functions that
queue work and return a handle, in-place variants, synchronize/poll, join and
barrier. The differentiable synchronous API builds on these (autograd_ops.py).

Tensors go to the core as (data_ptr, dtype code, shape, device); the handle
table keeps them alive until synchronize(). Results land in place wherever
the output size is known beforehand (allreduce, broadcast); outputs whose size
is known only after negotiation (allgather, alltoall, reducescatter) are
allocated by the core (CUDA ones by PyTorch's caching allocator, through
cuda.allocate_output) and wrapped as tensors without a copy. A non-contiguous
input is copied into a contiguous buffer (and in-place results copied back).
"""
import torch

from hvdlite.common import basics, collective_table as table, requests
from hvdlite.common.fast_entries import without_frame
from hvdlite.common.ops import Average, Sum
from hvdlite.common.process_sets import global_process_set
from hvdlite.common.requests import (
    ALLREDUCE, BROADCAST, TORCH, add_group, add_handle, process_set_id, reduce_op, reduction,
    root_rank, tensor_name)
from hvdlite.torch import core_calls, cuda
from hvdlite.torch.tensors import (
    DTYPE_CODES, check_tensor, device_index, dtype_code, from_core_output)

# hvdlite.torch's names (mpi_ops.py re-exports them); allgather_into_async and
# grouped_reducescatter_into_async are hvdlite's own, for its sharded optimizers.
__all__ = [
    "allreduce_async", "allreduce_", "allreduce_async_", "grouped_allreduce_async",
    "grouped_allreduce_", "grouped_allreduce_async_", "allgather_async",
    "grouped_allgather_async", "broadcast_async", "broadcast_", "broadcast_async_",
    "alltoall_async", "reducescatter_async", "grouped_reducescatter_async",
    "sparse_allreduce_async", "synchronize", "poll", "join", "barrier",
]


# Note [One call, else the general path]
# Every synchronous collective on tensors first offers the call, with the
# user's arguments as given (the name resolved), to the core's tensor_call
# (Note [Torch collectives in one call] in csrc/python/torch_one_call.cc):
# allreduce(_), broadcast(_), allgather and grouped_allreduce(_) on
# contiguous CPU tensors and plain arguments go to the core and back in that
# one call. It returns the result, or None having done nothing, and the
# general path below (_prepare, the handle table, synchronize) then runs
# exactly as before, checks and messages included: CUDA and non-contiguous
# tensors, process sets given by None, average=, Adasum, integer scales...
# A call that needs a new output declines a tensor that requires grad, so
# autograd_ops' Functions keep deciding where gradients flow; compression is
# never offered. allreduce_async(_) likewise offers itself to
# allreduce_tensor_async, which submits, adds the operation to the handle
# table and returns the handle (Note [Asynchronous allreduce of a tensor in
# one call]); synchronize() takes the table's common entry through
# synchronize_handle. All three are read as core_calls' attributes, bound
# once (Note [Torch's core calls bound once] in hvdlite/torch/core_calls.py).
def _prepare(tensor, kind, name):
    """(contiguous tensor, dtype code, device) for the core; ValueError, naming
    the tensor, for what it cannot take."""
    try:  # the common cases first, with as few attribute reads as possible
        code = DTYPE_CODES[tensor.dtype]
        if tensor.is_contiguous():  # False for sparse COO
            if tensor.is_cpu:
                return tensor, code, -1
            if tensor.is_cuda:  # get_device(): the index, without a torch.device object
                return tensor, code, tensor.get_device()
    except (AttributeError, KeyError, RuntimeError):  # not a tensor, dtype, sparse CSR
        pass
    what = f"{kind} of '{name}'"
    check_tensor(tensor, what)
    code = dtype_code(tensor, kind, name)
    device = -1 if tensor.is_cpu else device_index(tensor, what)
    return (tensor if tensor.is_contiguous() else tensor.contiguous()), code, device


# --- what synchronize() returns, as the table declares it per collective
# (Note [The binding layer as a table] in hvdlite/common/collective_table.py);
# payloads are kept alive until then

def _from_core(raw, shape, like):
    return from_core_output(raw, shape, like.dtype)


def _splits_of(received, split_dtype):
    return torch.tensor(received, dtype=split_dtype)


_FINISHING = table.Finishing(_from_core, _splits_of)


def _copy_back(payload, results):
    tensor, buffer = payload
    with torch.no_grad():  # in-place results are written behind autograd, as Horovod does
        tensor.copy_(buffer)
    return tensor


def _output_bytes(output, src, op_name, name):
    """The size of `output`, checked as a buffer the core can write the result
    of an allgather or reducescatter into (Note [Outputs into the caller's
    buffer] in csrc/api/caller_output.cc): contiguous, src's dtype and device."""
    if (output.dtype != src.dtype or output.device != src.device
            or not output.is_contiguous()):
        raise ValueError(
            f"{op_name} of {name!r}: the output must be a contiguous tensor of the input's dtype "
            f"and device ({src.dtype}, {src.device}); got {output.dtype} on {output.device}"
            + ("" if output.is_contiguous() else ", not contiguous"))
    return output.numel() * output.element_size()


def _same_shape_output(tensor, src, in_place):
    """(output buffer, finish, payload) for an op whose output has its input's
    shape: `src` itself in place (then copied back into a non-contiguous
    `tensor`), else a new contiguous tensor."""
    if not in_place:
        output = torch.empty_like(src, memory_format=torch.contiguous_format)
        return output, table.written, (src, output)
    if src is tensor:
        return src, table.written, (src, src)
    return src, _copy_back, (tensor, src)


def _start(collective, tensor, name, set_id, in_place=False, into=None, splits_like=None,
           **fields):
    """Queues one `collective` (a row of hvdlite/common/collective_table.py)
    on `tensor` with its request `fields` (a group's member: group and
    group_size too); returns (core entry, (finish, payload)), the entry
    (core handle, dtype code) for a host tensor, with the device for a CUDA
    one (hvdlite/common/handles.py). The row decides what differs between
    collectives: whether a
    scalar counts as one row; whether the output is sized like the input
    (then allocated here, or the input itself `in_place`) or by negotiation
    (then the core's, or `into`, a caller's buffer of exactly the result's
    size: Note [Outputs into the caller's buffer] in csrc/api/caller_output.cc);
    and what synchronize() returns (`splits_like`: the received splits' dtype).
    Allreduce keeps its own _allreduce_start, the hottest path, in as few
    Python calls as it can."""
    src, code, device = _prepare(tensor, collective.kind, name)
    if collective.scalar_as_row and src.dim() == 0:
        src = src.reshape(1)
    if collective.allocated_before:
        output, finish, payload = _same_shape_output(tensor, src, in_place)
    elif into is not None:
        fields["output_bytes"] = _output_bytes(into, src, collective.kind, name)
        output, finish, payload = into, table.written, (src, into)
    else:
        output, finish, payload = None, _FINISHING.of(collective), (src, splits_like)
    handle = requests.enqueue(
        op=collective.op, name=name, process_set_id=set_id, input=src.data_ptr(),
        output=0 if output is None else output.data_ptr(), dtype=code, shape=src.shape,
        device=device, stream=cuda.current_stream(device) if device >= 0 else 0, **fields)
    return (handle, code) if device < 0 else (handle, code, device), (finish, payload)


# --- allreduce

def _allreduce_buffers(tensor, in_place, name):
    """(src, code, device, output, finish, payload) of one allreduce."""
    src, code, device = _prepare(tensor, "allreduce", name)
    if in_place and src is tensor:
        return src, code, device, src, table.written, (src, src)
    return (src, code, device) + _same_shape_output(tensor, src, in_place)


def _allreduce_now(tensor, in_place, average, name, op, prescale_factor, postscale_factor,
                   process_set):
    """allreduce_ and the synchronous allreduce: queued and waited for in one
    call into the core (Note [One call for a synchronous collective] in
    csrc/python/bind_collectives.cc), with no handle; returns the result."""
    name = tensor_name(name, "allreduce")
    op, prescale, postscale, set_id = reduction(op, average, prescale_factor, postscale_factor,
                                                process_set)
    src, code, device, output, finish, payload = _allreduce_buffers(tensor, in_place, name)
    requests.run(
        op=ALLREDUCE, name=name, process_set_id=set_id, input=src.data_ptr(),
        output=output.data_ptr(), dtype=code, shape=src.shape, reduce_op=op, prescale=prescale,
        postscale=postscale, device=device,
        stream=cuda.current_stream(device) if device >= 0 else 0)
    return finish(payload, None)


def _allreduce_start(tensor, in_place, name, op, prescale, postscale, set_id, group="",
                     group_size=0):
    """Queues one allreduce; returns (core entry, (finish, payload)), the entry
    as _start's. The hottest path (every gradient): one call into the core,
    keywords only."""
    src, code, device, output, finish, payload = _allreduce_buffers(tensor, in_place, name)
    address = src.data_ptr()
    if device < 0:  # a host tensor: no device, no stream, and a pair for the handle table
        core_handle = requests.enqueue(
            op=ALLREDUCE, name=name, process_set_id=set_id, input=address,
            output=address if output is src else output.data_ptr(), dtype=code, shape=src.shape,
            reduce_op=op, prescale=prescale, postscale=postscale, group=group,
            group_size=group_size)
        return (core_handle, code), (finish, payload)
    core_handle = requests.enqueue(
        op=ALLREDUCE, name=name, process_set_id=set_id, input=address,
        output=output.data_ptr(), dtype=code, shape=src.shape, reduce_op=op, prescale=prescale,
        postscale=postscale, device=device,
        # NCCL waits for what PyTorch's stream holds now (the core records
        # an event on it in this call), not for what backward queues next
        stream=cuda.current_stream(device), group=group, group_size=group_size)
    return (core_handle, code, device), (finish, payload)


def _allreduce_async(tensor, in_place, average, name, op, prescale_factor, postscale_factor,
                     process_set):
    name = tensor_name(name, "allreduce")
    op, prescale, postscale, set_id = reduction(op, average, prescale_factor, postscale_factor,
                                                process_set)
    entry, (finish, payload) = _allreduce_start(tensor, in_place, name, op, prescale, postscale,
                                                set_id)
    return add_handle(TORCH, (entry,), finish, payload)


# The defs decorated with without_frame are the general paths and the
# documentation; calls reach the core's entries without their frames (Note
# [A public collective without a Python frame] in
# csrc/python/codes/fast_entry.cc), and what an entry declines goes straight
# to the def's tail, which does not ask it again (Note [Declined without
# asking twice] there).
_REDUCTION_ARGUMENTS = ("tensor", "name", "op", "prescale_factor", "postscale_factor",
                        "process_set", "average")
_SCALES_AND_SET = ("op", "prescale_factor", "postscale_factor", "process_set")


@without_frame(core_calls, "allreduce_tensor_async", (False,) + _REDUCTION_ARGUMENTS, "allreduce",
               declined=(_allreduce_async, ("tensor", False, "average", "name") + _SCALES_AND_SET))
def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing `tensor` across the ranks (default op: Average) into a
    new tensor; `tensor` is not modified.

    Args:
        tensor (torch.Tensor): CPU or CUDA, contiguous or not.
        average (bool | None): Horovod's old switch: True is `op=Average`, False `op=Sum`.
        name (str | None): unique among operations in flight; unnamed ones are numbered.
        op (ReduceOp | None): `Average` when None; also `Sum`, `Min`, `Max`, `Product`, `Adasum`.
        prescale_factor (float): scales each rank's input first.
        postscale_factor (float): scales the reduced result.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        int: a handle for `synchronize()` (which returns the reduced tensor) or `poll()`.

    Raises:
        ValueError: for bad arguments (dtype, device, op, process set), at the call.
    """
    # tensor_name inlined: one frame less on every gradient (Note [One call, else the general path])
    name = name or basics.auto_name("allreduce")
    handle = core_calls.allreduce_tensor_async(False, tensor, name, op, prescale_factor,
                                               postscale_factor, process_set, average)
    if handle is not None:  # every gradient's call: no further frame
        return handle
    return _allreduce_async(tensor, False, average, name, op, prescale_factor,
                            postscale_factor, process_set)


@without_frame(core_calls, "allreduce_tensor_async", (True,) + _REDUCTION_ARGUMENTS, "allreduce",
               declined=(_allreduce_async, ("tensor", True, "average", "name") + _SCALES_AND_SET))
def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing `tensor` in place across the ranks.

    Args:
        tensor (torch.Tensor): overwritten with the result when the handle is synchronized.
        average (bool | None): True is `op=Average`, False `op=Sum` (Horovod's old switch).
        name (str | None): unique among operations in flight; None numbers it.
        op (ReduceOp | None): the reduction (`Average` when None).
        prescale_factor (float): multiplies each rank's input before the reduction.
        postscale_factor (float): multiplies the result.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        int: a handle; `synchronize(handle)` returns `tensor`.

    Raises:
        ValueError: for a tensor, op or process set the core cannot take, at the call.
    """
    # tensor_name inlined: one frame less on every gradient (Note [One call, else the general path])
    name = name or basics.auto_name("allreduce")
    handle = core_calls.allreduce_tensor_async(True, tensor, name, op, prescale_factor,
                                               postscale_factor, process_set, average)
    if handle is not None:  # every gradient's call: no further frame
        return handle
    return _allreduce_async(tensor, True, average, name, op, prescale_factor,
                            postscale_factor, process_set)


@without_frame(core_calls, "tensor_call", (ALLREDUCE, True, False, "tensor", "name", "process_set",
                                          "op", "prescale_factor", "postscale_factor", "average"),
               "allreduce",
               declined=(_allreduce_now, ("tensor", True, "average", "name") + _SCALES_AND_SET))
def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` in place across the ranks and returns it.

    Args:
        tensor (torch.Tensor): the input, overwritten with the reduced value.
        average (bool | None): Horovod's old switch for `op` (True: Average, False: Sum).
        name (str | None): unique among operations in flight; unnamed ones are numbered.
        op (ReduceOp | None): Average by default.
        prescale_factor (float): applied to each input first.
        postscale_factor (float): applied to the reduced result.
        process_set (ProcessSet): whose ranks reduce (default: all).

    Returns:
        torch.Tensor: `tensor` itself. Not differentiable.

    Raises:
        ValueError: for bad arguments, at the call.
        HorovodInternalError: when the collective fails at run time.
    """
    # tensor_name inlined: one frame less on every gradient (Note [One call, else the general path])
    name = name or basics.auto_name("allreduce")
    done = core_calls.tensor_call(ALLREDUCE, True, False, tensor, name, process_set, op,
                                  prescale_factor, postscale_factor, average)
    if done is not None:
        return done
    return _allreduce_now(tensor, True, average, name, op, prescale_factor, postscale_factor,
                          process_set)



def _grouped_allreduce_async(tensors, in_place, average, name, op, prescale_factor,
                             postscale_factor, process_set):
    op, prescale, postscale, set_id = reduction(op, average, prescale_factor,
                                                postscale_factor, process_set)

    def start(tensor, member, group, group_size):
        return _allreduce_start(tensor, in_place, member, op, prescale, postscale, set_id,
                                group, group_size)
    return add_group(TORCH, tensors, name, table.ALLREDUCE.grouped_kind, start, table.each)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing a list of tensors as one group: negotiated together and
    fused into as few collectives as possible. The inputs are not modified.

    Args:
        tensors (list[torch.Tensor]): the group's members.
        average (bool | None): True is `op=Average`, False `op=Sum`.
        name (str | None): the group's name; members are named after it.
        op (ReduceOp | None): one reduction for all (Average when None).
        prescale_factor (float): scales every input first.
        postscale_factor (float): scales every result.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        int: a handle; `synchronize()` returns a list of new tensors in input order.
    """
    return _grouped_allreduce_async(tensors, False, average, name, op, prescale_factor,
                                    postscale_factor, process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """In-place grouped_allreduce_async.

    Args:
        tensors (list[torch.Tensor]): reduced in place, as one group.
        average (bool | None): Horovod's old switch: True Average, False Sum.
        name (str | None): the group's name (None: numbered).
        op (ReduceOp | None): the reduction for every member; Average when None.
        prescale_factor (float): multiplies each input before reducing.
        postscale_factor (float): multiplies each reduced member.
        process_set (ProcessSet): the ranks of the group (default: all).

    Returns:
        int: a handle; `synchronize()` returns `tensors`.
    """
    return _grouped_allreduce_async(tensors, True, average, name, op, prescale_factor,
                                    postscale_factor, process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """Reduces a list of tensors in place as one group and returns them.

    Args:
        tensors (list[torch.Tensor]): overwritten with their reduced values.
        average (bool | None): True means `op=Average`, False `op=Sum`.
        name (str | None): the group's name; unnamed groups are numbered.
        op (ReduceOp | None): applies to every member (default Average).
        prescale_factor (float): input scale.
        postscale_factor (float): output scale.
        process_set (ProcessSet): which ranks reduce (default: all).

    Returns:
        list[torch.Tensor]: `tensors`, reduced.

    Raises:
        HorovodInternalError: when the collective fails at run time.
    """
    name = tensor_name(name, "grouped_allreduce")  # Note [One call, else the general path]
    done = core_calls.tensor_call(ALLREDUCE, True, True, tensors, name, process_set, op,
                                  prescale_factor, postscale_factor, average)
    if done is not None:
        return done
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


# --- allgather

def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every rank's `tensor` along the first dimension
    (its size may differ between ranks; the other dimensions must agree).

    Args:
        tensor (torch.Tensor): this rank's part; a scalar counts as one row.
        name (str | None): unique among operations in flight; None numbers it.
        process_set (ProcessSet): the ranks whose parts are gathered (default: all).

    Returns:
        int: a handle; `synchronize()` returns the gathered tensor, rank order.
    """
    entry, (finish, payload) = _start(table.ALLGATHER, tensor, tensor_name(name, "allgather"),
                                      process_set_id(process_set))
    return add_handle(TORCH, (entry,), finish, payload)


def allgather_into_async(tensor, output, name=None, process_set=global_process_set):
    """`allgather_async` into `output`, which must be exactly the size of the
    result: no allocation and no copy. `tensor` may be a part of `output`
    (a parameter's own rows, gathered into the parameter). An hvdlite
    extension, for sharded optimizers; `synchronize()` returns `output`."""
    entry, (finish, payload) = _start(table.ALLGATHER, tensor, tensor_name(name, "allgather"),
                                      process_set_id(process_set), into=output)
    return add_handle(TORCH, (entry,), finish, payload)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts allgathering a list of tensors as one group.

    Args:
        tensors (list[torch.Tensor]): each is gathered along its first dimension.
        name (str | None): the group's name (members are named after it).
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        int: a handle; `synchronize()` returns a list of gathered tensors.
    """
    set_id = process_set_id(process_set)

    def start(tensor, member, group, group_size):
        return _start(table.ALLGATHER, tensor, member, set_id, group=group,
                      group_size=group_size)
    return add_group(TORCH, tensors, name, table.ALLGATHER.grouped_kind, start, table.each)


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Starts reducing a sparse COO tensor by allgathering its indices and
    values (duplicate indices then sum when the result is used or coalesced).

    Args:
        tensor (torch.Tensor): a sparse COO tensor, the same shape on every rank.
        name (str): names the two allgathers (`name.indices`, `name.values`).
        op (ReduceOp): `Sum` or `Average` (values divided by the set's size).
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        Callable[[], torch.Tensor]: waits and returns the reduced sparse tensor
            (Horovod's interface, used for sparse gradients).

    Raises:
        ValueError: for an op other than Sum or Average.
    """
    op = reduce_op(op)
    if op not in (Average, Sum):
        raise ValueError(f"sparse allreduce of '{name}': op must be Sum or Average, not "
                         f"{op.name}")
    # allgather concatenates rows, so the indices go as (nnz, ndim).
    indices = allgather_async(tensor._indices().t().contiguous(), f"{name}.indices",
                              process_set)
    values = allgather_async(tensor._values(), f"{name}.values", process_set)

    def wait():
        gathered_values = synchronize(values)
        gathered_indices = synchronize(indices)
        if op == Average:
            gathered_values = gathered_values / _set_size(process_set)
        return torch.sparse_coo_tensor(gathered_indices.t(), gathered_values, tensor.shape)
    return wait


def _set_size(process_set):
    if process_set is None or process_set is global_process_set:
        return basics.size()
    return process_set.size()


# --- broadcast

def _broadcast_async(tensor, in_place, root, name, process_set):
    name = tensor_name(name, "broadcast")
    entry, (finish, payload) = _start(table.BROADCAST, tensor, name, process_set_id(process_set),
                                      in_place, root_rank=root_rank(root, name))
    return add_handle(TORCH, (entry,), finish, payload)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts sending root_rank's `tensor` to every rank, into a new tensor.

    Args:
        tensor (torch.Tensor): the value on the root; shape and dtype on the others.
        root_rank (int): the sending rank (its rank in `process_set`).
        name (str | None): unique among operations in flight; unnamed ones are numbered.
        process_set (ProcessSet): the ranks that receive (default: all).

    Returns:
        int: a handle; `synchronize()` returns the new tensor.
    """
    return _broadcast_async(tensor, False, root_rank, name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts overwriting `tensor` with root_rank's, in place.

    Args:
        tensor (torch.Tensor): overwritten on every rank but the root.
        root_rank (int): the rank whose value is sent.
        name (str | None): names the operation (None: numbered).
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        int: a handle; `synchronize()` returns `tensor`.
    """
    return _broadcast_async(tensor, True, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites `tensor` with root_rank's value on every rank and returns it.

    Args:
        tensor (torch.Tensor): the input, overwritten in place.
        root_rank (int): which rank's value every rank gets.
        name (str | None): the operation's name; numbered when None.
        process_set (ProcessSet): the ranks of the broadcast (default: all).

    Returns:
        torch.Tensor: `tensor`. Not differentiable.

    Raises:
        HorovodInternalError: when the collective fails at run time.
    """
    name = tensor_name(name, "broadcast")  # Note [One call, else the general path]
    done = core_calls.tensor_call(BROADCAST, True, False, tensor, name, process_set, root_rank)
    if done is not None:
        return done
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# --- alltoall

def _split_list(splits, name):
    if splits is None:
        return []
    if isinstance(splits, torch.Tensor):
        splits = splits.reshape(-1).tolist()
    try:
        return [int(s) for s in splits]
    except (TypeError, ValueError):
        raise ValueError(f"alltoall of '{name}': splits must be a list or tensor of integers, "
                         f"got {splits!r}") from None


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts sending splits[i] rows of `tensor` to rank i.

    Args:
        tensor (torch.Tensor): the rows to send, in destination-rank order.
        splits (list[int] | torch.Tensor | None): rows per destination; None splits evenly.
        name (str | None): unique among operations in flight; None numbers it.
        process_set (ProcessSet): the ranks that exchange (default: all).

    Returns:
        int: a handle; `synchronize()` returns (received tensor, received splits).

    Raises:
        ValueError: for splits that are not integers.
    """
    name = tensor_name(name, "alltoall")
    split_dtype = splits.dtype if isinstance(splits, torch.Tensor) else torch.int32
    entry, (finish, payload) = _start(table.ALLTOALL, tensor, name, process_set_id(process_set),
                                      splits_like=split_dtype, splits=_split_list(splits, name))
    return add_handle(TORCH, (entry,), finish, payload)


# --- reducescatter

def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducing `tensor` across the ranks and scattering the first
    dimension: rank r gets its share of the rows (the first rows % size ranks
    one more).

    Args:
        tensor (torch.Tensor): the same shape on every rank.
        name (str | None): the operation's name; unnamed ones are numbered.
        op (ReduceOp): `Average` (default), `Sum`, `Min`, `Max` or `Product`.
        process_set (ProcessSet): the ranks that take part (default: all).
        prescale_factor (float): scales each rank's input first.
        postscale_factor (float): scales this rank's share of the result.

    Returns:
        int: a handle; `synchronize()` returns this rank's rows.
    """
    op, prescale, postscale, set_id = reduction(op, None, prescale_factor, postscale_factor,
                                                process_set, "reducescatter")
    entry, (finish, payload) = _start(table.REDUCESCATTER, tensor,
                                      tensor_name(name, "reducescatter"), set_id, reduce_op=op,
                                      prescale=prescale, postscale=postscale)
    return add_handle(TORCH, (entry,), finish, payload)


def grouped_reducescatter_into_async(tensors, outputs, name=None, op=Average,
                                     process_set=global_process_set, prescale_factor=1.0,
                                     postscale_factor=1.0):
    """`grouped_reducescatter_async` into `outputs` (one per tensor, each
    exactly this rank's share): no allocation per call. An hvdlite
    extension, for sharded optimizers; `synchronize()` returns `outputs`."""
    op, prescale, postscale, set_id = reduction(op, None, prescale_factor, postscale_factor,
                                                process_set, "reducescatter")
    outputs = list(outputs)

    def start(pair, member, group, group_size):
        tensor, output = pair
        return _start(table.REDUCESCATTER, tensor, member, set_id, into=output, reduce_op=op,
                      prescale=prescale, postscale=postscale, group=group,
                      group_size=group_size)
    return add_group(TORCH, zip(tensors, outputs), name, table.REDUCESCATTER.grouped_kind, start,
                     table.each)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducescatter on a list of tensors as one group.

    Args:
        tensors (list[torch.Tensor]): each reduced and scattered along its first dimension.
        name (str | None): the group's name; members are named after it.
        op (ReduceOp): the reduction for all members (default `Average`; not Adasum).
        process_set (ProcessSet): the ranks of the group (default: all).
        prescale_factor (float): multiplies every input first.
        postscale_factor (float): multiplies every share.

    Returns:
        int: a handle; `synchronize()` returns a list of this rank's shares.
    """
    op, prescale, postscale, set_id = reduction(op, None, prescale_factor, postscale_factor,
                                                process_set, "reducescatter")

    def start(tensor, member, group, group_size):
        return _start(table.REDUCESCATTER, tensor, member, set_id, reduce_op=op,
                      prescale=prescale, postscale=postscale, group=group,
                      group_size=group_size)
    return add_group(TORCH, tensors, name, table.REDUCESCATTER.grouped_kind, start, table.each)


# --- completion and control

def poll(handle):
    """Tells whether the operation behind `handle` has finished.

    Args:
        handle (int): from one of the *_async functions.

    Returns:
        bool: True when `synchronize(handle)` will not block.
    """
    return requests.poll(handle, TORCH)


def synchronize(handle):
    """Waits for the operation behind `handle` and returns its result.

    CUDA tensors: returns once the collective is queued on the GPU, having
    made the calling thread's current stream (and the stream the tensor was
    submitted on) wait for it, so work queued on either afterwards sees the
    result; another stream must wait for the current one (or synchronize
    under it), as for any PyTorch result.

    Args:
        handle (int): from one of the *_async functions; it is spent by this call.

    Returns:
        torch.Tensor | list[torch.Tensor] | tuple: a tensor, a list of tensors
            (grouped), or (tensor, received splits) (alltoall).

    Raises:
        HorovodInternalError: (a RuntimeError) if the operation failed.
    """
    # The table's synchronize, its common entry taken in C (Note [The handle
    # table's common cases in C] in csrc/python/handle_table.cc)
    return core_calls.synchronize_handle(handle, TORCH)


def join(device=-1, process_set=global_process_set):
    """Marks this rank as out of data: it takes part in the other ranks'
    allreduces of process_set with zeros (an Average still divides by the
    set's size) until every rank of the set has joined; their allgather,
    broadcast, alltoall and reducescatter fail meanwhile. Blocks until then.

    Args:
        device (int): accepted for Horovod compatibility; the zeros need no tensor here.
        process_set (ProcessSet): the set to join (default: all ranks).

    Returns:
        int: the rank that joined last, the same on every rank.
    """
    return requests.join(process_set)


def barrier(process_set=global_process_set):
    """Returns once every rank of process_set has called barrier().

    Args:
        process_set (ProcessSet): the ranks that wait for each other (default: all).
    """
    requests.barrier(process_set)
