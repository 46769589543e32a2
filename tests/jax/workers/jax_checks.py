"""hvdlite.jax on every rank, in one process (JAX's import is slow): each
collective against NumPy, eagerly and inside jax.jit (through the XLA FFI
custom call, and once through the io_callback fallback), ordering of
independent collectives, lax.cond / fori_loop / scan / nested jit, errors, the
pytree helpers, and optax's DistributedOptimizer against one process on the
concatenated batch. Exits non-zero with a message on the first mismatch."""
import re
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

import hvdlite.jax as hvd
from hvdlite.common import basics
from hvdlite.jax import ffi

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
from checks import check, close  # noqa: E402


def every_rank(size, fn):
    return [fn(r) for r in range(size)]


def check_collectives(rank, size):
    def value(r):
        return np.arange(6, dtype=np.float32).reshape(3, 2) * (r + 1) - r
    all_values = np.stack(every_rank(size, value))
    x = jnp.asarray(value(rank))
    for mode, wrap in [("eager", lambda f: f), ("jit", jax.jit)]:
        what = f"{mode} allreduce"
        close(wrap(lambda a: hvd.allreduce(a))(x), all_values.mean(0), f"{what} average")
        # 3.0 x 0.5, not a product of 1: a dropped or doubled scale shows.
        close(wrap(lambda a: hvd.allreduce(a, op=hvd.Sum, prescale_factor=3.0,
                                           postscale_factor=0.5))(x),
              all_values.sum(0) * 1.5, f"{what} sum scaled")
        close(wrap(lambda a: hvd.allreduce(a, op=hvd.Max))(x), all_values.max(0), f"{what} max")
        close(wrap(lambda a: hvd.allreduce(a, op=hvd.Min))(x), all_values.min(0), f"{what} min")
        close(wrap(lambda a: hvd.allreduce(a, op=hvd.Product))(x), all_values.prod(0),
              f"{what} product")
        ints = jnp.asarray(np.array([rank + 1, 7], dtype=np.int32))
        close(wrap(lambda a: hvd.allreduce(a, op=hvd.Sum))(ints),
              np.array([sum(range(1, size + 1)), 7 * size]), f"{what} int32 sum")
        close(wrap(lambda a: hvd.allreduce(a, compression=hvd.Compression.fp16))(x),
              all_values.mean(0), f"{what} fp16 compression", atol=1e-2)
        grouped = wrap(lambda a, b: hvd.grouped_allreduce([a, b], op=hvd.Sum))(x, x[0] * 3)
        close(grouped[0], all_values.sum(0), f"{mode} grouped_allreduce [0]")
        close(grouped[1], all_values[:, 0].sum(0) * 3, f"{mode} grouped_allreduce [1]")
        close(wrap(lambda a: hvd.broadcast(a, size - 1))(x), value(size - 1), f"{mode} broadcast")
        close(wrap(lambda a: hvd.allgather(a))(x), all_values.reshape(-1, 2), f"{mode} allgather")
        rows = jnp.asarray(np.tile(np.arange(size * 2, dtype=np.float32)[:, None] + 10 * rank,
                                   (1, 3)))
        received, splits = wrap(lambda a: hvd.alltoall(a))(rows)
        want = np.concatenate([np.tile(np.arange(2 * rank, 2 * rank + 2, dtype=np.float32)[:, None]
                                       + 10 * r, (1, 3)) for r in range(size)])
        close(received, want, f"{mode} alltoall")
        close(splits, [2] * size, f"{mode} alltoall splits")
        long = jnp.asarray(np.arange(5 * 2, dtype=np.float32).reshape(5, 2) * (rank + 1))
        total = np.arange(10, dtype=np.float32).reshape(5, 2) * sum(range(1, size + 1))
        counts = [5 // size + (1 if r < 5 % size else 0) for r in range(size)]
        start = sum(counts[:rank])
        close(wrap(lambda a: hvd.reducescatter(a, op=hvd.Sum))(long),
              total[start:start + counts[rank]], f"{mode} reducescatter")
    # Eager only: ragged allgather and uneven alltoall splits.
    ragged = jnp.full((rank + 1, 2), float(rank))
    want = np.concatenate([np.full((r + 1, 2), float(r)) for r in range(size)])
    close(hvd.allgather(ragged), want, "eager ragged allgather")
    splits = [1 + (r + rank) % 2 for r in range(size)]
    data = jnp.arange(sum(splits), dtype=jnp.float32) + 100 * rank
    received, got_splits = hvd.alltoall(data, splits=splits)
    want_splits = [1 + (rank + r) % 2 for r in range(size)]
    close(got_splits, want_splits, "eager alltoall uneven splits")
    check(received.shape == (sum(want_splits),), f"eager alltoall uneven: {received.shape}")


def custom_calls(fn, *args, platform=None):
    """The collectives' custom calls in fn's lowered StableHLO (for
    `platform`, traced as where it is JAX's default backend; else this
    backend's), in order: (results, operands) text of each."""
    if platform is None:
        text = jax.jit(fn).lower(*args).as_text()
    else:
        traced_for_cpu = ffi._traced_for_cpu
        ffi._traced_for_cpu = lambda: platform == "cpu"
        try:  # a fresh function: jit reuses a function's earlier trace
            text = jax.jit(lambda *a: fn(*a)).trace(*args).lower(lowering_platforms=(platform,)).as_text()
        finally:
            ffi._traced_for_cpu = traced_for_cpu
    return re.findall(r"(%\S+) = stablehlo.custom_call @hvdlite_collective\(([^)]*)\)", text)


def check_ffi_path(rank, size):
    check(hvd.jit_path() == "ffi", f"jit path is {hvd.jit_path()}, not the FFI custom call")
    # Every dtype of the core in one custom call (x64 on, for int64/float64).
    inputs = [np.array([r + 1, 0, r % 2, 3]) for r in range(size)]
    names = sorted(basics.core().data_types)
    with jax.enable_x64(True):
        arrays = [jnp.asarray(inputs[rank].astype(jnp.dtype(n.lower()))) for n in names]
        check(sorted(a.dtype.name.upper() for a in arrays) == names, f"{arrays} vs {names}")
        for name, got in zip(names, jax.jit(lambda *a: hvd.grouped_allreduce(
                list(a), name="every_dtype", op=hvd.Sum))(*arrays)):
            want = np.any(inputs, 0) if name == "BOOL" else np.sum(inputs, 0)
            check(got.dtype.name.upper() == name and np.array_equal(
                np.asarray(got).astype(np.float64), want.astype(np.float64)),
                f"jit allreduce of {name}: got {got!r}, want {want!r}")
    x = jnp.ones((2, 3)) * (rank + 1)
    whole = sum(range(1, size + 1))
    # Two collectives with no data dependency between them (XLA could run
    # either first). On the CUDA platform the ordering token makes the
    # second wait for the first (the handler blocks there); on the CPU the
    # handler does not block, so neither waits for the other and both are
    # queued at once (Note [Unordered on the CPU] in hvdlite/jax/ffi.py).
    def independent(a, b):
        return (hvd.allreduce(a, name="independent.a", op=hvd.Sum),
                hvd.allgather(b, name="independent.b"))
    calls = custom_calls(independent, x, x[0], platform="cuda")
    check(len(calls) == 2, f"expected 2 custom calls, got {calls}")
    first_result, second_operands = calls[0][0].split(":")[0], calls[1][1]
    check(second_operands.split(",")[0].strip() == f"{first_result}#0",
          f"the second CUDA collective does not take the first's token: {calls}")
    calls = custom_calls(independent, x, x[0])
    check([operands.count(",") for _, operands in calls] == [0, 0],
          f"a CPU collective takes a token or the other's result: {calls}")
    # ... XLA's optimizations keep them apart, and the allreduce of a
    # computed value writes into its input's buffer (so no later instruction
    # is given that buffer while the call is pending) where the allgather,
    # whose result is larger, cannot. (An allreduce of the step's own
    # argument reads it where it is: Note [Arguments read where they are].)
    compiled = jax.jit(lambda a, b: independent(a * 2, b)).lower(x, x[0]).compile().as_text()
    calls = re.findall(r"custom-call\(([^)]*)\).*?custom_call_target=\"hvdlite_collective\"(.*)",
                       compiled)
    aliased = sorted("output_to_operand_aliasing" in rest for _, rest in calls)
    check(len(calls) == 2 and aliased == [False, True] and not any("token" in o for o, _ in calls),
          f"the compiled step's CPU collectives: {calls}")
    for run in range(2):
        reduced, gathered = jax.jit(independent)(x + run, x[0])
        close(reduced, np.ones((2, 3)) * (whole + size * run), f"independent allreduce, run {run}")
        close(gathered, np.repeat(np.arange(1, size + 1, dtype=np.float32)[:, None], 3, 1)
              .reshape(-1), f"independent allgather, run {run}")
    # Loops and nested jit: the token goes through every iteration and call.
    loop = jax.jit(lambda a: jax.lax.fori_loop(
        0, 3, lambda i, acc: hvd.allreduce(acc, name="loop", op=hvd.Sum), a))
    close(loop(x), np.ones((2, 3)) * whole * size ** 2, "allreduce in fori_loop")

    def scan_step(carry, row):
        return carry + hvd.allreduce(row, name="scan", op=hvd.Max), carry
    total, carries = jax.jit(lambda rows: jax.lax.scan(scan_step, jnp.zeros(3), rows))(x)
    close(total, np.ones(3) * size * 2, "allreduce in scan")
    close(carries[1], np.ones(3) * size, "scan's carries")
    inner = jax.jit(lambda a: hvd.allreduce(a, name="nested.inner", op=hvd.Sum))
    outer = jax.jit(lambda a: inner(a) + hvd.broadcast(a, 0, name="nested.outer"))
    close(outer(x), np.ones((2, 3)) * (whole + 1), "nested jit")
    # Ranks that disagree on a shape: an error naming the tensor on every
    # rank, no hang, and the job keeps working.
    mismatched = jnp.ones(2 if rank == 0 else 3)
    try:
        jax.jit(lambda a: hvd.allreduce(a, name="mismatch_jit"))(mismatched).block_until_ready()
        check(False, "allreduce of mismatched shapes inside jit did not fail")
    except Exception as error:  # noqa: BLE001 - XLA raises its own runtime error type
        check("mismatch_jit" in str(error) and "shape" in str(error), str(error))
    close(jax.jit(lambda a: hvd.allreduce(a, name="after_error", op=hvd.Sum))(x),
          np.ones((2, 3)) * whole, "allreduce after an error")


def check_io_callback_fallback(rank, size):
    previous = ffi.set_jit_path("io_callback")
    try:
        x = jnp.arange(4.0) * (rank + 1)
        step = jax.jit(lambda a: hvd.grouped_allreduce([a, a * 2], name="fallback", op=hvd.Sum))
        check(not custom_calls(step, x), "set_jit_path('io_callback') still lowered to FFI")
        check("python_cpu_callback" in jax.jit(step).lower(x).as_text(), "no io_callback")
        whole = sum(range(1, size + 1))
        reduced = step(x)
        close(reduced[0], np.arange(4.0) * whole, "io_callback grouped_allreduce [0]")
        close(reduced[1], np.arange(4.0) * whole * 2, "io_callback grouped_allreduce [1]")
    finally:
        ffi.set_jit_path(previous)


def check_jit_semantics(rank, size):
    # Not pruned: rank 0's jitted step ignores the result, rank 1 waits for it
    # eagerly under the same name (a pruned callback would leave rank 1 hanging).
    x = jnp.ones(3) * rank
    if rank == 0:
        ignores_result = jax.jit(lambda a: (hvd.allreduce(a, name="unused", op=hvd.Sum), a)[1])
        ignores_result(x).block_until_ready()
    else:
        close(hvd.allreduce(x, name="unused", op=hvd.Sum), np.ones(3) * sum(range(size)),
              "unused jit result still reduced")
    # Compiled once, run several times: the same names every run; under lax.cond.
    step = jax.jit(lambda a, go: jax.lax.cond(go, lambda: hvd.allreduce(a, op=hvd.Sum) * 2,
                                              lambda: a))
    for i in range(3):
        close(step(x + i, True), (np.ones(3) * sum(range(size)) + size * i) * 2,
              f"lax.cond taken, run {i}")
        close(step(x + i, False), x + i, f"lax.cond not taken, run {i}")
    # A traced allgather whose ranks disagree on rows fails on every rank.
    try:
        rows = 1 if rank == 0 else 2
        gather = jax.jit(lambda a: hvd.allgather(a, name="ragged_jit"))
        gather(jnp.ones((rows, 2))).block_until_ready()
        check(False, "ragged allgather inside jit did not fail")
    except Exception as error:  # XLA wraps the callback's ValueError
        check("inside jax.jit" in str(error) and "ragged_jit" in str(error), str(error))
    # Pytrees: differently seeded parameters end identical.
    params = {"w": jnp.full((2, 2), float(rank)), "b": [jnp.arange(3.0) + rank]}
    synced = hvd.broadcast_parameters(params, root_rank=1)
    close(synced["w"], np.ones((2, 2)), "broadcast_parameters w")
    close(synced["b"][0], np.arange(3.0) + 1, "broadcast_parameters b")
    grads = jax.jit(hvd.allreduce_gradients)(params)
    close(grads["w"], np.full((2, 2), (size - 1) / 2), "allreduce_gradients")


def data(size, steps=4, batch=4):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps, size * batch, 3)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5], np.float32) + 0.3)[..., None]
    return x, y


