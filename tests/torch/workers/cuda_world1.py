"""Every hvdlite.torch collective and a DistributedOptimizer step on CUDA
tensors, checked against the same computation on the CPU. Run at world size 1
on a machine with a GPU (NCCL cannot put several ranks on one GPU).
Prints "cuda collectives OK"."""
import torch

import hvdlite.torch as hvd

hvd.init()
torch.cuda.set_device(hvd.local_rank())
device = torch.device("cuda", hvd.local_rank())
torch.manual_seed(0)


def check(name, got, want):
    assert got.is_cuda, f"{name}: the result is not on the GPU"
    assert got.dtype == want.dtype and got.shape == want.shape, f"{name}: {got} != {want}"
    assert torch.allclose(got.cpu().double(), want.double(), rtol=1e-3, atol=1e-3), \
        f"{name}: {got} != {want}"


for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32):
    x = (torch.arange(24) - 8).reshape(4, 6).to(dtype)
    gpu = x.to(device)
    check(f"allreduce sum {dtype}", hvd.allreduce(gpu, op=hvd.Sum, name=f"sum.{dtype}"), x)
    check(f"allreduce min {dtype}", hvd.allreduce(gpu, op=hvd.Min, name=f"min.{dtype}"), x)
    if dtype.is_floating_point:
        got = hvd.allreduce(gpu, op=hvd.Average, prescale_factor=2.0, postscale_factor=0.5,
                            name=f"avg.{dtype}")
        check(f"allreduce average {dtype}", got, x)
    check(f"allgather {dtype}", hvd.allgather(gpu, name=f"gather.{dtype}"), x)
    check(f"broadcast {dtype}", hvd.broadcast(gpu, root_rank=0, name=f"bcast.{dtype}"), x)
    out = hvd.alltoall(gpu, name=f"a2a.{dtype}")
    check(f"alltoall {dtype}", out[0] if isinstance(out, tuple) else out, x)
    check(f"reducescatter {dtype}", hvd.reducescatter(gpu, op=hvd.Sum, name=f"rs.{dtype}"), x)

# In place, and the framework's stream: a kernel queued right after sees the result.
y = torch.ones(1 << 20, device=device)
hvd.allreduce_(y, op=hvd.Sum, name="inplace")
assert float((y * 2).sum()) == 2.0 * (1 << 20)

# Fusion: many gradients at once.
parts = [torch.full((100 + k,), float(k), device=device) for k in range(16)]
handles = [hvd.allreduce_async(p, op=hvd.Sum, name=f"fused.{k}") for k, p in enumerate(parts)]
for k, h in enumerate(handles):
    check(f"fused {k}", hvd.synchronize(h), torch.full((100 + k,), float(k)))

# A DistributedOptimizer step equals a plain one at world size 1.
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
reference = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
reference.load_state_dict(model.state_dict())
model.to(device)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters())
ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
data, target = torch.randn(32, 8), torch.randn(32, 1)
for m, o, d, t in ((model, opt, data.to(device), target.to(device)), (reference, ref_opt, data, target)):
    o.zero_grad()
    torch.nn.functional.mse_loss(m(d), t).backward()
    o.step()
for (name, p), q in zip(model.named_parameters(), reference.parameters()):
    check(f"optimizer step {name}", p.detach(), q.detach())
hvd.shutdown()
print("cuda collectives OK")
