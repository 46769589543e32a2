"""Collectives on NumPy arrays: arrays in, new arrays out; *_async versions
return a handle for synchronize()/poll()."""
import numpy as np

from hvdlite.common import basics, collective_table as table, requests
from hvdlite.common.fast_entries import without_frame
from hvdlite.common.ops import DataType
from hvdlite.common.process_sets import global_process_set
from hvdlite.common.requests import (
    ALLREDUCE, NUMPY, add_handle, barrier, join, process_set_id, reduction, root_rank,
    tensor_name)

try:  # bfloat16 for NumPy comes from ml_dtypes (shipped with JAX and TensorFlow)
    from ml_dtypes import bfloat16 as _bfloat16
except ImportError:  # pragma: no cover - optional
    _bfloat16 = None


def _numpy_dtype(name):
    """np.dtype of a name in the core's NumPy table; None for bfloat16 without ml_dtypes."""
    if name == "bfloat16":
        return np.dtype(_bfloat16) if _bfloat16 is not None else None
    return np.dtype(name)


# The one NumPy dtype table (Note [One NumPy dtype table] in
# csrc/python/numpy_dtypes.h), from hvdlite._codes, which loads no core.
_DTYPES = {_numpy_dtype(name): DataType(code)
           for name, code in basics.compiled_module("_codes").numpy_dtypes.items()}
_DTYPES.pop(None, None)


# What synchronize() returns, as the table declares it per collective (Note
# [The binding layer as a table] in hvdlite/common/collective_table.py); the
# payloads keep the input (and output) arrays alive until then, since the
# core holds only their addresses.
def _from_core(raw, shape, like):
    """The core's output bytes as an array of `like`'s dtype, without a copy."""
    return raw.view(like.dtype).reshape(shape)


def _splits_of(received, like):
    return np.asarray(received, dtype=np.int64)


_FINISHING = table.Finishing(_from_core, _splits_of)


def dtype_code(array, kind, name):
    """The core's code for `array`'s dtype, or ValueError naming the operation
    (`kind`) and the tensor: the host layer's dtype check, which hvdlite.jax
    also makes at trace time."""
    code = _DTYPES.get(array.dtype)
    if code is None:
        raise requests.unsupported_dtype(kind, name, array.dtype)
    return int(code)


def _as_input(array):
    # Not np.ascontiguousarray: it turns a 0-d array into shape (1,).
    return np.asarray(array, order="C")


def _start(collective, tensor, name, process_set, **fields):
    """Queues one `collective` (a row of hvdlite/common/collective_table.py)
    on a host array, with its request `fields`: the input made contiguous (a
    scalar as one row where the table says so), its output allocated here
    when it is sized like the input; returns the handle, finished as the
    table says. The core takes NumPy arrays as buffers."""
    array = _as_input(tensor)
    if collective.scalar_as_row and array.ndim == 0:
        array = array.reshape(1)
    output = np.empty_like(array) if collective.allocated_before else None
    code = dtype_code(array, collective.kind, name)
    handle = requests.enqueue(op=collective.op, name=name,
                              process_set_id=process_set_id(process_set), input=array,
                              output=output, dtype=code, shape=array.shape, **fields)
    return add_handle(NUMPY, ((handle, code),), _FINISHING.of(collective), (array, output))


def _allreduce_buffers(tensor, in_place, name):
    """(input, output) arrays of an allreduce: `tensor` itself twice in place."""
    if in_place:
        flags = tensor.flags if isinstance(tensor, np.ndarray) else None
        if not (flags is not None and flags.c_contiguous and flags.writeable):
            raise ValueError(f"allreduce_ of '{name}': the array must be a writable, "
                             "C-contiguous np.ndarray to be reduced in place; pass "
                             "np.ascontiguousarray(x) and use its result, or call allreduce()")
        return tensor, tensor
    array = _as_input(tensor)
    return array, np.empty_like(array)


def _allreduce_now(tensor, average, name, op, prescale_factor, postscale_factor, process_set,
                   in_place):
    """allreduce and allreduce_: queued and waited for in one call into the
    core (Note [One call for a synchronous collective] in
    csrc/python/bind_collectives.cc), with no handle; returns the output."""
    op, prescale, postscale, set_id = reduction(op, average, prescale_factor, postscale_factor,
                                                process_set)
    name = name or basics.auto_name("allreduce")
    # _allreduce_buffers and dtype_code inlined for the common case: each
    # Python call costs ~0.1 us here, a few % of a small allreduce.
    flags = tensor.flags if in_place and isinstance(tensor, np.ndarray) else None
    if flags is not None and flags.c_contiguous and flags.writeable:
        array = output = tensor
    else:
        array, output = _allreduce_buffers(tensor, in_place, name)
    code = _DTYPES.get(array.dtype)
    requests.run(op=ALLREDUCE, name=name, process_set_id=set_id, input=array, output=output,
                 dtype=code if code is not None else dtype_code(array, "allreduce", name),
                 shape=array.shape, reduce_op=op, prescale=prescale, postscale=postscale)
    return output


