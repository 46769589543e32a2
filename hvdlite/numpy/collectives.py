"""Collectives on NumPy arrays: arrays in, new arrays out; *_async versions
return a handle for synchronize()/poll()."""
import numpy as np

from hvdlite.common import basics
from hvdlite.common.handles import HandleTable
from hvdlite.common.ops import DataType, OpType, ReduceOp, resolve_op
from hvdlite.common.process_sets import global_process_set

try:  # bfloat16 for NumPy comes from ml_dtypes (shipped with JAX and TensorFlow)
    from ml_dtypes import bfloat16 as _bfloat16
except ImportError:  # pragma: no cover - optional
    _bfloat16 = None

_DTYPES = {
    np.dtype(np.uint8): DataType.UINT8,
    np.dtype(np.int8): DataType.INT8,
    np.dtype(np.int32): DataType.INT32,
    np.dtype(np.int64): DataType.INT64,
    np.dtype(np.float16): DataType.FLOAT16,
    np.dtype(np.float32): DataType.FLOAT32,
    np.dtype(np.float64): DataType.FLOAT64,
    np.dtype(np.bool_): DataType.BOOL,
}
if _bfloat16 is not None:
    _DTYPES[np.dtype(_bfloat16)] = DataType.BFLOAT16


_handles = HandleTable()


def _output(payload, results):
    """Results written into output(s) allocated before the call: payload is (inputs, outputs)."""
    return payload[1]


def _received(payload, results):
    raw, shape, _, _ = results[0]
    return raw.view(payload[1]).reshape(shape)


def _exchanged(payload, results):
    _, _, received_splits, _ = results[0]
    return _received(payload, results), np.asarray(received_splits, dtype=np.int64)


def _dtype_code(array, what):
    code = _DTYPES.get(array.dtype)
    if code is None:
        names = ", ".join(sorted(str(d) for d in _DTYPES))
        raise ValueError(f"{what}: dtype {array.dtype} is not supported; use one of {names}")
    return int(code)


def _as_input(array):
    # Not np.ascontiguousarray: it turns a 0-d array into shape (1,).
    return np.asarray(array, order="C")


def _set_id(process_set):
    if process_set is None:
        return 0
    return process_set._require_id()


_ALLREDUCE, _ALLGATHER, _BROADCAST = int(OpType.ALLREDUCE), int(OpType.ALLGATHER), int(OpType.BROADCAST)
_ALLTOALL, _REDUCESCATTER = int(OpType.ALLTOALL), int(OpType.REDUCESCATTER)


def _enqueue(op, name, array, output=None, wake=True, reduce_op=0, root_rank=0, prescale=1.0,
             postscale=1.0, splits=(), set_id=0, group="", group_size=0):
    """Queues one operation on host arrays (the core takes NumPy arrays as
    buffers). Positional arguments to the core: this is the hot path.
    wake=False when the caller synchronizes next and so runs the cycle itself."""
    return basics.core().enqueue(
        op, name, array, output, _dtype_code(array, name), array.shape, reduce_op, root_rank,
        prescale, postscale, splits, set_id, -1, group, group_size, (), 0, 0, wake)


def _allreduce(tensor, average, name, op, prescale_factor, postscale_factor, process_set, wake,
               in_place=False):
    if in_place:
        if not (isinstance(tensor, np.ndarray) and tensor.flags.c_contiguous
                and tensor.flags.writeable):
            raise ValueError(f"allreduce_ of '{name or 'unnamed'}': the array must be a writable, "
                             "C-contiguous np.ndarray to be reduced in place; pass "
                             "np.ascontiguousarray(x) and use its result, or call allreduce()")
        array = output = tensor
    else:
        array = _as_input(tensor)
        output = np.empty_like(array)
    handle = _enqueue(_ALLREDUCE, name or basics.auto_name("allreduce"), array, output, wake,
                      int(resolve_op(op, average)), 0, float(prescale_factor),
                      float(postscale_factor), (), _set_id(process_set))
    return _handles.add(((handle, 0),), _output, (array, output))


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    return _allreduce(tensor, average, name, op, prescale_factor, postscale_factor, process_set,
                      True)


