"""Reduce operations and the codes the C++ core uses for ops and dtypes.

The codes are defined once, in csrc/api/api.h (Note [Codes defined once]);
these enums are built from hvdlite._codes, which exports them without
loading the core.
"""
import enum

from hvdlite.common import basics

_codes = basics.compiled_module("_codes")


def _enum(name, members, doc):
    cls = enum.IntEnum(name, members, module=__name__, qualname=name)
    cls.__doc__ = doc
    return cls


ReduceOp = _enum("ReduceOp", {name.title(): code for name, code in _codes.reduce_ops.items()},
                 "How allreduce and reducescatter combine values: Sum, Average, Min, Max, "
                 "Product, Adasum.")
OpType = _enum("OpType", _codes.op_types, "The collective kinds (ALLREDUCE, BROADCAST, ...).")
DataType = _enum("DataType", _codes.data_types, "Element types (UINT8, ..., FLOAT32, BOOL).")


Sum = ReduceOp.Sum
Average = ReduceOp.Average
Min = ReduceOp.Min
Max = ReduceOp.Max
Product = ReduceOp.Product
Adasum = ReduceOp.Adasum


_BY_CODE = {int(op): op for op in ReduceOp}


def resolve_op(op, average=None, default=Average):
    """Horovod's op/average arguments to a ReduceOp (average= is its old spelling).
    Called on every collective, hence the dictionary rather than ReduceOp(op)."""
    if average is None:
        if op is None:
            return default
        found = _BY_CODE.get(op) if isinstance(op, int) else _BY_CODE.get(_as_code(op))
        if found is not None:
            return found
        raise ValueError(f"op={op!r} is not a reduce op; use hvdlite.Sum, Average, Min, Max "
                         "or Product")
    if op is not None:
        raise ValueError("pass either op= or the deprecated average=, not both")
    return Average if average else Sum


def _as_code(op):
    """An op given as another integral type (a NumPy integer, 1.0) as its int."""
    try:
        return int(op)
    except (TypeError, ValueError):
        return None