def _allreduce_start(tensor, in_place, name, op, prescale, postscale, set_id, group="",
                     group_size=0):
    """Queues one allreduce; returns ((core handle, code), (finish, (input,
    output))). The hottest path (every gradient): one call into the core,
    keywords only."""
    array, output = _allreduce_buffers(tensor, in_place, name)
    code = dtype_code(array, "allreduce", name)
    handle = requests.enqueue(op=ALLREDUCE, name=name, process_set_id=set_id, input=array,
                              output=output, dtype=code, shape=array.shape, reduce_op=op,
                              prescale=prescale, postscale=postscale, group=group,
                              group_size=group_size)
    return (handle, code), (table.written, (array, output))


def _allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor, process_set,
                     in_place=False):
    op, prescale, postscale, set_id = reduction(op, average, prescale_factor, postscale_factor,
                                                process_set)
    entry, (finish, payload) = _allreduce_start(tensor, in_place, tensor_name(name, "allreduce"),
                                                op, prescale, postscale, set_id)
    return add_handle(NUMPY, (entry,), finish, payload)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """`allreduce` without waiting: takes its arguments and raises as it does at the call.

    Args:
        tensor (np.ndarray): the same shape and dtype on every rank.
        average (bool | None): True is `op=Average`, False `op=Sum` (Horovod's old switch).
        name (str | None): unique among operations in flight; unnamed ones are numbered.
        op (ReduceOp | None): `Average` when None; also `Sum`, `Min`, `Max`, `Product`, `Adasum`.
        prescale_factor (float): multiplies the input before the reduction.
        postscale_factor (float): multiplies the result.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        int: a handle for `synchronize(handle)`, which waits and returns the reduced array,
            or `poll(handle)`. The input must stay unchanged until then.
    """
    return _allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor,
                            process_set)


