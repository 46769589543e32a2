"""The cases of tests/gpu/device_check.sh on ONE real NVIDIA GPU, one per
argv[1] (RANKS says how many ranks each needs; device_check.sh starts them
with `python -m hvdlite.runner -np N python device_cases.py CASE`).

Every result is compared with the same computation done by torch on the GPU
(by NumPy in two_level_host).
No check relies on a collective being the identity at world size 1: reducing
cases use prescale/postscale factors that do not cancel (Sum with prescale 3
and postscale 2 must give 6x), and outputs hvdlite allocates are first
poisoned in torch's cache, so a collective that did nothing fails.

Each case prints its key numbers as `DEVICE_CHECK_RESULT {json}` lines
(device_check_summary.py puts them in summary.json) and `<case> OK` last.
"""
import contextlib
import copy
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib

CASE = sys.argv[1] if len(sys.argv) > 1 else ""

# How many ranks each case runs on (device_check.sh's list must agree;
# tests/gpu/test_device_check.py checks that it does).
RANKS = {"report": 1, "collectives": 1, "host_path": 2, "two_hosts": 2, "two_level_host": 4,
         "second_stream": 2, "overlap": 1, "fusion_growth": 1, "cuda_graph": 1, "powersgd_cuda": 2,
         "killed": 2}


def _case_environment(case, rank):
    """Variables the core reads at init(), set here so that a case run by hand
    behaves as under device_check.sh."""
    if case in ("host_path", "second_stream", "powersgd_cuda"):
        # Several ranks on one GPU: NCCL refuses that, so CUDA tensors go
        # through pinned host memory and the CPU transport.
        return {"HVDLITE_GPU_OPERATIONS": "host"}
    if case == "killed":
        return {"HVDLITE_GPU_OPERATIONS": "host", "HVDLITE_NCCL_TIMEOUT_SECONDS": "20"}
    if case == "two_hosts":
        # Two ranks as two hosts of one GPU each: NCCL within a host (a
        # 1-rank communicator), the CPU transport across hosts.
        return {"HVDLITE_HIERARCHICAL_ALLREDUCE": "1", "HVDLITE_HOSTNAME": f"host{'AB'[rank]}",
                "HVDLITE_LOCAL_RANK": "0", "HVDLITE_LOCAL_SIZE": "1",
                "HVDLITE_CROSS_RANK": str(rank), "HVDLITE_CROSS_SIZE": "2"}
    if case == "two_level_host":
        # Four ranks as two hosts of two each, on the one GPU: the host path
        # inside a host (NCCL refuses two ranks on one GPU), the CPU
        # transport across; info level, for the line naming the two levels.
        return {"HVDLITE_GPU_OPERATIONS": "host", "HVDLITE_HIERARCHICAL_ALLREDUCE": "1",
                "HVDLITE_HOSTNAME": f"host{'AB'[rank // 2]}", "HVDLITE_LOCAL_RANK": str(rank % 2),
                "HVDLITE_LOCAL_SIZE": "2", "HVDLITE_CROSS_RANK": str(rank // 2),
                "HVDLITE_CROSS_SIZE": "2", "HVDLITE_LOG_LEVEL": "info"}
    if case == "fusion_growth":
        return {"HVDLITE_FUSION_THRESHOLD": str(2 << 30)}  # 1 GiB fuses into one buffer
    if case == "cuda_graph":
        return {"HVDLITE_NCCL_TIMEOUT_SECONDS": "30"}  # a wrong capture fails, not hangs
    return {}


os.environ.update(_case_environment(CASE, int(os.environ.get("HVDLITE_RANK", "0"))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import hvdlite  # noqa: E402
import hvdlite.torch as hvd  # noqa: E402
from hvdlite.common import basics  # noqa: E402

from device_check_helpers import check_build_under_test, median_ms, result  # noqa: E402

check_build_under_test(hvdlite)

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64,
          torch.uint8, torch.int8, torch.bool]
HALF = (torch.float16, torch.bfloat16)
checks = 0


# --- helpers shared by the cases ---------------------------------------------

def short(dtype):
    return str(dtype).replace("torch.", "")


def sample(name, rank, shape, dtype, device):
    """Small integers (exact in every dtype, also after x6 scaling), seeded by
    (name, rank) so that every rank can build every other rank's input."""
    generator = torch.Generator().manual_seed(zlib.crc32(f"{name}/{rank}".encode()))
    if dtype == torch.bool:
        values = torch.randint(0, 2, shape, generator=generator).bool()
    else:
        low = 0 if dtype == torch.uint8 else -4
        values = torch.randint(low, 5, shape, generator=generator).to(dtype)
    return values.to(device)


def reference(op, inputs, dtype, prescale=1.0, postscale=1.0):
    """What allreduce(op, prescale, postscale) of `inputs` (one per rank) must
    give, computed by torch on the inputs' device in float64."""
    if dtype == torch.bool:
        stacked = torch.stack(inputs)
        return stacked.any(0) if op in (hvd.Sum, hvd.Max) else stacked.all(0)
    integer = not dtype.is_floating_point
    wide = torch.stack([t.double() * prescale for t in inputs])
    if integer:
        wide = wide.trunc()  # the core scales integers in double, toward zero
    if op == hvd.Sum:
        out = wide.sum(0)
    elif op == hvd.Average:
        out = wide.sum(0) / len(inputs)
        out = out.trunc() if integer else out
    elif op == hvd.Min:
        out = wide.amin(0)
    elif op == hvd.Max:
        out = wide.amax(0)
    else:
        out = wide.prod(0)
    out = out * postscale
    return (out.trunc() if integer else out).to(dtype)


def expect(what, got, want, tolerance=None):
    """got equals want: same device, dtype and shape; exact for integers and
    bool (compared as bytes, so a poisoned bool fails), else within tolerance."""
    global checks
    if not isinstance(got, torch.Tensor):
        raise AssertionError(f"{what}: got a {type(got).__name__}, expected a tensor")
    if got.device != want.device or got.dtype != want.dtype or got.shape != want.shape:
        raise AssertionError(f"{what}: got {got.dtype} {tuple(got.shape)} on {got.device}, expected "
                             f"{want.dtype} {tuple(want.shape)} on {want.device}")
    if want.dtype == torch.bool:
        same = torch.equal(got.view(torch.uint8), want.view(torch.uint8))
    elif not want.dtype.is_floating_point and tolerance is None:
        same = torch.equal(got, want)
    else:
        if tolerance is None:
            tolerance = {torch.float16: 1e-2, torch.bfloat16: 2e-2, torch.float32: 1e-5}.get(
                want.dtype, 1e-9)
        same = torch.allclose(got.double(), want.double(), rtol=tolerance, atol=tolerance)
    if not same:
        bad = (got.view(torch.uint8) != want.view(torch.uint8)).flatten() if want.dtype == torch.bool else \
            ~torch.isclose(got.double(), want.double(), rtol=tolerance or 0, atol=tolerance or 0).flatten()
        where = bad.nonzero().flatten()
        first = int(where[0]) if where.numel() else -1
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.numel()} elements differ, the first at "
                             f"{first}: got {got.flatten()[max(first - 2, 0):first + 4].tolist()}, expected "
                             f"{want.flatten()[max(first - 2, 0):first + 4].tolist()} (last differing: "
                             f"{int(where[-1]) if where.numel() else -1})")
    checks += 1


