"""Every hvdlite.torch collective and a DistributedOptimizer step on CUDA
tensors, checked against the same computation by torch. Run at world size 1
on a machine with a GPU (NCCL cannot put several ranks on one GPU), where
every collective is the identity, so no check may rest on that:

- reductions use prescale/postscale factors whose product is not 1 (x6);
- outputs hvdlite allocates (allgather, alltoall, broadcast, out-of-place
  results) are first poisoned in torch's cache, under the caller's stream
  and hvdlite's, so an output nobody writes reads as 0x5A bytes;
- the optimizer's hooks are kept at size 1 (DistributedOptimizer registers
  none there, as Horovod, unless elastic training may add ranks), and its
  allreduces must have started during backward; their values, averages of
  one rank, can only be compared with a plain step (averages over several
  ranks: tests/gpu/device_check.sh, host_path and second_stream).
Prints "cuda collectives OK"."""
import os

import torch

import hvdlite.torch as hvd
from hvdlite.common import basics

hvd.init()
assert hvd.size() == 1, "this worker runs at world size 1"
torch.cuda.set_device(hvd.local_rank())
device = torch.device("cuda", hvd.local_rank())
torch.manual_seed(0)
PRE, POST = 3.0, 2.0  # x6, never the identity


def check(name, got, want):
    assert got.is_cuda, f"{name}: the result is not on the GPU"
    assert got.dtype == want.dtype and got.shape == want.shape, f"{name}: {got} != {want}"
    assert torch.allclose(got.cpu().double(), want.double(), rtol=1e-3, atol=1e-3), \
        f"{name}: {got} != {want}"


def poison(like):
    """Leaves blocks of like's size filled with 0x5A in torch's cache for the
    current stream and hvdlite's, where the next output of that size comes from."""
    nbytes = max(like.numel() * like.element_size(), 1)
    streams = [torch.cuda.current_stream(device)]
    own = basics.core().device_stream(device.index)
    if own:
        streams.append(torch.cuda.ExternalStream(own, device=device))
    for stream in streams:
        with torch.cuda.stream(stream):
            blocks = [torch.full((nbytes,), 0x5A, dtype=torch.uint8, device=device) for _ in range(2)]
            del blocks


# In place, and the framework's stream: a kernel queued right after sees the result.
y = torch.ones(1 << 20, device=device)
assert hvd.allreduce_(y, op=hvd.Sum, prescale_factor=PRE, name="inplace") is y
assert float((y * 2).sum()) == 2.0 * PRE * (1 << 20), float(y[0])

for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32):
    x = (torch.arange(24) - 8).reshape(4, 6).to(dtype)  # six times these stay exact
    gpu = x.to(device)
    scaled = (x.double() * PRE * POST).to(dtype)
    for op in (hvd.Sum, hvd.Min, hvd.Max, hvd.Product, hvd.Average):
        name = f"allreduce {op.name} {dtype}"
        poison(gpu)
        check(name, hvd.allreduce(gpu, op=op, prescale_factor=PRE, postscale_factor=POST,
                                  name=f"{op.name}.{dtype}"), scaled)
    poison(gpu)
    check(f"allgather {dtype}", hvd.allgather(gpu, name=f"gather.{dtype}"), x)
    poison(gpu)
    check(f"broadcast {dtype}", hvd.broadcast(gpu, root_rank=0, name=f"bcast.{dtype}"), x)
    poison(gpu)
    out = hvd.alltoall(gpu, name=f"a2a.{dtype}")
    check(f"alltoall {dtype}", out[0] if isinstance(out, tuple) else out, x)
    check(f"reducescatter {dtype}", hvd.reducescatter(gpu, op=hvd.Sum, prescale_factor=PRE,
                                                      postscale_factor=POST, name=f"rs.{dtype}"), scaled)
    check(f"input of {dtype} unchanged", gpu, x)

# Fusion: many gradients at once.
parts = [torch.full((100 + k,), float(k), device=device) for k in range(16)]
handles = [hvd.allreduce_async(p, op=hvd.Sum, prescale_factor=PRE, name=f"fused.{k}")
           for k, p in enumerate(parts)]
for k, h in enumerate(handles):
    check(f"fused {k}", hvd.synchronize(h), torch.full((100 + k,), PRE * k))

# A DistributedOptimizer step equals a plain one (one rank's average), with
# its allreduces started from backward's hooks.
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
reference = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
reference.load_state_dict(model.state_dict())
model.to(device)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
os.environ["HVDLITE_ELASTIC"] = "1"  # read when the optimizer is made: keep the hooks at size 1
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters())
del os.environ["HVDLITE_ELASTIC"]
ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
data, target = torch.randn(32, 8), torch.randn(32, 1)
opt.zero_grad()
torch.nn.functional.mse_loss(model(data.to(device)), target.to(device)).backward()
launched = len(opt._launched)
assert launched == len(list(model.parameters())), f"{launched} allreduces started during backward"
opt.step()
ref_opt.zero_grad()
torch.nn.functional.mse_loss(reference(data), target).backward()
ref_opt.step()
for (name, p), q in zip(model.named_parameters(), reference.parameters()):
    check(f"optimizer step {name}", p.detach(), q.detach())
hvd.shutdown()
print("cuda collectives OK")
