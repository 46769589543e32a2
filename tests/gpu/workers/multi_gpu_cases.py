"""The cases tests/gpu/multi_gpu_check.sh adds to workers/gpu_cases.py on 2-8
real GPUs of one node, one rank per GPU (argv[1]); prints "<mode> OK" and,
where there are numbers, DEVICE_CHECK_RESULT lines.

  dtypes         every collective on every dtype NCCL takes, against torch on
                 one GPU (scale factors whose product is not 1)
  process_sets   collectives inside the sets of even and odd ranks (NCCL
                 communicators of their own) and the whole job, interleaved
  two_levels     HVDLITE_HIERARCHICAL_ALLREDUCE=1 with the ranks faked into
                 hosts of 2 local ranks each (HVDLITE_HOSTNAME): NCCL inside a
                 "host", the CPU transport between them
  state          broadcast_parameters and broadcast_optimizer_state of a
                 model on the GPU: every rank ends with rank 0's, bit for bit
  fused_step     200 gradients of 16 KiB: one hvdlite step (async allreduces,
                 synchronize) against DDP's way (one flat bucket, one NCCL
                 all_reduce), median of 20 steps each, as DEVICE_CHECK_RESULT
"""
import os
import statistics
import sys
import time

MODE = sys.argv[1]
RANK = int(os.environ["HVDLITE_RANK"])
if MODE == "two_levels":  # before init(): hosts of 2 ranks
    os.environ.update(HVDLITE_HOSTNAME=f"fakehost{RANK // 2}", HVDLITE_LOCAL_RANK=str(RANK % 2),
                      HVDLITE_LOCAL_SIZE="2", HVDLITE_CROSS_RANK=str(RANK // 2),
                      HVDLITE_CROSS_SIZE=str(int(os.environ["HVDLITE_SIZE"]) // 2),
                      HVDLITE_HIERARCHICAL_ALLREDUCE="1")

import torch  # noqa: E402

import hvdlite.torch as hvd  # noqa: E402
from device_check_helpers import result  # noqa: E402

SIZE = int(os.environ["HVDLITE_SIZE"])
EVENS, ODDS = hvd.ProcessSet(list(range(0, SIZE, 2))), hvd.ProcessSet(list(range(1, SIZE, 2)))
hvd.init(process_sets=[EVENS, ODDS] if MODE == "process_sets" else None)
rank, size = hvd.rank(), hvd.size()
# The GPU is the physical one of this rank whatever the layout (docs/gpus.md);
# under two_levels the faked local rank is not the GPU's index.
torch.cuda.set_device(rank % torch.cuda.device_count())
device = torch.device("cuda", torch.cuda.current_device())

DTYPES = [torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
          torch.float64]


def values(r, dtype, n=37):
    return (torch.arange(n, device=device) % 5 + r + 1).to(dtype)


def same(what, got, want):
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape, want.shape)
    tol = 1e-2 if want.dtype in (torch.float16, torch.bfloat16) else 1e-6
    if want.is_floating_point():
        assert torch.allclose(got.double(), want.double(), rtol=tol, atol=tol), (what, got[:4], want[:4])
    else:
        assert torch.equal(got, want), (what, got[:4], want[:4])


def dtypes():
    for dtype in DTYPES:
        name = str(dtype).split(".")[1]
        every = [values(r, dtype) for r in range(size)]
        mine = every[rank]
        same(f"sum {name}", hvd.allreduce(mine, op=hvd.Sum, name=f"sum.{name}"),
             torch.stack([v.double() for v in every]).sum(0).to(dtype))
        same(f"max {name}", hvd.allreduce(mine, op=hvd.Max, name=f"max.{name}"), torch.stack(every).max(0).values)
        same(f"min {name}", hvd.allreduce(mine, op=hvd.Min, name=f"min.{name}"), torch.stack(every).min(0).values)
        if dtype.is_floating_point:
            got = hvd.allreduce(mine, op=hvd.Average, prescale_factor=0.5, postscale_factor=3.0, name=f"avg.{name}")
            same(f"average {name}", got, (torch.stack([v.double() for v in every]).mean(0) * 1.5).to(dtype))
        same(f"allgather {name}", hvd.allgather(mine[:rank + 1], name=f"gather.{name}"),
             torch.cat([v[:r + 1] for r, v in enumerate(every)]))
        same(f"broadcast {name}", hvd.broadcast(mine, root_rank=size - 1, name=f"bcast.{name}"), every[-1])
        splits = torch.tensor([1 + (rank + r) % 2 for r in range(size)])
        got, received = hvd.alltoall(torch.cat([mine[:int(s)] for s in splits]), splits=splits, name=f"a2a.{name}")
        want = torch.cat([every[r][:1 + (r + rank) % 2] for r in range(size)])
        same(f"alltoall {name}", got, want)
        rows = torch.stack([values(rank, dtype, 4) for _ in range(2 * size)])
        want_rows = torch.stack([torch.stack([values(r, dtype, 4) for _ in range(2 * size)]).double()
                                 for r in range(size)]).sum(0).to(dtype)
        same(f"reducescatter {name}", hvd.reducescatter(rows, op=hvd.Sum, name=f"rs.{name}"),
             want_rows[2 * rank:2 * rank + 2])


def process_sets():
    mine, members = (EVENS, range(0, size, 2)) if rank % 2 == 0 else (ODDS, range(1, size, 2))
    for step in range(5):
        x = torch.full((1000,), rank + 1.0 + step, device=device)
        got = hvd.allreduce(x, op=hvd.Sum, name=f"set.{step}", process_set=mine)
        assert torch.all(got == sum(r + 1.0 + step for r in members)).item(), (step, got[:2])
        everyone = hvd.allreduce(x, op=hvd.Sum, name=f"all.{step}")
        assert torch.all(everyone == sum(r + 1.0 + step for r in range(size))).item(), everyone[:2]
        gathered = hvd.allgather(x[:2], name=f"set.gather.{step}", process_set=mine)
        assert gathered.shape[0] == 2 * len(members), gathered.shape


def two_levels():
    for count in (1, 1000, 1 << 20):
        x = torch.full((count,), rank + 1.0, device=device)
        got = hvd.allreduce(x, op=hvd.Average, prescale_factor=3.0, name=f"hier.{count}")
        assert torch.allclose(got, torch.full_like(got, 3.0 * (size + 1) / 2)), (count, got[:2])


def state():
    torch.manual_seed(rank)  # different on purpose
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01 * (rank + 1))
    model(torch.randn(8, 64, device=device)).sum().backward()
    optimizer.step()  # Adam's state exists, and differs per rank
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    flat = torch.cat([p.detach().flatten() for p in model.parameters()] +
                     [s.flatten().float() for group in optimizer.state.values() for s in group.values()
                      if torch.is_tensor(s)])
    gathered = hvd.allgather(flat.unsqueeze(0), name="state.check")
    assert all(torch.equal(gathered[r], gathered[0]) for r in range(size)), "ranks differ after the broadcast"
    assert optimizer.param_groups[0]["lr"] == 0.01, optimizer.param_groups[0]["lr"]


