"""hvdlite.numpy's allreduce_ of a few bytes, called again and again under one
name, as a loss or a metric is: after the first call every call is a response
cache hit, which a cached allreduce of at most 16 bytes completes in the cache
bits' exchange itself (Note [One exchange for a cached small allreduce] in
csrc/core/cached_exchange.cc). Every dtype and reduce op around that bound,
with prescale and postscale, against NumPy; some steps with one rank late,
and the last step's bytes compared across ranks. Exits non-zero with a
message on the first mismatch."""
import time

import numpy as np
from ml_dtypes import bfloat16

import hvdlite.numpy as hvd
from checks import check, run_checks
from collectives import expect_equal, reference

STEPS = 12
# dtype, shape, op, prescale, postscale: within 16 bytes but the last two.
CASES = [(np.float32, (), hvd.Sum, 1.0, 1.0),
         (np.float32, (1,), hvd.Average, 0.5, 3.0),
         (np.float64, (2,), hvd.Sum, 2.0, 0.25),
         (np.float16, (8,), hvd.Average, 1.0, 1.0),
         (bfloat16, (3,), hvd.Sum, 0.5, 2.0),
         (np.int32, (3,), hvd.Average, 1.0, 1.0),
         (np.int64, (2,), hvd.Max, 1.0, 1.0),
         (np.uint8, (5,), hvd.Product, 1.0, 1.0),
         (np.int16, (1,), hvd.Min, 1.0, 1.0),
         (np.bool_, (16,), hvd.Max, 1.0, 1.0),
         (np.float32, (5,), hvd.Sum, 1.0, 1.0),
         (np.float64, (3,), hvd.Average, 0.5, 1.0)]


def values(rank, step, shape, dtype):
    """Small integers, different per rank and step: exact in every dtype."""
    n = int(np.prod(shape, dtype=np.int64))
    raw = (np.arange(n) + rank + step) % 4
    if dtype == np.bool_:
        return (raw % 2 == 0).reshape(shape)
    return raw.astype(dtype).reshape(shape)


def scaled_reference(op, arrays, dtype, prescale, postscale):
    if prescale == 1.0 and postscale == 1.0:
        return reference(op, arrays, dtype)
    wide = [a.astype(np.float64) * prescale for a in arrays]
    out = np.sum(wide, axis=0) / (len(arrays) if op == hvd.Average else 1)
    return (out * postscale).astype(dtype)


def check_cached_small_allreduces(rank, size):
    for k, (dtype, shape, op, prescale, postscale) in enumerate(CASES):
        name = f"small.{k}.{np.dtype(dtype).name}"
        for step in range(STEPS):
            if step % 4 == 3 and rank == size - 1:
                time.sleep(0.003)  # the others carry their data alone first
            x = values(rank, step, shape, dtype)
            got = hvd.allreduce_(x, name=name, op=op, prescale_factor=prescale,
                                 postscale_factor=postscale)
            check(got is x, f"{name}: allreduce_ returned another array")
            want = scaled_reference(op, [values(r, step, shape, dtype) for r in range(size)], dtype,
                                    prescale, postscale)
            expect_equal(f"{name} step {step}", got, want, dtype)
        mine = np.frombuffer(x.tobytes(), np.uint8).reshape(1, -1)
        every = hvd.allgather(mine, name=f"{name}.bytes")
        check(all((row == every[0]).all() for row in every),
              f"{name}: ranks hold different bytes: {every}")


if __name__ == "__main__":
    run_checks(hvd, [check_cached_small_allreduces], "cached small allreduces OK")
