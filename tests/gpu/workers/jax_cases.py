"""The JAX cases of tests/gpu/device_check.sh on ONE real NVIDIA GPU, one per
argv[1] (RANKS says how many ranks each needs; device_check.sh starts them
with `python -m hvdlite.runner -np N python jax_cases.py CASE`).

  jax_step       1 rank: a jitted training step of a 50-layer MLP (100
                 gradient arrays, optax SGD with momentum) whose gradients
                 hvdlite.jax reduces inside jit with prescale 3 and
                 postscale 0.5 equals the same step scaling them by 1.5
                 without hvdlite, on the XLA FFI path and on the io_callback
                 fallback; the per-step time of both (the FFI path is meant
                 to be 10x faster); collectives inside jit; eager collectives
                 of GPU arrays against NumPy.
  jax_host_path  2 ranks sharing the GPU (HVDLITE_GPU_OPERATIONS=host): the
                 same step on each rank's own batch equals one process
                 stepping with the ranks' gradients summed by hand; the
                 collectives inside jit and eagerly.

Parameters are compared by how far training moved them (relative to the
reference's move), so that a gradient scaled wrongly fails by a third, not
by a rounding error. Each case prints `DEVICE_CHECK_RESULT {json}` lines and
`<case> OK` last.
"""
import os
import sys
import time
import zlib

CASE = sys.argv[1] if len(sys.argv) > 1 else ""

# How many ranks each case runs on (device_check.sh's list must agree;
# tests/gpu/test_device_check.py checks that it does).
RANKS = {"jax_step": 1, "jax_host_path": 2}


def _case_environment(case):
    """Set before JAX and the core start, so that a case run by hand behaves
    as under device_check.sh."""
    # JAX takes 75 % of the GPU at its first use otherwise: two ranks on one
    # GPU would not both fit.
    env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    if case == "jax_host_path":
        env["HVDLITE_GPU_OPERATIONS"] = "host"  # NCCL refuses two ranks on one GPU
    return env


os.environ.update(_case_environment(CASE))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import hvdlite  # noqa: E402
import hvdlite.jax as hvd  # noqa: E402
from hvdlite.common import basics  # noqa: E402
from hvdlite.jax import ffi  # noqa: E402

import device_check_helpers as helpers  # noqa: E402
from device_check_helpers import close, median_ms, result  # noqa: E402

helpers.check_build_under_test(hvdlite)
# Full float32 matmuls: the reference and the step with hvdlite are two
# compiled programs, and TF32 rounding would hide small errors in both.
jax.config.update("jax_default_matmul_precision", "highest")

LAYERS, WIDTH, ROWS = 50, 128, 64  # a weight and a bias per layer: 100 gradients
TX = optax.sgd(0.05, momentum=0.9)  # linear in the gradient: a wrong scale shows
EAGER_DTYPES = [np.float32, np.float16, jnp.bfloat16, np.int32, np.uint8]


# --- the model and its steps ----------------------------------------------------

def initial_params(seed=0):
    rng = np.random.default_rng(seed)
    return [(jnp.asarray(rng.normal(0, WIDTH ** -0.5, (WIDTH, WIDTH)).astype(np.float32)),
             jnp.asarray(rng.normal(0, 0.1, WIDTH).astype(np.float32))) for _ in range(LAYERS)]


def loss(params, x, y):
    h = x
    for w, b in params:
        h = h + 0.1 * jnp.tanh(h @ w + b)  # residual: every layer gets a real gradient
    return jnp.mean((h - y) ** 2)


def batch(step, rank):
    rng = np.random.default_rng(1000 * step + rank)
    return (jnp.asarray(rng.normal(size=(ROWS, WIDTH)).astype(np.float32)),
            jnp.asarray(rng.normal(size=(ROWS, WIDTH)).astype(np.float32)))


