"""The libraries the suite compares, behind one small interface, so every
benchmark runs the same loop over each: hvdlite (NumPy binding) over its
built-in transport and over MPI, hvdlite.torch (the binding most users call),
PyTorch's torch.distributed with the gloo backend, mpi4py, and Horovod
(horovod.torch) where a user has it.

Each backend is started by run_all.py under its own launcher (hvdliterun for
hvdlite and gloo, mpirun for hvdlite-mpi and mpi, horovodrun for horovod) and
works on float32 NumPy arrays (torch tensors for gloo and horovod).
"""
import importlib
import json
import os

import numpy as np


class Hvdlite:
    name = "hvdlite"

    def __init__(self):
        import hvdlite.numpy as hvd
        self.hvd = hvd
        hvd.init()
        self.rank, self.size = hvd.rank(), hvd.size()

    def array(self, count):
        return np.ones(count, np.float32)

    def allreduce(self, x, tag):
        # In place, as every peer here reduces (and as gradients are): a new
        # output per call would add its page faults to hvdlite's time only.
        return self.hvd.allreduce_(x, op=self.hvd.Sum, name=tag)

    def allreduce_async(self, x, tag):
        """The asynchronous path of one allreduce: submit, then synchronize."""
        return self.hvd.synchronize(self.hvd.allreduce_async_(x, op=self.hvd.Sum, name=tag))

    def allgather(self, x, tag):
        return self.hvd.allgather(x, name=tag)

    def broadcast(self, x, tag):
        return self.hvd.broadcast(x, root_rank=0, name=tag)

    def reducescatter(self, x, tag):
        return self.hvd.reducescatter(x, op=self.hvd.Sum, name=tag)

    def alltoall(self, x, tag):
        return self.hvd.alltoall(x, name=tag)

    def step(self, arrays, tag):
        """Submits every array asynchronously, then waits for all (a training step)."""
        handles = [self.hvd.allreduce_async_(a, op=self.hvd.Sum, name=f"{tag}.{i}")
                   for i, a in enumerate(arrays)]
        for h in handles:
            self.hvd.synchronize(h)

    def barrier(self):
        self.hvd.barrier()

    def max_of(self, values):
        return self.hvd.allreduce(np.asarray(values, np.float64), op=self.hvd.Max, name="bench.max")

    def shutdown(self):
        self.hvd.shutdown()


class HvdliteMpi(Hvdlite):
    """hvdlite under mpirun, negotiating and moving data over MPI (launch.py
    sets HVDLITE_CPU_OPERATIONS=mpi: on one host the default data transport
    is shared memory)."""
    name = "hvdlite-mpi"

    def __init__(self):
        super().__init__()
        if not self.hvd.mpi_enabled() or self.hvd.gloo_enabled():
            raise RuntimeError("hvdlite-mpi: this job does not run over MPI only; start it with "
                               "mpirun, from an hvdlite built with MPI, with "
                               "HVDLITE_CPU_OPERATIONS=mpi")