def allreduce(tensor, average=None, name=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` across the ranks of process_set (default: average)."""
    return synchronize(_allreduce(tensor, average, name, op, prescale_factor, postscale_factor,
                                  process_set, False))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """allreduce_async into `tensor` itself (a writable, C-contiguous array):
    no output is allocated; synchronize() returns `tensor`."""
    return _allreduce(tensor, average, name, op, prescale_factor, postscale_factor, process_set,
                      True, in_place=True)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """allreduce into `tensor` itself, as hvdlite.torch.allreduce_ does; returns it.
    For large arrays this also saves the page faults of a new output."""
    return synchronize(_allreduce(tensor, average, name, op, prescale_factor, postscale_factor,
                                  process_set, False, in_place=True))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Allreduces a list of arrays as one group: negotiated, fused and completed together."""
    arrays = [_as_input(t) for t in tensors]
    op = resolve_op(op, average)
    group = name or basics.auto_name("grouped_allreduce")
    outputs = [np.empty_like(a) for a in arrays]
    handles = []
    for index, (array, output) in enumerate(zip(arrays, outputs)):
        handles.append(_enqueue(
            _ALLREDUCE, f"{group}.{index}", array, output, reduce_op=int(op),
            prescale=float(prescale_factor), postscale=float(postscale_factor),
            set_id=_set_id(process_set), group=group, group_size=len(arrays)))
    return _handles.add([(h, 0) for h in handles], _output, (arrays, outputs))


def grouped_allreduce(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                               postscale_factor, process_set))


def allgather_async(tensor, name=None, process_set=global_process_set):
    array = _as_input(tensor)
    if array.ndim == 0:
        array = array.reshape(1)
    name = name or basics.auto_name("allgather")
    handle = _enqueue(_ALLGATHER, name, array, set_id=_set_id(process_set))
    return _handles.add(((handle, int(_DTYPES[array.dtype])),), _received, (array, array.dtype))


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's array along the first dimension (sizes may differ)."""
    return synchronize(allgather_async(tensor, name, process_set))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    array = _as_input(tensor)
    name = name or basics.auto_name("broadcast")
    output = np.empty_like(array)
    handle = _enqueue(_BROADCAST, name, array, output, root_rank=int(root_rank),
                      set_id=_set_id(process_set))
    return _handles.add(((handle, 0),), _output, (array, output))


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's array on every rank (root_rank is a global rank)."""
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    array = _as_input(tensor)
    name = name or basics.auto_name("alltoall")
    split_list = [] if splits is None else [int(s) for s in np.asarray(splits).reshape(-1)]
    handle = _enqueue(_ALLTOALL, name, array, splits=split_list, set_id=_set_id(process_set))
    return _handles.add(((handle, int(_DTYPES[array.dtype])),), _exchanged, (array, array.dtype))


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends splits[i] rows of `tensor` to rank i; returns (received rows, received splits)."""
    return synchronize(alltoall_async(tensor, splits, name, process_set))


def reducescatter_async(tensor, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                        process_set=global_process_set):
    array = _as_input(tensor)
    op = resolve_op(op)
    name = name or basics.auto_name("reducescatter")
    handle = _enqueue(_REDUCESCATTER, name, array, reduce_op=int(op),
                      prescale=float(prescale_factor), postscale=float(postscale_factor),
                      set_id=_set_id(process_set))
    return _handles.add(((handle, int(_DTYPES[array.dtype])),), _received, (array, array.dtype))


def reducescatter(tensor, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                  process_set=global_process_set):
    """Reduces across ranks and gives rank r its share of the first dimension (the
    first rows % size ranks get one row more)."""
    return synchronize(reducescatter_async(tensor, name, op, prescale_factor, postscale_factor,
                                           process_set))


def barrier(process_set=global_process_set):
    """Returns once every rank of process_set has called barrier()."""
    handle = basics.core().enqueue(op=int(OpType.BARRIER), name=basics.auto_name("barrier"),
                                   process_set_id=_set_id(process_set), wake=False)
    basics.core().wait(handle)


def join(process_set=global_process_set):
    """Marks this rank as out of data: it takes part in the other ranks'
    allreduces of process_set with zeros (an Average still divides by the
    set's size) until every rank of the set has joined; their allgather,
    broadcast, alltoall and reducescatter fail meanwhile. Returns the last
    rank to join, the same on every rank."""
    handle = basics.core().enqueue(op=int(OpType.JOIN), name="__join",
                                   process_set_id=_set_id(process_set), wake=False)
    _, _, _, last = basics.core().wait(handle)
    return last


def poll(handle):
    """True when the operation behind `handle` has finished."""
    return _handles.poll(handle)


def synchronize(handle):
    """Waits for the operation and returns its result (raises HvdliteInternalError
    if it failed, ValueError for bad arguments detected by other ranks)."""
    return _handles.synchronize(handle)