def hvdlite_stream(device):
    """hvdlite's own stream on `device` (NCCL's, or the host path's copies), or None."""
    handle = basics.core().device_stream(device.index)
    return torch.cuda.ExternalStream(handle, device=device) if handle else None


def poison(nbytes, device):
    """Leaves blocks of `nbytes` filled with 0x5A in torch's cache, for the
    current stream and hvdlite's (outputs hvdlite allocates come from the
    cache under its stream), so that an output nobody writes reads as 0x5A..."""
    streams = [torch.cuda.current_stream(device)]
    own = hvdlite_stream(device)
    if own is not None:
        streams.append(own)
    for stream in streams:
        with torch.cuda.stream(stream):
            blocks = [torch.full((max(nbytes, 1),), 0x5A, dtype=torch.uint8, device=device)
                      for _ in range(2)]
            del blocks


_cycles_per_ms = None


def busy(ms, device):
    """Queues a kernel that keeps the current stream busy for about `ms` ms
    (torch.cuda._sleep, one spinning thread, calibrated once with events)."""
    global _cycles_per_ms
    if _cycles_per_ms is None:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)  # warm-up
        start.record()
        torch.cuda._sleep(10_000_000)
        end.record()
        end.synchronize()
        _cycles_per_ms = 10_000_000 / max(start.elapsed_time(end), 1e-3)
    torch.cuda._sleep(int(ms * _cycles_per_ms))


