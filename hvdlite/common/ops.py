"""Reduce operations and the codes the C++ core uses for ops and dtypes."""
import enum


class ReduceOp(enum.IntEnum):
    """How allreduce and reducescatter combine values (same codes as the core)."""
    Sum = 0
    Average = 1
    Min = 2
    Max = 3
    Product = 4
    Adasum = 5


class OpType(enum.IntEnum):
    """The collective kinds of csrc/common/types.h (OpType)."""
    ALLREDUCE = 0
    ALLGATHER = 1
    BROADCAST = 2
    ALLTOALL = 3
    REDUCESCATTER = 4
    BARRIER = 5
    JOIN = 6
    ADD_PROCESS_SET = 7
    REMOVE_PROCESS_SET = 8


class DataType(enum.IntEnum):
    """Element types of csrc/common/types.h (DataType)."""
    UINT8 = 0
    INT8 = 1
    INT32 = 2
    INT64 = 3
    FLOAT16 = 4
    BFLOAT16 = 5
    FLOAT32 = 6
    FLOAT64 = 7
    BOOL = 8


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
