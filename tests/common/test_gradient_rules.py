"""The collective table's gradient rules (Note [Horovod's gradients] in
hvdlite/common/collective_table.py) and the bindings that carry them out:
every row's rule is made of steps torch's autograd glue and TensorFlow's
registered gradients both implement, and TensorFlow registers a gradient for
every collective op of the compiled library. No processes: the gradients'
values are checked on ranks by tests/torch/test_autograd.py and the
TensorFlow tests."""
import re
from pathlib import Path

import pytest

from hvdlite.common import collective_table as table
from hvdlite.common.ops import ReduceOp

OP_DEFINITIONS = Path(__file__).resolve().parents[2] / "csrc" / "tensorflow" / "op_definitions.cc"


def rule_steps():
    """{(via, how)} and {then} over the table's rows."""
    return ({(c.gradient.via, c.gradient.how) for c in table.COLLECTIVES},
            {c.gradient.then for c in table.COLLECTIVES})


def test_rules_are_horovods():
    assert table.ALLREDUCE.gradient == table.Gradient("allreduce", table.SAME_REDUCTION,
                                                      sum_or_average=True)
    assert table.ALLGATHER.gradient.then == table.OWN_ROWS
    assert table.BROADCAST.gradient == table.Gradient("allreduce", table.AVERAGED, table.ON_ROOT)
    assert table.ALLTOALL.gradient.how == table.RECEIVED_SPLITS
    assert table.REDUCESCATTER.gradient == table.Gradient("allgather", then=table.SCALED,
                                                          sum_or_average=True)
    assert str(table.REDUCESCATTER.gradient).startswith("allgather of the output gradient, then")


def test_differentiable_ops_and_scale():
    for op in (ReduceOp.Sum, ReduceOp.Average):
        table.check_differentiable(table.REDUCESCATTER, op)
    table.check_differentiable(table.BROADCAST, ReduceOp.Min)  # no reduction of its own
    with pytest.raises(ValueError, match="gradient of grouped_allreduce is defined for op=Sum "
                                         "and op=Average, not Max"):
        table.check_differentiable(table.ALLREDUCE, int(ReduceOp.Max), "grouped_allreduce")
    assert table.gradient_scale(ReduceOp.Sum, 0.5, 3.0, 4) == 6.0
    assert table.gradient_scale(ReduceOp.Average, 0.5, 3.0, 4) == 1.5


def test_torch_carries_out_every_rule():
    pytest.importorskip("torch")
    from hvdlite.torch import autograd_ops
    collectives, thens = rule_steps()
    assert collectives <= set(autograd_ops._GRADIENT_COLLECTIVE)
    assert thens <= set(autograd_ops._THEN)


def test_tensorflow_registers_every_collectives_gradient():
    pytest.importorskip("tensorflow")
    from tensorflow.python.framework import ops as tf_ops

    from hvdlite.tensorflow import gradients
    collectives, thens = rule_steps()
    assert collectives <= set(gradients._GRADIENT_COLLECTIVE)
    assert thens <= set(gradients._THEN)
    defined = set(re.findall(r'REGISTER_OP\("(Hvdlite\w+)"\)', OP_DEFINITIONS.read_text()))
    expected = {gradients._op_type(c.kind) for c in table.COLLECTIVES} | {
        gradients._op_type(c.grouped_kind) for c in table.COLLECTIVES if c.groupable}
    assert expected <= defined  # the names the library's ops have
    for op_type in expected:
        assert tf_ops._gradient_registry.lookup(op_type).__module__ == gradients.__name__
