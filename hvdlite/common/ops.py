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


def resolve_op(op, average=None, default=Average):
    """Horovod's op/average arguments to a ReduceOp (average= is its old spelling)."""
    if op is not None and average is not None:
        raise ValueError("pass either op= or the deprecated average=, not both")
    if average is not None:
        return Average if average else Sum
    if op is None:
        return default
    try:
        return ReduceOp(int(op))
    except (ValueError, TypeError):
        raise ValueError(f"op={op!r} is not a reduce op; use hvdlite.Sum, Average, Min, Max "
                         "or Product") from None