def loss(params, x, y):
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


def train(tx, xs, ys, params):
    state = tx.init(params)

    @jax.jit
    def step(params, state, x, y):
        updates, state = tx.update(jax.grad(loss)(params, x, y), state, params)
        return optax.apply_updates(params, updates), state

    for x, y in zip(xs, ys):
        params, state = step(params, state, x, y)
    return params


def check_optax(rank, size):
    xs, ys = data(size)
    batch = xs.shape[1] // size
    mine = slice(rank * batch, (rank + 1) * batch)
    init = {"w": jnp.zeros((3, 1)), "b": jnp.zeros((1,))}
    for what, make, options, reference in [
            ("adam", lambda: optax.adam(0.05), {}, lambda: optax.adam(0.05)),
            ("sgd momentum", lambda: optax.sgd(0.1, momentum=0.9), {},
             lambda: optax.sgd(0.1, momentum=0.9)),
            ("backward_passes_per_step=2 averaged", lambda: optax.sgd(0.1),
             dict(backward_passes_per_step=2, average_aggregated_gradients=True),
             lambda: optax.MultiSteps(optax.sgd(0.1), 2).gradient_transformation()),
            ("backward_passes_per_step=2 summed", lambda: optax.sgd(0.1),
             dict(backward_passes_per_step=2),
             lambda: optax.MultiSteps(optax.sgd(0.2), 2).gradient_transformation())]:
        got = train(hvd.DistributedOptimizer(make(), **options), xs[:, mine], ys[:, mine], init)
        want = train(reference(), xs, ys, init)
        for key in init:
            close(got[key], want[key], f"optax {what} {key} vs one process")


CHECKS = [check_ffi_path, check_collectives, check_jit_semantics, check_io_callback_fallback,
          check_optax]


def main():
    check(sys.argv[1:] in ([], ["powersgd"]),
          f"jax_checks.py takes no argument or 'powersgd', not {sys.argv[1:]}")
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    for check_fn in CHECKS:
        check_fn(rank, size)
    print("jax OK", flush=True)
    if sys.argv[1:]:
        # PowerSGD's checks in the same job (starting JAX ranks costs more than
        # most checks): tests/jax/test_jax.py.
        import jax_powersgd
        jax_powersgd.run()
    hvd.shutdown()


if __name__ == "__main__":
    main()
