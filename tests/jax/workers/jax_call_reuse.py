"""What a handler's thread keeps from one call to the next (Note [Names read
once] in csrc/jax/collective_handler.cc, Note [Sites interned once] in
csrc/jax/collective_call.cc) never outlives a change: jitted steps of the
same names run in turn with other shapes, dtypes, names, another process
set and the same names from other lines, then again after shutdown() and
init(), every result checked against NumPy's on every rank; and a lone call
that drives its own cycles in turn with calls it must not hold up (Note [A
lone call drives itself] in csrc/jax/call_driver.cc)."""
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import hvdlite.jax as hvd

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
from checks import check, close  # noqa: E402

NAMES = [f"reuse.{i}" for i in range(40)]


def separate(names, process_set=None):
    """A jitted step of separate allreduces (one merged custom call)."""
    kwargs = {} if process_set is None else {"process_set": process_set}
    return jax.jit(lambda xs: [hvd.allreduce(x, name=n, op=hvd.Sum, **kwargs) for x, n in zip(xs, names)])


def separate_other_line(names):
    """The same names as separate()'s, called from another line."""
    return jax.jit(lambda xs: [hvd.allreduce(x, name=n, op=hvd.Average) for x, n in zip(xs, names)])


def inputs(rank, shape, dtype, offset):
    return [jnp.full(shape, rank + i + offset, dtype) for i in range(len(NAMES))]


def expect_sums(got, ranks, shape, dtype, offset, what, average=False):
    for i, value in enumerate(got):
        check(value.shape == shape and value.dtype == np.dtype(dtype),
              f"{what} {i}: {value.shape} {value.dtype}, want {shape} {np.dtype(dtype)}")
        want = sum(r + i + offset for r in ranks)
        close(value, np.full(shape, want / len(ranks) if average else want, dtype), f"{what} {i}")


def in_turn(rank, size):
    everyone = list(range(size))
    steps = [
        ("float32 (1024,)", separate(NAMES), (1024,), jnp.float32),
        ("float32 (8, 3)", separate(NAMES), (8, 3), jnp.float32),
        ("float64 (1024,)", separate(NAMES), (1024,), jnp.float64),
        ("int32 (1024,)", separate(NAMES), (1024,), jnp.int32),
        ("other names", separate([n + ".b" for n in NAMES]), (1024,), jnp.float32),
    ]
    subset = hvd.add_process_set([0, 1])
    for run in range(3):
        for what, jitted, shape, dtype in steps:
            got = jitted(inputs(rank, shape, dtype, run))
            expect_sums(got, everyone, shape, dtype, run, f"{what} run {run}")
        # The same names and shapes in a set of two ranks.
        if rank in (0, 1):
            got = separate(NAMES, subset)(inputs(rank, (1024,), jnp.float32, run))
            expect_sums(got, [0, 1], (1024,), jnp.float32, run, f"process set run {run}")
        # The same names from another line, another reduce op.
        got = separate_other_line(NAMES)(inputs(rank, (1024,), jnp.float32, run))
        expect_sums(got, everyone, (1024,), jnp.float32, run, f"other line run {run}", average=True)
    hvd.remove_process_set(subset)


def lone_then_crossed(rank, size):
    """A step of one merged call (which drives its own cycles: Note [A lone
    call drives itself] in csrc/jax/call_driver.cc) in turn with a step of
    two calls that XLA may start in either order, traced in opposite orders
    on alternate ranks: the guess that a call is alone is then wrong, and the
    call hands over to the driver instead of holding its thread."""
    lone = separate(NAMES)
    n = 64 * 1024  # large enough buffers for XLA's concurrent mode

    def crossed(x, y):
        first = lambda: hvd.allreduce(x, name="crossed.sum", op=hvd.Sum)
        second = lambda: hvd.allreduce(y, name="crossed.avg", op=hvd.Average)
        if rank % 2:
            b = second()
            return first(), b
        a = first()
        return a, second()

    crossed = jax.jit(crossed)
    for run in range(3):
        expect_sums(lone(inputs(rank, (1024,), jnp.float32, run)), list(range(size)), (1024,), jnp.float32,
                    run, f"lone call run {run}")
        a, b = crossed(jnp.full(n, rank + run, jnp.float32), jnp.full(n, 2.0 * rank, jnp.float32))
        close(a, np.full(n, sum(range(size)) + size * run, np.float32), f"crossed sum run {run}")
        close(b, np.full(n, 2.0 * sum(range(size)) / size, np.float32), f"crossed average run {run}")


def main():
    jax.config.update("jax_enable_x64", True)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    check(hvd.jit_path() == "ffi", f"jit path is {hvd.jit_path()}")
    in_turn(rank, size)
    lone_then_crossed(rank, size)
    # Interned sites outlive the runtime (Note [Sites interned once]).
    hvd.shutdown()
    hvd.init()
    in_turn(rank, size)
    hvd.shutdown()
    print("jax call reuse OK", flush=True)


if __name__ == "__main__":
    main()
