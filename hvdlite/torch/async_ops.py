"""Collectives on torch tensors as the core runs them: *_async functions that
queue work and return a handle, in-place variants, synchronize/poll, join and
barrier. The differentiable synchronous API builds on these (autograd_ops.py).

Tensors go to the core as (data_ptr, dtype code, shape, device); the handle
table keeps them alive until synchronize(). Results land in place wherever
the output size is known beforehand (allreduce, broadcast); outputs whose size
is known only after negotiation (allgather, alltoall, reducescatter) are
allocated by the core and wrapped as tensors without a copy. A non-contiguous
input is copied into a contiguous buffer (and in-place results copied back).
"""
import torch

from hvdlite.common import basics
from hvdlite.common.handles import HandleTable
from hvdlite.common.ops import Average, OpType, Sum, resolve_op
from hvdlite.common.process_sets import global_process_set
from hvdlite.torch import cuda
from hvdlite.torch.tensors import (
    DTYPE_CODES, check_tensor, device_index, dtype_code, from_core_output)

_handles = HandleTable()
_ALLREDUCE = int(OpType.ALLREDUCE)
_ALLGATHER = int(OpType.ALLGATHER)
_BROADCAST = int(OpType.BROADCAST)
_ALLTOALL = int(OpType.ALLTOALL)
_REDUCESCATTER = int(OpType.REDUCESCATTER)


def _prepare(tensor, kind, name):
    """(contiguous tensor, dtype code, device) for the core; ValueError, naming
    the tensor, for what it cannot take."""
    try:  # the common case first, with as few attribute reads as possible
        code = DTYPE_CODES[tensor.dtype]
        if tensor.is_cpu and tensor.is_contiguous():  # False for sparse COO
            return tensor, code, -1
    except (AttributeError, KeyError, RuntimeError):  # not a tensor, dtype, sparse CSR
        pass
    what = f"{kind} of '{name}'"
    check_tensor(tensor, what)
    code = dtype_code(tensor, what)
    device = -1 if tensor.is_cpu else device_index(tensor, what)
    return (tensor if tensor.is_contiguous() else tensor.contiguous()), code, device


def _set_id(process_set):
    return 0 if process_set is None else process_set._require_id()


def _scale(value, what):
    if value.__class__ is float:
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {value!r}") from None


def _enqueue(op, name, src, output, code, device, reduce_op=0, root_rank=0, prescale=1.0,
             postscale=1.0, splits=(), set_id=0, group="", group_size=0):
    return basics.core().enqueue(
        op, name, src.data_ptr(), output.data_ptr() if output is not None else 0, code,
        src.shape, reduce_op, root_rank, prescale, postscale, splits, set_id, device, group,
        group_size, (), 0, cuda.current_stream(device) if device >= 0 else 0)


# --- what synchronize() returns, per kind (payloads are kept alive until then)

def _output(payload, results):
    return payload[1]


def _copy_back(payload, results):
    tensor, buffer = payload
    with torch.no_grad():  # in-place results are written behind autograd, as Horovod does
        tensor.copy_(buffer)
    return tensor


def _outputs(payload, results):
    return [finish(part, None) for finish, part in payload]


def _gathered(payload, results):
    raw, shape, _, _ = results[0]
    return from_core_output(raw, shape, payload[1])


def _gathered_all(payload, results):
    return [from_core_output(raw, shape, dtype)
            for (raw, shape, _, _), dtype in zip(results, payload[1])]


def _exchanged(payload, results):
    raw, shape, received, _ = results[0]
    return (from_core_output(raw, shape, payload[1]),
            torch.tensor(received, dtype=payload[2]))


def _same_shape_output(tensor, src, in_place):
    """(output buffer, finish, payload) for an op whose output has its input's
    shape: `src` itself in place (then copied back into a non-contiguous
    `tensor`), else a new contiguous tensor."""
    if not in_place:
        output = torch.empty_like(src, memory_format=torch.contiguous_format)
        return output, _output, (src, output)
    if src is tensor:
        return src, _output, (src, src)
    return src, _copy_back, (tensor, src)


# --- allreduce

