"""hvdlite.torch's part of the desync scenarios (tests/common/workers/desync_scenarios.py).
The mismatch goes through DistributedOptimizer's hooks: its call site is the
program's backward() line, not hvdlite's or torch's frames."""
import sys
from pathlib import Path

import torch

import hvdlite.torch as hvd

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
from desync_scenarios import run  # noqa: E402


def step(x):
    return hvd.allreduce(x, name="loss")  # SITE:step


def evaluate(x):
    return hvd.allreduce(x, name="val_loss")  # SITE:evaluate


class Torch:
    def mismatch(self, rank):
        # Rank 1's model is wider: every gradient's shape differs.
        model = torch.nn.Linear(4, 2 if rank == 0 else 3)
        optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        loss = model(torch.ones(1, 4)).sum()
        loss.backward()  # SITE:backward
        optimizer.step()

    def branches(self, rank):
        x = torch.ones(4)
        step(x) if rank == 0 else evaluate(x)

    def reorder(self, rank):
        x = torch.ones(4)
        first, second = ("a", "b") if rank == 0 else ("b", "a")
        hvd.allreduce(x, name=first)  # SITE:first
        hvd.allreduce(x, name=second)  # SITE:second

    def skip(self, rank):
        x = torch.ones(4)
        for i in range(3):
            if rank == 1 and i == 1:
                continue
            hvd.allreduce(x, name="step")  # SITE:skip_step
        hvd.allreduce(x, name="final")  # SITE:skip_final


if __name__ == "__main__":
    hvd.init()
    run(hvd.rank(), Torch(), lambda name: hvd.allreduce(torch.zeros(1), name=name))
    hvd.shutdown()