@contextlib.contextmanager
def hooks_at_size_one():
    """DistributedOptimizer registers no gradient hooks at world size 1 (as
    Horovod), unless elastic training may add ranks: pretend it may, while
    the optimizer is made, so that its allreduces run during backward."""
    before = os.environ.get("HVDLITE_ELASTIC")
    os.environ["HVDLITE_ELASTIC"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["HVDLITE_ELASTIC"]
        else:
            os.environ["HVDLITE_ELASTIC"] = before


def small_model(seed, width=64):
    torch.manual_seed(seed)  # the same initial weights on every rank
    return torch.nn.Sequential(torch.nn.Linear(32, width), torch.nn.ReLU(), torch.nn.Linear(width, 8))


def batch(step, rank, device, rows=16, features=32):
    generator = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(rows, features, generator=generator)
    y = torch.randn(rows, 8 if features == 32 else features, generator=generator)
    return x.to(device), y.to(device)


def loss_of(model, data):
    x, y = data
    return torch.nn.functional.mse_loss(model(x), y)


def averaged_reference_step(reference, optimizer, batches):
    """One step of `reference` with the gradient averaged over every rank's
    batch, computed locally: what a DistributedOptimizer step must equal."""
    grads = []
    for data in batches:
        reference.zero_grad(set_to_none=True)
        loss_of(reference, data).backward()
        grads.append([p.grad.clone() for p in reference.parameters()])
    for i, p in enumerate(reference.parameters()):
        p.grad = sum(g[i] for g in grads) / len(batches)
    optimizer.step()
    return grads


def loaded_library(fragment):
    """The path of a loaded shared library whose name contains `fragment`."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if fragment in os.path.basename(path):
                return path
    return None


def gpu_libraries():
    """basics.gpu_libraries(), or a dict saying it is missing (an older core)."""
    if not hasattr(basics, "gpu_libraries"):
        return {"error": "hvdlite.common.basics.gpu_libraries() does not exist in this build"}
    return basics.gpu_libraries()


# --- the cases ----------------------------------------------------------------

def report():
    """Versions and where the libraries came from: torch's, and hvdlite's view."""
    x = torch.ones(4, device=DEVICE)
    hvd.allreduce(x, op=hvd.Sum, name="report.load")  # loads NCCL and the CUDA runtime
    properties = torch.cuda.get_device_properties(DEVICE)
    check_build = subprocess.run([sys.executable, "-m", "hvdlite.runner", "--check-build"],
                                 capture_output=True, text=True, timeout=60)
    print(check_build.stdout + check_build.stderr, flush=True)
    libraries = gpu_libraries()
    print(f"gpu_libraries(): {json.dumps(libraries, indent=2, default=str)}", flush=True)
    nccl_version = torch.cuda.nccl.version()
    loaded = {"libnccl": loaded_library("libnccl"), "libcudart": loaded_library("libcudart")}
    result(gpu=properties.name, capability=f"{properties.major}.{properties.minor}",
           gpu_memory_gib=round(properties.total_memory / 2**30, 1), torch=torch.__version__,
           torch_cuda=torch.version.cuda,
           torch_nccl=".".join(map(str, nccl_version)) if isinstance(nccl_version, tuple) else nccl_version,
           loaded_libnccl=loaded["libnccl"], loaded_libcudart=loaded["libcudart"],
           hvdlite=hvdlite.__file__, nccl_built=basics.nccl_built(), gpu_libraries=libraries,
           check_build=check_build.stdout.strip().splitlines())
    assert check_build.returncode == 0, check_build.stderr
    assert "[X] NCCL" in check_build.stdout, "--check-build does not show NCCL as available"
    assert libraries.get("error") is None, libraries.get("error")
    assert libraries.get("nccl") and libraries.get("cuda_runtime"), libraries
    assert libraries.get("gpu_operations") == "nccl", libraries
    # One copy of each library in the process: the one torch loaded.
    for key, name in (("nccl", "libnccl"), ("cuda_runtime", "libcudart")):
        if loaded[name] and libraries.get(key):
            assert os.path.realpath(loaded[name]) == os.path.realpath(libraries[key]), \
                f"hvdlite uses {libraries[key]} but {loaded[name]} is loaded"


def collectives():
    """Every collective on 1 rank through NCCL, every dtype NCCL has."""
    started = time.monotonic()
    dev = DEVICE
    for dtype in DTYPES:
        ops = [hvd.Sum, hvd.Min, hvd.Max, hvd.Product] + ([hvd.Average] if dtype != torch.bool else [])
        scales = (1.0, 1.0) if dtype == torch.bool else (3.0, 2.0)  # x6, never the identity
        for op in ops:
            name = f"ar.{short(dtype)}.{op.name}"
            x = sample(name, 0, (5, 7), dtype, dev)
            want = reference(op, [x], dtype, *scales)
            kwargs = dict(op=op, prescale_factor=scales[0], postscale_factor=scales[1])
            poison(x.numel() * x.element_size(), dev)
            expect(name, hvd.allreduce(x, name=name, **kwargs), want)
            expect(f"{name} leaves its input", x, sample(name, 0, (5, 7), dtype, dev))
            y = x.clone()
            assert hvd.allreduce_(y, name=f"{name}.inplace", **kwargs) is y, name
            expect(f"{name}.inplace", y, want)
            poison(x.numel() * x.element_size(), dev)
            expect(f"{name}.async", hvd.synchronize(hvd.allreduce_async(x, name=f"{name}.async",
                                                                        **kwargs)), want)
        if dtype.is_floating_point:  # a scale that is not an integer
            name = f"ar.{short(dtype)}.fraction"
            x = torch.randn(1000, device=dev).to(dtype)
            got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0, name=name)
            expect(name, got, (x.double() * 1.5).to(dtype))
    try:  # NCCL has no 16-bit integers: refused at the call, as in Horovod
        hvd.allreduce(torch.ones(4, dtype=torch.int16, device=dev), op=hvd.Sum, name="ar.int16")
        raise AssertionError("an int16 allreduce on the GPU was not refused")
    except ValueError as error:
        assert "int16" in str(error), error

    shapes = [(3,), (2, 5), (4,), (7,), (0,), (1000,)]
    dtypes = [torch.float32, torch.float64, torch.int32, torch.bfloat16, torch.float16, torch.int64]
    group = [sample(f"gar.{i}", 0, s, d, dev) for i, (s, d) in enumerate(zip(shapes, dtypes))]
    got = hvd.grouped_allreduce(group, op=hvd.Sum, prescale_factor=3.0, name="gar")
    for i, (g, t) in enumerate(zip(got, group)):
        expect(f"grouped allreduce [{i}]", g, reference(hvd.Sum, [t], t.dtype, 3.0))
    copies = [t.clone() for t in group]
    hvd.grouped_allreduce_(copies, op=hvd.Average, prescale_factor=2.0, postscale_factor=3.0,
                           name="gar.inplace")
    for i, (c, t) in enumerate(zip(copies, group)):
        expect(f"grouped allreduce_ [{i}]", c, reference(hvd.Average, [t], t.dtype, 2.0, 3.0))

    for dtype in DTYPES + [torch.int16]:
        for shape in ((5, 3), (0, 3), (1,)):
            name = f"ag.{short(dtype)}.{shape}"
            x = sample(name, 0, shape, dtype, dev)
            poison(x.numel() * x.element_size(), dev)
            expect(name, hvd.allgather(x, name=name), x)
        name = f"bc.{short(dtype)}"
        x = sample(name, 0, (4, 3), dtype, dev)
        poison(x.numel() * x.element_size(), dev)
        expect(name, hvd.broadcast(x, root_rank=0, name=name), x)
        y = x.clone()
        assert hvd.broadcast_(y, root_rank=0, name=f"{name}.inplace") is y
        expect(f"{name}.inplace", y, x)
        for rows in (6, 0):
            name = f"a2a.{short(dtype)}.{rows}"
            x = sample(name, 0, (rows, 2), dtype, dev)
            poison(x.numel() * x.element_size(), dev)
            received, splits = hvd.alltoall(x, splits=torch.tensor([rows], dtype=torch.int32),
                                            name=name)
            expect(name, received, x)
            assert splits.tolist() == [rows], (name, splits)
    for dtype in DTYPES[:-1]:  # no bool: Horovod reduces no bool in reducescatter
        name = f"rs.{short(dtype)}"
        x = sample(name, 0, (7, 3), dtype, dev)
        got = hvd.reducescatter(x, op=hvd.Sum, prescale_factor=3.0, postscale_factor=2.0, name=name)
        expect(name, got, reference(hvd.Sum, [x], dtype, 3.0, 2.0))
        if dtype.is_floating_point:
            got = hvd.reducescatter(x, prescale_factor=3.0, name=f"{name}.average")
            expect(f"{name}.average", got, reference(hvd.Average, [x], dtype, 3.0))

    grads = [torch.full((1000 + i,), float(i % 9 + 1), device=dev) for i in range(200)]
    handles = [hvd.allreduce_async_(g, op=hvd.Sum, prescale_factor=3.0, name=f"fused.{i}")
               for i, g in enumerate(grads)]
    for i, (h, g) in enumerate(zip(handles, grads)):
        hvd.synchronize(h)
        expect(f"fused.{i}", g, torch.full((1000 + i,), 3.0 * (i % 9 + 1), device=dev))
    stale = stream_order(dev, "nccl", repeats=5)
    result(checks=checks, seconds=round(time.monotonic() - started, 1), **stale)


def stream_order(dev, what, repeats):
    """allreduce_async_ on s1 behind a long kernel, synchronize() under s2, a
    clone on s2 at once: without s2 waiting for the collective the clone reads
    the value from before (NCCL and the host path wait for s1's kernel)."""
    s1, s2 = torch.cuda.Stream(dev), torch.cuda.Stream(dev)
    x = torch.full((8 << 20,), -1.0, device=dev)  # 32 MiB
    torch.cuda.synchronize()
    for step in range(repeats):
        with torch.cuda.stream(s1):
            busy(50, dev)
            x.fill_(hvd.rank() + 1.0 + step)
            handle = hvd.allreduce_async_(x, op=hvd.Sum, prescale_factor=2.0,
                                          name=f"{what}.stream.{step}")
            busy(50, dev)  # the producer goes on working
        with torch.cuda.stream(s2):
            hvd.synchronize(handle)
            seen = x.clone()
            s2.synchronize()
        want = 2.0 * sum(r + 1.0 + step for r in range(hvd.size()))
        wrong = int((seen != want).sum())
        if wrong:
            raise AssertionError(f"{what}: a clone on s2 right after synchronize() read {wrong} of "
                                 f"{seen.numel()} elements stale (first {seen[:3].tolist()}, "
                                 f"expected {want})")
        torch.cuda.synchronize()
    return {"stream_order_repeats": repeats}


def host_path():
    """Two ranks share the GPU (HVDLITE_GPU_OPERATIONS=host): every collective
    against values computed from both ranks' known inputs."""
    started = time.monotonic()
    dev, rank, size = DEVICE, hvd.rank(), hvd.size()
    libraries = gpu_libraries()
    assert libraries.get("gpu_operations") == "host", libraries
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32,
                  torch.int64, torch.uint8, torch.bool):
        ops = [hvd.Sum, hvd.Min, hvd.Max, hvd.Product] + ([hvd.Average] if dtype != torch.bool else [])
        for op in ops:
            # Scales only where the result stays exact (no uint8 overflow).
            scaled = dtype != torch.bool and (op == hvd.Sum or (op == hvd.Average and dtype.is_floating_point))
            scales = (3.0, 2.0) if scaled else (1.0, 1.0)
            name = f"host.ar.{short(dtype)}.{op.name}"
            inputs = [sample(name, r, (3, 5), dtype, dev) for r in range(size)]
            want = reference(op, inputs, dtype, *scales)
            kwargs = dict(op=op, prescale_factor=scales[0], postscale_factor=scales[1])
            expect(name, hvd.allreduce(inputs[rank], name=name, **kwargs), want)
            y = inputs[rank].clone()
            hvd.allreduce_(y, name=f"{name}.inplace", **kwargs)
            expect(f"{name}.inplace", y, want)
    group = [[sample(f"host.gar.{i}", r, (4, i + 1), d, dev) for i, d in
              enumerate((torch.float32, torch.int32, torch.bfloat16, torch.float64))] for r in range(size)]
    got = hvd.grouped_allreduce(group[rank], op=hvd.Sum, prescale_factor=3.0, name="host.gar")
    for i, g in enumerate(got):
        expect(f"host grouped [{i}]", g, reference(hvd.Sum, [group[r][i] for r in range(size)],
                                                   g.dtype, 3.0))
    for dtype in (torch.float32, torch.int64, torch.bool, torch.bfloat16, torch.int16):
        name = f"host.ag.{short(dtype)}"
        parts = [sample(name, r, (2 * r, 3), dtype, dev) for r in range(size)]  # rank 0: no rows
        expect(name, hvd.allgather(parts[rank], name=name), torch.cat(parts))
        name = f"host.bc.{short(dtype)}"
        root = size - 1
        x = sample(name, rank, (4, 3), dtype, dev)
        expect(name, hvd.broadcast(x, root_rank=root, name=name), sample(name, root, (4, 3), dtype, dev))
        hvd.broadcast_(x, root_rank=root, name=f"{name}.inplace")
        expect(f"{name}.inplace", x, sample(name, root, (4, 3), dtype, dev))
        name = f"host.a2a.{short(dtype)}"
        splits = [[(r + 2 * k) % 3 for k in range(size)] for r in range(size)]  # some zero
        sent = [sample(name, r, (sum(splits[r]), 2), dtype, dev) for r in range(size)]
        received, got_splits = hvd.alltoall(sent[rank], splits=splits[rank], name=name)
        want = torch.cat([sent[r][sum(splits[r][:rank]):sum(splits[r][:rank + 1])] for r in range(size)])
        expect(name, received, want)
        assert got_splits.tolist() == [splits[r][rank] for r in range(size)], (name, got_splits)
    rows = 2 * size + 1  # uneven: the first rows % size ranks get one more
    counts = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
    first = sum(counts[:rank])
    for dtype, op, scales in ((torch.float32, hvd.Sum, (3.0, 2.0)), (torch.float16, hvd.Average, (1.0, 3.0)),
                              (torch.int32, hvd.Sum, (3.0, 1.0))):
        name = f"host.rs.{short(dtype)}"
        inputs = [sample(name, r, (rows, 3), dtype, dev) for r in range(size)]
        got = hvd.reducescatter(inputs[rank], op=op, prescale_factor=scales[0],
                                postscale_factor=scales[1], name=name)
        expect(name, got, reference(op, inputs, dtype, *scales)[first:first + counts[rank]])
    step_numbers = optimizer_matches_reference(dev, "host", steps=3)
    result(checks=checks, seconds=round(time.monotonic() - started, 1), **step_numbers)


def optimizer_matches_reference(dev, what, steps, broadcast=True):
    """DistributedOptimizer steps (SGD with momentum) on each rank's own batch
    equal steps of a local copy with the gradient averaged over all batches;
    the local gradients differ from the average, so no averaging fails."""
    rank, size = hvd.rank(), hvd.size()
    model = small_model(seed=1).to(dev)
    reference_model = copy.deepcopy(model)
    if broadcast:
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                         named_parameters=model.named_parameters())
    reference_optimizer = torch.optim.SGD(reference_model.parameters(), lr=0.1, momentum=0.9)
    spread = 0.0
    for step in range(steps):
        batches = [batch(step, r, dev) for r in range(size)]
        optimizer.zero_grad()
        loss_of(model, batches[rank]).backward()
        optimizer.step()
        local = averaged_reference_step(reference_model, reference_optimizer, batches)[rank]
        for i, (p, q) in enumerate(zip(model.parameters(), reference_model.parameters())):
            expect(f"{what} optimizer step {step} grad {i}", p.grad, q.grad)
            expect(f"{what} optimizer step {step} param {i}", p.detach(), q.detach())
            spread = max(spread, float((local[i] - q.grad).abs().max()))
    assert spread > 1e-3, f"the ranks' gradients hardly differ ({spread}): the check proves nothing"
    return {"optimizer_steps": steps, "local_vs_average_max_diff": round(spread, 4)}


