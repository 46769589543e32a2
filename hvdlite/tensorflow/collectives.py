"""The collectives as TensorFlow ops: eager, inside tf.function and in Keras
graphs. Each wraps one op of the compiled library (op_library.py; the
kernels are in csrc/tensorflow, the grouped ones in grouped_kernels.cc);
their gradients are registered in gradients.py."""
import re

import tensorflow as tf

from hvdlite.common import basics, call_sites, collective_table as table, exceptions, requests
from hvdlite.common.exceptions import HvdliteInternalError
from hvdlite.common.ops import DataType, ReduceOp, resolve_op
from hvdlite.common.process_sets import global_process_set
from hvdlite.common.requests import process_set_id as _set_id
from hvdlite.tensorflow import op_library

# hvdlite.tensorflow's names (its __init__ re-exports them).
__all__ = ["allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast",
           "alltoall", "reducescatter", "grouped_reducescatter", "barrier", "join", "rank_op",
           "size_op", "local_rank_op", "local_size_op"]

# hvdlite's functions are called from users' tf.functions: AutoGraph must not
# convert them (it would also recurse into the op-library loader and warn).
do_not_convert = tf.autograph.experimental.do_not_convert


def _ops():
    return op_library.load()


def _set_size(process_set):
    return basics.size() if process_set in (None, global_process_set) else process_set.size()


def _normalize(name):
    return re.sub(r"[^a-zA-Z0-9_.\-/]", "_", name)


def tensor_name(kind, name, tensor=None):
    """The name every rank gives this collective. Eagerly: a per-kind counter
    (ranks issue unnamed collectives in the same order). In a graph: the input
    tensor's name, which is the same on every rank and across calls, so the
    response cache hits on every step."""
    if name:
        return str(name)
    if tf.executing_eagerly() or tensor is None:
        return basics.auto_name(kind)
    return f"{kind}.{_normalize(tensor.name)}"


def _call_site():
    """[file, line, function] of the user's code that creates this op, for
    its call_site attribute (Note [Call sites] in csrc/core/call_site.h), or
    [] when unknown or HVDLITE_CALL_SITES=0. Eagerly the core reads it off
    this thread's frames; while a tf.function is traced, TensorFlow's own
    stack, which maps AutoGraph's generated code back to the user's lines."""
    core = basics.core()
    if not core.call_sites_enabled():
        return []
    site = core.call_site() if tf.executing_eagerly() else _traced_call_site(core)
    return [] if site is None else [site[0], str(site[1]), site[2]]


def _traced_call_site(core):
    try:
        from tensorflow.python.util import tf_stack
        frames = tf_stack.extract_stack()
    except Exception:  # noqa: BLE001 - TF's internals moved: the plain frames will do
        return core.call_site()
    for frame in reversed(frames):
        if not call_sites.is_library(frame.filename):
            return frame.filename, frame.lineno, frame.name
    return None


def _clean_message(error):
    """The core's message without TF's "{{function_node ...}}" and "[Op:...]" wrapping."""
    message = re.sub(r"^(\{\{[^}]*\}\}\s*)+", "", error.message)
    return re.sub(r"\s*\[Op:[^\]]*\].*$", "", message, flags=re.S)


# Note [TensorFlow error types]
# The collectives raise TensorFlow's error types, as Horovod's do, eagerly,
# inside tf.function and in tf.compat.v1 sessions alike (the kernels set them,
# pending_op.cc): ranks that disagree on a collective (shape, dtype, root
# rank, op) -> tf.errors.FailedPreconditionError; bad arguments (alltoall
# splits, root rank) -> tf.errors.InvalidArgumentError; a run-time failure
# (lost peer, stall, shutdown) -> tf.errors.InternalError. Eagerly the last
# two are also hvdlite's Python types (ValueError, HvdliteInternalError),
# which hvdlite raised before and which hvdlite's elastic run catches.
class InvalidArgumentError(tf.errors.InvalidArgumentError, ValueError):
    """tf.errors.InvalidArgumentError raised eagerly; also a ValueError."""


class InternalError(tf.errors.InternalError, HvdliteInternalError):
    """tf.errors.InternalError raised eagerly; also an HvdliteInternalError."""


