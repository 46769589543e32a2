"""One case on real GPUs, one rank per GPU (argv[1]); prints "<mode> OK".
Each result is compared with the same computation done by torch on one GPU.
Reductions use scale factors whose product is not 1, so that a check cannot
pass at world size 1 (where a plain allreduce is the identity) if hvdlite
does nothing. tests/gpu/device_check.sh covers one GPU in more depth."""
import os
import signal
import sys
import time

import torch

import hvdlite.torch as hvd
from hvdlite.common import basics

MODE = sys.argv[1]
hvd.init()
rank, size = hvd.rank(), hvd.size()
torch.cuda.set_device(hvd.local_rank())
device = torch.device("cuda", hvd.local_rank())


def ordering():
    # A long kernel writes the input just before the allreduce: a missing
    # ready wait reduces stale values; a missing done wait reads stale results.
    for step in range(20):
        x = torch.full((1 << 22,), -1.0, device=device)
        big = torch.randn(2048, 2048, device=device)
        for _ in range(5):
            big = big @ big / 2048  # keeps the stream busy
        x.fill_(rank + 1.0 + step)
        y = hvd.allreduce(x, op=hvd.Sum, prescale_factor=3.0, name=f"ordered.{step}")
        want = 3.0 * sum(r + 1.0 + step for r in range(size))
        assert torch.all(y == want).item(), (step, y[:4])
    # Many fused gradients from one stream.
    grads = [torch.full((1000 + i,), rank + 1.0, device=device) for i in range(200)]
    handles = [hvd.allreduce_async_(g, op=hvd.Sum, prescale_factor=3.0, name=f"g.{i}")
               for i, g in enumerate(grads)]
    for h in handles:
        hvd.synchronize(h)
    assert all(torch.all(g == 3.0 * size * (size + 1) / 2).item() for g in grads)


def uneven_reducescatter(name):
    """A reducescatter whose rows do not divide by the ranks, checked (x3:
    not the identity at world size 1)."""
    rows = 2 * size + 1
    r = torch.arange(rows * 2, device=device, dtype=torch.float32).reshape(rows, 2) * (rank + 1)
    got = hvd.reducescatter(r, op=hvd.Sum, prescale_factor=3.0, name=name)
    total = torch.arange(rows * 2, device=device, dtype=torch.float32).reshape(rows, 2) * 3.0 * sum(range(1, size + 1))
    counts = [rows // size + (1 if i < rows % size else 0) for i in range(size)]
    start = sum(counts[:rank])
    assert torch.allclose(got, total[start:start + counts[rank]]), got


def collectives():
    g = torch.arange((rank + 1) * 3, device=device, dtype=torch.float32).reshape(rank + 1, 3)
    out = hvd.allgather(g, name="uneven.gather")
    want = torch.cat([torch.arange((r + 1) * 3, device=device, dtype=torch.float32).reshape(r + 1, 3)
                      for r in range(size)])
    assert torch.equal(out, want), out
    uneven_reducescatter("uneven.rs")
    # Rank r sends p + 1 rows to rank p: row i of rank r's input is
    # (2i, 2i + 1) + 100 r, so each received block says where it came from.
    splits = torch.tensor([p + 1 for p in range(size)])
    a = torch.arange(int(splits.sum()) * 2, device=device, dtype=torch.float64).reshape(-1, 2) + 100 * rank
    received, received_splits = hvd.alltoall(a, splits=splits, name="a2a")
    assert received_splits.tolist() == [rank + 1] * size
    first = sum(p + 1 for p in range(rank))  # the rows every rank sends here start there
    block = torch.arange(first * 2, (first + rank + 1) * 2, device=device, dtype=torch.float64).reshape(-1, 2)
    want = torch.cat([block + 100 * r for r in range(size)])
    assert torch.equal(received, want), (received, want)
    root = size - 1
    b = torch.arange(5, device=device, dtype=torch.int32) * (rank + 1)
    assert torch.equal(hvd.broadcast(b, root_rank=root, name="bcast"),
                       torch.arange(5, device=device, dtype=torch.int32) * (root + 1))


def scale():
    prescale, postscale = 0.5, 3.0
    assert abs(prescale * postscale / size - 1.0) > 0.1, "the scales cancel at this size"
    for dtype in (torch.float16, torch.bfloat16):
        x = (torch.linspace(-2, 3, 7, device=device) + rank).to(dtype) / 4
        y = hvd.allreduce(x, op=hvd.Average, prescale_factor=prescale, postscale_factor=postscale,
                          name=f"avg.{dtype}")
        want = sum(((torch.linspace(-2, 3, 7, device=device) + r).to(dtype) / 4).double()
                   for r in range(size)) / size * 1.5
        assert torch.allclose(y.double(), want, rtol=2e-2, atol=2e-2), (dtype, y, want)


def oom():
    # One rank out of memory must fail the operation on every rank; with one
    # rank there is no other to tell (the test skips it).
    assert size >= 2, "the oom case needs 2 or more ranks"
    hog = []
    if rank == size - 1:  # leave too little for the allgather's output
        while True:
            try:
                hog.append(torch.empty(256 << 20, dtype=torch.uint8, device=device))
            except torch.cuda.OutOfMemoryError:
                break
    big = torch.ones(64 << 20, device=device, dtype=torch.uint8)  # 64 MiB per rank
    try:
        hvd.allgather(big, name="too_big")
        failed = False
    except hvd.HvdliteInternalError as error:
        failed = "out of GPU memory on rank" in str(error)
    hog.clear()
    torch.cuda.empty_cache()
    assert failed, "the allgather did not fail with an out-of-memory error"
    x = torch.ones(8, device=device)
    assert torch.all(hvd.allreduce(x, op=hvd.Sum, prescale_factor=3.0, name="after_oom") == 3 * size).item()


def join():
    if rank == size - 1:
        hvd.join()
    else:
        x = torch.ones(4, device=device)
        got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=3.0, name="joined")
        assert torch.all(got == 3 * (size - 1)).item(), got
        hvd.join()