def two_hosts():
    """HVDLITE_HIERARCHICAL_ALLREDUCE with one rank per host: NCCL inside each
    (fake) host, the CPU transport between them."""
    started = time.monotonic()
    dev, rank, size = DEVICE, hvd.rank(), hvd.size()
    assert (hvd.local_size(), hvd.cross_size(), hvd.cross_rank()) == (1, 2, rank), \
        (hvd.local_size(), hvd.cross_size(), hvd.cross_rank())
    for n in (1, 7, 1000, 1 << 20, 1_000_003):  # 1,000,003 is prime
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64):
            name = f"hier.{n}.{short(dtype)}"
            inputs = [sample(name, r, (n,), dtype, dev) for r in range(size)]
            got = hvd.allreduce(inputs[rank], op=hvd.Sum, prescale_factor=3.0, name=name)
            expect(name, got, reference(hvd.Sum, inputs, dtype, 3.0))
            if dtype.is_floating_point:
                got = hvd.allreduce(inputs[rank], op=hvd.Average, postscale_factor=2.0, name=f"{name}.avg")
                expect(f"{name}.avg", got, reference(hvd.Average, inputs, dtype, 1.0, 2.0))
    group = [[sample(f"hier.gar.{i}", r, (1000 + i,), torch.float32, dev) for i in range(10)]
             for r in range(size)]
    for i, g in enumerate(hvd.grouped_allreduce(group[rank], op=hvd.Sum, postscale_factor=2.0,
                                                name="hier.gar")):
        expect(f"hier grouped [{i}]", g, reference(hvd.Sum, [group[r][i] for r in range(size)],
                                                   torch.float32, 1.0, 2.0))
    # Only allreduce takes the two-level path: no broadcast_parameters (the
    # same seed gives the same initial weights instead).
    step_numbers = optimizer_matches_reference(dev, "two_hosts", steps=2, broadcast=False)
    result(checks=checks, seconds=round(time.monotonic() - started, 1), **step_numbers)


