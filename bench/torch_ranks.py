"""One rank of a PyTorch training benchmark that hvdliterun started (its
HVDLITE_RANK/SIZE say who is who), and how the ranks meet around the timed
steps, whichever library shares the gradients: hvdlite.torch, or a
torch.distributed gloo process group (DDP, ZeroRedundancyOptimizer, FSDP2),
or none (a rank that trains alone). bench/sharded_memory_worker.py and
bench/training_multihost_worker.py build their model and optimizer on it.
"""
import gc
import os

import torch

HVDLITE, GLOO = "hvdlite", "gloo"


class TorchRank:
    """Starts `library` (HVDLITE, GLOO with its store at `gloo_address`,
    host:port, or None) on one thread, with the same initial seed on every
    rank; subclasses set `model` and `optimizer`."""

    def __init__(self, library, gloo_address=None):
        torch.set_num_threads(1)
        torch.manual_seed(0)
        self.hvd = self.dist = None
        self.model = self.optimizer = None
        self.rank, self.size = int(os.environ["HVDLITE_RANK"]), int(os.environ["HVDLITE_SIZE"])
        if library == HVDLITE:
            import hvdlite.torch as hvd
            self.hvd = hvd
            hvd.init()
        elif library == GLOO:
            import torch.distributed as dist
            self.dist = dist
            dist.init_process_group("gloo", rank=self.rank, world_size=self.size,
                                    init_method=f"tcp://{gloo_address}")

    def meet(self):
        """Returns once every rank called it (at once without a library)."""
        if self.hvd:
            self.hvd.allreduce(torch.zeros(1), name="bench.meet")
        elif self.dist:
            self.dist.barrier()

    def slowest(self, seconds):
        """The largest of every rank's `seconds` (a list), element by element."""
        t = torch.tensor(seconds, dtype=torch.float64)
        if self.hvd:
            t = self.hvd.allreduce(t, op=self.hvd.Max, name="bench.slowest")
        elif self.dist:
            self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return t.tolist()

    def everyone(self, value):
        """`value` (a number) from every rank, in rank order."""
        t = torch.tensor([float(value)], dtype=torch.float64)
        if self.hvd:
            return self.hvd.allgather(t, name="bench.everyone").tolist()
        if not self.dist:
            return t.tolist()
        out = [torch.zeros_like(t) for _ in range(self.size)]
        self.dist.all_gather(out, t)
        return [float(o[0]) for o in out]

    def shutdown(self):
        """Stops the library, leaving nothing running for the next run."""
        if self.hvd:
            self.hvd.shutdown()
        elif self.dist:
            # DDP's reducer (and the PowerSGD hook's state) hold the process
            # group: freed after destroy_process_group(), gloo's teardown left
            # one rank hung in 3 of 6 jobs of 4 ranks here. Free them first,
            # on every rank.
            self.model = self.optimizer = None
            gc.collect()
            self.dist.barrier()
            self.dist.destroy_process_group()
