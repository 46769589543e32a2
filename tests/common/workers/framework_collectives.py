"""One body for the collectives that behave the same in every binding (numpy,
torch, TensorFlow, JAX), run over a small adapter per framework, the way
mpi4py runs one test over every array library: allreduce with each op and
with scales whose product is not 1, allgather with a different first
dimension on every rank, broadcast from every root; float32 and int32, each
against NumPy. Usage: framework_collectives.py <numpy|torch|tensorflow|jax>."""
import importlib
import sys

import numpy as np

from checks import check, close


def numpy_adapter():
    return importlib.import_module("hvdlite.numpy"), np.array


def torch_adapter():
    import torch
    return importlib.import_module("hvdlite.torch"), lambda a: torch.from_numpy(np.array(a))


def tensorflow_adapter():
    import tensorflow as tf
    return importlib.import_module("hvdlite.tensorflow"), tf.constant


def jax_adapter():
    import jax.numpy as jnp
    return importlib.import_module("hvdlite.jax"), jnp.asarray


# Each: () -> (the binding's module, a function making its tensor from a NumPy array).
ADAPTERS = {"numpy": numpy_adapter, "torch": torch_adapter, "tensorflow": tensorflow_adapter,
            "jax": jax_adapter}


def value(rank, dtype):
    """Rank `rank`'s input: different on every rank and at every element."""
    return (np.arange(6).reshape(3, 2) * (rank + 1) - rank).astype(dtype)


def dtype_name(tensor):
    return str(tensor.dtype).rsplit(".", 1)[-1].replace("<dtype: '", "").rstrip("'>")


def check_collectives(hvd, tensor, rank, size):
    for dtype in (np.float32, np.int32):
        every = np.stack([value(r, dtype) for r in range(size)]).astype(np.float64)
        x = tensor(value(rank, dtype))
        ops = [(hvd.Sum, every.sum(0)), (hvd.Max, every.max(0)), (hvd.Min, every.min(0)),
               (hvd.Product, every.prod(0))]
        if dtype == np.float32:
            ops.append((hvd.Average, every.mean(0)))
        for op, want in ops:
            what = f"allreduce op {op} {dtype.__name__}"
            got = hvd.allreduce(x, op=op, name=what.replace(" ", "."))
            check(dtype_name(got) == dtype.__name__, f"{what}: dtype {got.dtype}")
            close(got, want, what)
        if dtype == np.float32:  # 3.0 x 0.5: a dropped or doubled scale shows
            close(hvd.allreduce(x, op=hvd.Sum, prescale_factor=3.0, postscale_factor=0.5,
                                name="allreduce.scaled"), every.sum(0) * 1.5, "scaled allreduce")
        ragged = tensor(np.full((rank + 1, 2), rank + 1, dtype))
        close(hvd.allgather(ragged, name=f"allgather.{dtype.__name__}"),
              np.concatenate([np.full((r + 1, 2), r + 1) for r in range(size)]),
              f"ragged allgather {dtype.__name__}")
        for root in range(size):
            close(hvd.broadcast(x, root, name=f"broadcast.{root}.{dtype.__name__}"), every[root],
                  f"broadcast from {root} {dtype.__name__}")


def main():
    framework = sys.argv[1]
    hvd, tensor = ADAPTERS[framework]()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    check_collectives(hvd, tensor, rank, size)
    print(f"rank {rank}: {framework} collectives OK", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
