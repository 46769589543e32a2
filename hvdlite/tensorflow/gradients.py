"""Gradients of the collectives, as Horovod defines them (Note [Horovod's
gradients] in hvdlite/torch/autograd_ops.py), so that models can
differentiate through allreduce, allgather, broadcast, alltoall and
reducescatter, and their grouped forms (per member the same as these),
eagerly, inside tf.function and in tf.compat.v1 graphs.
"""
import tensorflow as tf

from hvdlite.common import basics
from hvdlite.common.ops import ReduceOp
from hvdlite.tensorflow import collectives


def _process_set(op):
    from hvdlite.common.process_sets import ProcessSet, global_process_set
    set_id = op.get_attr("process_set_id")
    if set_id == 0:
        return global_process_set
    ps = ProcessSet(basics.core().process_set_ranks(set_id))
    ps.process_set_id = set_id
    return ps


def _check_differentiable(op, kind):
    reduce_op = ReduceOp(op.get_attr("reduce_op"))
    if reduce_op not in (ReduceOp.Sum, ReduceOp.Average):
        raise ValueError(f"the gradient of {kind} is defined for op=Sum and op=Average, "
                         f"not {reduce_op.name}")
    return reduce_op


def _set_index(process_set):
    """This rank's index in the process set (its rank in the global set)."""
    return basics.rank() if process_set.process_set_id == 0 else process_set.rank()


def _own_rows(grad, rows, process_set):
    """This rank's rows of an allgathered gradient: every rank's row count is
    gathered, this rank's block starts after those of the ranks before it."""
    all_rows = collectives.allgather(tf.reshape(rows, [1]), process_set=process_set)
    start = tf.reduce_sum(all_rows[:_set_index(process_set)])
    begin = tf.concat([[start], tf.zeros([tf.rank(grad) - 1], tf.int64)], 0)
    size = tf.concat([[rows], tf.fill([tf.rank(grad) - 1], tf.constant(-1, tf.int64))], 0)
    return tf.slice(grad, begin, size)


@tf.RegisterGradient("HvdliteAllreduce")
def _allreduce_grad(op, grad):
    """The same allreduce of the output gradient (op, scale factors, set)."""
    reduce_op = _check_differentiable(op, "allreduce")
    return collectives._allreduce(grad, reduce_op, op.get_attr("prescale_factor"),
                          op.get_attr("postscale_factor"), process_set=_process_set(op))


@tf.RegisterGradient("HvdliteGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    """A grouped allreduce of the output gradients; an output no loss depends
    on contributes zeros, so that every rank submits the same group."""
    reduce_op = _check_differentiable(op, "grouped_allreduce")
    grads = [tf.zeros_like(out) if g is None else g for g, out in zip(grads, op.outputs)]
    return collectives.grouped_allreduce(grads, op=reduce_op,
                                 prescale_factor=op.get_attr("prescale_factor"),
                                 postscale_factor=op.get_attr("postscale_factor"),
                                 process_set=_process_set(op))


@tf.RegisterGradient("HvdliteAllgather")
def _allgather_grad(op, grad):
    """The output gradient averaged over the ranks, then this rank's rows."""
    process_set = _process_set(op)
    grad = collectives._allreduce(grad, ReduceOp.Average, process_set=process_set)
    return _own_rows(grad, tf.shape(op.inputs[0], out_type=tf.int64)[0], process_set)


@tf.RegisterGradient("HvdliteBroadcast")
def _broadcast_grad(op, grad):
    """The output gradient averaged over the ranks on the root (a global
    rank), zeros elsewhere: only the root's input made the result."""
    reduced = collectives._allreduce(grad, ReduceOp.Average, process_set=_process_set(op))
    if basics.rank() != op.get_attr("root_rank"):
        # Not zeros_like: in a tf.compat.v1 session only what the fetched
        # result needs runs, and this rank's allreduce must run for its peers.
        return reduced * 0
    return reduced


@tf.RegisterGradient("HvdliteAlltoall")
def _alltoall_grad(op, grad, _):
    """Each gradient row goes back to the rank it came from."""
    result, _ = collectives.alltoall(grad, splits=op.outputs[1], process_set=_process_set(op))
    return [result, None]


@tf.RegisterGradient("HvdliteReducescatter")
def _reducescatter_grad(op, grad):
    """The allgather of the output gradient, times the set size for Sum (for
    Average: the plain allgather) and times the scale factors."""
    reduce_op = _check_differentiable(op, "reducescatter")
    process_set = _process_set(op)
    gathered = collectives.allgather(grad, process_set=process_set)
    scale = op.get_attr("prescale_factor") * op.get_attr("postscale_factor")
    if reduce_op == ReduceOp.Sum:
        scale *= collectives._set_size(process_set)
    return gathered * tf.cast(scale, gathered.dtype) if scale != 1.0 else gathered


@tf.RegisterGradient("HvdliteGroupedAllgather")
def _grouped_allgather_grad(op, *grads):
    """Horovod's: average each member's gradient over the ranks, then keep this
    rank's rows of it."""
    process_set = _process_set(op)
    # One allreduce per member: TF may hand float32 zeros for a float64 member.
    grads = [collectives._allreduce(g, ReduceOp.Average, process_set=process_set) for g in grads]
    rows = tf.stack([tf.shape(x, out_type=tf.int64)[0] for x in op.inputs])
    all_rows = collectives.allgather(tf.reshape(rows, [1, -1]), process_set=process_set)
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
        scale *= collectives._set_size(process_set)
    gathered = collectives.grouped_allgather(list(grads), process_set=process_set)
    return [g * tf.cast(scale, g.dtype) if scale != 1.0 else g for g in gathered]
