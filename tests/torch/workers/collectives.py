"""hvdlite.torch on real ranks: every collective x dtype x shape x op against
a torch reference, sync and async, in place and not, grouped, non-contiguous,
compressed; errors (gradients: autograd_checks.py);
join, barrier, poll; re-init after shutdown.

Each rank's input is generated from (name, rank), so every rank can build
every other rank's input and compute the expected result locally.
Exits non-zero with a message on the first mismatch."""
import sys
import time
import zlib
from pathlib import Path

import torch

import hvdlite.torch as hvd

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "common" / "workers"))
from every_dtype_group import check_group_of_every_dtype  # noqa: E402

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64, torch.bool]
# torch.uint16 (torch 2.3+) has little arithmetic, but it can be made, viewed,
# copied and converted, which is all the collectives and these checks need.
UNSIGNED = [torch.uint8]
if hasattr(torch, "uint16"):
    DTYPES.insert(2, torch.uint16)
    UNSIGNED.append(torch.uint16)
SHAPES = [(), (0,), (1,), (7,), (5, 3), (2, 3, 4), (1000,)]
# Above 2 ranks the dtype x op matrices run on fewer shapes: the 2-rank run
# (tests/torch/test_torch_jobs.py, and over MPI test_mpi_ops.py) covers every
# shape, and the 3-rank run's point is an odd size.
FEW_SHAPES = [(), (0,), (5, 3)]


def shapes():
    return FEW_SHAPES if hvd.size() > 2 else SHAPES


def data(name, rank, shape, dtype):
    generator = torch.Generator().manual_seed(zlib.crc32(f"{name}/{rank}".encode()))
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    low = 0 if dtype in UNSIGNED else -2
    # Small integers: sums and products stay exact in every dtype, including
    # float16 and bfloat16, so results can be compared exactly.
    return torch.randint(low, 3, shape, generator=generator).to(dtype)


def reference(op, tensors, dtype):
    if dtype == torch.bool:
        stacked = torch.stack(tensors)
        return stacked.any(0) if op in (hvd.Sum, hvd.Max) else stacked.all(0)
    wide = torch.stack([t.double() for t in tensors])
    if op == hvd.Sum:
        out = wide.sum(0)
    elif op == hvd.Average:
        out = wide.sum(0) / len(tensors)
        if not dtype.is_floating_point:
            out = out.trunc()
    elif op == hvd.Min:
        out = wide.amin(0)
    elif op == hvd.Max:
        out = wide.amax(0)
    else:
        out = wide.prod(0)
    return out.to(dtype)