class Gloo:
    """torch.distributed over gloo; rank and size come from hvdliterun's variables."""
    name = "gloo"

    def __init__(self):
        import torch
        import torch.distributed as dist
        torch.set_num_threads(1)
        self.torch, self.dist = torch, dist
        self.rank = int(os.environ["HVDLITE_RANK"])
        self.size = int(os.environ["HVDLITE_SIZE"])
        dist.init_process_group("gloo", rank=self.rank, world_size=self.size,
                                init_method=f"tcp://{os.environ.get('BENCH_GLOO_ADDR', '127.0.0.1')}:"
                                            f"{os.environ['BENCH_GLOO_PORT']}")

    def array(self, count):
        return self.torch.ones(count, dtype=self.torch.float32)

    def allreduce(self, x, tag):
        self.dist.all_reduce(x)
        return x

    def allreduce_async(self, x, tag):
        self.dist.all_reduce(x, async_op=True).wait()
        return x

    def allgather(self, x, tag):
        out = self.torch.empty(x.numel() * self.size, dtype=x.dtype)
        self.dist.all_gather_into_tensor(out, x)
        return out

    def broadcast(self, x, tag):
        self.dist.broadcast(x, 0)
        return x

    def reducescatter(self, x, tag):
        out = self.torch.empty(x.numel() // self.size, dtype=x.dtype)
        self.dist.reduce_scatter_tensor(out, x)
        return out

    def alltoall(self, x, tag):
        out = self.torch.empty_like(x)
        self.dist.all_to_all_single(out, x)
        return out

    def step(self, arrays, tag):
        works = [self.dist.all_reduce(a, async_op=True) for a in arrays]
        for w in works:
            w.wait()

    def barrier(self):
        self.dist.barrier()

    def max_of(self, values):
        t = self.torch.tensor(values, dtype=self.torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return t.numpy()

    def shutdown(self):
        self.dist.destroy_process_group()


class Horovod(Hvdlite):
    """Horovod's PyTorch binding on CPU tensors, started by horovodrun; the
    calls hvdlite.numpy shares with it are inherited. BENCH_HOROVOD_MODULE
    names another module with Horovod's API (the suite's own test runs this
    backend over hvdlite.torch, where Horovod is not installed)."""
    name = "horovod"
    module = "horovod.torch"

    def __init__(self):
        import torch
        torch.set_num_threads(1)
        self.torch = torch
        self.hvd = hvd = importlib.import_module(os.environ.get("BENCH_HOROVOD_MODULE",
                                                                self.module))
        hvd.init()
        self.rank, self.size = hvd.rank(), hvd.size()

    def array(self, count):
        return self.torch.ones(count, dtype=self.torch.float32)

    def broadcast(self, x, tag):
        return self.hvd.broadcast_(x, root_rank=0, name=tag)

    def max_of(self, values):
        t = self.torch.tensor(values, dtype=self.torch.float64)
        return self.hvd.allreduce(t, op=self.hvd.Max, name="bench.max").numpy()


class HvdliteTorch(Horovod):
    """hvdlite.torch on CPU tensors under hvdliterun, as training code calls
    it: allreduce_, broadcast_ and allgather synchronously (in one call into
    the core: Note [Torch collectives in one call] in
    csrc/python/torch_one_call.cc), allreduce_async_ + synchronize for the
    asynchronous path and the fusion step."""
    name = "hvdlite-torch"
    module = "hvdlite.torch"


class Mpi:
    name = "mpi"

    def __init__(self):
        from mpi4py import MPI
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()

    def array(self, count):
        return np.ones(count, np.float32)

    def allreduce(self, x, tag):
        self.comm.Allreduce(self.MPI.IN_PLACE, x, op=self.MPI.SUM)
        return x

    def allreduce_async(self, x, tag):
        self.comm.Iallreduce(self.MPI.IN_PLACE, x, op=self.MPI.SUM).Wait()
        return x

    def allgather(self, x, tag):
        out = np.empty(x.size * self.size, x.dtype)
        self.comm.Allgather(x, out)
        return out

    def broadcast(self, x, tag):
        self.comm.Bcast(x, root=0)
        return x

    def reducescatter(self, x, tag):
        out = np.empty(x.size // self.size, x.dtype)
        self.comm.Reduce_scatter_block(x, out, op=self.MPI.SUM)
        return out

    def alltoall(self, x, tag):
        out = np.empty_like(x)
        self.comm.Alltoall(x, out)
        return out

    def step(self, arrays, tag):
        requests = [self.comm.Iallreduce(self.MPI.IN_PLACE, a, op=self.MPI.SUM) for a in arrays]
        self.MPI.Request.Waitall(requests)

    def barrier(self):
        self.comm.Barrier()

    def max_of(self, values):
        out = np.asarray(values, np.float64).copy()
        self.comm.Allreduce(self.MPI.IN_PLACE, out, op=self.MPI.MAX)
        return out

    def shutdown(self):
        pass


BACKENDS = {"hvdlite": Hvdlite, "hvdlite-mpi": HvdliteMpi, "hvdlite-torch": HvdliteTorch,
            "gloo": Gloo, "mpi": Mpi, "horovod": Horovod}
# The backends run_all.py starts with mpirun rather than hvdliterun.
MPIRUN_BACKENDS = ("hvdlite-mpi", "mpi")


def finish(backend, results, json_path):
    """Rank 0 writes the results (for run_all.py); then the backend shuts down."""
    if backend.rank == 0 and json_path:
        with open(json_path, "w") as f:
            json.dump({"backend": backend.name, "ranks": backend.size, "results": results}, f,
                      indent=1)
    backend.shutdown()