def allreduce(tensor, average=None, name=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` across the ranks of `process_set`: their average by default.

    Args:
        tensor (np.ndarray): the same shape and dtype on every rank.
        average (bool | None): Horovod's old switch: True is `op=Average`, False `op=Sum`.
        name (str | None): unique among operations in flight; unnamed operations are numbered,
            so every rank must issue them in the same order.
        op (ReduceOp | None): `Average` (default), `Sum`, `Min`, `Max`, `Product` or `Adasum`.
        prescale_factor (float): multiplies the input before the reduction.
        postscale_factor (float): multiplies the result.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        np.ndarray: a new array; `tensor` is unchanged (`allreduce_` writes into it).

    Raises:
        ValueError: for bad arguments (dtype, op, root rank, splits, process set), at the call.
        HvdliteInternalError: when the collective fails at run time (ranks disagree, a peer is
            lost, shutdown), on every rank.

    Example:
        ```python
        avg = hvd.allreduce(np.full(4, float(hvd.rank())))   # 0.5 everywhere on 2 ranks
        ```
    """
    return _allreduce_now(tensor, average, name, op, prescale_factor, postscale_factor,
                          process_set, in_place=False)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """allreduce_async into `tensor` itself: no output is allocated.

    Args:
        tensor (np.ndarray): a writable, C-contiguous array, overwritten with the result.
        average (bool | None): Horovod's old switch: True Average, False Sum.
        name (str | None): the operation's name (None: numbered).
        op (ReduceOp | None): the reduction, Average when None.
        prescale_factor (float): scales the input first.
        postscale_factor (float): scales the reduced value.
        process_set (ProcessSet): whose ranks reduce (default: all).

    Returns:
        int: a handle; `synchronize()` returns `tensor`.

    Raises:
        ValueError: when `tensor` is not a writable, C-contiguous np.ndarray, or for other
            bad arguments, at the call.
    """
    name = tensor_name(name, "allreduce")
    # Every gradient's call: one call into the core (Note [Asynchronous
    # allreduce of an array in one call] in csrc/python/bind_collectives.cc),
    # else the general path, which checks and says what is wrong.
    entry = requests.allreduce_array_async(tensor, name, op, prescale_factor, postscale_factor,
                                           process_set, average)
    if entry is not None:
        return add_handle(NUMPY, (entry,), table.written, (tensor, tensor))
    return _allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor,
                            process_set, in_place=True)


# The def is the general path and the documentation; calls reach
# requests.allreduce_array without its frame (Note [A public collective
# without a Python frame] in csrc/python/codes/fast_entry.cc), and what it
# declines goes straight to _allreduce_now, which does not ask it again
# (Note [Declined without asking twice]).
@without_frame(requests, "allreduce_array", ("tensor", "name", "op", "prescale_factor",
                                             "postscale_factor", "process_set", "average"),
               declined=(_allreduce_now, ("tensor", "average", "name", "op", "prescale_factor",
                                          "postscale_factor", "process_set", True)))
def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """allreduce into `tensor` itself, as hvdlite.torch.allreduce_ does.
    For large arrays this also saves the page faults of a new output.

    Args:
        tensor (np.ndarray): a writable, C-contiguous array; the result is written into it.
        average (bool | None): as in `allreduce`.
        name (str | None): unique among operations in flight; numbered when None.
        op (ReduceOp | None): `Average` by default.
        prescale_factor (float): input scale.
        postscale_factor (float): output scale.
        process_set (ProcessSet): the ranks of the reduction (default: all).

    Returns:
        np.ndarray: `tensor`.

    Raises:
        ValueError: when `tensor` is not a writable, C-contiguous np.ndarray, or for other
            bad arguments, at the call.
        HvdliteInternalError: at run time, as `allreduce` raises it.
    """
    done = requests.allreduce_array(tensor, name, op, prescale_factor, postscale_factor, process_set,
                                    average)
    if done is not None:
        return done
    return _allreduce_now(tensor, average, name, op, prescale_factor, postscale_factor,
                          process_set, in_place=True)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Allreduces a list of arrays as one group: negotiated, fused and completed together.

    Args:
        tensors (list[np.ndarray]): the arrays, in the same order on every rank.
        average (bool | None): Horovod's old switch, for every array of the group.
        name (str | None): the group's name; its arrays are named after it.
        op (ReduceOp | None): one reduction for all (Average when None).
        prescale_factor (float): multiplies every input first.
        postscale_factor (float): multiplies every result.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        int: a handle; `synchronize()` returns the list of new reduced arrays.
    """
    op, prescale, postscale, set_id = reduction(op, average, prescale_factor,
                                                postscale_factor, process_set)

    def start(array, member, group, group_size):
        return _allreduce_start(array, False, member, op, prescale, postscale, set_id, group,
                                group_size)
    return requests.add_group(NUMPY, tensors, name, table.ALLREDUCE.grouped_kind, start,
                              table.each)


def grouped_allreduce(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set):
    """Allreduces a list of arrays as one group: negotiated, fused and completed together.

    Args:
        tensors (list[np.ndarray]): the arrays, in the same order on every rank.
        average (bool | None): as in `allreduce`, for every array of the group.
        name (str | None): the group's name; its arrays are named after it.
        op (ReduceOp | None): as in `allreduce`.
        prescale_factor (float): as in `allreduce`.
        postscale_factor (float): as in `allreduce`.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        list[np.ndarray]: the reduced arrays, in the order given.

    Raises:
        ValueError: for bad arguments (dtype, op, process set), at the call.
        HvdliteInternalError: when the collective fails at run time (ranks disagree, a
            peer is lost, shutdown).

    Example:
        ```python
        w_grad, b_grad = hvd.grouped_allreduce([w_grad, b_grad], name="grads")
        ```
    """
    return synchronize(grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                               postscale_factor, process_set))


def allgather_async(tensor, name=None, process_set=global_process_set):
    """`allgather` without waiting: takes its arguments and raises as it does at the call.

    Args:
        tensor (np.ndarray): this rank's rows; the other dimensions agree across ranks.
        name (str | None): as in `allreduce`.
        process_set (ProcessSet): the ranks whose rows are gathered (default: all).

    Returns:
        int: a handle for `synchronize(handle)`, which waits and returns the concatenated
            array, or `poll(handle)`. The input must stay unchanged until then.
    """
    return _start(table.ALLGATHER, tensor, tensor_name(name, "allgather"), process_set)


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's array along the first dimension.

    Args:
        tensor (np.ndarray): the same dtype and trailing dimensions on every rank; the first
            dimension may differ (a scalar counts as one row).
        name (str | None): as in `allreduce`.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        np.ndarray: the ranks' rows in rank order.

    Raises:
        ValueError: for bad arguments, at the call.
        HvdliteInternalError: at run time, as `allreduce` raises it.

    Example:
        ```python
        rows = hvd.allgather(np.arange(hvd.rank() + 1))   # [0, 0, 1] on 2 ranks
        ```
    """
    return synchronize(allgather_async(tensor, name, process_set))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """`broadcast` without waiting: takes its arguments and raises as it does at the call.

    Args:
        tensor (np.ndarray): the value on the root; the shape and dtype elsewhere.
        root_rank (int): the sending rank.
        name (str | None): unique among operations in flight (None: numbered).
        process_set (ProcessSet): the ranks that receive it (default: all).

    Returns:
        int: a handle for `synchronize(handle)`, which waits and returns root's array,
            or `poll(handle)`. The input must stay unchanged until then.
    """
    return _broadcast_async(tensor, root_rank, tensor_name(name, "broadcast"), process_set)


def _broadcast_async(tensor, root, name, process_set):
    return _start(table.BROADCAST, tensor, name, process_set, root_rank=root_rank(root, name))


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Gives every rank `root_rank`'s array.

    Args:
        tensor (np.ndarray): the same shape and dtype on every rank; only root's values count.
        root_rank (int): a global rank, a member of `process_set`.
        name (str | None): as in `allreduce`.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        np.ndarray: a new array holding root's values.

    Raises:
        ValueError: for bad arguments, at the call.
        HvdliteInternalError: at run time, as `allreduce` raises it.
    """
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """`alltoall` without waiting: takes its arguments and raises as it does at the call.

    Args:
        tensor (np.ndarray): the rows to send, in rank order.
        splits (Sequence[int] | None): rows for each rank of the set; None splits evenly.
        name (str | None): the operation's name; unnamed ones are numbered.
        process_set (ProcessSet): the ranks that exchange rows (default: all).

    Returns:
        int: a handle for `synchronize(handle)`, which waits and returns `(rows, splits)`,
            or `poll(handle)`. The input must stay unchanged until then.
    """
    split_list = [] if splits is None else [int(s) for s in np.asarray(splits).reshape(-1)]
    return _start(table.ALLTOALL, tensor, tensor_name(name, "alltoall"), process_set,
                  splits=split_list)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends `splits[i]` rows of `tensor` to rank i, and receives each rank's rows for this one.

    Args:
        tensor (np.ndarray): the rows to send, in rank order.
        splits (Sequence[int] | None): rows for each rank of the set, summing to the first
            dimension; None splits evenly.
        name (str | None): as in `allreduce`.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        tuple[np.ndarray, np.ndarray]: the received rows (in rank order) and how many came
        from each rank.

    Raises:
        ValueError: for bad arguments, at the call.
        HvdliteInternalError: at run time, as `allreduce` raises it.

    Example:
        ```python
        rows, received = hvd.alltoall(x, splits=[2, 1])   # 2 rows to rank 0, 1 to rank 1
        ```
    """
    return synchronize(alltoall_async(tensor, splits, name, process_set))


def reducescatter_async(tensor, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                        process_set=global_process_set):
    """`reducescatter` without waiting: takes its arguments and raises as it does at the call.

    Args:
        tensor (np.ndarray): the same shape and dtype on every rank.
        name (str | None): names the operation; None numbers it.
        op (ReduceOp | None): `Average` (default), `Sum`, `Min`, `Max` or `Product`.
        prescale_factor (float): applied to the input before the reduction.
        postscale_factor (float): applied to this rank's share.
        process_set (ProcessSet): the ranks of the reduction (default: all).

    Returns:
        int: a handle for `synchronize(handle)`, which waits and returns this rank's rows,
            or `poll(handle)`. The input must stay unchanged until then.
    """
    op, prescale, postscale, _ = reduction(op, None, prescale_factor, postscale_factor, process_set,
                                           "reducescatter")
    return _start(table.REDUCESCATTER, tensor, tensor_name(name, "reducescatter"), process_set,
                  reduce_op=op, prescale=prescale, postscale=postscale)


def reducescatter(tensor, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                  process_set=global_process_set):
    """Reduces across the ranks and gives each rank its share of the first dimension.

    Args:
        tensor (np.ndarray): the same shape and dtype on every rank.
        name (str | None): as in `allreduce`.
        op (ReduceOp | None): `Average` (default), `Sum`, `Min`, `Max` or `Product`.
        prescale_factor (float): multiplies the input before the reduction.
        postscale_factor (float): multiplies the result.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        np.ndarray: this rank's rows of the reduced array; the first `rows % size` ranks get
        one row more.

    Raises:
        ValueError: for bad arguments, at the call.
        HvdliteInternalError: at run time, as `allreduce` raises it.
    """
    return synchronize(reducescatter_async(tensor, name, op, prescale_factor, postscale_factor,
                                           process_set))


def poll(handle):
    """Whether the operation behind `handle` has finished.

    Args:
        handle (int): from an *_async function.

    Returns:
        bool: True when `synchronize(handle)` will not wait.
    """
    return requests.poll(handle, NUMPY)


def synchronize(handle):
    """Waits for the operation and returns its result.

    Args:
        handle (int): from an *_async function.

    Returns:
        np.ndarray | list | tuple: an array, a list of arrays (grouped), or
            (rows, splits) (alltoall).

    Raises:
        HvdliteInternalError: if the operation failed.
        ValueError: for bad arguments detected by other ranks.
    """
    return requests.synchronize(handle, NUMPY)