def numpy_sum(inputs, dtype, prescale=1.0, postscale=1.0, average=False):
    """What allreduce(Sum, or Average) of `inputs` (one per rank) must give,
    computed by NumPy in float64 from their host copies; integers scaled
    toward zero, as the core scales them."""
    integer = not dtype.is_floating_point
    wide = np.stack([t.cpu().double().numpy() * prescale for t in inputs])
    wide = np.trunc(wide) if integer else wide
    out = wide.sum(0) / (len(inputs) if average else 1)
    out = (np.trunc(out) if integer else out) * postscale
    out = np.trunc(out) if integer else out
    return torch.from_numpy(out).to(dtype).to(inputs[0].device)


def two_level_host():
    """HVDLITE_HIERARCHICAL_ALLREDUCE over 2 (fake) hosts x 2 ranks with the
    host path inside each (csrc/transport/two_level/
    device_two_level_communicator.cc): sizes padded to the local size,
    primes, several dtypes, Average with postscale, zero-element tensors alone
    and fused beside others; then broadcast and allgather, which create its
    flat communicator lazily, and allreduce after that. Against NumPy."""
    started = time.monotonic()
    dev, rank, size = DEVICE, hvd.rank(), hvd.size()
    layout = (hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size())
    assert layout == (rank % 2, 2, rank // 2, 2), layout
    assert gpu_libraries().get("gpu_operations") == "host", gpu_libraries()
    levels = [line.split("CUDA tensors in ", 1)[1] for line in INIT_LOG.splitlines()
              if "CUDA tensors in " in line]
    if rank == 0:  # the rank that logs the process set's communicators
        assert levels and levels[0].startswith("two levels"), \
            f"process set 0 does not say its CUDA tensors go in two levels; init logged:\n{INIT_LOG}"
    dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64,
              torch.uint8, torch.int8]
    for n in (1, 3, 7, 1024, 65537, 1_000_003):  # odd ones padded; 65537 and 1,000,003 are prime
        for dtype in dtypes:
            name = f"two_level.{n}.{short(dtype)}"
            inputs = [sample(name, r, (n,), dtype, dev) for r in range(size)]
            got = hvd.allreduce(inputs[rank], op=hvd.Sum, prescale_factor=3.0, postscale_factor=2.0,
                                name=name)
            expect(name, got, numpy_sum(inputs, dtype, 3.0, 2.0))
            if dtype.is_floating_point:
                got = hvd.allreduce(inputs[rank], op=hvd.Average, postscale_factor=2.0, name=f"{name}.avg")
                expect(f"{name}.avg", got, numpy_sum(inputs, dtype, 1.0, 2.0, average=True))
    zero_element_allreduces(dev, rank, size)
    # Allreduce alone never needs the flat communicator: these make it.
    for dtype in (torch.float32, torch.int64, torch.bfloat16, torch.uint8):
        name = f"two_level.bc.{short(dtype)}"
        root = size - 1  # on the other host than rank 0
        x = sample(name, rank, (5, 3), dtype, dev)
        expect(name, hvd.broadcast(x, root_rank=root, name=name), sample(name, root, (5, 3), dtype, dev))
        name = f"two_level.ag.{short(dtype)}"
        parts = [sample(name, r, (r, 3), dtype, dev) for r in range(size)]  # rank 0: no rows
        expect(name, hvd.allgather(parts[rank], name=name), torch.cat(parts))
    empty = torch.empty(0, 3, device=dev)
    expect("two_level.ag.empty", hvd.allgather(empty, name="two_level.ag.empty"), torch.empty(0, 3, device=dev))
    expect("two_level.bc.empty", hvd.broadcast(empty, root_rank=1, name="two_level.bc.empty"), empty)
    # Two levels again, beside the flat communicator now made.
    inputs = [sample("two_level.after", r, (65537,), torch.float32, dev) for r in range(size)]
    got = hvd.allreduce(inputs[rank], op=hvd.Average, prescale_factor=3.0, postscale_factor=2.0,
                        name="two_level.after")
    expect("allreduce after the flat collectives", got, numpy_sum(inputs, torch.float32, 3.0, 2.0, True))
    step_numbers = optimizer_matches_reference(dev, "two_level_host", steps=2)
    result(checks=checks, seconds=round(time.monotonic() - started, 1),
           cuda_tensors_in=levels[0] if levels else None, **step_numbers)


def zero_element_allreduces(dev, rank, size):
    """Tensors with no elements through the two levels: alone, fused with
    others in one group and among separate requests queued at once."""
    empty = torch.empty(0, device=dev)
    expect("two_level.empty", hvd.allreduce(empty, op=hvd.Sum, prescale_factor=3.0,
                                            name="two_level.empty"), empty)
    assert hvd.allreduce_(empty, op=hvd.Sum, name="two_level.empty.inplace") is empty
    shapes = [(5,), (0,), (7, 3), (0, 4), (1_000_003,), (0,)]
    for dtype in (torch.float32, torch.int32):
        name = f"two_level.group.{short(dtype)}"
        group = [[sample(f"{name}.{i}", r, s, dtype, dev) for i, s in enumerate(shapes)]
                 for r in range(size)]
        got = hvd.grouped_allreduce(group[rank], op=hvd.Sum, prescale_factor=3.0, name=name)
        for i, g in enumerate(got):
            expect(f"{name} [{i}]", g, numpy_sum([group[r][i] for r in range(size)], dtype, 3.0))
    name = "two_level.queued"
    inputs = [[sample(f"{name}.{i}", r, s, torch.float32, dev) for i, s in enumerate(shapes)]
              for r in range(size)]
    mine = [t.clone() for t in inputs[rank]]
    handles = [hvd.allreduce_async_(t, op=hvd.Average, postscale_factor=2.0, name=f"{name}.{i}")
               for i, t in enumerate(mine)]
    for i, (h, t) in enumerate(zip(handles, mine)):
        hvd.synchronize(h)
        expect(f"{name}.{i}", t, numpy_sum([inputs[r][i] for r in range(size)], torch.float32, 1.0,
                                           2.0, average=True))


