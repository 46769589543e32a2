"""A worker alone as a late joiner is (Note [Late joiners] in
hvdlite/common/late_joiners.py), on the fake GPU (tests/common/fake_gpu,
with FAKE_CUDA_RACE_CHECK=1): an out-of-place broadcast and allreduce, as
TensorFlow's and XLA's kernels submit them, are copies queued on the
framework's stream after the kernel that wrote the input and before the one
that reads the output (no race); an allreduce with scale factors is refused.
Prints "alone OK"."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "common" / "workers"))
from hvdlite.common import basics, init, late_joiners  # noqa: E402
from hvdlite.common.exceptions import CollectiveOutsideRunError  # noqa: E402
from hvdlite.common.ops import OpType, ReduceOp  # noqa: E402
from fake_device import (Caller, assert_no_races, cudart, device_array, new_stream,  # noqa: E402
                         read_on, write_on)


def main():
    init()
    cudart.cudaSetDevice(0)
    stream = new_stream()
    caller = Caller(0, stream)
    late_joiners.begin("worker w9 (rank 0 of 1), which joined round 3 of a running elastic job,",
                       basics.core())
    x, out = device_array(64, np.float32), device_array(64, np.float32)
    for op, value in ((OpType.BROADCAST, 7.0), (OpType.ALLREDUCE, 3.0)):
        write_on(stream, x, value)  # runs later, on the stream
        caller.finish(caller.start(op, f"alone.{int(op)}", x, out=out, root_rank=0,
                                   reduce_op=int(ReduceOp.Average)))
        assert np.all(read_on(stream, out) == value), (op, read_on(stream, out))
    try:
        caller.start(OpType.ALLREDUCE, "alone.scaled", x, out=out, reduce_op=int(ReduceOp.Sum),
                     postscale=0.5)
        raise AssertionError("a scaled allreduce on the GPU completed alone")
    except CollectiveOutsideRunError as error:  # the core's own kind, in every binding
        assert "with scale factors" in str(error), error
    assert_no_races("alone")
    late_joiners.end()
    basics.shutdown()
    print("alone OK", flush=True)


if __name__ == "__main__":
    main()