def training_step(reduce):
    """A jitted step that hands the gradients' pytree to `reduce` before optax."""
    def step(params, state, x, y):
        grads = reduce(jax.grad(loss)(params, x, y))
        updates, state = TX.update(grads, state, params)
        return optax.apply_updates(params, updates), state
    return jax.jit(step)


def scaled(factor):
    return lambda grads: jax.tree_util.tree_map(lambda g: g * factor, grads)


def traced_on(path, step, *args):
    """step(*args), traced now (its first call) with hvdlite.jax's jit path forced to `path`."""
    previous = ffi.set_jit_path(path)
    try:
        return jax.block_until_ready(step(*args))
    finally:
        ffi.set_jit_path(previous)


def train(step, params, rank, steps):
    state = TX.init(params)
    for s in range(steps):
        params, state = step(params, state, *batch(s, rank))
    return jax.block_until_ready(params)


def same_moves(what, got, want, start, rtol=1e-3):
    """Each parameter moved from `start` as in the reference, within rtol of
    the reference's largest move (float32 rounding differs between programs)."""
    leaves = zip(*(jax.tree_util.tree_leaves(t) for t in (got, want, start)))
    for i, (g, w, s) in enumerate(leaves):
        moved_got = np.asarray(g, np.float64) - np.asarray(s, np.float64)
        moved_want = np.asarray(w, np.float64) - np.asarray(s, np.float64)
        reach = float(np.abs(moved_want).max())
        assert reach > 0, f"{what}: parameter {i} did not move in the reference"
        close(f"{what}: parameter {i} moved", moved_got, moved_want, rtol=0, atol=rtol * reach)


# --- collectives -------------------------------------------------------------

def sample(name, rank, shape, dtype):
    """Small integers (exact in every dtype, also x6), seeded by (name, rank)
    so that every rank can build every other rank's input."""
    rng = np.random.default_rng(zlib.crc32(f"{name}/{rank}".encode()))
    low = 0 if dtype == np.uint8 else -4
    return rng.integers(low, 5, shape).astype(dtype)


def on_gpu(what, got, like):
    """got is a jax.Array on the device of `like` (a GPU array)."""
    if not isinstance(got, jax.Array):
        raise AssertionError(f"{what}: got a {type(got).__name__}, not a jax.Array")
    if got.devices() != like.devices():
        raise AssertionError(f"{what}: the result is on {got.devices()}, the input on {like.devices()}")
    return np.asarray(got)


def eager_collectives(rank, size):
    """hvdlite.jax's collectives on GPU arrays outside jit, against NumPy."""
    for dtype in EAGER_DTYPES:
        kind = np.dtype(dtype).name
        name = f"eager.ar.{kind}"
        inputs = [sample(name, r, (5, 3), dtype) for r in range(size)]
        x = jax.device_put(inputs[rank], GPU)
        total = sum(i.astype(np.float64) for i in inputs)
        got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=3.0, postscale_factor=2.0, name=name)
        close(name, on_gpu(name, got, x), (6.0 * total).astype(dtype))
        if jnp.issubdtype(dtype, jnp.floating):  # bfloat16 too
            got = hvd.allreduce(x, op=hvd.Average, prescale_factor=2.0, postscale_factor=3.0,
                                name=f"{name}.average")
            close(f"{name}.average", on_gpu(name, got, x), (6.0 * total / size).astype(dtype),
                  rtol=1e-2, atol=1e-2)
        name = f"eager.ag.{kind}"
        parts = [sample(name, r, (r + 1, 3), dtype) for r in range(size)]  # ragged
        x = jax.device_put(parts[rank], GPU)
        close(name, on_gpu(name, hvd.allgather(x, name=name), x), np.concatenate(parts))
        name, root = f"eager.bc.{kind}", size - 1
        x = jax.device_put(sample(name, rank, (4, 2), dtype), GPU)
        close(name, on_gpu(name, hvd.broadcast(x, root_rank=root, name=name), x),
              sample(name, root, (4, 2), dtype))
    shapes = [((3,), np.float32), ((2, 5), np.int32), ((7,), jnp.bfloat16), ((0,), np.float32)]
    groups = [[sample(f"eager.gar.{i}", r, s, d) for i, (s, d) in enumerate(shapes)] for r in range(size)]
    arrays = [jax.device_put(a, GPU) for a in groups[rank]]
    got = hvd.grouped_allreduce(arrays, op=hvd.Sum, prescale_factor=3.0, name="eager.gar")
    for i, (g, a) in enumerate(zip(got, arrays)):
        want = 3.0 * sum(groups[r][i].astype(np.float64) for r in range(size))
        close(f"eager grouped [{i}]", on_gpu(f"eager grouped [{i}]", g, a), want.astype(a.dtype))


