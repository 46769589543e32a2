"""Gradients of the collectives, so that models can differentiate through
allreduce, allgather, broadcast, alltoall, reducescatter and their grouped
forms eagerly, inside tf.function and in tf.compat.v1 graphs. Each op's
gradient is its table row's rule (Note [Horovod's gradients] in
hvdlite/common/collective_table.py), registered for every row below; this
module supplies only the rule's steps as TensorFlow ops.
"""
import tensorflow as tf

from hvdlite.common import basics, collective_table as table
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


def _set_index(process_set):
    """This rank's index in the process set (its rank in the global set)."""
    return basics.rank() if process_set.process_set_id == 0 else process_set.rank()


class _Forward:
    """What a gradient rule needs of the forward op: its table row, whether it
    was a group, its reduce op and scale factors (where it has them), and its
    process set."""

    def __init__(self, row, grouped, op):
        self.row, self.grouped, self.op = row, grouped, op
        reduces = "reduce_op" in row.fields
        self.reduce_op = ReduceOp(op.get_attr("reduce_op")) if reduces else ReduceOp.Average
        self.prescale = op.get_attr("prescale_factor") if reduces else 1.0
        self.postscale = op.get_attr("postscale_factor") if reduces else 1.0
        self.process_set = _process_set(op)


def _gradient(forward, grads):
    """The input gradients for the output gradients `grads` (one per member;
    alltoall's received splits have none), by `forward.row.gradient`."""
    row = forward.row
    table.check_differentiable(row, forward.reduce_op,
                               row.grouped_kind if forward.grouped else None)
    grads = _GRADIENT_COLLECTIVE[row.gradient.via, row.gradient.how](forward, list(grads))
    return _THEN[row.gradient.then](forward, grads)


def _same_reduction(forward, grads):
    if forward.grouped:  # an output no loss depends on gives zeros, so every rank submits alike
        grads = [tf.zeros_like(out) if g is None else g
                 for g, out in zip(grads, forward.op.outputs)]
        return collectives.grouped_allreduce(
            grads, op=forward.reduce_op, prescale_factor=forward.prescale,
            postscale_factor=forward.postscale, process_set=forward.process_set)
    return [collectives._allreduce(grads[0], forward.reduce_op, forward.prescale,
                                   forward.postscale, process_set=forward.process_set)]


def _averaged(forward, grads):
    # One allreduce per member, grouped or not: TF may hand float32 zeros for
    # a float64 member.
    return [collectives._allreduce(g, ReduceOp.Average, process_set=forward.process_set)
            for g in grads]


def _gathered(forward, grads):
    if forward.grouped:
        return collectives.grouped_allgather(grads, process_set=forward.process_set)
    return [collectives.allgather(grads[0], process_set=forward.process_set)]


def _sent_back(forward, grads):
    result, _ = collectives.alltoall(grads[0], splits=forward.op.outputs[1],
                                     process_set=forward.process_set)
    return [result, None]  # the splits input has no gradient


_GRADIENT_COLLECTIVE = {
    ("allreduce", table.SAME_REDUCTION): _same_reduction,
    ("allreduce", table.AVERAGED): _averaged,
    ("allgather", ""): _gathered,
    ("alltoall", table.RECEIVED_SPLITS): _sent_back,
}


def _own_rows(forward, grads):
    """Each member's rows of its gathered gradient: every rank's row counts
    are gathered; this rank's block starts after those of the ranks before it."""
    rows = tf.stack([tf.shape(x, out_type=tf.int64)[0] for x in forward.op.inputs])
    all_rows = collectives.allgather(tf.reshape(rows, [1, -1]), process_set=forward.process_set)
    starts = tf.reduce_sum(all_rows[:_set_index(forward.process_set)], axis=0)
    return [g[starts[i]:starts[i] + rows[i]] for i, g in enumerate(grads)]


def _on_root(forward, grads):
    """Kept on the root (a global rank), zeros elsewhere: only the root's input
    made the result."""
    if basics.rank() != forward.op.get_attr("root_rank"):
        # Not zeros_like: in a tf.compat.v1 session only what the fetched
        # result needs runs, and this rank's allreduce must run for its peers.
        return [g * 0 for g in grads]
    return grads


def _scaled(forward, grads):
    scale = table.gradient_scale(forward.reduce_op, forward.prescale, forward.postscale,
                                 collectives._set_size(forward.process_set))
    return [g * tf.cast(scale, g.dtype) for g in grads] if scale != 1.0 else grads


_THEN = {table.AS_IS: lambda forward, grads: grads, table.OWN_ROWS: _own_rows,
         table.ON_ROOT: _on_root, table.SCALED: _scaled}


def _op_type(kind):
    """The compiled library's op of a collective's kind ("grouped_allgather":
    HvdliteGroupedAllgather; csrc/tensorflow/op_definitions.cc)."""
    return "Hvdlite" + "".join(word.capitalize() for word in kind.split("_"))


def _register(row, grouped):
    def gradient(op, *grads):
        return _gradient(_Forward(row, grouped, op), grads)
    gradient.__name__ = f"_{row.grouped_kind if grouped else row.kind}_grad"
    tf.RegisterGradient(_op_type(row.grouped_kind if grouped else row.kind))(gradient)


for _row in table.COLLECTIVES:
    _register(_row, False)
    if _row.groupable:
        _register(_row, True)
