"""Reducescatters of uneven shapes queued at once fuse (Note [Fused
reducescatter] in csrc/core/fusion.cc) and give each rank what NumPy says.
argv[1]: the timeline file, which the test reads to see how many collectives
ran. Prints "fused reducescatter OK"."""
import sys

import numpy as np

import hvdlite.numpy as hvd

COUNT = 40


def shapes(size):
    # One row (a 0-d parameter as the sharding layer sends it), fewer rows
    # than ranks, rows not divisible by the ranks, 2-D and 3-D.
    return [(1,), (size - 1, 3), (2 * size + 1,), (5, 4), (3 * size + 2, 2, 3)]


def value(rank, i, shape, dtype):
    n = int(np.prod(shape))
    return ((np.arange(n) % 11) * (rank + 1) + i).reshape(shape).astype(dtype)


def kind(i):
    """(dtype, op, prescale, postscale) of tensor i: four groups that fuse among themselves."""
    return [(np.float64, hvd.Sum, 0.5, 3.0), (np.float32, hvd.Average, 1.0, 1.0),
            (np.float64, hvd.Average, 2.0, 0.25), (np.int32, hvd.Sum, 1.0, 1.0)][i % 4]


def expected(rank, size, i, shape):
    dtype, op, prescale, postscale = kind(i)
    total = sum(value(r, i, shape, dtype).astype(np.float64) * prescale for r in range(size))
    if op == hvd.Average:
        total = total / size
    total = total * postscale
    rows = shape[0]
    per = [rows // size + (r < rows % size) for r in range(size)]
    first = sum(per[:rank])
    return total[first:first + per[rank]].astype(dtype)


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    all_shapes = shapes(size)
    for step in range(2):  # the second step runs from the response cache
        handles = []
        for i in range(COUNT):
            shape = all_shapes[i % len(all_shapes)]
            dtype, op, prescale, postscale = kind(i)
            handles.append(hvd.reducescatter_async(value(rank, i, shape, dtype), name=f"rs.{i}", op=op,
                                                   prescale_factor=prescale, postscale_factor=postscale))
        for i, handle in enumerate(handles):
            shape = all_shapes[i % len(all_shapes)]
            got, want = hvd.synchronize(handle), expected(rank, size, i, shape)
            assert got.dtype == want.dtype and got.shape == want.shape, (step, i, got.shape, want.shape)
            assert np.allclose(got, want, rtol=1e-6, atol=0), (step, i, got, want)
    # A lone one still runs by itself.
    x = np.arange(size * 2, dtype=np.float32) * (rank + 1)
    got = hvd.reducescatter(x, name="alone", op=hvd.Sum)
    assert np.array_equal(got, (np.arange(size * 2) * sum(range(1, size + 1)))[2 * rank:2 * rank + 2]), got
    hvd.shutdown()
    print(f"rank {rank}: fused reducescatter OK", flush=True)


if __name__ == "__main__":
    sys.exit(main())
