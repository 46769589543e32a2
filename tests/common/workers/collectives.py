"""Every collective x dtype x shape against a NumPy reference, on every rank.

Each rank's input is generated from (test name, rank), so every rank can build
every other rank's input and compute the expected result locally.
Exits non-zero with a message on the first mismatch."""
import zlib

import numpy as np
from ml_dtypes import bfloat16

import hvdlite.numpy as hvd
from checks import run_checks
from every_dtype_group import check_group_of_every_dtype

DTYPES = [np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64, np.float16, bfloat16,
          np.float32, np.float64, np.bool_]
SHAPES = [(), (0,), (1,), (7,), (5, 3), (2, 3, 4), (1000,)]


def data(name, rank, shape, dtype):
    rng = np.random.default_rng(zlib.crc32(f"{name}/{rank}".encode()))
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    low = 0 if np.issubdtype(dtype, np.unsignedinteger) else -2
    # Small integers: sums and products stay exact in every dtype, including
    # float16 and bfloat16, so results can be compared exactly.
    return rng.integers(low, 3, size=shape).astype(dtype)


def reference(op, arrays, dtype):
    wide = [a.astype(np.float64) for a in arrays]
    if dtype == np.bool_:
        stacked = np.stack([a.astype(bool) for a in arrays])
        return {hvd.Sum: stacked.any(0), hvd.Max: stacked.any(0), hvd.Min: stacked.all(0),
                hvd.Product: stacked.all(0)}[op]
    if op == hvd.Sum:
        out = np.sum(wide, axis=0)
    elif op == hvd.Average:
        out = np.sum(wide, axis=0) / len(arrays)
        if np.issubdtype(dtype, np.integer):
            out = np.trunc(out)
    elif op == hvd.Min:
        out = np.min(wide, axis=0)
    elif op == hvd.Max:
        out = np.max(wide, axis=0)
    else:
        out = np.prod(wide, axis=0)
    return out.astype(dtype)


def expect_equal(what, got, want, dtype):
    got = np.asarray(got)
    if got.shape != want.shape:
        raise AssertionError(f"{what}: shape {got.shape}, expected {want.shape}")
    if got.dtype != np.dtype(dtype):
        raise AssertionError(f"{what}: dtype {got.dtype}, expected {np.dtype(dtype)}")
    tolerance = 1e-2 if dtype in (np.float16, bfloat16) else 1e-6
    if not np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=tolerance, atol=tolerance):
        raise AssertionError(f"{what}: got {got.ravel()[:8]}, expected {want.ravel()[:8]}")


def reduce_ops(dtype):
    ops = [hvd.Sum, hvd.Min, hvd.Max, hvd.Product]
    return ops if dtype == np.bool_ else ops + [hvd.Average]


def check_allreduce(rank, size):
    for dtype in DTYPES:
        for op in reduce_ops(dtype):
            for shape in SHAPES:
                name = f"ar.{np.dtype(dtype).name}.{op.name}.{shape}"
                got = hvd.allreduce(data(name, rank, shape, dtype), op=op, name=name)
                want = reference(op, [data(name, r, shape, dtype) for r in range(size)], dtype)
                expect_equal(name, got, want, dtype)


def check_scaling(rank, size):
    x = np.arange(10, dtype=np.float32) + rank
    got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0, name="scaled")
    want = 1.5 * sum(np.arange(10, dtype=np.float32) + r for r in range(size))
    expect_equal("scaled", got, want.astype(np.float32), np.float32)


def check_allgather(rank, size):
    for dtype in DTYPES:
        for trailing in [(), (3,), (2, 2)]:
            name = f"ag.{np.dtype(dtype).name}.{trailing}"
            # First dimension differs per rank, rank 0 contributes nothing.
            arrays = [data(name, r, (r,) + trailing, dtype) for r in range(size)]
            got = hvd.allgather(arrays[rank], name=name)
            expect_equal(name, got, np.concatenate(arrays), dtype)


def check_broadcast(rank, size):
    for dtype in DTYPES:
        for shape in SHAPES:
            for root in range(size):
                name = f"bc.{np.dtype(dtype).name}.{shape}.{root}"
                got = hvd.broadcast(data(name, rank, shape, dtype), root_rank=root, name=name)
                expect_equal(name, got, data(name, root, shape, dtype), dtype)


