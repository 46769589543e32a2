"""Gradients of the collectives, as Horovod defines them, so that models can
differentiate through allreduce, allgather, broadcast, alltoall and
reducescatter."""
import tensorflow as tf

from hvdlite.common import basics
from hvdlite.common.ops import ReduceOp
from hvdlite.tensorflow import ops


def _process_set(op):
    from hvdlite.common.process_sets import ProcessSet, global_process_set
    set_id = op.get_attr("process_set_id")
    if set_id == 0:
        return global_process_set
    ps = ProcessSet(basics.core().process_set_ranks(set_id))
    ps.process_set_id = set_id
    return ps


@tf.RegisterGradient("HvdliteAllreduce")
def _allreduce_grad(op, grad):
    reduce_op = ReduceOp(op.get_attr("reduce_op"))
    if reduce_op not in (ReduceOp.Sum, ReduceOp.Average):
        raise ValueError(f"the gradient of allreduce is defined for Sum and Average, not {reduce_op.name}")
    return ops._allreduce(grad, reduce_op, op.get_attr("prescale_factor"),
                          op.get_attr("postscale_factor"), process_set=_process_set(op))


@tf.RegisterGradient("HvdliteGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    reduce_op = ReduceOp(op.get_attr("reduce_op"))
    if reduce_op not in (ReduceOp.Sum, ReduceOp.Average):
        raise ValueError(f"the gradient of grouped_allreduce is defined for Sum and Average, "
                         f"not {reduce_op.name}")
    return ops.grouped_allreduce(list(grads), op=reduce_op,
                                 prescale_factor=op.get_attr("prescale_factor"),
                                 postscale_factor=op.get_attr("postscale_factor"),
                                 process_set=_process_set(op))


@tf.RegisterGradient("HvdliteAllgather")
def _allgather_grad(op, grad):
    """Sum the incoming gradient over the ranks, then keep this rank's rows."""
    process_set = _process_set(op)
    grad = ops._allreduce(grad, ReduceOp.Sum, process_set=process_set)
    rows = tf.shape(op.inputs[0], out_type=tf.int64)[:1]
    all_rows = ops.allgather(rows, process_set=process_set)
    my_index = process_set.rank() if process_set.ranks is not None else basics.rank()
    start = tf.reduce_sum(all_rows[:my_index])
    return tf.slice(grad, tf.concat([[start], tf.zeros([tf.rank(grad) - 1], tf.int64)], 0),
                    tf.concat([rows, tf.fill([tf.rank(grad) - 1], tf.constant(-1, tf.int64))], 0))


@tf.RegisterGradient("HvdliteBroadcast")
def _broadcast_grad(op, grad):
    """Only the root's input influenced the result: it gets the summed gradient."""
    reduced = ops._allreduce(grad, ReduceOp.Sum, process_set=_process_set(op))
    if basics.rank() != op.get_attr("root_rank"):
        return reduced * 0
    return reduced


@tf.RegisterGradient("HvdliteAlltoall")
def _alltoall_grad(op, grad, _):
    """Send each gradient row back where it came from."""
    result, _ = ops.alltoall(grad, splits=op.outputs[1], process_set=_process_set(op))
    return [result, None]


@tf.RegisterGradient("HvdliteReducescatter")
def _reducescatter_grad(op, grad):
    reduce_op = ReduceOp(op.get_attr("reduce_op"))
    if reduce_op not in (ReduceOp.Sum, ReduceOp.Average):
        raise ValueError(f"the gradient of reducescatter is defined for Sum and Average, "
                         f"not {reduce_op.name}")
    process_set = _process_set(op)
    gathered = ops.allgather(grad, process_set=process_set)
    scale = op.get_attr("prescale_factor") * op.get_attr("postscale_factor")
    if reduce_op == ReduceOp.Average:
        scale /= ops._set_size(process_set)
    return gathered * tf.cast(scale, gathered.dtype) if scale != 1.0 else gathered