def eager_allreduce_ms(mib=64, calls=5):
    """Median ms of an eager Sum of a `mib` MiB GPU array (through DLPack, no
    host copy, it costs what the collective does)."""
    x = jax.device_put(np.ones(mib << 18, np.float32), GPU)
    times = []
    for i in range(calls + 1):
        started = time.perf_counter()
        jax.block_until_ready(hvd.allreduce(x, op=hvd.Sum, name="eager.big"))
        times.append((time.perf_counter() - started) * 1e3)
    return median_ms(times[1:])


def jit_collectives(rank, size):
    """Collectives inside one jitted function, against NumPy."""
    root = size - 1
    a_in = [sample("jit.a", r, (5, 3), np.float32) for r in range(size)]
    b_in = [sample("jit.b", r, (4, 2), np.int32) for r in range(size)]

    @jax.jit
    def collectives(a, b):
        return (hvd.allreduce(a, op=hvd.Sum, prescale_factor=3.0, postscale_factor=2.0, name="jit.ar"),
                hvd.allgather(b, name="jit.ag"),
                hvd.broadcast(b, root_rank=root, name="jit.bc"),
                hvd.grouped_allreduce([a, b], op=hvd.Max, name="jit.gar"))

    a, b = jax.device_put(a_in[rank], GPU), jax.device_put(b_in[rank], GPU)
    reduced, gathered, broadcast, (most_a, most_b) = collectives(a, b)
    close("jit allreduce", on_gpu("jit allreduce", reduced, a), (6.0 * sum(a_in)).astype(np.float32))
    close("jit allgather", on_gpu("jit allgather", gathered, b), np.concatenate(b_in))
    close("jit broadcast", on_gpu("jit broadcast", broadcast, b), b_in[root])
    close("jit grouped Max [0]", np.asarray(most_a), np.max(a_in, axis=0))
    close("jit grouped Max [1]", np.asarray(most_b), np.max(b_in, axis=0))


# --- the cases ------------------------------------------------------------------

def jax_step():
    started = time.monotonic()
    path = hvd.jit_path()
    print(f"hvdlite.jax.jit_path() on JAX's {jax.default_backend()} backend: {path!r}", flush=True)
    eager_collectives(0, 1)
    eager_ms = eager_allreduce_ms()
    jit_collectives(0, 1)

    params = initial_params()
    x, y = batch(0, 0)
    steps = {"reference": training_step(scaled(1.5))}
    for way in dict.fromkeys((path, ffi.IO_CALLBACK)):  # the default first, the fallback too
        steps[way] = training_step(lambda g, w=way: hvd.allreduce_gradients(
            g, op=hvd.Average, prescale_factor=3.0, postscale_factor=0.5, name=f"grads.{w}"))
        traced_on(way, steps[way], params, TX.init(params), x, y)
    want = train(steps["reference"], params, 0, steps=5)
    for way in [w for w in steps if w != "reference"]:
        same_moves(f"{way} step vs the reference", train(steps[way], params, 0, steps=5), want, params)

    times = step_times(steps, params, x, y)
    numbers = {f"step_ms_{way}": median_ms(t) for way, t in times.items()}
    ratio = None
    if path == ffi.FFI:
        ratio = round(float(np.median(times[ffi.IO_CALLBACK]) / np.median(times[ffi.FFI])), 1)
    result(checks=helpers.checks, seconds=round(time.monotonic() - started, 1), jit_path=path,
           gradients=2 * LAYERS, io_callback_over_ffi=ratio, target_ratio=10,
           meets_target=ratio is not None and ratio >= 10, eager_allreduce_64mib_ms=eager_ms, **numbers)
    print(f"a step with {2 * LAYERS} gradients: " + ", ".join(f"{k} {v} ms" for k, v in numbers.items()) +
          (f"; the io_callback fallback takes x{ratio} the FFI path's time (target x10)" if ratio else ""),
          flush=True)
    assert path == ffi.FFI, (f"hvdlite.jax.jit_path() is {path!r} on JAX's GPU backend: collectives "
                             "inside jit do not reach the core through the XLA FFI handler (the log "
                             "says why)")