def check_alltoall(rank, size):
    for dtype in DTYPES:
        name = f"a2a.even.{np.dtype(dtype).name}"
        arrays = [data(name, r, (2 * size, 3), dtype) for r in range(size)]
        got, received = hvd.alltoall(arrays[rank], name=name)
        want = np.concatenate([arrays[r][2 * rank:2 * rank + 2] for r in range(size)])
        expect_equal(name, got, want, dtype)
        assert list(received) == [2] * size, received
        # Uneven splits: rank r sends (r + k) % 3 rows to rank k.
        name = f"a2a.splits.{np.dtype(dtype).name}"
        splits = [[(r + k) % 3 for k in range(size)] for r in range(size)]
        arrays = [data(name, r, (sum(splits[r]), 2), dtype) for r in range(size)]
        got, received = hvd.alltoall(arrays[rank], splits=splits[rank], name=name)
        parts = []
        for r in range(size):
            start = sum(splits[r][:rank])
            parts.append(arrays[r][start:start + splits[r][rank]])
        expect_equal(name, got, np.concatenate(parts), dtype)
        assert list(received) == [splits[r][rank] for r in range(size)], received


def check_reducescatter(rank, size):
    for dtype in DTYPES:
        for rows in [size, 2 * size + 1, 1, 0]:
            for op in reduce_ops(dtype):
                name = f"rs.{np.dtype(dtype).name}.{rows}.{op.name}"
                arrays = [data(name, r, (rows, 3), dtype) for r in range(size)]
                got = hvd.reducescatter(arrays[rank], op=op, name=name)
                full = reference(op, arrays, dtype)
                base, extra = divmod(rows, size)
                start = rank * base + min(rank, extra)
                count = base + (1 if rank < extra else 0)
                expect_equal(name, got, full[start:start + count], dtype)


def check_grouped_and_async(rank, size):
    arrays = [np.full((i + 1,), rank + i, dtype=np.float64) for i in range(5)]
    got = hvd.grouped_allreduce(arrays, op=hvd.Sum, name="group")
    for i, g in enumerate(got):
        expect_equal(f"group.{i}", g, np.full((i + 1,), sum(r + i for r in range(size)), np.float64),
                     np.float64)
    check_group_of_every_dtype(hvd, rank, size, "group", dtypes=DTYPES, float32=np.float32,
                               reduce_ops=reduce_ops, data=data, reference=reference, expect=expect_equal,
                               label=lambda d: np.dtype(d).name)
    handles = [hvd.allreduce_async(np.full(3, rank, np.float32), op=hvd.Max, name=f"async.{i}")
               for i in range(20)]
    for h in handles:
        expect_equal("async", hvd.synchronize(h), np.full(3, size - 1, np.float32), np.float32)


def check_in_place(rank, size):
    x = np.full((4, 3), rank + 1, np.float32)
    got = hvd.allreduce_(x, op=hvd.Sum, name="in_place")
    assert got is x, "allreduce_ must return the array it reduced into"
    expect_equal("in_place", x, np.full((4, 3), size * (size + 1) / 2, np.float32), np.float32)
    handles = [(a, hvd.allreduce_async_(a, op=hvd.Max, name=f"in_place.async.{i}"))
               for i, a in enumerate(np.full((3, 5), rank, np.int64))]
    for a, h in handles:
        assert hvd.synchronize(h) is a
        expect_equal("in_place.async", a, np.full(5, size - 1, np.int64), np.int64)
    try:
        hvd.allreduce_(np.zeros((4, 4), np.float32)[:, ::2], name="strided")
    except ValueError as error:
        assert "writable, C-contiguous" in str(error) and "'strided'" in str(error), error
    else:
        raise AssertionError("allreduce_ took a non-contiguous array")


def _outcome(call):
    """What a call did: ("ok", result bytes, dtype) or ("raised", type, message)."""
    try:
        out = call()
    except Exception as error:  # compared between the two paths, not judged
        return ("raised", type(error).__name__, str(error))
    return ("ok", np.asarray(out).tobytes(), str(np.asarray(out).dtype))


def _one_call_async(array, tag, op, scales):
    """allreduce_array_async, then the wait synchronize() makes; the array."""
    from hvdlite.common import basics, requests
    entry = requests.allreduce_array_async(array, tag, op, *scales, hvd.global_process_set, None)
    assert entry is not None, f"{tag}: the async one call declined a plain case"
    basics.core().wait(*entry)
    return array


