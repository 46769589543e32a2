"""Collectives on JAX arrays, eagerly or inside jax.jit.

Note [Host callback]
~~~~~~~~~~~~~~~~~~~~
Outside a trace an array on the CPU goes straight to hvdlite.numpy; one on
a GPU takes the custom call below, compiled for it (Note [Eager arrays on a
GPU] in ffi.py). Inside jax.jit a collective becomes one XLA FFI custom call
of hvdlite's C++ handler (hvdlite/jax/ffi.py; on the CPU and CUDA
platforms), which queues the requests and waits for them when the compiled
step reaches it; where that handler cannot be used (ffi.jit_path() says
which, and the log says why), an *ordered* io_callback that calls back into
Python with the operands as NumPy arrays (on a GPU: copied to the host and
back).
Both carry JAX's ordered IO effect: XLA never prunes them (a collective whose
result is unused must still run, or the other ranks wait for it) and runs
them in program order on every rank (Note [Ordered custom calls] in ffi.py).
The name of each collective is fixed when the function is traced,
identically on every rank, so every run of the compiled step reuses it and
the core's response cache skips negotiation.

The custom call costs what any XLA instruction does, the io_callback 0.5-3 ms
more per crossing on CPU (JAX's dispatch of a step with an ordered effect
comes on top of both; numbers in docs/jax.md). Either way a list of arrays
(gradients, a model's parameters) crosses in ONE call that queues every array
and then waits: the core fuses them as it would eager requests. Shapes must be known at trace time, so
inside jit allgather and alltoall assume the same first dimension on every
rank (checked when the step runs), alltoall splits evenly, and reducescatter
gives this rank its share of the rows.
"""
import jax
import jax.numpy as jnp
import numpy as np

from hvdlite.common import requests
from hvdlite.common.ops import ReduceOp
from hvdlite.common.process_sets import global_process_set
from hvdlite.common.collective_table import ALLGATHER, REDUCESCATTER, member_name
from hvdlite.jax import ffi
from hvdlite.jax.compression import Compression
from hvdlite.jax.host_call import call_host, is_traced
from hvdlite.jax.host_call import like as _like
from hvdlite.numpy import collectives as host

barrier = host.barrier
join = host.join


def cross(host_function, result_shapes, arrays, op, names, **attributes):
    """Runs one collective of kind `op` (api.h's code) on a list of arrays:
    inside jit as one FFI custom call (attributes: ffi.collective's) or the
    io_callback fallback running host_function(*NumPy arrays) -> list of
    results; eagerly, host_function directly. Returns a list of arrays."""
    if is_traced(*arrays):
        if ffi.jit_path() == ffi.FFI:
            return ffi.collective(op, arrays, result_shapes, names, **attributes)
    elif ffi.on_gpu(arrays):
        return ffi.eager_collective(op, arrays, result_shapes, names, **attributes)
    return call_host(host_function, result_shapes, *arrays)


def _set_size(process_set):
    return process_set.size() if process_set is not None else global_process_set.size()


def _device_of(array):
    """The device of a concrete array (None for other objects)."""
    devices = getattr(array, "devices", None)
    return next(iter(devices())) if devices is not None else None


def _check_rows(result, rows, kind, name):
    if result.shape[0] != rows:
        raise ValueError(
            f"{kind} of '{name}' inside jax.jit: expected {rows} rows, got {result.shape[0]}: "
            "every rank must pass the same first dimension inside jit (shapes are fixed when "
            "the step is traced); call it outside jit for ragged sizes")
    return result


def allreduce(tensor, average=None, name=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set, compression=None):
    """Reduces a JAX array across the ranks: their average by default.

    Works eagerly and inside `jax.jit` (an XLA FFI custom call, or an ordered host callback
    where that cannot be used; `jit_path()` says which).

    Args:
        tensor (jax.Array): the same shape and dtype on every rank.
        average (bool | None): Horovod's old switch: True is `op=Average`, False `op=Sum`.
        name (str | None): the collective's name; unnamed ones are numbered in call order.
        op (ReduceOp | None): `Average` (default), `Sum`, `Min`, `Max` or `Product`.
        prescale_factor (float): scales the input before the reduction.
        postscale_factor (float): scales the result.
        process_set (ProcessSet): the ranks that take part (default: all).
        compression: `Compression.none`, `.fp16` or `.bf16`.

    Returns:
        jax.Array: the reduced array.

    Raises:
        ValueError: for bad arguments, at the call (at trace time inside jit).
        HvdliteInternalError: eagerly, when the collective fails at run time; inside jit JAX
            raises its runtime error with the same text (`hvdlite_error(error)` gives the
            hvdlite kind).
    """
    return grouped_allreduce([tensor], average, name, op, prescale_factor, postscale_factor,
                             process_set, compression, _kind="allreduce")[0]