def second_stream():
    """Gradients made on s1 (DistributedOptimizer's hooks fire there), step()
    and a read on s2 at once: the reads must see the averaged gradients."""
    started = time.monotonic()
    dev, rank, size = DEVICE, hvd.rank(), hvd.size()
    torch.manual_seed(3)
    width = 2048
    model = torch.nn.Sequential(torch.nn.Linear(1024, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, 1024)).to(dev)  # 34 MB of gradients
    reference_model = copy.deepcopy(model)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    reference_optimizer = torch.optim.SGD(reference_model.parameters(), lr=0.1)
    s1, s2 = torch.cuda.Stream(dev), torch.cuda.Stream(dev)
    hook_streams = set()
    model[-1].weight.register_post_accumulate_grad_hook(
        lambda p: hook_streams.add(torch.cuda.current_stream(dev).cuda_stream))
    torch.cuda.synchronize()
    for step in range(4):
        data = [batch(step, r, dev, rows=512, features=1024) for r in range(size)]
        s1.wait_stream(torch.cuda.current_stream(dev))  # the batches, made on the default stream
        s1.wait_stream(s2)  # the last step's update (on s2) before this forward
        with torch.cuda.stream(s1):
            busy(100, dev)  # a missing wait would read what is there before backward
            optimizer.zero_grad()
            loss_of(model, data[rank]).backward()
            busy(50, dev)
        with torch.cuda.stream(s2):
            optimizer.step()  # synchronize() under s2
            grads = [p.grad.clone() for p in model.parameters()]
            params = [p.detach().clone() for p in model.parameters()]
        torch.cuda.synchronize()
        averaged_reference_step(reference_model, reference_optimizer, data)
        for i, (g, p, q) in enumerate(zip(grads, params, reference_model.parameters())):
            expect(f"step {step}: gradient {i} read on s2", g, q.grad)
            expect(f"step {step}: parameter {i} read on s2", p, q.detach())
    # Where autograd runs AccumulateGrad (and so the hooks) is PyTorch's
    # choice: reported, not asserted; the reads above must be right either way.
    hooks_on = ["s1" if s == s1.cuda_stream else "default" if s == torch.cuda.default_stream(dev).cuda_stream
                else str(s) for s in sorted(hook_streams)]
    order = stream_order(dev, "host", repeats=4)
    result(checks=checks, seconds=round(time.monotonic() - started, 1), optimizer_steps=4,
           hooks_ran_on=hooks_on, **order)


def overlap():
    """DistributedOptimizer's allreduces run during backward without slowing
    it: backward timed with CUDA events, plain and with the hooks."""
    dev = DEVICE
    layers, width = 8, 4096
    torch.manual_seed(0)
    plain = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)]).to(dev)
    hooked = copy.deepcopy(plain)
    x = torch.randn(4096, width, device=dev)
    plain_optimizer = torch.optim.SGD(plain.parameters(), lr=0.0)
    with hooks_at_size_one():
        optimizer = hvd.DistributedOptimizer(torch.optim.SGD(hooked.parameters(), lr=0.0),
                                             named_parameters=hooked.named_parameters())
    assert optimizer._hook_handles, "DistributedOptimizer registered no hooks"
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def backward_ms(model, opt, distributed):
        opt.zero_grad()
        loss = model(x).square().mean()
        begin.record()
        loss.backward()
        end.record()
        launched = len(opt._launched) if distributed else 0
        if distributed:
            opt.synchronize()
        torch.cuda.synchronize()
        return begin.elapsed_time(end), launched

    warm, steps = 3, 10
    times = {"plain": [], "hvdlite": []}
    for step in range(warm + steps):  # interleaved, so that clocks and heat hit both alike
        plain_ms, _ = backward_ms(plain, plain_optimizer, False)
        hvd_ms, launched = backward_ms(hooked, optimizer, True)
        assert launched > 0, "no allreduce started during backward"
        if step >= warm:
            times["plain"].append(plain_ms)
            times["hvdlite"].append(hvd_ms)
    for i, (p, q) in enumerate(zip(hooked.parameters(), plain.parameters())):
        expect(f"overlap gradient {i}", p.grad, q.grad, tolerance=1e-4)
    plain_ms, hvd_ms = median_ms(times["plain"]), median_ms(times["hvdlite"])
    ratio = hvd_ms / plain_ms
    lead = early_allreduce_lead(plain, x, dev)
    bound = float(os.environ.get("DEVICE_CHECK_OVERLAP_BOUND", "1.15"))
    result(backward_plain_ms=plain_ms, backward_hvdlite_ms=hvd_ms, ratio=round(ratio, 3),
           bound=bound, allreduce_ended_before_backward_ms=lead)
    print(f"backward: plain {plain_ms} ms, with DistributedOptimizer {hvd_ms} ms "
          f"(x{ratio:.3f}, bound x{bound}); the last layer's allreduce ended {lead} ms before "
          f"backward did", flush=True)
    assert ratio < bound, f"backward with the hooks took x{ratio:.3f} the plain time (bound {bound})"
    assert lead > 0, f"the first gradient's allreduce ended {-lead} ms AFTER backward"


def early_allreduce_lead(model, x, dev):
    """ms by which the allreduce of the first gradient (the last layer's,
    started from its hook) ended before backward's last kernel: an event on
    hvdlite's stream after synchronize() vs one on backward's stream."""
    begin, end, done = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    state = {}

    def hook(grad):
        if "handle" not in state:
            state["handle"] = hvd.allreduce_async(grad, op=hvd.Sum, name="early")
        return grad

    remove = model[-1].weight.register_hook(hook)
    leads = []
    for _ in range(4):
        state.clear()
        model.zero_grad(set_to_none=True)
        loss = model(x).square().mean()
        begin.record()
        loss.backward()
        end.record()
        hvd.synchronize(state["handle"])  # queued on hvdlite's stream by now
        done.record(hvdlite_stream(dev))
        torch.cuda.synchronize()
        leads.append(begin.elapsed_time(end) - begin.elapsed_time(done))
    remove.remove()
    return median_ms(leads[1:])  # the first one warms up