def check_in_place_one_call(rank, size):
    """allreduce_'s one-call path (Note [In-place allreduce of an array in one
    call]) takes the common calls and gives the general path's bytes; every
    call it declines still gets the general path's result or error."""
    from hvdlite.common import requests
    from hvdlite.numpy.collectives import _allreduce_now
    ops = [None, hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product, 0, True]
    for dtype in DTYPES:
        for op in ops:
            tag = f"one_call.{np.dtype(dtype).name}.{op!r}"
            fast, slow = data(tag, rank, (5, 3), dtype), data(tag, rank, (5, 3), dtype)
            scales = (0.5, 2.0) if np.issubdtype(dtype, np.floating) else (1.0, 1.0)
            if dtype is bfloat16:  # not a NumPy builtin: left to the general path
                assert requests.allreduce_array(fast, tag, op, *scales, hvd.global_process_set,
                                                None) is None, tag
                continue
            took = _outcome(lambda: requests.allreduce_array(fast, tag, op, *scales,
                                                             hvd.global_process_set, None))
            general = _outcome(lambda: _allreduce_now(slow, None, tag, op, *scales,
                                                      hvd.global_process_set, in_place=True))
            if took != general:
                raise AssertionError(f"{tag}: one call {took[:2]} != general path {general[:2]}")
            # allreduce_async_'s one call (Note [Asynchronous allreduce of an
            # array in one call]): the same bytes once synchronized.
            queued = data(tag, rank, (5, 3), dtype)
            took = _outcome(lambda: _one_call_async(queued, tag, op, scales))
            if took != general:
                raise AssertionError(f"{tag}: async one call {took[:2]} != general path {general[:2]}")
    declined = {
        "average=": lambda x: (x, "d.avg", None, 1.0, 1.0, hvd.global_process_set, True),
        "Adasum": lambda x: (x, "d.adasum", hvd.Adasum, 1.0, 1.0, hvd.global_process_set, None),
        "op as text": lambda x: (x, "d.text", "sum", 1.0, 1.0, hvd.global_process_set, None),
        "int scale": lambda x: (x, "d.int", hvd.Sum, 2, 1.0, hvd.global_process_set, None),
        "no name": lambda x: (x, None, hvd.Sum, 1.0, 1.0, hvd.global_process_set, None),
        "empty name": lambda x: (x, "", hvd.Sum, 1.0, 1.0, hvd.global_process_set, None),
        "NUL in name": lambda x: (x, "d\0nul", hvd.Sum, 1.0, 1.0, hvd.global_process_set, None),
        "no set": lambda x: (x, "d.noset", hvd.Sum, 1.0, 1.0, None, None),
        "read-only": lambda x: (np.frombuffer(x.tobytes(), x.dtype), "d.ro", hvd.Sum, 1.0, 1.0,
                                hvd.global_process_set, None),
        "strided": lambda x: (np.zeros(8, x.dtype)[::2], "d.strided", hvd.Sum, 1.0, 1.0,
                              hvd.global_process_set, None),
        "big-endian": lambda x: (x.astype(">f4"), "d.be", hvd.Sum, 1.0, 1.0, hvd.global_process_set, None),
        "complex": lambda x: (x.astype(np.complex64), "d.cx", hvd.Sum, 1.0, 1.0, hvd.global_process_set, None),
        "list": lambda x: ([1.0, 2.0], "d.list", hvd.Sum, 1.0, 1.0, hvd.global_process_set, None),
    }
    for what, arguments in declined.items():
        args = arguments(np.ones(4, np.float32))
        if requests.allreduce_array(*args) is not None:
            raise AssertionError(f"one call took the {what} case, which needs the general path")
        if requests.allreduce_array_async(*args) is not None:
            raise AssertionError(f"the async one call took the {what} case, which needs the general path")
    # And allreduce_ itself then does what the general path does (both ranks alike).
    x = np.full(4, rank + 1.0, np.float32)
    got = hvd.allreduce_(x, name="d.avg.allreduce_", average=True)
    assert got is x and np.all(x == (size + 1) / 2), x
    try:
        hvd.allreduce_(np.ones(4, np.complex64), op=hvd.Sum, name="d.cx.allreduce_")
    except ValueError as error:
        assert "complex64 is not supported" in str(error), error
    else:
        raise AssertionError("allreduce_ took a complex64 array")


def check_barrier(rank, size):
    for _ in range(3):
        hvd.barrier()


CHECKS = [check_allreduce, check_scaling, check_allgather, check_broadcast, check_alltoall,
          check_reducescatter, check_grouped_and_async, check_in_place, check_in_place_one_call,
          check_barrier]


if __name__ == "__main__":
    run_checks(hvd, CHECKS, "collectives OK")