# Eagerly, the kind of failure too, with its fields (Note [Failures by
# message] in csrc/api/session.h): each is TensorFlow's type and hvdlite's.
class CollectiveMismatchError(tf.errors.FailedPreconditionError, exceptions.CollectiveMismatchError):
    """tf.errors.FailedPreconditionError raised eagerly; also a CollectiveMismatchError."""


class DivergenceError(InternalError, exceptions.DivergenceError):
    """tf.errors.InternalError raised eagerly; also a DivergenceError."""


class PeerLostError(InternalError, exceptions.PeerLostError):
    """tf.errors.InternalError raised eagerly; also a PeerLostError."""


class StallTimeoutError(InternalError, exceptions.StallTimeoutError):
    """tf.errors.InternalError raised eagerly; also a StallTimeoutError."""


class ShutdownError(InternalError, exceptions.ShutdownError):
    """tf.errors.InternalError raised eagerly; also a ShutdownError."""


_EAGER_TYPES = {tf.errors.InvalidArgumentError: InvalidArgumentError,
                tf.errors.InternalError: InternalError,
                tf.errors.FailedPreconditionError: tf.errors.FailedPreconditionError}
_TYPED = {exceptions.CollectiveMismatchError: CollectiveMismatchError,
          exceptions.DivergenceError: DivergenceError, exceptions.PeerLostError: PeerLostError,
          exceptions.StallTimeoutError: StallTimeoutError, exceptions.ShutdownError: ShutdownError}


def _translated(error):
    """The eager error to raise for a failed op: TensorFlow's type, with the
    core's message alone, and hvdlite's kind and fields where the core knows them."""
    message = _clean_message(error)
    known = basics.core().exception_for(message)
    if isinstance(known, exceptions.CollectiveOutsideRunError):
        return known  # a late joiner's refusal: not a TensorFlow failure (Note [Late joiners])
    cls = _TYPED.get(type(known), _EAGER_TYPES[type(error)])
    translated = cls(error.node_def, error.op, message)
    if known is not None and isinstance(translated, HvdliteInternalError):
        translated.__dict__.update(known.fields())
    return translated


def run_translated(fn):
    """Runs an op; eagerly, re-raises its error with the core's message alone
    (Note [TensorFlow error types])."""
    if not tf.executing_eagerly():
        return fn()
    try:
        return fn()
    except tuple(_EAGER_TYPES) as error:
        raise _translated(error) from None


def _reduction(op, prescale_factor, postscale_factor, process_set, kind="allreduce"):
    """(reduce op code, prescale, postscale, process set id), checked as
    hvdlite.numpy and hvdlite.torch check them (requests.reduction), plus
    Horovod's TensorFlow limit on Adasum, raised as Horovod raises it; the
    core checks the rest (float dtypes, CPU, global set)."""
    op, prescale, postscale, set_id = requests.reduction(op, None, prescale_factor,
                                                         postscale_factor, process_set, kind)
    size = _set_size(process_set)
    if op == ReduceOp.Adasum and size & (size - 1):
        raise NotImplementedError(f"op=Adasum needs a power-of-two number of ranks (2, 4, 8, ...), "
                                  f"but the process set has {size}; use op=Average")
    return int(op), prescale, postscale, set_id


def _compression_or_none(compression):
    """`compression`, or Compression.none when it is None. Imported here, not
    at the top: compression.py imports PowerSGD, which imports this module."""
    from hvdlite.tensorflow.compression import Compression
    return compression or Compression.none


def _checked(tensor, kind, name):
    """`tensor`, refused as every binding refuses a dtype the core cannot
    carry (the kernels would refuse it too, in other words)."""
    if tensor.dtype.name.upper() not in DataType.__members__:
        raise requests.unsupported_dtype(kind, name, tensor.dtype.name)
    return tensor


def _allreduce(tensor, op=ReduceOp.Average, prescale_factor=1.0, postscale_factor=1.0, name=None,
               process_set=global_process_set):
    """The raw op on a dense tensor (no compression, no IndexedSlices)."""
    tensor = tf.convert_to_tensor(tensor)
    name = tensor_name("allreduce", name, tensor)
    op, prescale, postscale, set_id = _reduction(op, prescale_factor, postscale_factor, process_set)
    _checked(tensor, "allreduce", name)
    return run_translated(lambda: _ops().hvdlite_allreduce(
        tensor, reduce_op=op, prescale_factor=prescale, postscale_factor=postscale,
        tensor_name=name, process_set_id=set_id, call_site=_call_site()))


