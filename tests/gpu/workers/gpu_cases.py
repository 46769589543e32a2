"""One case on real GPUs, one rank per GPU (argv[1]); prints "<mode> OK".
Each result is compared with the same computation done by torch on one GPU."""
import os
import signal
import sys
import time

import torch

import hvdlite.torch as hvd

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
        y = hvd.allreduce(x, op=hvd.Sum, name=f"ordered.{step}")
        want = sum(r + 1.0 + step for r in range(size))
        assert torch.all(y == want).item(), (step, y[:4])
    # Many fused gradients from one stream.
    grads = [torch.full((1000 + i,), float(rank), device=device) for i in range(200)]
    handles = [hvd.allreduce_async_(g, op=hvd.Sum, name=f"g.{i}") for i, g in enumerate(grads)]
    for h in handles:
        hvd.synchronize(h)
    assert all(torch.all(g == size * (size - 1) / 2).item() for g in grads)


def collectives():
    g = torch.arange((rank + 1) * 3, device=device, dtype=torch.float32).reshape(rank + 1, 3)
    out = hvd.allgather(g, name="uneven.gather")
    want = torch.cat([torch.arange((r + 1) * 3, device=device, dtype=torch.float32).reshape(r + 1, 3)
                      for r in range(size)])
    assert torch.equal(out, want), out
    rows = 2 * size + 1
    r = torch.arange(rows * 2, device=device, dtype=torch.float32).reshape(rows, 2) * (rank + 1)
    got = hvd.reducescatter(r, op=hvd.Sum, name="uneven.rs")
    total = torch.arange(rows * 2, device=device, dtype=torch.float32).reshape(rows, 2) * sum(range(1, size + 1))
    counts = [rows // size + (1 if i < rows % size else 0) for i in range(size)]
    start = sum(counts[:rank])
    assert torch.allclose(got, total[start:start + counts[rank]]), got
    splits = torch.tensor([p + 1 for p in range(size)])
    a = torch.arange(int(splits.sum()) * 2, device=device, dtype=torch.float64).reshape(-1, 2) + 100 * rank
    received, received_splits = hvd.alltoall(a, splits=splits, name="a2a")
    assert received_splits.tolist() == [rank + 1] * size
    root = size - 1
    b = torch.arange(5, device=device, dtype=torch.int32) * (rank + 1)
    assert torch.equal(hvd.broadcast(b, root_rank=root, name="bcast"),
                       torch.arange(5, device=device, dtype=torch.int32) * (root + 1))


def scale():
    for dtype in (torch.float16, torch.bfloat16):
        x = (torch.linspace(-2, 3, 7, device=device) + rank).to(dtype) / 4
        y = hvd.allreduce(x, op=hvd.Average, prescale_factor=0.5, postscale_factor=3.0, name=f"avg.{dtype}")
        want = sum(((torch.linspace(-2, 3, 7, device=device) + r).to(dtype) / 4).double()
                   for r in range(size)) / size * 1.5
        assert torch.allclose(y.double(), want, rtol=2e-2, atol=2e-2), (dtype, y, want)


def oom():
    free, _ = torch.cuda.mem_get_info()
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
    assert failed or size == 1, "the allgather did not fail with an out-of-memory error"
    x = torch.ones(8, device=device)
    assert torch.all(hvd.allreduce(x, op=hvd.Sum, name="after_oom") == size).item()


def join():
    if rank == size - 1:
        hvd.join()
    else:
        x = torch.ones(4, device=device)
        assert torch.all(hvd.allreduce(x, op=hvd.Sum, name="joined") == size - 1).item()
        hvd.join()


def killed():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    x = torch.ones(1 << 20, device=device)
    for step in range(1000):
        started = time.monotonic()
        try:
            y = hvd.allreduce(x, op=hvd.Sum, name=f"step.{step % 3}")
            if rank == size - 1 and step == 10:
                os.kill(os.getpid(), signal.SIGKILL)
            torch.cuda.synchronize()  # hangs forever if NCCL is never aborted
        except hvd.HvdliteInternalError as error:
            print(f"rank {rank} failed after {time.monotonic() - started:.2f} s: {error}", flush=True)
            sys.exit(17)
    sys.exit(0)


def overlap():
    # The first gradient backward produces is the last layer's; its allreduce
    # runs on a side stream and must finish (CUDA event) before backward's
    # last kernel does.
    layers = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(12)]).to(device)
    side = torch.cuda.Stream()
    done = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    state = {}

    def hook(grad):
        if "handle" not in state:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                state["handle"] = hvd.allreduce_async(grad.clone(), op=hvd.Sum, name="early")
        return grad

    layers[-1].weight.register_hook(hook)
    for _ in range(3):
        state.clear()
        loss = layers(torch.randn(512, 4096, device=device)).square().mean()
        loss.backward()
        end.record()
        hvd.synchronize(state["handle"])  # queued: `side` now waits for NCCL's done event
        with torch.cuda.stream(side):
            done.record()
        torch.cuda.synchronize()
    lead_ms = done.elapsed_time(end)  # > 0: the allreduce finished before backward ended
    print(f"rank {rank}: early allreduce finished {lead_ms:.2f} ms before backward ended", flush=True)
    assert lead_ms > 0, lead_ms


if MODE == "killed":
    killed()
{"ordering": ordering, "collectives": collectives, "scale": scale, "oom": oom, "join": join,
 "overlap": overlap}[MODE]()
hvd.shutdown()
print(f"{MODE} OK", flush=True)