def _allreduce_start(tensor, in_place, name, op, prescale, postscale, set_id, group="",
                     group_size=0, wake=True):
    """Queues one allreduce; returns ((core handle, code), finish, payload).
    Positional arguments to the core: this is the hottest path (every gradient).
    wake=False when the caller synchronizes next (it runs the cycle itself)."""
    src, code, device = _prepare(tensor, "allreduce", name)
    if in_place and src is tensor:
        output, finish, payload = src, _output, (src, src)
    else:
        output, finish, payload = _same_shape_output(tensor, src, in_place)
    if device < 0:
        core_handle = basics.core().enqueue(
            _ALLREDUCE, name, src.data_ptr(), output.data_ptr(), code, src.shape, op, 0, prescale,
            postscale, (), set_id, device, group, group_size, (), 0, 0, wake)
    else:  # NCCL orders its work after what is queued on PyTorch's stream
        core_handle = basics.core().enqueue(
            _ALLREDUCE, name, src.data_ptr(), output.data_ptr(), code, src.shape, op, 0, prescale,
            postscale, (), set_id, device, group, group_size, (), 0, cuda.current_stream(device))
    return (core_handle, code), finish, payload


def _allreduce_async(tensor, in_place, average, name, op, prescale_factor, postscale_factor,
                     process_set, wake=True):
    entry, finish, payload = _allreduce_start(
        tensor, in_place, name or basics.auto_name("allreduce"), resolve_op(op, average),
        _scale(prescale_factor, "prescale_factor"), _scale(postscale_factor, "postscale_factor"),
        0 if process_set is global_process_set else _set_id(process_set), wake=wake)
    return _handles.add((entry,), finish, payload)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing `tensor` across the ranks (default op: Average) into a
    new tensor; `tensor` is not modified. Returns a handle for synchronize()."""
    return _allreduce_async(tensor, False, average, name, op, prescale_factor, postscale_factor,
                            process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing `tensor` in place. Returns a handle; synchronize(handle)
    returns `tensor`."""
    return _allreduce_async(tensor, True, average, name, op, prescale_factor, postscale_factor,
                            process_set)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` in place across the ranks and returns it."""
    return synchronize(_allreduce_async(tensor, True, average, name, op, prescale_factor,
                                        postscale_factor, process_set, wake=False))


def _grouped_allreduce_async(tensors, in_place, average, name, op, prescale_factor,
                             postscale_factor, process_set):
    op = int(resolve_op(op, average))
    group = name or basics.auto_name("grouped_allreduce")
    prescale = _scale(prescale_factor, "prescale_factor")
    postscale = _scale(postscale_factor, "postscale_factor")
    set_id = _set_id(process_set)
    tensors = list(tensors)
    entries, parts = [], []
    for index, tensor in enumerate(tensors):
        entry, finish, payload = _allreduce_start(
            tensor, in_place, f"{group}.{index}", op, prescale, postscale, set_id,
            group=group, group_size=len(tensors))
        entries.append(entry)
        parts.append((finish, payload))
    return _handles.add(entries, _outputs, parts)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing a list of tensors as one group: negotiated together and
    fused into as few collectives as possible. synchronize() returns a list."""
    return _grouped_allreduce_async(tensors, False, average, name, op, prescale_factor,
                                    postscale_factor, process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """In-place grouped_allreduce_async: synchronize() returns `tensors`."""
    return _grouped_allreduce_async(tensors, True, average, name, op, prescale_factor,
                                    postscale_factor, process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """Reduces a list of tensors in place as one group and returns them."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


# --- allgather

def _allgather_start(tensor, name, set_id, group="", group_size=0):
    src, code, device = _prepare(tensor, "allgather", name)
    if src.dim() == 0:
        src = src.reshape(1)
    core_handle = _enqueue(_ALLGATHER, name, src, None, code, device, set_id=set_id,
                           group=group, group_size=group_size)
    return (core_handle, code), src


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every rank's `tensor` along the first dimension
    (its size may differ between ranks). Returns a handle."""
    name = name or basics.auto_name("allgather")
    entry, src = _allgather_start(tensor, name, _set_id(process_set))
    return _handles.add((entry,), _gathered, (src, src.dtype))


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts allgathering a list of tensors as one group; synchronize()
    returns a list."""
    group = name or basics.auto_name("grouped_allgather")
    set_id = _set_id(process_set)
    tensors = list(tensors)
    entries, sources = [], []
    for index, tensor in enumerate(tensors):
        entry, src = _allgather_start(tensor, f"{group}.{index}", set_id, group, len(tensors))
        entries.append(entry)
        sources.append(src)
    return _handles.add(entries, _gathered_all, (sources, [s.dtype for s in sources]))


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Starts reducing a sparse COO tensor by allgathering its indices and
    values (duplicate indices then sum when the result is used or coalesced).
    Returns a function that waits and returns the reduced sparse tensor
    (Horovod's interface, used for sparse gradients)."""
    op = resolve_op(op)
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

def _broadcast_async(tensor, in_place, root_rank, name, process_set):
    name = name or basics.auto_name("broadcast")
    src, code, device = _prepare(tensor, "broadcast", name)
    output, finish, payload = _same_shape_output(tensor, src, in_place)
    core_handle = _enqueue(_BROADCAST, name, src, output, code, device,
                           root_rank=_root(root_rank, name), set_id=_set_id(process_set))
    return _handles.add(((core_handle, code),), finish, payload)


def _root(root_rank, name):
    try:
        return int(root_rank)
    except (TypeError, ValueError):
        raise ValueError(f"broadcast of '{name}': root_rank must be a rank number, "
                         f"got {root_rank!r}") from None


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts sending root_rank's `tensor` to every rank, into a new tensor.
    Returns a handle."""
    return _broadcast_async(tensor, False, root_rank, name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts overwriting `tensor` with root_rank's, in place. Returns a handle."""
    return _broadcast_async(tensor, True, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites `tensor` with root_rank's value on every rank and returns it."""
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
    """Starts sending splits[i] rows of `tensor` to rank i (even splits when
    None). synchronize() returns (received tensor, received splits)."""
    name = name or basics.auto_name("alltoall")
    src, code, device = _prepare(tensor, "alltoall", name)
    split_dtype = splits.dtype if isinstance(splits, torch.Tensor) else torch.int32
    core_handle = _enqueue(_ALLTOALL, name, src, None, code, device,
                           splits=_split_list(splits, name), set_id=_set_id(process_set))
    return _handles.add(((core_handle, code),), _exchanged, (src, src.dtype, split_dtype))


# --- reducescatter

def _reducescatter_start(tensor, name, op, prescale, postscale, set_id, group="", group_size=0):
    src, code, device = _prepare(tensor, "reducescatter", name)
    core_handle = _enqueue(_REDUCESCATTER, name, src, None, code, device, op, prescale=prescale,
                           postscale=postscale, set_id=set_id, group=group,
                           group_size=group_size)
    return (core_handle, code), src


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducing `tensor` across the ranks and scattering the first
    dimension: rank r gets its share of the rows (the first rows % size ranks
    one more). Returns a handle."""
    name = name or basics.auto_name("reducescatter")
    entry, src = _reducescatter_start(
        tensor, name, int(resolve_op(op)), _scale(prescale_factor, "prescale_factor"),
        _scale(postscale_factor, "postscale_factor"), _set_id(process_set))
    return _handles.add((entry,), _gathered, (src, src.dtype))


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducescatter on a list of tensors as one group; synchronize()
    returns a list."""
    group = name or basics.auto_name("grouped_reducescatter")
    op = int(resolve_op(op))
    prescale = _scale(prescale_factor, "prescale_factor")
    postscale = _scale(postscale_factor, "postscale_factor")
    set_id = _set_id(process_set)
    tensors = list(tensors)
    entries, sources = [], []
    for index, tensor in enumerate(tensors):
        entry, src = _reducescatter_start(tensor, f"{group}.{index}", op, prescale, postscale,
                                          set_id, group, len(tensors))
        entries.append(entry)
        sources.append(src)
    return _handles.add(entries, _gathered_all, (sources, [s.dtype for s in sources]))


# --- completion and control

def poll(handle):
    """True when the operation behind `handle` has finished (synchronize()
    will then not block)."""
    return _handles.poll(handle)


def synchronize(handle):
    """Waits for the operation behind `handle` and returns its result: a
    tensor, a list of tensors (grouped), or (tensor, received splits)
    (alltoall). Raises HorovodInternalError (a RuntimeError) if it failed."""
    return _handles.synchronize(handle)


def join(device=-1, process_set=global_process_set):
    """Marks this rank as out of data: it takes part in the other ranks'
    allreduces of process_set with zeros (an Average still divides by the
    set's size) until every rank of the set has joined; their allgather,
    broadcast, alltoall and reducescatter fail meanwhile. Blocks until then;
    returns the rank that joined last, the same on every rank. (`device` is
    accepted for Horovod compatibility; the zeros need no tensor here.)"""
    core = basics.core()
    _, _, _, last = core.wait(core.enqueue(int(OpType.JOIN), "__join",
                                           process_set_id=_set_id(process_set)))
    return last


def barrier(process_set=global_process_set):
    """Returns once every rank of process_set has called barrier()."""
    core = basics.core()
    core.wait(core.enqueue(int(OpType.BARRIER), basics.auto_name("barrier"),
                           process_set_id=_set_id(process_set)))