def grouped_allreduce(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set, compression=None,
                      _kind="grouped_allreduce"):
    """Allreduces a list of arrays as one group: negotiated, fused and completed
    together (one host callback inside jit).

    Args:
        tensors (list[jax.Array]): the arrays, in the same order on every rank.
        average (bool | None): Horovod's old switch, for every array: True Average, False Sum.
        name (str | None): the group's name; its arrays are named `name.0`, `name.1`, ...
        op (ReduceOp | None): one reduction for all (Average when None).
        prescale_factor (float): scales every input first.
        postscale_factor (float): scales every result.
        process_set (ProcessSet): the ranks that take part (default: all).
        compression: `Compression.none` (None), `.fp16` or `.bf16`.

    Returns:
        list[jax.Array]: the reduced arrays, in input order.

    Raises:
        ValueError: for bad arguments, at the call (at trace time inside jit).
        HvdliteInternalError: eagerly, at run time, as `allreduce` raises it.
    """
    requests.reduction(op, average, prescale_factor, postscale_factor, process_set)  # checks
    name = requests.tensor_name(name, _kind)
    names = [name] if _kind == "allreduce" else [member_name(name, i) for i in range(len(tensors))]
    return allreduce_many(tensors, names, average, op, prescale_factor, postscale_factor,
                          process_set, compression)