def fused_step():
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", os.environ.get("MULTI_GPU_CHECK_TORCH_PORT", "29533"))
    dist.init_process_group("nccl", rank=rank, world_size=size, device_id=device)
    grads = [torch.full((4096,), 1.0, device=device) for _ in range(200)]  # 16 KiB each

    def hvdlite_step(step):
        handles = [hvd.allreduce_async_(g, op=hvd.Average, name=f"fused.{i}") for i, g in enumerate(grads)]
        for h in handles:
            hvd.synchronize(h)

    def ddp_step(step):  # DDP's bucket: copy in, one all_reduce, copy out
        bucket = torch.cat(grads)
        dist.all_reduce(bucket)
        bucket /= size
        torch.cat(grads)  # the copy back out, as DDP's views make it
    times = {}
    for name, step in (("hvdlite", hvdlite_step), ("ddp", ddp_step)):
        samples = []
        for i in range(25):
            torch.cuda.synchronize()
            start = time.perf_counter()
            step(i)
            torch.cuda.synchronize()
            if i >= 5:
                samples.append((time.perf_counter() - start) * 1e3)
        times[name] = statistics.median(samples)
    dist.destroy_process_group()
    if rank == 0:
        result(case="fused_step", ranks=size, hvdlite_ms=round(times["hvdlite"], 3), ddp_ms=round(times["ddp"], 3),
               target="hvdlite_ms <= ddp_ms", met=times["hvdlite"] <= times["ddp"])


{"dtypes": dtypes, "process_sets": process_sets, "two_levels": two_levels, "state": state,
 "fused_step": fused_step}[MODE]()
print(f"{MODE} OK", flush=True)