def step_times(steps, params, x, y, rounds=6, per_round=5):
    """ms per step of each jitted step (already traced), interleaved so that
    clocks and load hit all alike; after two warm-up steps each."""
    state = TX.init(params)
    for step in steps.values():
        for _ in range(2):
            jax.block_until_ready(step(params, state, x, y))
    times = {way: [] for way in steps}
    for _ in range(rounds):
        for way, step in steps.items():
            for _ in range(per_round):
                started = time.perf_counter()
                jax.block_until_ready(step(params, state, x, y))
                times[way].append((time.perf_counter() - started) * 1e3)
    return times


def jax_host_path():
    started = time.monotonic()
    rank, size = hvd.rank(), hvd.size()
    libraries = basics.gpu_libraries()
    assert libraries.get("gpu_operations") == "host", libraries
    eager_collectives(rank, size)
    jit_collectives(rank, size)

    # Sum with prescale 0.5 and postscale 1.5: 0.75 x the ranks' sum.
    step = training_step(lambda g: hvd.allreduce_gradients(
        g, op=hvd.Sum, prescale_factor=0.5, postscale_factor=1.5, name="host.grads"))

    @jax.jit
    def reference_step(params, state, batches):
        grads = [jax.grad(loss)(params, *data) for data in batches]
        total = jax.tree_util.tree_map(lambda *g: 0.75 * sum(g), *grads)
        updates, state = TX.update(total, state, params)
        return optax.apply_updates(params, updates), state

    params = initial_params()
    steps = 4
    got = train(step, params, rank, steps)
    want, state = params, TX.init(params)
    for s in range(steps):
        want, state = reference_step(want, state, [batch(s, r) for r in range(size)])
    same_moves("2-rank step vs one process on both batches", got, want, params)
    # The ranks' own gradients differ: a step that reduced nothing would fail.
    gradient = jax.jit(jax.grad(loss))
    local = [jax.tree_util.tree_leaves(gradient(params, *batch(0, r))) for r in range(size)]
    spread = max(float(jnp.abs(a - b).max()) for a, b in zip(*local[:2]))
    assert spread > 1e-4, f"the ranks' gradients hardly differ ({spread}): the check proves nothing"
    result(checks=helpers.checks, seconds=round(time.monotonic() - started, 1), jit_path=hvd.jit_path(),
           steps=steps, gradients=2 * LAYERS, local_gradient_spread=round(spread, 4))


def check_gpu_backend():
    global GPU
    GPU = jax.devices()[0]
    if GPU.platform != "gpu":
        raise SystemExit(f"JAX runs on {GPU.platform!r}, not on the GPU: jax-cuda13-plugin/pjrt "
                         f"missing or unusable here (jax {jax.__version__})")


GPU = None

if __name__ == "__main__":
    helpers.run_case(CASE, RANKS, {"jax_step": jax_step, "jax_host_path": jax_host_path}, hvd,
                     before=check_gpu_backend)
