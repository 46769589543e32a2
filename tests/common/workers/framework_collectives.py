"""One body for the collectives that behave the same in every binding (numpy,
torch, TensorFlow, JAX), run over a small adapter per framework, the way
mpi4py runs one test over every array library: allreduce with each op and
with scales whose product is not 1, allgather with a different first
dimension on every rank, broadcast from every root; float32 and int32, each
against NumPy. Then bad arguments, refused by every binding in the same words
whichever way its request reaches the core (hvdlite._core's enqueue, or the
C API from a TF kernel or JAX's jit handler: Note [One way in] in
csrc/api/session.h). Usage: framework_collectives.py <numpy|torch|tensorflow|jax>."""
import importlib
import sys

import numpy as np

from checks import check, close


def eagerly(fn, x):
    return fn(x)


def numpy_adapter():
    return importlib.import_module("hvdlite.numpy"), np.array, [eagerly]


def torch_adapter():
    import torch
    return (importlib.import_module("hvdlite.torch"), lambda a: torch.from_numpy(np.array(a)),
            [eagerly])


def tensorflow_adapter():
    import tensorflow as tf
    return importlib.import_module("hvdlite.tensorflow"), tf.constant, \
        [eagerly, lambda fn, x: tf.function(fn)(x)]


def jax_adapter():
    import jax
    import jax.numpy as jnp
    return importlib.import_module("hvdlite.jax"), jnp.asarray, \
        [eagerly, lambda fn, x: jax.jit(fn)(x)]


# Each: () -> (the binding's module, a function making its tensor from a NumPy
# array, the ways to run fn(x): eagerly and, where the binding has one, traced
# (tf.function, jax.jit), which reaches the core through the C API).
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


def refused(run, fn, x, what, needles, error_type=ValueError):
    """run(fn, x) fails, every needle in its message; eagerly with error_type
    too (a traced run raises the framework's own types: tf.errors, XLA's,
    AutoGraph's StagingError)."""
    try:
        run(fn, x)
    except Exception as error:  # noqa: BLE001 - the type is checked below
        text = str(error)
        check(all(n in text for n in needles), f"{what}: {needles} not all in: {text}")
        if run is eagerly:
            check(isinstance(error, error_type),
                  f"{what}: {type(error).__name__}, not {error_type.__name__}: {text}")
        return
    check(False, f"{what}: accepted, though it should fail with {needles}")


def check_refusals(hvd, tensor, runners, rank, size):
    """The same bad arguments and the same words from every binding and path."""
    from hvdlite.common.exceptions import CollectiveMismatchError
    from hvdlite.common.requests import SUPPORTED_DTYPES
    x = tensor(value(rank, np.float32))  # 3 rows
    for index, run in enumerate(runners):
        how = "eagerly" if run is eagerly else "traced"
        # In the core (core/entry_validation.cc), whichever way the request came.
        root = f"bad.root.{index}"
        refused(run, lambda t: hvd.broadcast(t, size, name=root), x, f"root {how}",
                [f"broadcast of '{root}': root_rank {size} is not a member of process set 0"])
        mismatch = f"bad.shape.{index}"
        uneven = tensor(np.ones(rank + 1, np.float32))
        refused(run, lambda t: hvd.allreduce(t, op=hvd.Sum, name=mismatch), uneven,
                f"shape mismatch {how}", [f"'{mismatch}'", "mismatched shape across ranks"],
                CollectiveMismatchError)
        if run is eagerly:  # inside jit alltoall splits evenly
            splits = f"bad.splits.{index}"
            refused(run, lambda t: hvd.alltoall(t, splits=[3], name=splits), x,
                    f"splits {how}", [f"alltoall of '{splits}': splits has 1 entries but the "
                                      f"process set has {size} ranks"])
        # In hvdlite.common.requests, before a request is made.
        unregistered = hvd.ProcessSet([0])
        refused(run, lambda t: hvd.allreduce(t, name="bad.set", process_set=unregistered), x,
                f"process set {how}", [f"{unregistered!r} is not registered"])
        refused(run, lambda t: hvd.allreduce(t, prescale_factor="big", name="bad.scale"), x,
                f"scale {how}", ["prescale_factor must be a number, got 'big'"])
        refused(run, lambda t: hvd.broadcast(t, "first", name="bad.root.type"), x,
                f"root type {how}",
                ["broadcast of 'bad.root.type': root_rank must be a rank number, got 'first'"])
        refused(run, lambda t: hvd.reducescatter(t, op=hvd.Adasum, name="bad.adasum"), x,
                f"adasum {how}", ["op=Adasum is supported by allreduce only, not reducescatter"])
        refused(run, lambda t: hvd.allreduce(t, op=hvd.Sum, name="bad.dtype"),
                tensor(np.ones(3, np.complex64)), f"dtype {how}",
                ["allreduce of 'bad.dtype': dtype ",
                 f"complex64 is not supported by hvdlite; use one of {SUPPORTED_DTYPES}"])


def main():
    framework = sys.argv[1]
    hvd, tensor, runners = ADAPTERS[framework]()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    check_collectives(hvd, tensor, rank, size)
    check_refusals(hvd, tensor, runners, rank, size)
    # The job goes on after every refusal.
    close(hvd.allreduce(tensor(value(rank, np.float32)), op=hvd.Sum, name="after.refusals"),
          np.stack([value(r, np.float32) for r in range(size)]).sum(0), "allreduce after refusals")
    print(f"rank {rank}: {framework} collectives OK", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