def fusion_growth():
    """With torch's cache holding nearly all GPU memory, a fused allreduce far
    larger than any before still works: the fusion buffer comes from torch's
    cache, not from memory outside it."""
    dev = DEVICE
    tensors = [torch.full((1 << 20,), float(i % 7 + 1), device=dev) for i in range(256)]  # 1 GiB
    fused_bytes = sum(t.numel() * t.element_size() for t in tensors)
    small = torch.ones(1 << 18, device=dev)
    hvd.allreduce_(small, op=hvd.Sum, prescale_factor=3.0, name="fusion.small")  # a 1 MiB buffer
    expect("small allreduce", small, torch.full_like(small, 3.0))
    hog = []
    for chunk in (1 << 30, 64 << 20):  # fill: big blocks, then smaller ones
        while torch.cuda.mem_get_info(dev)[0] > (2 << 30 if chunk == 1 << 30 else 512 << 20):
            try:
                hog.append(torch.empty(chunk, dtype=torch.uint8, device=dev))
            except torch.cuda.OutOfMemoryError:
                break
    held = sum(h.numel() for h in hog)
    del hog  # back to torch's cache, not to the GPU (no empty_cache)
    free_before = torch.cuda.mem_get_info(dev)[0]
    reserved_before = torch.cuda.memory_reserved(dev)
    assert free_before < fused_bytes, \
        f"{free_before >> 20} MiB are still free outside torch's cache: the check proves nothing"
    started = time.monotonic()
    hvd.grouped_allreduce_(tensors, op=hvd.Sum, prescale_factor=3.0, name="fusion.big")
    torch.cuda.synchronize()
    seconds = time.monotonic() - started
    for i, t in enumerate(tensors):
        if not bool((t == 3.0 * (i % 7 + 1)).all()):
            raise AssertionError(f"fused tensor {i}: {t[:4].tolist()}, expected {3.0 * (i % 7 + 1)}")
    result(fused_mib=fused_bytes >> 20, cache_filled_gib=round(held / 2**30, 1),
           free_outside_cache_mib=free_before >> 20, reserved_before_gib=round(reserved_before / 2**30, 1),
           reserved_after_gib=round(torch.cuda.memory_reserved(dev) / 2**30, 1),
           free_after_mib=torch.cuda.mem_get_info(dev)[0] >> 20, allreduce_seconds=round(seconds, 3))


class Submitter(threading.Thread):
    """Starts collectives from a thread of its own, on a stream of its own,
    when asked: so that they start while the main thread captures a graph
    (torch.cuda.graph synchronizes the device before capturing, so work
    submitted before is done on the GPU by then). In place, on tensors
    allocated up front: this thread's own cudaMalloc during a global-mode
    capture would be illegal (hvdlite's threads allocate the allgather's
    output, in thread-local capture mode)."""

    def __init__(self, dev):
        super().__init__(daemon=True)
        self.dev = dev
        self.stream = torch.cuda.Stream(dev)
        self.tensors = [torch.empty(4 << 20, device=dev) for _ in range(6)]  # 16 MiB each
        self.gathered = torch.empty(1 << 20, 4, device=dev)
        self.requests, self.submitted = queue.Queue(), queue.Queue()

    def run(self):
        torch.cuda.set_device(self.dev)
        while True:
            attempt = self.requests.get()
            pending = []
            with torch.cuda.stream(self.stream):
                busy(100, self.dev)  # the collectives wait behind this, past the capture
                for i, t in enumerate(self.tensors):
                    t.fill_(float(i + 1))
                    pending.append((hvd.allreduce_async_(t, op=hvd.Sum, prescale_factor=3.0,
                                                         name=f"graph.flight.{attempt}.{i}"), 3.0 * (i + 1)))
                self.gathered.fill_(float(attempt))
                pending.append((hvd.allgather_async(self.gathered, name=f"graph.gather.{attempt}"),
                                float(attempt)))
            self.submitted.put(pending)

    def submit(self, attempt):
        self.requests.put(attempt)
        return self.submitted.get(timeout=60)


def cuda_graph():
    """torch.cuda.graph captures (global capture mode) while hvdlite's threads
    negotiate, enqueue, allocate outputs and poll the collectives another
    thread started during the capture (or, after collectives, with the
    watchdog polling) stay valid and replay right; hvd.allreduce inside a
    capture raises ValueError and leaves hvdlite working."""
    dev = DEVICE
    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 16)).to(dev)
    eager = copy.deepcopy(model)
    static_x = torch.randn(64, 256, device=dev)
    busy(1, dev)  # calibrates outside any capture
    for i in range(3):  # hvdlite's threads and watchdog are running from here on
        expect("warm-up", hvd.allreduce(torch.ones(8, device=dev), op=hvd.Sum, prescale_factor=3.0,
                                        name=f"graph.warm.{i}"), torch.full((8,), 3.0, device=dev))
    submitter = Submitter(dev)
    submitter.start()
    side = torch.cuda.Stream(dev)  # torch's recipe: warm up backward on a side stream
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            model(static_x).square().mean().backward()
    torch.cuda.current_stream(dev).wait_stream(side)
    graphs, in_flight = [], 0
    for attempt in range(4):
        pending = []
        model.zero_grad(set_to_none=True)
        if attempt % 2 == 1:  # submitted just before: hvdlite's threads finish them, polling
            for i in range(6):
                t = torch.full((1 << 20,), float(i + 1), device=dev)
                pending.append((hvd.allreduce_async_(t, op=hvd.Sum, prescale_factor=3.0,
                                                     name=f"graph.before.{attempt}.{i}"), 3.0 * (i + 1)))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            if attempt % 2 == 0:
                pending = submitter.submit(attempt)
            model(static_x).square().mean().backward()
            if attempt % 2 == 0:
                time.sleep(0.05)  # hvdlite's threads work while the capture is open
        in_flight += sum(not hvd.poll(h) for h, _ in pending)  # so still unfinished during it
        for h, value in pending:
            out = hvd.synchronize(h)
            if not bool((out == value).all()):
                raise AssertionError(f"a collective started during capture {attempt}: "
                                     f"{out.flatten()[:3].tolist()}, expected {value}")
        graphs.append((graph, [p.grad for p in model.parameters()]))
    for replay in range(3):
        static_x.copy_(torch.randn(64, 256, device=dev))
        for n, (graph, grads) in enumerate(graphs):
            graph.replay()
            eager.zero_grad(set_to_none=True)
            eager(static_x).square().mean().backward()
            for i, (g, p) in enumerate(zip(grads, eager.parameters())):
                expect(f"graph {n} replay {replay} gradient {i}", g, p.grad, tolerance=1e-4)
    raised, end_error = inside_capture(dev)
    got = hvd.allreduce(torch.ones(16, device=dev), op=hvd.Sum, prescale_factor=3.0, name="graph.after")
    expect("allreduce after the refused capture", got, torch.full((16,), 3.0, device=dev))
    torch.cuda.synchronize()
    result(graphs=len(graphs), replays=3, collectives_unfinished_at_capture_end=in_flight,
           refused_with=raised, capture_end_error=end_error)