def expect_equal(what, got, want, tolerance=None):
    if not isinstance(got, torch.Tensor):
        raise AssertionError(f"{what}: got a {type(got).__name__}, expected a tensor")
    if got.shape != want.shape:
        raise AssertionError(f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    if got.dtype != want.dtype:
        raise AssertionError(f"{what}: dtype {got.dtype}, expected {want.dtype}")
    if tolerance is None:
        tolerance = 1e-2 if want.dtype in (torch.float16, torch.bfloat16) else 1e-6
    if not torch.allclose(got.double(), want.double(), rtol=tolerance, atol=tolerance):
        raise AssertionError(f"{what}: got {got.flatten()[:8]}, expected {want.flatten()[:8]}")


def finish(pending):
    """Synchronizes (what, handle, expected, tensor the result must be) tuples."""
    for what, handle, want, same in pending:
        got = hvd.synchronize(handle)
        expect_equal(what, got, want)
        if same is not None and got is not same:
            raise AssertionError(f"{what}: the in-place result is not the input tensor")


def reduce_ops(dtype):
    ops = [hvd.Sum, hvd.Min, hvd.Max, hvd.Product]
    return ops if dtype == torch.bool else ops + [hvd.Average]


def check_allreduce(rank, size):
    pending = []
    for dtype in DTYPES:
        for op in reduce_ops(dtype):
            for shape in shapes():
                base = f"ar.{dtype}.{op.name}.{shape}"
                want = reference(op, [data(base, r, shape, dtype) for r in range(size)], dtype)
                x = data(base, rank, shape, dtype)
                # Every case runs async in place and not; the synchronous calls
                # (the same path plus synchronize) alternate between the two.
                if len(pending) % 4 == 0:
                    expect_equal(base, hvd.allreduce(x, op=op, name=base), want)
                    expect_equal(f"{base} input", x, data(base, rank, shape, dtype), 0)
                else:
                    y = x.clone()
                    if hvd.allreduce_(y, op=op, name=f"{base}.inplace") is not y:
                        raise AssertionError(f"{base}: allreduce_ did not return its input")
                    expect_equal(f"{base}.inplace", y, want)
                pending.append((f"{base}.async", hvd.allreduce_async(x, op=op,
                                                                     name=f"{base}.async"),
                                want, None))
                z = x.clone()
                pending.append((f"{base}.async_", hvd.allreduce_async_(z, op=op,
                                                                       name=f"{base}.async_"),
                                want, z))
    finish(pending)


def check_allreduce_arguments(rank, size):
    x = torch.arange(10, dtype=torch.float32) + rank
    total = sum(torch.arange(10, dtype=torch.float32) + r for r in range(size))
    got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
    expect_equal("scaled", got, 1.5 * total)
    expect_equal("default op is Average", hvd.allreduce(x), total / size)
    expect_equal("average=True", hvd.allreduce(x, average=True), total / size)
    expect_equal("average=False", hvd.allreduce(x, average=False), total)
    ints = torch.full((4,), 7 * (rank + 1), dtype=torch.int32)
    expect_equal("int average truncates", hvd.allreduce(ints, op=hvd.Average),
                 reference(hvd.Average, [torch.full((4,), 7 * (r + 1), dtype=torch.int32)
                                         for r in range(size)], torch.int32))
    for compression in (hvd.Compression.fp16, hvd.Compression.bf16):
        y = torch.linspace(-1, 1, 50, dtype=torch.float32) * (rank + 1)
        want = sum(torch.linspace(-1, 1, 50) * (r + 1) for r in range(size)) / size
        got = hvd.allreduce(y, compression=compression, name=f"compressed.{compression.__name__}")
        expect_equal(f"{compression.__name__} allreduce", got, want, 2e-2)
        ints = torch.arange(5, dtype=torch.int64)
        expect_equal(f"{compression.__name__} leaves ints alone",
                     hvd.allreduce(ints, op=hvd.Sum, compression=compression), ints * size)
        got = hvd.grouped_allreduce([y, y.double()], compression=compression)
        expect_equal(f"{compression.__name__} grouped", got[1], want.double(), 2e-2)
    if hvd.Compression.none.compress(x) != (x, None):
        raise AssertionError("Compression.none changed the tensor")


def check_grouped_allreduce(rank, size):
    shapes = [(3,), (), (2, 5), (0,), (1000,)]
    dtypes = [torch.float32, torch.float64, torch.int32, torch.bfloat16, torch.float32]
    for op in (hvd.Sum, hvd.Average, hvd.Max):
        name = f"gar.{op.name}"
        inputs = [[data(f"{name}.{i}", r, s, d) for i, (s, d) in enumerate(zip(shapes, dtypes))]
                  for r in range(size)]
        wants = [reference(op, [inputs[r][i] for r in range(size)], d)
                 for i, d in enumerate(dtypes)]
        mine = inputs[rank]
        for variant, fn in [("sync", lambda t, n: hvd.grouped_allreduce(t, op=op, name=n)),
                            ("async", lambda t, n: hvd.synchronize(
                                hvd.grouped_allreduce_async(t, op=op, name=n)))]:
            got = fn(mine, f"{name}.{variant}")
            for i, want in enumerate(wants):
                expect_equal(f"{name}.{variant}[{i}]", got[i], want)
        for variant, fn in [("inplace", lambda t, n: hvd.grouped_allreduce_(t, op=op, name=n)),
                            ("async_", lambda t, n: hvd.synchronize(
                                hvd.grouped_allreduce_async_(t, op=op, name=n)))]:
            copies = [t.clone() for t in mine]
            got = fn(copies, f"{name}.{variant}")
            for i, want in enumerate(wants):
                expect_equal(f"{name}.{variant}[{i}]", copies[i], want)
                if got[i] is not copies[i]:
                    raise AssertionError(f"{name}.{variant}[{i}] is not the input tensor")
    check_group_of_every_dtype(hvd, rank, size, "gar", dtypes=DTYPES, float32=torch.float32,
                               reduce_ops=reduce_ops, data=data, reference=reference,
                               expect=lambda what, got, want, d: expect_equal(what, got, want), label=str)
    if hvd.grouped_allreduce([]) != []:
        raise AssertionError("grouped_allreduce([]) is not []")


def check_allgather(rank, size):
    pending = []
    for dtype in DTYPES:
        for trailing in [(), (3,), (2, 2)]:
            name = f"ag.{dtype}.{trailing}"
            # First dimension differs per rank; rank 0 contributes nothing.
            tensors = [data(name, r, (r,) + trailing, dtype) for r in range(size)]
            want = torch.cat(tensors)
            expect_equal(name, hvd.allgather(tensors[rank], name=name), want)
            pending.append((f"{name}.async", hvd.allgather_async(tensors[rank],
                                                                 name=f"{name}.async"),
                            want, None))
    finish(pending)
    expect_equal("allgather of a scalar", hvd.allgather(torch.tensor(float(rank))),
                 torch.arange(size, dtype=torch.float32))
    groups = [[data(f"gag.{i}", r, (r + i % 3, 2), d) for i, d in enumerate(DTYPES)]
              for r in range(size)]
    for variant, got in [("sync", hvd.grouped_allgather(groups[rank], name="gag")),
                         ("async", hvd.synchronize(hvd.grouped_allgather_async(
                             groups[rank], name="gag.async")))]:
        for i in range(len(DTYPES)):
            expect_equal(f"grouped_allgather.{variant}[{i}]", got[i],
                         torch.cat([groups[r][i] for r in range(size)]))


def check_into_buffers(rank, size):
    """allgather and reducescatter into buffers the caller gives (Note
    [Outputs into the caller's buffer] in csrc/api/caller_output.cc)."""
    from hvdlite.torch.collectives import allgather_into_async, grouped_reducescatter_into_async
    parts = [data("agi", r, (r + 1, 3), torch.float32) for r in range(size)]
    want = torch.cat(parts)
    output = torch.full_like(want, -7.0)
    got = hvd.synchronize(allgather_into_async(parts[rank], output, name="agi"))
    if got is not output:
        raise AssertionError("allgather_into_async returned another tensor than its output")
    expect_equal("allgather into a buffer", output, want)
    # A rank's rows gathered into the tensor that holds them (a sharded
    # parameter): every rank's own rows are already in place.
    whole = torch.zeros_like(want)
    start = sum(r + 1 for r in range(rank))
    whole[start:start + rank + 1] = parts[rank]
    hvd.synchronize(allgather_into_async(whole.narrow(0, start, rank + 1), whole, name="agi.own"))
    expect_equal("allgather of a tensor's own rows into it", whole, want)
    # Reducescatter of two members into steady buffers, twice (reused).
    for step in range(2):
        tensors = [data(f"rsi.{step}.{i}", r, (2 * size + i, 2), torch.float64)
                   for i in range(2) for r in range(size)]
        mine = [tensors[i * size + rank] for i in range(2)]
        outputs = [torch.empty(2 + (1 if i and rank < i else 0), 2, dtype=torch.float64)
                   for i in range(2)]
        got = hvd.synchronize(grouped_reducescatter_into_async(
            mine, outputs, name=f"rsi.{step}", op=hvd.Sum))
        for i in range(2):
            if got[i] is not outputs[i]:
                raise AssertionError("grouped_reducescatter_into_async returned other tensors")
            total = sum(tensors[i * size + r] for r in range(size))
            rows = [2 + (1 if i and r < i else 0) for r in range(size)]
            begin = sum(rows[:rank])
            expect_equal(f"reducescatter into a buffer [{i}] step {step}", outputs[i],
                         total[begin:begin + rows[rank]])
    # A buffer of the wrong size on rank 0: the collective runs on every rank
    # (none hangs), the others get their result, and rank 0 fails, naming both sizes.
    rows = want.shape[0] + (1 if rank == 0 else 0)
    handle = allgather_into_async(parts[rank], torch.empty(rows, 3), name="agi.wrong")
    if rank == 0:
        expect_raises("an output of the wrong size", ValueError,
                      ["allgather of 'agi.wrong'", f"holds {rows * 12} bytes",
                       f"shape [{want.shape[0]}, 3]"], lambda: hvd.synchronize(handle))
    else:
        expect_equal("the others' result beside a wrong buffer", hvd.synchronize(handle), want)
    expect_equal("a collective after the failed one", hvd.allreduce(torch.ones(2), op=hvd.Sum),
                 torch.full((2,), float(size)))
    expect_raises("an output of another dtype", ValueError, ["the output must be a contiguous",
                                                             "torch.float32"],
                  lambda: allgather_into_async(parts[rank], torch.empty(want.shape, dtype=torch.int32),
                                               name="agi.dtype"))


def check_broadcast(rank, size):
    pending = []
    for dtype in DTYPES:
        for shape in shapes():
            for root in range(size):
                name = f"bc.{dtype}.{shape}.{root}"
                want = data(name, root, shape, dtype)
                x = data(name, rank, shape, dtype)
                if len(pending) % 4 == 0:  # as in check_allreduce
                    expect_equal(name, hvd.broadcast(x, root_rank=root, name=name), want)
                    expect_equal(f"{name} input", x, data(name, rank, shape, dtype), 0)
                else:
                    y = x.clone()
                    if hvd.broadcast_(y, root, name=f"{name}.inplace") is not y:
                        raise AssertionError(f"{name}: broadcast_ did not return its input")
                    expect_equal(f"{name}.inplace", y, want)
                pending.append((f"{name}.async", hvd.broadcast_async(x, root,
                                                                     name=f"{name}.async"),
                                want, None))
                z = x.clone()
                pending.append((f"{name}.async_", hvd.broadcast_async_(z, root,
                                                                       name=f"{name}.async_"),
                                want, z))
    finish(pending)


def check_alltoall(rank, size):
    for dtype in DTYPES:
        name = f"a2a.even.{dtype}"
        tensors = [data(name, r, (2 * size, 3), dtype) for r in range(size)]
        want = torch.cat([tensors[r][2 * rank:2 * rank + 2] for r in range(size)])
        # Horovod: without splits alltoall returns only the tensor.
        expect_equal(name, hvd.alltoall(tensors[rank], name=name), want)
        got, received = hvd.synchronize(hvd.alltoall_async(tensors[rank], name=f"{name}.async"))
        expect_equal(f"{name}.async", got, want)
        expect_equal(f"{name}.async splits", received, torch.full((size,), 2, dtype=torch.int32))
        # Uneven splits: rank r sends (r + k) % 3 rows to rank k.
        name = f"a2a.splits.{dtype}"
        splits = [[(r + k) % 3 for k in range(size)] for r in range(size)]
        tensors = [data(name, r, (sum(splits[r]), 2), dtype) for r in range(size)]
        parts = []
        for r in range(size):
            start = sum(splits[r][:rank])
            parts.append(tensors[r][start:start + splits[r][rank]])
        want_splits = [splits[r][rank] for r in range(size)]
        for variant, given, split_dtype in [("list", splits[rank], torch.int32),
                                            ("tensor", torch.tensor(splits[rank]), torch.int64)]:
            got, received = hvd.alltoall(tensors[rank], splits=given, name=f"{name}.{variant}")
            expect_equal(f"{name}.{variant}", got, torch.cat(parts))
            expect_equal(f"{name}.{variant} received", received,
                         torch.tensor(want_splits, dtype=split_dtype))


def check_reducescatter(rank, size):
    pending = []
    for dtype in DTYPES:
        for rows in [size, 2 * size + 1, 1, 0]:
            for op in reduce_ops(dtype):
                name = f"rs.{dtype}.{rows}.{op.name}"
                tensors = [data(name, r, (rows, 3), dtype) for r in range(size)]
                full = reference(op, tensors, dtype)
                base, extra = divmod(rows, size)
                start = rank * base + min(rank, extra)
                want = full[start:start + base + (1 if rank < extra else 0)]
                expect_equal(name, hvd.reducescatter(tensors[rank], op=op, name=name), want)
                pending.append((f"{name}.async", hvd.reducescatter_async(
                    tensors[rank], name=f"{name}.async", op=op), want, None))
    finish(pending)
    x = torch.arange(2 * size * 2, dtype=torch.float32).reshape(2 * size, 2) * (rank + 1)
    total = sum(torch.arange(2 * size * 2, dtype=torch.float32).reshape(2 * size, 2) * (r + 1)
                for r in range(size))
    mine = slice(2 * rank, 2 * rank + 2)
    expect_equal("reducescatter default Average", hvd.reducescatter(x), total[mine] / size)
    expect_equal("reducescatter scaled",
                 hvd.reducescatter(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25),
                 total[mine] * 0.5)
    expect_equal("reducescatter fp16", hvd.reducescatter(x, compression=hvd.Compression.fp16),
                 total[mine] / size, 1e-2)
    inputs = [x, x.double() + 1, x[:, :1].to(torch.int32)]
    wants = [total[mine] / size, (total[mine] / size + 1).double(),
             reference(hvd.Average, [(torch.arange(2 * size * 2).reshape(2 * size, 2)
                                      * (r + 1))[:, :1].to(torch.int32) for r in range(size)],
                       torch.int32)[mine]]
    for variant, got in [("sync", hvd.grouped_reducescatter(inputs, name="grs")),
                         ("async", hvd.synchronize(hvd.grouped_reducescatter_async(
                             inputs, name="grs.async")))]:
        for i, want in enumerate(wants):
            expect_equal(f"grouped_reducescatter.{variant}[{i}]", got[i], want)
    # One group holding every dtype, uneven rows, for every op.
    for op in reduce_ops(torch.float32):
        dtypes = [d for d in DTYPES if op in reduce_ops(d)]
        name = f"grs.every_dtype.{op.name}"
        groups = [[data(f"{name}.{i}", r, (size + 1, 2), d) for i, d in enumerate(dtypes)]
                  for r in range(size)]
        base, extra = divmod(size + 1, size)
        start = rank * base + min(rank, extra)
        mine = slice(start, start + base + (1 if rank < extra else 0))
        got = hvd.grouped_reducescatter(groups[rank], op=op, name=name)
        for i, d in enumerate(dtypes):
            expect_equal(f"{name}[{d}]", got[i],
                         reference(op, [groups[r][i] for r in range(size)], d)[mine])


def check_noncontiguous(rank, size):
    name = "nc"
    bases = [data(name, r, (6, 8), torch.float32) for r in range(size)]
    views = [b[:, ::2] for b in bases]  # every other column: not contiguous
    mine = bases[rank].clone()
    view = mine[:, ::2]
    assert not view.is_contiguous()
    want = reference(hvd.Sum, views, torch.float32)
    expect_equal("nc allreduce", hvd.allreduce(view, op=hvd.Sum), want)
    if hvd.allreduce_(view, op=hvd.Sum) is not view:
        raise AssertionError("nc allreduce_ did not return the view")
    expect_equal("nc allreduce_", mine[:, ::2], want)
    expect_equal("nc allreduce_ left other columns alone", mine[:, 1::2], bases[rank][:, 1::2], 0)
    transposed = bases[rank].t()
    expect_equal("nc broadcast", hvd.broadcast(transposed, 0), bases[0].t())
    target = bases[rank].clone()
    hvd.synchronize(hvd.broadcast_async_(target.t(), 0))
    expect_equal("nc broadcast_async_", target, bases[0])
    expect_equal("nc allgather", hvd.allgather(transposed), torch.cat([b.t() for b in bases]))
    column = bases[rank][:, 3]
    if size <= 6 and 6 % size == 0:
        got = hvd.alltoall(column)
        rows = 6 // size
        expect_equal("nc alltoall", got,
                     torch.cat([b[:, 3][rank * rows:(rank + 1) * rows] for b in bases]))
    got = hvd.reducescatter(views[rank], op=hvd.Sum)
    base, extra = divmod(6, size)
    start = rank * base + min(rank, extra)
    expect_equal("nc reducescatter", got, want[start:start + base + (1 if rank < extra else 0)])
    group = [view.clone().t(), bases[rank][::2]]
    got = hvd.grouped_allreduce(group, op=hvd.Sum)
    expect_equal("nc grouped", got[1], reference(hvd.Sum, [b[::2] for b in bases], torch.float32))


def check_sparse(rank, size):
    # Rank r has rows r and r + 1 of a (size + 1, 3) matrix set to r + 1.
    dense = [torch.zeros(size + 1, 3) for _ in range(size)]
    for r in range(size):
        dense[r][r:r + 2] = r + 1
    for op in (hvd.Sum, hvd.Average):
        wait = hvd.sparse_allreduce_async(dense[rank].to_sparse(), f"sparse.{op.name}", op)
        got = wait()
        if not got.is_sparse:
            raise AssertionError("sparse_allreduce_async did not return a sparse tensor")
        expect_equal(f"sparse {op.name}", got.to_dense(), reference(op, dense, torch.float32))


def expect_raises(what, error_type, needles, fn):
    try:
        fn()
    except error_type as error:
        for needle in needles:
            if needle not in str(error):
                raise AssertionError(f"{what}: '{needle}' not in: {error}") from error
        return error
    except Exception as error:
        raise AssertionError(f"{what}: raised {type(error).__name__}: {error}, "
                             f"expected {error_type.__name__}") from error
    raise AssertionError(f"{what}: no error raised")


def check_errors(rank, size):
    ones = torch.ones(4)
    unsupported = getattr(torch, "uint32", torch.complex128)  # neither is a Horovod dtype
    expect_raises("unsupported dtype", ValueError,
                  [str(unsupported).replace("torch.", ""), "not supported", "'bad.unsupported'"],
                  lambda: hvd.allreduce(torch.zeros(3, dtype=unsupported), name="bad.unsupported"))
    expect_raises("complex", ValueError, ["complex64"],
                  lambda: hvd.allgather(torch.ones(3, dtype=torch.complex64)))
    expect_raises("meta device", ValueError, ["meta", ".cpu()"],
                  lambda: hvd.broadcast(torch.ones(3, device="meta"), 0))
    expect_raises("not a tensor", ValueError, ["torch.Tensor", "list"],
                  lambda: hvd.allreduce([1.0, 2.0]))
    expect_raises("sparse", ValueError, ["sparse", "to_dense"],
                  lambda: hvd.allreduce(torch.eye(3).to_sparse()))
    expect_raises("bad op", ValueError, ["not a reduce op"], lambda: hvd.allreduce(ones, op=42))
    expect_raises("op and average", ValueError, ["either op= or"],
                  lambda: hvd.allreduce(ones, op=hvd.Sum, average=True))
    if size & (size - 1):  # Adasum itself: tests/torch/test_adasum.py
        expect_raises("adasum", ValueError, ["Adasum", "power-of-two"],
                      lambda: hvd.allreduce(ones, op=hvd.Adasum))
    expect_raises("bad scale", ValueError, ["prescale_factor"],
                  lambda: hvd.allreduce(ones, prescale_factor="x"))
    expect_raises("bad root", ValueError, ["root_rank", str(size)],
                  lambda: hvd.broadcast(ones, root_rank=size, name="bad.root"))
    expect_raises("bad splits", ValueError, ["splits", "sum to"],
                  lambda: hvd.alltoall(ones, splits=[5] + [0] * (size - 1)))
    expect_raises("scalar alltoall", ValueError, ["at least one dimension"],
                  lambda: hvd.alltoall(torch.tensor(1.0)))
    expect_raises("unknown handle", ValueError, ["unknown"], lambda: hvd.synchronize(987654))
    handle = hvd.allreduce_async(ones, name="twice")
    hvd.synchronize(handle)
    expect_raises("synchronized twice", ValueError, ["already synchronized"],
                  lambda: hvd.synchronize(handle))
    expect_raises("poll unknown", ValueError, ["unknown"], lambda: hvd.poll(handle))
    # Run-time failures (ranks disagree) are HorovodInternalError, a RuntimeError.
    error = expect_raises("mismatched shape", hvd.HorovodInternalError,
                          ["bad.shape", "mismatched shape"],
                          lambda: hvd.allreduce(torch.zeros(2 + rank), name="bad.shape"))
    assert isinstance(error, RuntimeError) and isinstance(error, hvd.HvdliteInternalError)
    dtype = torch.float32 if rank == 0 else torch.float64
    expect_raises("mismatched dtype (async)", RuntimeError, ["bad.dtype", "mismatched dtype"],
                  lambda: hvd.synchronize(hvd.allreduce_async(torch.zeros(3, dtype=dtype),
                                                              name="bad.dtype")))
    # ... and the job goes on.
    expect_equal("after errors", hvd.allreduce(ones, op=hvd.Sum, name="bad.shape"),
                 torch.full((4,), float(size)))


def check_join_barrier_poll(rank, size):
    # Rank r has r + 1 batches; joined ranks contribute nothing to the rest.
    for step in range(rank + 1):
        got = hvd.allreduce(torch.ones(3), op=hvd.Sum, name=f"join.step.{step}")
        expect_equal(f"join step {step}", got, torch.full((3,), float(size - step)))
    last = hvd.join()
    if last != size - 1:
        raise AssertionError(f"join() returned {last}, expected {size - 1}")
    for _ in range(3):
        hvd.barrier()
    handle = hvd.allreduce_async(torch.ones(100), name="polled")
    while not hvd.poll(handle):
        pass
    expect_equal("polled", hvd.synchronize(handle), torch.ones(100))


def check_basics(rank, size):
    assert hvd.is_initialized()
    assert 0 <= hvd.local_rank() < hvd.local_size() and hvd.cross_size() >= 1
    assert hvd.local_size() * hvd.cross_size() == size or not hvd.is_homogeneous()
    # Under mpirun (an MPI build) everything runs over MPI, which hvdlite
    # initialises with MPI_THREAD_MULTIPLE; otherwise over the built-in transport.
    over_mpi = hvd.mpi_enabled()
    assert (hvd.mpi_threads_supported(), hvd.gloo_built(), hvd.gloo_enabled()) == \
        (over_mpi, True, not over_mpi)
    assert isinstance(hvd.nccl_built(), int) and hvd.nccl_built() >= 0
    assert isinstance(hvd.mpi_built(), bool)
    assert issubclass(hvd.HorovodInternalError, RuntimeError)
    assert issubclass(hvd.HostsUpdatedInterrupt, RuntimeError)
    assert [int(op) for op in (hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product)] == \
        [0, 1, 2, 3, 4] and hvd.Adasum is not None
    assert hvd.global_process_set.size() == size
    if size >= 3:
        ends = hvd.add_process_set([0, size - 1])
        if rank in (0, size - 1):
            # Named: only some ranks issue them, so automatic names would diverge.
            got = hvd.allreduce(torch.tensor([float(rank)]), op=hvd.Sum, name="set.ar",
                                process_set=ends)
            expect_equal("process set allreduce", got, torch.tensor([float(size - 1)]))
            got = hvd.broadcast(torch.tensor([rank]), size - 1, name="set.bc", process_set=ends)
            expect_equal("process set broadcast", got, torch.tensor([size - 1]))
        hvd.barrier()
        hvd.remove_process_set(ends)


def check_reinit(rank, size):
    hvd.shutdown()
    assert not hvd.is_initialized()
    expect_raises("use after shutdown", ValueError, ["init()"],
                  lambda: hvd.allreduce(torch.ones(2)))
    hvd.init()
    expect_equal("after re-init", hvd.allreduce(torch.ones(2) * rank, op=hvd.Sum),
                 torch.full((2,), float(sum(range(size)))))


CHECKS = [check_basics, check_allreduce, check_allreduce_arguments, check_grouped_allreduce,
          check_allgather, check_into_buffers, check_broadcast, check_alltoall, check_reducescatter,
          check_noncontiguous, check_sparse, check_errors,
          check_join_barrier_poll, check_reinit]


DONE = "torch collectives OK"


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    selected = sys.argv[1:] or [c.__name__ for c in CHECKS]
    for check in CHECKS:
        if check.__name__ in selected:
            start = time.monotonic()
            check(rank, size)
            print(f"rank {rank}: {check.__name__} passed in {time.monotonic() - start:.1f} s",
                  flush=True)
    print(f"rank {rank}: {DONE}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
