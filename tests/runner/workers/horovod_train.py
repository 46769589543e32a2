"""A PyTorch training script written for Horovod, left as Horovod's users
write it (tests/runner/test_horovod_alias.py runs it through the alias, and
a copy importing hvdlite.torch without it). Rank 0 prints RESULT and JSON:
the trained weights and an allreduce, for the test to compare."""
import json

import torch

import horovod.torch as hvd

BATCH = 4  # per rank
STEPS = 3

hvd.init()
torch.manual_seed(0)
model = torch.nn.Linear(5, 3).double()
if hvd.rank() != 0:
    with torch.no_grad():  # different starting weights: broadcast_parameters must fix them
        for parameter in model.parameters():
            parameter.add_(hvd.rank())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

generator = torch.Generator().manual_seed(1)
for step in range(STEPS):
    x = torch.randn(hvd.size() * BATCH, 5, generator=generator, dtype=torch.float64)
    y = torch.randn(hvd.size() * BATCH, 3, generator=generator, dtype=torch.float64)
    mine = slice(hvd.rank() * BATCH, (hvd.rank() + 1) * BATCH)
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x[mine]), y[mine])
    loss.backward()
    optimizer.step()

total = hvd.allreduce(torch.tensor([hvd.rank() + 1.0]), op=hvd.Sum, name="ranks")
if hvd.rank() == 0:
    print("RESULT", json.dumps({
        "module": hvd.__name__,
        "size": hvd.size(),
        "weight": model.weight.tolist(),
        "bias": model.bias.tolist(),
        "rank_sum": total.item(),
    }), flush=True)