def _check_indexed_slices(op, prescale_factor, postscale_factor):
    """What Horovod cannot do with tf.IndexedSlices (they are allgathered, not reduced)."""
    if op == ReduceOp.Adasum:
        raise NotImplementedError("op=Adasum does not support sparse gradients (tf.IndexedSlices); "
                                  "pass sparse_as_dense=True to reduce them as dense tensors")
    if op not in (ReduceOp.Sum, ReduceOp.Average):
        raise NotImplementedError(f"allreduce of tf.IndexedSlices supports op=Sum and op=Average "
                                  f"only, not {ReduceOp(op).name}; convert the gradient with "
                                  f"tf.convert_to_tensor first")
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError("prescale_factor and postscale_factor are not supported for "
                                  "tf.IndexedSlices; convert them with tf.convert_to_tensor first")


@do_not_convert
def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=None, op=None,
              prescale_factor=1.0, postscale_factor=1.0, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """Reduces a tensor over the ranks: their average by default. A TensorFlow op.

    Works eagerly, inside tf.function and in Keras. tf.IndexedSlices are allgathered
    (values and indices) instead, averaged when `op` is Average, as Horovod does.

    Args:
        tensor (tf.Tensor | tf.IndexedSlices): the same shape and dtype on every rank.
        average (bool | None): Horovod's old switch: True is `op=Average`, False `op=Sum`.
        device_dense (str): accepted for Horovod compatibility.
        device_sparse (str): accepted for Horovod compatibility.
        compression: `Compression.none` or `.fp16`: floats cast for the wire and back.
        op (ReduceOp | None): `Average` (default), `Sum`, `Min`, `Max`, `Product` or `Adasum`.
        prescale_factor (float): scales the input before the reduction.
        postscale_factor (float): scales the result.
        name (str | None): the op's and the collective's name.
        process_set (ProcessSet): the ranks that take part (default: all).
        ignore_name_scope (bool): accepted for Horovod compatibility.

    Returns:
        tf.Tensor | tf.IndexedSlices: the reduced tensor.

    Raises:
        ValueError: for bad arguments, when the op is built.
        tf.errors.FailedPreconditionError: the ranks disagree (Horovod's error; eagerly also
            the hvdlite kind with its fields).
        tf.errors.InternalError: any other run-time failure, e.g. a lost peer.
    """
    op = resolve_op(op, average)
    compression = _compression_or_none(compression)
    if isinstance(tensor, tf.IndexedSlices):
        _check_indexed_slices(op, prescale_factor, postscale_factor)
        values = allgather(tensor.values, name=f"{name}.values" if name else None,
                           process_set=process_set)
        indices = allgather(tensor.indices, name=f"{name}.indices" if name else None,
                            process_set=process_set)
        if op == ReduceOp.Average:
            values = values / tf.cast(_set_size(process_set), values.dtype)
        return tf.IndexedSlices(values, indices, dense_shape=tensor.dense_shape)
    compressed, ctx = compression.compress(tf.convert_to_tensor(tensor))
    reduced = _allreduce(compressed, op, prescale_factor, postscale_factor, name, process_set)
    return compression.decompress(reduced, ctx)


