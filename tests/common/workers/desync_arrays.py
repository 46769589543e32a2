"""The desync scenarios (desync_scenarios.py) of the array bindings, one body
over a small adapter: `python desync_arrays.py numpy|torch [scenario ...]`.
The binding gives its module and how it makes an array; every scenario but
the mismatch is the same code, at the same `# SITE:` lines, for both. torch's
mismatch goes through DistributedOptimizer's hooks: its call site is the
program's backward() line, not hvdlite's or torch's frames."""
import sys
import time

from desync_scenarios import SCENARIOS, run

BINDING = sys.argv[1]
if BINDING == "torch":
    import torch

    import hvdlite.torch as hvd

    def ones(n):
        return torch.ones(n)
else:
    import numpy as np

    import hvdlite.numpy as hvd

    def ones(n):
        return np.ones(n, np.float32)


def step(x):
    return hvd.allreduce(x, name="loss")  # SITE:step


def evaluate(x):
    return hvd.allreduce(x, name="val_loss")  # SITE:evaluate


def numpy_mismatch(rank):
    if rank == 0:
        hvd.allreduce(ones(2), name="w")  # SITE:mismatch0
    else:
        hvd.allreduce(ones(3), name="w")  # SITE:mismatch1


def torch_mismatch(rank):
    # Rank 1's model is wider: every gradient's shape differs.
    model = torch.nn.Linear(4, 2 if rank == 0 else 3)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    loss = model(torch.ones(1, 4)).sum()
    loss.backward()  # SITE:backward
    optimizer.step()


class Scenarios:
    mismatch = staticmethod(torch_mismatch if BINDING == "torch" else numpy_mismatch)

    def branches(self, rank):
        x = ones(4)
        step(x) if rank == 0 else evaluate(x)

    def reorder(self, rank):
        x = ones(4)
        first, second = ("a", "b") if rank == 0 else ("b", "a")
        hvd.allreduce(x, name=first)  # SITE:first
        hvd.allreduce(x, name=second)  # SITE:second

    def skip(self, rank):
        x = ones(4)
        for i in range(3):
            if rank == 1 and i == 1:
                continue
            hvd.allreduce(x, name="step")  # SITE:skip_step
        hvd.allreduce(x, name="final")  # SITE:skip_final

    def late(self, rank):
        if rank == 1:
            time.sleep(3.0)  # no collective pending: a late peer, never a divergence
        hvd.allreduce(ones(4), name="late")  # SITE:late


if __name__ == "__main__":
    hvd.init()
    run(hvd.rank(), Scenarios(), lambda name: hvd.allreduce(ones(1) * 0, name=name),
        scenarios=sys.argv[2:] or SCENARIOS)
    hvd.shutdown()