def killed():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    x = torch.ones(1 << 20, device=device)
    for step in range(1000):
        started = time.monotonic()
        try:
            hvd.allreduce(x, op=hvd.Sum, name=f"step.{step % 3}")
            if rank == size - 1 and step == 10:
                os.kill(os.getpid(), signal.SIGKILL)
            torch.cuda.synchronize()  # hangs forever if NCCL is never aborted
        except hvd.HvdliteInternalError as error:
            print(f"rank {rank} failed after {time.monotonic() - started:.2f} s: {error}", flush=True)
            sys.exit(17)
    sys.exit(0)


def overlap():
    # Note [Ready at enqueue] (csrc/transport/device_communicator.h): the last
    # layer's gradient is allreduced from a hook on the stream backward runs
    # on, as DistributedOptimizer does, so backward queues the other layers'
    # kernels behind it. NCCL must wait only for what came before the hook,
    # and so finish (an event on NCCL's stream) before backward's last kernel
    # (an event on backward's stream), both timed from one start event.
    torch.manual_seed(rank)
    layers = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192) for _ in range(8)]).to(device)
    x = torch.randn(4096, 8192, device=device)
    hvd.allreduce(torch.ones(1, device=device), name="warm")  # creates the NCCL stream
    nccl = torch.cuda.ExternalStream(basics.core().device_stream(device.index), device=device)
    begin, end, done = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    state = {}

    def hook(grad):
        if "handle" not in state:
            state["handle"] = hvd.allreduce_async(grad, op=hvd.Sum, name="early")
        return grad

    layers[-1].weight.register_hook(hook)
    leads = []
    for _ in range(4):
        state.clear()
        begin.record()
        layers(x).square().mean().backward()
        end.record()
        hvd.synchronize(state["handle"])  # queued: NCCL's stream holds the allreduce
        done.record(nccl)
        torch.cuda.synchronize()
        leads.append(begin.elapsed_time(end) - begin.elapsed_time(done))
    lead_ms = max(leads[1:])  # the first step warms up
    print(f"rank {rank}: early allreduce finished {lead_ms:.2f} ms before backward ended "
          f"(steps: {', '.join(f'{v:.2f}' for v in leads)})", flush=True)
    assert lead_ms > 0, leads


def allocator():
    # Note [Outputs from the framework's allocator] (csrc/api/session.h): the
    # outputs of allgather, reducescatter and alltoall come from PyTorch's
    # caching allocator (its statistics count them, and a freed one goes back
    # to its cache), are right, and stay valid while NCCL and the caller use them.
    g = torch.full((1000 + rank, 256), float(rank), device=device)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated(device)
    out = hvd.allgather(g, name="alloc.gather")
    assert torch.cuda.memory_allocated(device) - before >= out.numel() * 4, "not from torch's allocator"
    want = torch.cat([torch.full((1000 + r, 256), float(r), device=device) for r in range(size)])
    assert torch.equal(out, want)
    del out
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated(device) - before < want.numel() * 4, "the output was not freed"
    reserved = torch.cuda.memory_reserved(device)
    for step in range(20):  # freed outputs are reused from the cache
        out = hvd.allgather(g + step, name="alloc.loop")
        assert torch.equal(out[-1], torch.full((256,), float(size - 1 + step), device=device))
        del out
    assert torch.cuda.memory_reserved(device) <= reserved + 4 * want.numel() * 4, "the cache grew"
    uneven_reducescatter("alloc.rs")
    a = torch.arange(size * 3, device=device, dtype=torch.float64).reshape(size, 3) + 100 * rank
    received = hvd.alltoall(a, name="alloc.a2a")
    want = torch.stack([torch.arange(rank * 3, rank * 3 + 3, device=device, dtype=torch.float64) + 100 * p
                        for p in range(size)])
    assert torch.equal(received, want), received


if MODE == "killed":
    killed()
{"ordering": ordering, "collectives": collectives, "scale": scale, "oom": oom, "join": join,
 "overlap": overlap, "allocator": allocator}[MODE]()
hvd.shutdown()
print(f"{MODE} OK", flush=True)