@do_not_convert
def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="", compression=None,
                      op=None, prescale_factor=1.0, postscale_factor=1.0, name=None,
                      process_set=global_process_set):
    """Allreduces a list of tensors as one group: negotiated and fused together.
    A list holding tf.IndexedSlices is reduced member by member instead, as
    `allreduce` reduces each.

    Args:
        tensors (list[tf.Tensor | tf.IndexedSlices]): the same shapes and dtypes on every rank.
        average (bool | None): Horovod's old switch: True is `op=Average`, False `op=Sum`.
        device_dense (str): accepted for Horovod compatibility.
        device_sparse (str): accepted for Horovod compatibility.
        compression: `Compression.none` or `.fp16`, for every member.
        op (ReduceOp | None): one reduction for all (Average when None).
        prescale_factor (float): scales each input first.
        postscale_factor (float): scales each result.
        name (str | None): the group's name; its members are `name.0`, `name.1`, ...
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        list[tf.Tensor | tf.IndexedSlices]: the reduced tensors, in input order.

    Raises:
        ValueError: for bad arguments, when the op is built.
        tf.errors.InternalError: at run time, as `allreduce` raises it.
    """
    op = resolve_op(op, average)
    code, prescale, postscale, set_id = _reduction(op, prescale_factor, postscale_factor,
                                                   process_set)
    compression = _compression_or_none(compression)
    tensors = list(tensors)
    if not tensors:
        return []
    if any(isinstance(t, tf.IndexedSlices) for t in tensors):
        return [allreduce(t, op=op, compression=compression, prescale_factor=prescale_factor,
                          postscale_factor=postscale_factor, process_set=process_set)
                for t in tensors]
    pairs = [compression.compress(tf.convert_to_tensor(t)) for t in tensors]
    group = tensor_name("grouped_allreduce", name, pairs[0][0])
    return _grouped_reduction(table.ALLREDUCE, group, pairs, compression, code, prescale,
                              postscale, set_id)


def _grouped_reduction(collective, group, pairs, compression, code, prescale, postscale,
                       set_id):
    """The grouped op of `collective` (allreduce or reducescatter: a table
    row) on the compressed `pairs` ((tensor, context) each) as the group
    `group`, its members named as the table names them; the results
    decompressed, in input order."""
    for index, (compressed, _) in enumerate(pairs):
        _checked(compressed, collective.kind, table.member_name(group, index))
    grouped_op = getattr(_ops(), f"hvdlite_{collective.grouped_kind}")
    reduced = run_translated(lambda: grouped_op(
        [p[0] for p in pairs], reduce_op=code, prescale_factor=prescale,
        postscale_factor=postscale, tensor_name=group, process_set_id=set_id,
        call_site=_call_site()))
    return [compression.decompress(r, p[1]) for r, p in zip(reduced, pairs)]


@do_not_convert
def allgather(tensor, name=None, process_set=global_process_set, ignore_name_scope=False):
    """Concatenates every rank's tensor along the first dimension (sizes may differ).

    Args:
        tensor (tf.Tensor): this rank's rows; a scalar counts as one row.
        name (str | None): the collective's name; eagerly unnamed ones are numbered, in a
            graph they are named after the input.
        process_set (ProcessSet): the ranks whose rows are gathered (default: all).
        ignore_name_scope (bool): accepted for Horovod compatibility.

    Returns:
        tf.Tensor: every rank's rows, in rank order.

    Raises:
        tf.errors.InternalError: at run time, as `allreduce` raises it.
    """
    tensor = tf.convert_to_tensor(tensor)
    if tensor.shape.rank == 0:
        tensor = tf.reshape(tensor, [1])
    name = tensor_name("allgather", name, tensor)
    _checked(tensor, "allgather", name)
    return run_translated(lambda: _ops().hvdlite_allgather(
        tensor, tensor_name=name, process_set_id=_set_id(process_set), call_site=_call_site()))


def _group_name(kind, name, tensors):
    """As tensor_name, from the first and last member in a graph (Horovod's choice)."""
    if name:
        return str(name)
    if tf.executing_eagerly():
        return basics.auto_name(kind)
    return f"{kind}.{_normalize(tensors[0].name)}.{_normalize(tensors[-1].name)}"


@do_not_convert
def grouped_allgather(tensors, name=None, ignore_name_scope=False, process_set=global_process_set):
    """allgather of every tensor in `tensors` as one group. First dimensions may
    differ between ranks (and between members).

    Args:
        tensors (Iterable[tf.Tensor]): each gathered along its first dimension; a scalar
            counts as one row.
        name (str | None): the group's name; members are `name.0`, `name.1`, ...
        ignore_name_scope (bool): accepted for Horovod compatibility.
        process_set (ProcessSet): the ranks whose rows are gathered (default: all).

    Returns:
        list[tf.Tensor]: the gathered tensors, in input order.

    Raises:
        tf.errors.InternalError: at run time, as `allreduce` raises it.
    """
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    tensors = [tf.reshape(t, [1]) if t.shape.rank == 0 else t for t in tensors]
    group = _group_name("grouped_allgather", name, tensors)
    for index, tensor in enumerate(tensors):
        _checked(tensor, "allgather", table.member_name(group, index))
    return run_translated(lambda: list(_ops().hvdlite_grouped_allgather(
        tensors, tensor_name=group, process_set_id=_set_id(process_set),
        call_site=_call_site())))