def allreduce_many(tensors, names, average=None, op=None, prescale_factor=1.0,
                   postscale_factor=1.0, process_set=global_process_set, compression=None):
    """Allreduces each array under its own name, in one host call: the core
    negotiates and fuses them as separate requests (gradients)."""
    compression = compression or Compression.none
    compressed = [compression.compress(jnp.asarray(t)) for t in tensors]
    sent = [array for array, _ in compressed]

    if not sent:
        return []
    reduce_op, prescale, postscale, _ = requests.reduction(op, average, prescale_factor,
                                                           postscale_factor, process_set)

    def reduce_on_host(*arrays):
        handles = [host.allreduce_async(a, average, n, op, prescale_factor, postscale_factor,
                                        process_set) for a, n in zip(arrays, names)]
        return [host.synchronize(h) for h in handles]

    reduced = cross(reduce_on_host, [_like(s) for s in sent], sent, requests.ALLREDUCE, names,
                    reduce_op=reduce_op, prescale=prescale, postscale=postscale,
                    process_set=process_set)
    return [compression.decompress(r, c) for r, (_, c) in zip(reduced, compressed)]


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Gives every rank root_rank's array.

    Args:
        tensor (jax.Array): the value on the root; its shape and dtype elsewhere.
        root_rank (int): the sending rank, a global rank.
        name (str | None): the collective's name; unnamed ones are numbered in call order.
        process_set (ProcessSet): the ranks that receive it (default: all).

    Returns:
        jax.Array: root_rank's array.

    Raises:
        ValueError: for a bad root rank, at the call.
        HvdliteInternalError: eagerly, at run time, as `allreduce` raises it.
    """
    name = requests.tensor_name(name, "broadcast")
    return broadcast_many([tensor], [name], root_rank, process_set)[0]


def broadcast_many(tensors, names, root_rank, process_set=global_process_set):
    """Broadcasts each array under its own name, in one host call."""
    arrays = [jnp.asarray(t) for t in tensors]

    def broadcast_on_host(*values):
        handles = [host.broadcast_async(v, root_rank, n, process_set)
                   for v, n in zip(values, names)]
        return [host.synchronize(h) for h in handles]

    if not arrays:
        return []
    root = requests.root_rank(root_rank, names[0])
    return cross(broadcast_on_host, [_like(a) for a in arrays], arrays, requests.BROADCAST, names,
                 root_rank=root, process_set=process_set)


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's array along the first dimension (ragged sizes
    outside jit; the same size on every rank inside jit).

    Args:
        tensor (jax.Array): this rank's rows; a scalar counts as one row.
        name (str | None): names the collective; None numbers it.
        process_set (ProcessSet): the ranks whose rows are gathered (default: all).

    Returns:
        jax.Array: every rank's rows, in rank order.

    Raises:
        HvdliteInternalError: eagerly, at run time, as `allreduce` raises it.
    """
    name = requests.tensor_name(name, "allgather")
    array = jnp.asarray(tensor)
    if array.ndim == 0:
        array = array.reshape(1)
    if not is_traced(array):
        if not ffi.on_gpu([array]):
            return jnp.asarray(host.allgather(np.asarray(array), name, process_set))
        # Ragged eagerly: the rows every rank sends, then the GPU allgather.
        rows = int(host.allreduce(np.array([array.shape[0]], np.int64), op=ReduceOp.Sum,
                                  name=f"{name}.rows", process_set=process_set)[0])
    else:
        rows = ALLGATHER.output_shape(array.shape, _set_size(process_set), None)[0]
    return cross(lambda a: [_check_rows(host.allgather(a, name, process_set), rows, "allgather",
                                        name)],
                 [_like(array, rows)], [array], requests.ALLGATHER, [name],
                 process_set=process_set)[0]


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends splits[i] rows of `tensor` to rank i. Inside jit only even splits
    (splits=None).

    Args:
        tensor (jax.Array): the rows to send, in rank order.
        splits (Sequence[int] | None): rows for each rank; None splits evenly.
        name (str | None): the collective's name (None: numbered).
        process_set (ProcessSet): the ranks that exchange rows (default: all).

    Returns:
        tuple[jax.Array, jax.Array]: the received rows and the received splits (int32).

    Raises:
        ValueError: inside jit, for splits other than None or a first dimension that is
            not a multiple of the set's size.
        HvdliteInternalError: eagerly, at run time, as `allreduce` raises it.
    """
    name = requests.tensor_name(name, "alltoall")
    array = jnp.asarray(tensor)
    size = _set_size(process_set)
    even = splits is None and array.shape[0] % size == 0
    if not is_traced(array) and not (even and ffi.on_gpu([array])):
        # Uneven splits of an eager GPU array go through the host: the CUDA
        # handler takes the even ones only, as inside jit.
        received, received_splits = host.alltoall(np.asarray(array), splits, name, process_set)
        return jnp.asarray(received, device=_device_of(array)), jnp.asarray(received_splits, dtype=jnp.int32)
    if not even:
        raise ValueError(f"alltoall of '{name}' inside jax.jit: splits must be None and the "
                         f"first dimension ({array.shape[0]}) a multiple of the {size} ranks "
                         "(received sizes must be known when the step is traced); call it "
                         "outside jit for uneven splits")

    def exchange(a):
        received, _ = host.alltoall(a, None, name, process_set)
        return [_check_rows(received, a.shape[0], "alltoall", name)]

    received = cross(exchange, [_like(array)], [array], requests.ALLTOALL, [name],
                     process_set=process_set)[0]
    return received, jnp.full((size,), array.shape[0] // size, dtype=jnp.int32)


def reducescatter(tensor, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                  process_set=global_process_set):
    """Reduces across ranks and gives rank r its share of the first dimension
    (the first rows % size ranks get one row more).

    Args:
        tensor (jax.Array): the same shape and dtype on every rank.
        name (str | None): unique among collectives in flight; unnamed ones are numbered.
        op (ReduceOp | None): `Average` (default), `Sum`, `Min`, `Max` or `Product`.
        prescale_factor (float): multiplies the input before the reduction.
        postscale_factor (float): multiplies this rank's share.
        process_set (ProcessSet): the ranks of the reduction (default: all).

    Returns:
        jax.Array: this rank's rows of the reduced array.

    Raises:
        ValueError: for bad arguments, at the call.
        HvdliteInternalError: eagerly, at run time, as `allreduce` raises it.
    """
    name = requests.tensor_name(name, "reducescatter")
    return reducescatter_many([tensor], [name], op, prescale_factor, postscale_factor,
                              process_set)[0]


def reducescatter_many(tensors, names, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set, compression=None):
    """Reduce-scatters each array under its own name, in one crossing: the
    core negotiates and fuses them as separate requests (a sharded
    optimizer's gradients). A 0-d array counts as one row; rank r gets its
    rows as Note [Sharding by rows] in hvdlite/common/sharding.py splits them."""
    reduce_op, prescale, postscale, _ = requests.reduction(op, None, prescale_factor,
                                                           postscale_factor, process_set,
                                                           "reducescatter")
    compression = compression or Compression.none
    compressed = [compression.compress(jnp.asarray(t)) for t in tensors]
    sent = [array.reshape(1) if array.ndim == 0 else array for array, _ in compressed]
    if not sent:
        return []
    size = _set_size(process_set)
    rank = (process_set or global_process_set).rank()
    shapes = [_like(a, REDUCESCATTER.output_shape(a.shape, size, rank)[0]) for a in sent]

    def scatter_on_host(*arrays):
        handles = [host.reducescatter_async(a, n, op, prescale_factor, postscale_factor,
                                            process_set) for a, n in zip(arrays, names)]
        return [host.synchronize(h) for h in handles]

    reduced = cross(scatter_on_host, shapes, sent, requests.REDUCESCATTER, names,
                    reduce_op=reduce_op, prescale=prescale, postscale=postscale,
                    process_set=process_set)
    return [compression.decompress(r, c) for r, (_, c) in zip(reduced, compressed)]


def allgather_many(tensors, names, rows, process_set=global_process_set):
    """Allgathers each array under its own name, in one crossing, where the
    caller knows each result's rows (rows[i], the sum over the ranks): so the
    ranks may pass different first dimensions inside jit too (a sharded
    optimizer's rows of each parameter)."""
    arrays = [jnp.asarray(t) for t in tensors]
    if not arrays:
        return []

    def gather_on_host(*values):
        handles = [host.allgather_async(v, n, process_set) for v, n in zip(values, names)]
        return [_check_rows(host.synchronize(h), r, "allgather", n)
                for h, r, n in zip(handles, rows, names)]

    return cross(gather_on_host, [_like(a, r) for a, r in zip(arrays, rows)], arrays,
                 requests.ALLGATHER, names, process_set=process_set)