def inside_capture(dev):
    """hvd.allreduce while the current stream is being captured: ValueError
    naming CUDA graphs. torch ends the capture (and may report it invalid)."""
    graph = torch.cuda.CUDAGraph()
    t = torch.ones(16, device=dev)
    torch.cuda.synchronize()
    raised, end_error = None, None
    try:
        with torch.cuda.graph(graph):
            y = t * 2
            try:
                hvd.allreduce(y, op=hvd.Sum, name="graph.inside")
            except ValueError as error:
                raised = str(error)
    except RuntimeError as error:  # capture_end of a capture the failed call invalidated
        end_error = str(error)
    torch.cuda.synchronize()
    assert raised is not None, "hvd.allreduce inside a CUDA graph capture raised no ValueError"
    assert "CUDA graph" in raised, raised
    return raised, end_error


def powersgd_cuda():
    """hvdlite.torch's PowerSGD (hvd.Compression.powersgd) on CUDA gradients,
    2 ranks through the host path: at full rank every step equals the
    uncompressed average (a local reference) to float32 rounding, the ranks'
    error memories summing to zero; at rank 1 the optimizer steps run, leave
    rank-1 gradients, the same on both ranks, and keep their state on the GPU."""
    started = time.monotonic()
    dev, rank, size = DEVICE, hvd.rank(), hvd.size()
    model = small_model(seed=5).to(dev)
    reference_model = copy.deepcopy(model)
    full = hvd.Compression.powersgd(rank=64, start_iter=0, min_compression_rate=0.0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                         named_parameters=model.named_parameters(), compression=full)
    reference_optimizer = torch.optim.SGD(reference_model.parameters(), lr=0.1, momentum=0.9)
    for step in range(3):
        batches = [batch(step, r, dev) for r in range(size)]
        optimizer.zero_grad()
        loss_of(model, batches[rank]).backward()
        optimizer.step()
        averaged_reference_step(reference_model, reference_optimizer, batches)
        for i, (p, q) in enumerate(zip(model.parameters(), reference_model.parameters())):
            expect(f"full-rank PowerSGD step {step} grad {i}", p.grad, q.grad, tolerance=1e-4)
            expect(f"full-rank PowerSGD step {step} param {i}", p.detach(), q.detach(), tolerance=1e-4)
    assert full.iter == 3 and len(full.qs) == 2, (full.iter, sorted(full.qs))
    for key, error in full.errors.items():
        assert error.device == dev, (key, error.device)
        total = hvd.allreduce(error, op=hvd.Sum, name=f"powersgd.error.{key}")
        assert float(total.abs().max()) < 1e-4, f"{key}: the ranks' errors sum to {total.abs().max()}"

    model = small_model(seed=6).to(dev)
    low = hvd.Compression.powersgd(rank=1, start_iter=1, min_compression_rate=0.0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                         named_parameters=model.named_parameters(), compression=low)
    losses = []
    for step in range(5):  # the first a plain allreduce (start_iter=1), then compressed
        optimizer.zero_grad()
        loss = loss_of(model, batch(step, rank, dev))
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert low.iter == 5 and all(q.device == dev for q in low.qs.values()), low.iter
    for name, p in model.named_parameters():
        if p.dim() == 2:
            found = int(torch.linalg.matrix_rank(p.grad, rtol=1e-4))
            assert found == 1, f"{name}: the rank-1 PowerSGD gradient has rank {found}"
        both = hvd.allgather(p.detach()[None], name=f"powersgd.same.{name}")
        expect(f"rank-1 PowerSGD: {name} the same on both ranks", both[rank], both[1 - rank], tolerance=1e-6)
    assert all(np.isfinite(losses)), losses
    result(checks=checks, seconds=round(time.monotonic() - started, 1), full_rank_steps=3,
           rank1_steps=5, rank1_losses=[round(x, 4) for x in losses])


def killed():
    """The last rank SIGKILLs itself mid-loop: the survivor raises
    HvdliteInternalError naming it, in time; exits 17 (the launcher then
    exits non-zero)."""
    # The launcher stops the survivors once a rank dies; ignore its SIGTERM so
    # that the core's own failure detection is what is measured.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    dev, rank, size = DEVICE, hvd.rank(), hvd.size()
    x = torch.ones(1 << 20, device=dev)
    for step in range(10_000):
        started = time.monotonic()
        try:
            hvd.allreduce_(x.fill_(1.0), op=hvd.Sum, name=f"killed.{step % 3}")
            torch.cuda.synchronize()
        except hvd.HvdliteInternalError as error:
            waited = time.monotonic() - started
            print(f"rank {rank} failed after {waited:.2f} s: {error}", flush=True)
            torch.cuda.synchronize()  # the GPU is not left waiting forever
            result(rank=rank, failed_after_s=round(waited, 2), lost_rank_named=f"rank {size - 1}" in str(error))
            assert isinstance(error, RuntimeError)
            assert f"rank {size - 1}" in str(error), f"the error does not name rank {size - 1}"
            assert waited < 30, f"the survivor needed {waited:.1f} s to fail"
            print("killed OK", flush=True)
            sys.exit(17)
        if rank == size - 1 and step == 10:
            os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("no failure seen after the last rank was killed")


def init_passing_the_log_on():
    """hvd.init() with what the core writes to stderr meanwhile captured, then
    passed on (also when init fails): returns that text (at info level, the
    process sets' communicators)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            hvd.init()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text = captured.read().decode(errors="replace")
            sys.stderr.write(text)
            sys.stderr.flush()
    return text


# --- main -----------------------------------------------------------------------

if __name__ == "__main__":
    if CASE not in RANKS:
        raise SystemExit(f"usage: device_cases.py CASE, one of {', '.join(RANKS)}")
    if CASE == "two_level_host":  # it reads what init() logged
        INIT_LOG = init_passing_the_log_on()
    else:
        hvd.init()
    if hvd.size() != RANKS[CASE]:
        raise SystemExit(f"case {CASE} runs on {RANKS[CASE]} rank(s), not {hvd.size()}")
    # One GPU, shared by the ranks of the host-path cases.
    DEVICE = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    torch.cuda.set_device(DEVICE)
    globals()[CASE]()
    hvd.shutdown()
    print(f"{CASE} OK", flush=True)