@do_not_convert
def broadcast(tensor, root_rank, name=None, process_set=global_process_set, ignore_name_scope=False):
    """Gives every rank root_rank's tensor.

    Args:
        tensor (tf.Tensor): the value on the root; its shape and dtype elsewhere.
        root_rank (int): the sending rank, a global rank.
        name (str | None): the op's and the collective's name.
        process_set (ProcessSet): the ranks that receive it (default: all).
        ignore_name_scope (bool): accepted for Horovod compatibility.

    Returns:
        tf.Tensor: root_rank's tensor.

    Raises:
        ValueError: for a root rank that is not a number, when the op is built.
        tf.errors.InternalError: at run time, as `allreduce` raises it.
    """
    tensor = tf.convert_to_tensor(tensor)
    name = tensor_name("broadcast", name, tensor)
    root = requests.root_rank(root_rank, name)
    _checked(tensor, "broadcast", name)
    return run_translated(lambda: _ops().hvdlite_broadcast(
        tensor, root_rank=root, tensor_name=name, process_set_id=_set_id(process_set),
        call_site=_call_site()))


@do_not_convert
def alltoall(tensor, splits=None, name=None, process_set=global_process_set, ignore_name_scope=False):
    """Sends splits[i] rows to rank i (the first dimension split evenly when
    splits is None).

    Args:
        tensor (tf.Tensor): the rows to send, in rank order.
        splits (tf.Tensor | list[int] | None): rows for each rank of the set.
        name (str | None): names the collective.
        process_set (ProcessSet): the ranks that exchange rows (default: all).
        ignore_name_scope (bool): accepted for Horovod compatibility.

    Returns:
        tf.Tensor | tuple[tf.Tensor, tf.Tensor]: as in Horovod: (received rows, received
            splits as int32) when `splits` is given, the received rows alone when it is not.

    Raises:
        tf.errors.InternalError: at run time, as `allreduce` raises it.
    """
    tensor = tf.convert_to_tensor(tensor)
    sent = tf.zeros([0], tf.int64) if splits is None else tf.cast(tf.reshape(splits, [-1]), tf.int64)
    name = tensor_name("alltoall", name, tensor)
    _checked(tensor, "alltoall", name)
    received, received_splits = run_translated(lambda: _ops().hvdlite_alltoall(
        tensor, sent, tensor_name=name, process_set_id=_set_id(process_set), call_site=_call_site()))
    return received if splits is None else (received, received_splits)


