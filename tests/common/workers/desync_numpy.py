"""hvdlite.numpy's part of the desync scenarios (desync_scenarios.py)."""
import time

import numpy as np

import hvdlite.numpy as hvd
from desync_scenarios import run


def step(x):
    return hvd.allreduce(x, name="loss")  # SITE:step


def evaluate(x):
    return hvd.allreduce(x, name="val_loss")  # SITE:evaluate


class Numpy:
    def mismatch(self, rank):
        if rank == 0:
            hvd.allreduce(np.ones(2, np.float32), name="w")  # SITE:mismatch0
        else:
            hvd.allreduce(np.ones(3, np.float32), name="w")  # SITE:mismatch1

    def branches(self, rank):
        x = np.ones(4, np.float32)
        step(x) if rank == 0 else evaluate(x)

    def reorder(self, rank):
        x = np.ones(4, np.float32)
        first, second = ("a", "b") if rank == 0 else ("b", "a")
        hvd.allreduce(x, name=first)  # SITE:first
        hvd.allreduce(x, name=second)  # SITE:second

    def skip(self, rank):
        x = np.ones(4, np.float32)
        for i in range(3):
            if rank == 1 and i == 1:
                continue
            hvd.allreduce(x, name="step")  # SITE:skip_step
        hvd.allreduce(x, name="final")  # SITE:skip_final

    def late(self, rank):
        if rank == 1:
            time.sleep(3.0)  # no collective pending: a late peer, never a divergence
        hvd.allreduce(np.ones(4, np.float32), name="late")  # SITE:late


if __name__ == "__main__":
    hvd.init()
    run(hvd.rank(), Numpy(), lambda name: hvd.allreduce(np.zeros(1, np.float32), name=name))
    hvd.shutdown()
