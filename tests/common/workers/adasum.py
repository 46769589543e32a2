"""hvdlite.numpy allreduce(op=Adasum) on real ranks against a NumPy
implementation of the pairwise tree (adasum_reference.py): single tensors of
odd sizes, a grouped (fused) batch, async allreduces fused by the core, scale
factors, a joined rank; results bitwise identical on every rank. With a
number of ranks that is not a power of two, and on a process set other than
the global one, the errors. Exits non-zero with a message on the first mismatch."""
import zlib

import numpy as np
from ml_dtypes import bfloat16

import hvdlite.numpy as hvd
from adasum_reference import adasum, power_of_two_only
from checks import check_job_goes_on, run_checks

DTYPES = [np.float64, np.float32, np.float16, bfloat16]
SHAPES = [(7,), (5, 3), (1,), (0,), (1001,), (3, 11)]  # odd, and not divisible by 2 or 4
TOLERANCE = {np.float64: 1e-12, np.float32: 1e-5, np.float16: 4e-3, bfloat16: 3e-2}


def data(name, rank, shape, dtype):
    """A direction shared by the ranks plus each rank's own, so that the
    vectors are neither parallel nor orthogonal and both coefficients matter."""
    shared = np.random.default_rng(zlib.crc32(name.encode())).standard_normal(shape)
    own = np.random.default_rng(zlib.crc32(f"{name}/{rank}".encode())).standard_normal(shape)
    return (shared + own).astype(dtype)


def expect_close(what, got, want, dtype):
    got = np.asarray(got)
    if got.shape != want.shape or got.dtype != np.dtype(dtype):
        raise AssertionError(f"{what}: {got.dtype}{got.shape}, expected {np.dtype(dtype)}{want.shape}")
    tolerance = TOLERANCE[dtype]
    if not np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=tolerance,
                       atol=tolerance):
        raise AssertionError(f"{what}: got {got.ravel()[:6]}, expected {want.ravel()[:6]}")


def expect_same_on_every_rank(what, got):
    root = hvd.broadcast(got, root_rank=0, name=f"same.{what}")
    if root.tobytes() != np.asarray(got).tobytes():
        raise AssertionError(f"{what}: rank {hvd.rank()}'s result differs from rank 0's")


def expect_error(what, substrings, fn, kind=ValueError):
    try:
        fn()
    except kind as error:
        missing = [s for s in substrings if s not in str(error)]
        if missing:
            raise AssertionError(f"{what}: message {str(error)!r} lacks {missing}")
    else:
        raise AssertionError(f"{what}: no {kind.__name__}")


@power_of_two_only
def check_allreduce(rank, size):
    for dtype in DTYPES:
        for shape in SHAPES:
            name = f"adasum.{np.dtype(dtype).name}.{shape}"
            inputs = [data(name, r, shape, dtype) for r in range(size)]
            got = hvd.allreduce(inputs[rank], op=hvd.Adasum, name=name)
            expect_close(name, got, adasum(inputs), dtype)
            expect_same_on_every_rank(name, got)


@power_of_two_only
def check_fused(rank, size):
    # Each tensor of a fused buffer gets its own dot product and norms.
    shapes = [(7,), (1,), (0,), (13, 3), (1001,), (2,)]
    for dtype in (np.float64, np.float32, np.float16):
        group = f"adasum.group.{np.dtype(dtype).name}"
        inputs = [[data(f"{group}.{i}", r, shape, dtype) for r in range(size)]
                  for i, shape in enumerate(shapes)]
        got = hvd.grouped_allreduce([x[rank] for x in inputs], op=hvd.Adasum, name=group)
        for i, (out, per_rank) in enumerate(zip(got, inputs)):
            expect_close(f"{group}.{i}", out, adasum(per_rank), dtype)
            expect_same_on_every_rank(f"{group}.{i}", out)
        # Queued together, separate allreduces are fused by the core likewise.
        handles = [hvd.allreduce_async(x[rank], op=hvd.Adasum, name=f"{group}.async{i}")
                   for i, x in enumerate(inputs)]
        for i, (handle, per_rank) in enumerate(zip(handles, inputs)):
            expect_close(f"{group}.async{i}", hvd.synchronize(handle), adasum(per_rank), dtype)


@power_of_two_only
def check_scale_factors(rank, size):
    # Horovod scales the input before the reduction and the result after it.
    inputs = [data("adasum.scaled", r, (9,), np.float64) for r in range(size)]
    got = hvd.allreduce(inputs[rank], op=hvd.Adasum, prescale_factor=0.5, postscale_factor=3.0,
                        name="adasum.scaled")
    expect_close("scaled", got, 3.0 * adasum([0.5 * x for x in inputs]), np.float64)


@power_of_two_only
def check_joined_rank(rank, size):
    # The last rank has joined: it contributes zeros, which leave the others' vectors unchanged.
    inputs = [data("adasum.joined", r, (6,), np.float32) for r in range(size)]
    if rank == size - 1:
        hvd.join()
        return
    got = hvd.allreduce(inputs[rank], op=hvd.Adasum, name="adasum.joined")
    expect_close("joined", got, adasum(inputs[:-1] + [np.zeros(6, np.float32)]), np.float32)
    hvd.join()


def check_errors(rank, size):
    expect_error("int32", ["'adasum.int'", "floating-point", "int32"],
                 lambda: hvd.allreduce(np.ones(3, np.int32), op=hvd.Adasum, name="adasum.int"))
    for kind in (RuntimeError, ValueError):  # Horovod's type, and hvdlite's API errors
        expect_error("reducescatter", ["allreduce only", "not reducescatter"],
                     lambda: hvd.reducescatter(np.ones(2 * size, np.float32), op=hvd.Adasum),
                     kind=kind)
    pair = hvd.add_process_set([0, 1])
    if pair.included():
        expect_error("process set", ["non-global process sets"],
                     lambda: hvd.allreduce(np.ones(3, np.float32), op=hvd.Adasum,
                                           name="adasum.set", process_set=pair),
                     kind=NotImplementedError)  # Horovod's type
    hvd.remove_process_set(pair)
    if size & (size - 1):
        expect_error("ranks", ["'adasum.ranks'", "power-of-two", f"has {size}"],
                     lambda: hvd.allreduce(np.ones(3, np.float32), op=hvd.Adasum, name="adasum.ranks"))
    # Nothing was sent: the ranks go on with other collectives.
    check_job_goes_on(hvd, "adasum.after_errors")


CHECKS = [check_allreduce, check_fused, check_scale_factors, check_joined_rank, check_errors]


if __name__ == "__main__":
    run_checks(hvd, CHECKS, "adasum OK")
