"""grouped_allgather and grouped_reducescatter: lists of tensors negotiated
and fused as one group (the kernels are in csrc/tensorflow/grouped_kernels.cc),
with their gradients as Horovod defines them."""
import tensorflow as tf

from hvdlite.common import basics
from hvdlite.common.ops import ReduceOp
from hvdlite.common.process_sets import global_process_set
from hvdlite.tensorflow import ops


def _group_name(kind, name, tensors):
    """As ops.tensor_name, from the first and last member in a graph (Horovod's choice)."""
    if name:
        return str(name)
    if tf.executing_eagerly():
        return basics.auto_name(kind)
    return f"{kind}.{ops._normalize(tensors[0].name)}.{ops._normalize(tensors[-1].name)}"


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
        ops._checked(tensor, "allgather", f"{group}.{index}")
    return ops.run_translated(lambda: list(ops._ops().hvdlite_grouped_allgather(
        tensors, tensor_name=group, process_set_id=ops._set_id(process_set),
        call_site=ops._call_site())))


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
    from hvdlite.tensorflow.compression import Compression
    code, prescale, postscale, set_id = ops._reduction(op, prescale_factor, postscale_factor,
                                                       process_set, "grouped_reducescatter")
    compression = compression or Compression.none
    tensors = list(tensors)
    if not tensors:
        return []
    pairs = [compression.compress(tf.convert_to_tensor(t)) for t in tensors]
    group = _group_name("grouped_reducescatter", name, [p[0] for p in pairs])
    for index, (compressed, _) in enumerate(pairs):
        ops._checked(compressed, "reducescatter", f"{group}.{index}")
    reduced = ops.run_translated(lambda: ops._ops().hvdlite_grouped_reducescatter(
        [p[0] for p in pairs], reduce_op=code, prescale_factor=prescale,
        postscale_factor=postscale, tensor_name=group, process_set_id=set_id,
        call_site=ops._call_site()))
    return [compression.decompress(r, p[1]) for r, p in zip(reduced, pairs)]


def _process_set(op):
    from hvdlite.tensorflow.gradients import _process_set as of_op
    return of_op(op)


def _set_index(process_set):
    return process_set.rank() if process_set.ranks is not None else basics.rank()


@tf.RegisterGradient("HvdliteGroupedAllgather")
def _grouped_allgather_grad(op, *grads):
    """Horovod's: average each member's gradient over the ranks, then keep this
    rank's rows of it."""
    process_set = _process_set(op)
    # One allreduce per member: TF may hand float32 zeros for a float64 member.
    grads = [ops._allreduce(g, ReduceOp.Average, process_set=process_set) for g in grads]
    rows = tf.stack([tf.shape(x, out_type=tf.int64)[0] for x in op.inputs])
    all_rows = ops.allgather(tf.reshape(rows, [1, -1]), process_set=process_set)
    starts = tf.reduce_sum(all_rows[:_set_index(process_set)], axis=0)
    return [g[starts[i]:starts[i] + rows[i]] for i, g in enumerate(grads)]


@tf.RegisterGradient("HvdliteGroupedReducescatter")
def _grouped_reducescatter_grad(op, *grads):
    """Horovod's: allgather each member's gradient, times the set's size for Sum
    (and the scale factors the forward pass applied)."""
    reduce_op = ReduceOp(op.get_attr("reduce_op"))
    if reduce_op not in (ReduceOp.Sum, ReduceOp.Average):
        raise ValueError(f"the gradient of grouped_reducescatter is defined for Sum and Average, "
                         f"not {reduce_op.name}")
    process_set = _process_set(op)
    scale = op.get_attr("prescale_factor") * op.get_attr("postscale_factor")
    if reduce_op == ReduceOp.Sum:
        scale *= ops._set_size(process_set)
    gathered = grouped_allgather(list(grads), process_set=process_set)
    return [g * tf.cast(scale, g.dtype) if scale != 1.0 else g for g in gathered]
