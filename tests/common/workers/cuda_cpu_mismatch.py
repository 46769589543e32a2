"""Two ranks, one with a CUDA tensor (fake CUDA/NCCL libraries) and one with a
CPU tensor of the same name: every rank gets a mismatch naming the device kind,
nothing is fused across devices, and a later CPU collective still works.
Prints "device mismatch OK"."""
import re

import numpy as np

import hvdlite.common.basics as basics
import hvdlite.numpy as hvd
from hvdlite.common.ops import DataType, OpType

hvd.init()
rank = hvd.rank()
x = np.ones(4, np.float32)
handle = basics.core().enqueue(op=int(OpType.ALLREDUCE), name="grad", input=x.ctypes.data,
                               output=x.ctypes.data, dtype=int(DataType.FLOAT32), shape=[4],
                               device=0 if rank == 0 else -1)
try:
    basics.core().wait(handle, int(DataType.FLOAT32))
    raise AssertionError("a CUDA and a CPU tensor were reduced together")
except hvd.HvdliteInternalError as error:
    text = str(error)
    # Each rank's value, then where it called it (this file, at module level).
    assert re.search(r"mismatched device across ranks: rank 0 has cuda at \S+cuda_cpu_mismatch\.py:\d+ "
                     r"in <module>\(\), rank 1 has cpu at ", text), text
    assert isinstance(error, hvd.CollectiveMismatchError) and error.field == "device", error
    assert error.values == {0: "cuda", 1: "cpu"}, error.values
assert hvd.allreduce(np.full(3, rank + 1.0), op=hvd.Sum, name="after").tolist() == [3.0] * 3
hvd.shutdown()
print("device mismatch OK")
