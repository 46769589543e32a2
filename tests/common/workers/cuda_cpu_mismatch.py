"""Two ranks, one with a CUDA tensor (fake CUDA/NCCL libraries) and one with a
CPU tensor of the same name: every rank gets a mismatch naming the device kind,
nothing is fused across devices, and a later CPU collective still works.
Prints "device mismatch OK"."""
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
    assert "mismatched device across ranks: rank 0 has cuda, rank 1 has cpu" in text, text
assert hvd.allreduce(np.full(3, rank + 1.0), op=hvd.Sum, name="after").tolist() == [3.0] * 3
hvd.shutdown()
print("device mismatch OK")