@do_not_convert
def reducescatter(tensor, device_dense="", compression=None, op=None, name=None,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces over the ranks and gives each its share of the first dimension
    (the first rows % size ranks get one row more).

    Args:
        tensor (tf.Tensor): the same shape and dtype on every rank.
        device_dense (str): accepted for Horovod compatibility.
        compression: `Compression.none` or `.fp16`.
        op (ReduceOp | None): `Average` (default), `Sum`, `Min`, `Max` or `Product`.
        name (str | None): the op's and the collective's name.
        process_set (ProcessSet): the ranks of the reduction (default: all).
        prescale_factor (float): multiplies the input first.
        postscale_factor (float): multiplies this rank's share.

    Returns:
        tf.Tensor: this rank's rows of the reduced tensor.

    Raises:
        ValueError: for bad arguments, when the op is built.
        tf.errors.InternalError: at run time, as `allreduce` raises it.
    """
    op, prescale, postscale, set_id = _reduction(op, prescale_factor, postscale_factor,
                                                 process_set, "reducescatter")
    compression = _compression_or_none(compression)
    compressed, ctx = compression.compress(tf.convert_to_tensor(tensor))
    name = tensor_name("reducescatter", name, compressed)
    _checked(compressed, "reducescatter", name)
    reduced = run_translated(lambda: _ops().hvdlite_reducescatter(
        compressed, reduce_op=op, prescale_factor=prescale, postscale_factor=postscale,
        tensor_name=name, process_set_id=set_id, call_site=_call_site()))
    return compression.decompress(reduced, ctx)


@do_not_convert
def grouped_reducescatter(tensors, device_dense="", compression=None, op=ReduceOp.Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0, name=None):
    """reducescatter of every tensor in `tensors` as one group (each rank gets its
    share of every member's first dimension).

    Args:
        tensors (Iterable[tf.Tensor]): the same shapes and dtypes on every rank.
        device_dense (str): accepted for Horovod compatibility.
        compression: `Compression.none` or `.fp16`, for every member.
        op (ReduceOp): `Average` (default), `Sum`, `Min`, `Max` or `Product`.
        process_set (ProcessSet): the ranks of the group (default: all).
        prescale_factor (float): multiplies each input first.
        postscale_factor (float): multiplies each share.
        name (str | None): the group's name (None: numbered eagerly, named after the inputs
            in a graph).

    Returns:
        list[tf.Tensor]: this rank's share of each reduced tensor.

    Raises:
        ValueError: for bad arguments, when the op is built.
        tf.errors.InternalError: at run time, as `allreduce` raises it.
    """
    code, prescale, postscale, set_id = _reduction(op, prescale_factor, postscale_factor,
                                                   process_set, "grouped_reducescatter")
    compression = _compression_or_none(compression)
    tensors = list(tensors)
    if not tensors:
        return []
    pairs = [compression.compress(tf.convert_to_tensor(t)) for t in tensors]
    group = _group_name("grouped_reducescatter", name, [p[0] for p in pairs])
    return _grouped_reduction(table.REDUCESCATTER, group, pairs, compression, code, prescale,
                              postscale, set_id)


@do_not_convert
def barrier(process_set=global_process_set):
    """Returns once every rank of process_set has reached it.

    Args:
        process_set (ProcessSet): the ranks that wait for each other (default: all).

    Returns:
        tf.Operation | None: in a graph, the op to run; eagerly it has already waited.
    """
    name = basics.auto_name("barrier") if tf.executing_eagerly() else \
        tf.compat.v1.get_default_graph().unique_name("barrier")
    return run_translated(lambda: _ops().hvdlite_barrier(tensor_name=name,
                                                         process_set_id=_set_id(process_set),
                                                         call_site=_call_site()))


@do_not_convert
def join():
    """Marks this rank as out of data: it takes part in the other ranks'
    allreduces with zeros until every rank has joined.

    Returns:
        tf.Tensor: the last rank to join, an int32 scalar, the same on every rank.
    """
    return run_translated(lambda: _ops().hvdlite_join(call_site=_call_site()))


@do_not_convert
def rank_op(name=None):
    """This process's rank, as an op evaluated when the graph runs.

    Args:
        name (str | None): the op's name.

    Returns:
        tf.Tensor: an int32 scalar.
    """
    return _ops().hvdlite_rank(name=name)


@do_not_convert
def size_op(process_set_id=0, name=None):
    """The number of ranks, as an op evaluated when the graph runs.

    Args:
        process_set_id (int): 0, the global set (the only one supported).
        name (str | None): the op's name.

    Returns:
        tf.Tensor: an int32 scalar.

    Raises:
        ValueError: for another process set; use ProcessSet.size().
    """
    if process_set_id:
        raise ValueError("size_op supports the global process set only; use ProcessSet.size()")
    return _ops().hvdlite_size(name=name)


@do_not_convert
def local_rank_op(name=None):
    """This process's rank on its host, as an op evaluated when the graph runs.

    Args:
        name (str | None): names the op.

    Returns:
        tf.Tensor: an int32 scalar.
    """
    return _ops().hvdlite_local_rank(name=name)


@do_not_convert
def local_size_op(name=None):
    """The number of ranks on this host, as an op evaluated when the graph runs.

    Args:
        name (str | None): the name of the op.

    Returns:
        tf.Tensor: an int32 scalar.
    """
    return _ops().hvdlite_local_size(name=name)
