"""What one trip from a jax.jit-compiled step to host code costs, per call,
for the ways hvdlite.jax could reach the core (one process, no collective):
an ordered io_callback (hvdlite.jax's fallback: never pruned or reordered),
an unordered one, pure_callback, and an XLA FFI custom call (a C++ handler
that copies its input; compiled here against jaxlib's headers), with and
without has_side_effect, and behind the ordering token as hvdlite.jax lowers
its collectives (Note [Ordered custom calls] in hvdlite/jax/ffi.py). Runs
interleaved, so machine load affects all alike.

    python bench/jax_crossing.py

With --collective, a real jitted grouped allreduce of a few small arrays on
every rank, through hvdlite.jax's two ways into the core inside jit (its XLA
FFI custom call, and the ordered io_callback it falls back to), interleaved,
with the eager call for reference; rank 0 prints:

    hvdliterun -np 2 python bench/jax_crossing.py --collective

With --step, a training step's gradients as training code reduces them: 100
separate 4 KiB allreduces inside one jitted step (on the CPU the lowering
merges them into one custom call, Note [One custom call for a step's
collectives] in hvdlite/jax/merged_calls.py, whose requests the core fuses in
one cycle that hvdlite.jax's driver runs, Note [Driving a step's calls] in
csrc/jax/call_driver.cc), the same as one grouped_allreduce inside jit, the
same step compiled without merging (each collective its own custom call,
queued without blocking: Note [Asynchronous calls on the CPU] in
csrc/jax/collective_handler.cc), and hvdlite.torch's asynchronous step of
the same tensors (allreduce_async_ each, then synchronize each), interleaved
in one run; rank 0 prints a table of medians, and the CPU time a step of
the whole process (all its threads), which a loaded machine disturbs less;
its floor rows are the same number of custom calls that only copy and return
a completed future (what XLA:CPU itself costs the unmerged step), and one
such call of every array (the same for the merged step):

    hvdliterun -np 2 python bench/jax_crossing.py --step
"""
import argparse
import ctypes
import os
import subprocess
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from hvdlite.jax.ffi import ordered_primitive

HANDLER = r"""
#include <cstring>
#include "xla/ffi/api/ffi.h"
namespace ffi = xla::ffi;
static ffi::Error CopyImpl(ffi::Buffer<ffi::F32> in, ffi::ResultBuffer<ffi::F32> out) {
  std::memcpy(out->typed_data(), in.typed_data(), in.element_count() * sizeof(float));
  return ffi::Error::Success();
}
XLA_FFI_DEFINE_HANDLER_SYMBOL(Copy, CopyImpl,
    ffi::Ffi::Bind().Arg<ffi::Buffer<ffi::F32>>().Ret<ffi::Buffer<ffi::F32>>());
// The same behind the ordering token that hvdlite.jax threads through its calls.
static ffi::Error OrderedCopyImpl(ffi::Token, ffi::Buffer<ffi::F32> in, ffi::Result<ffi::Token>,
                                  ffi::ResultBuffer<ffi::F32> out) {
  return CopyImpl(in, out);
}
XLA_FFI_DEFINE_HANDLER_SYMBOL(OrderedCopy, OrderedCopyImpl,
    ffi::Ffi::Bind().Arg<ffi::Token>().Arg<ffi::Buffer<ffi::F32>>().Ret<ffi::Token>()
        .Ret<ffi::Buffer<ffi::F32>>());
// The same returning a future, already completed: what XLA:CPU itself costs
// an asynchronous call like hvdlite's CPU handler (--step's floor row).
static ffi::Future AsyncCopyImpl(ffi::Buffer<ffi::F32> in, ffi::ResultBuffer<ffi::F32> out) {
  std::memcpy(out->typed_data(), in.typed_data(), in.element_count() * sizeof(float));
  ffi::Promise promise;
  ffi::Future future(promise);
  promise.SetAvailable();
  return future;
}
XLA_FFI_DEFINE_HANDLER_SYMBOL(AsyncCopy, AsyncCopyImpl,
    ffi::Ffi::Bind().Arg<ffi::Buffer<ffi::F32>>().Ret<ffi::Buffer<ffi::F32>>());
// All of a step's arrays in one such call: the floor of a merged step.
static ffi::Future AsyncCopyAllImpl(ffi::RemainingArgs args, ffi::RemainingRets rets) {
  for (size_t i = 0; i < args.size(); ++i) {
    auto in = args.get<ffi::AnyBuffer>(i);
    auto out = rets.get<ffi::AnyBuffer>(i);
    std::memcpy((*out)->untyped_data(), in->untyped_data(), in->size_bytes());
  }
  ffi::Promise promise;
  ffi::Future future(promise);
  promise.SetAvailable();
  return future;
}
XLA_FFI_DEFINE_HANDLER_SYMBOL(AsyncCopyAll, AsyncCopyAllImpl,
    ffi::Ffi::Bind().RemainingArgs().RemainingRets());
"""


def build_handler(directory):
    source, library = os.path.join(directory, "copy.cc"), os.path.join(directory, "copy.so")
    with open(source, "w") as f:
        f.write(HANDLER)
    subprocess.run(["c++", "-O2", "-std=c++17", "-shared", "-fPIC", "-w",
                    f"-I{jax.ffi.include_dir()}", source, "-o", library], check=True)
    return ctypes.cdll.LoadLibrary(library)


def main(rounds=9, calls=200, elements=256):
    with tempfile.TemporaryDirectory() as directory:
        library = build_handler(directory)
    jax.ffi.register_ffi_target("bench_copy", jax.ffi.pycapsule(library.Copy), platform="cpu")
    jax.ffi.register_ffi_target("bench_ordered_copy", jax.ffi.pycapsule(library.OrderedCopy),
                                platform="cpu")
    ordered_copy = ordered_primitive("bench_ordered_copy")
    x = jnp.ones(elements, jnp.float32)
    shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
    ways = {
        "jit without crossing": jax.jit(lambda a: a * 2),
        "ffi custom call": jax.jit(lambda a: jax.ffi.ffi_call("bench_copy", shape)(a)),
        "ffi, has_side_effect": jax.jit(
            lambda a: jax.ffi.ffi_call("bench_copy", shape, has_side_effect=True)(a)),
        "ffi, ordered (hvdlite)": jax.jit(
            lambda a: ordered_copy.bind(a, result_avals=(jax.core.ShapedArray(a.shape, a.dtype),))[0]),
        "io_callback ordered": jax.jit(lambda a: io_callback(lambda v: v, shape, a, ordered=True)),
        "io_callback unordered": jax.jit(lambda a: io_callback(lambda v: v, shape, a)),
        "pure_callback": jax.jit(lambda a: jax.pure_callback(lambda v: v, shape, a)),
    }
    times = {name: [] for name in ways}
    for step in ways.values():
        step(x).block_until_ready()
    for _ in range(rounds):
        for name, step in ways.items():
            start = time.perf_counter()
            for _ in range(calls):
                step(x).block_until_ready()
            times[name].append((time.perf_counter() - start) / calls * 1e6)
    print(f"jax {jax.__version__}, {elements} float32, {rounds} rounds x {calls} calls")
    for name, values in times.items():
        print(f"{name:24s} median {np.median(values):8.1f} us   min {min(values):8.1f} us")


def collective(rounds=9, calls=200, arrays=4, elements=256):
    import hvdlite.jax as hvd
    from hvdlite.jax import ffi
    hvd.init()
    grads = [jnp.full(elements, float(i + hvd.rank())) for i in range(arrays)]
    steps = {}
    for path in (ffi.FFI, ffi.IO_CALLBACK):
        ffi.set_jit_path(path)  # chosen when the step is traced, i.e. by its first call
        steps[f"jit, {path}"] = jax.jit(
            lambda gs, p=path: hvd.grouped_allreduce(gs, name=f"bench.{p}", op=hvd.Sum))
        steps[f"jit, {path}"](grads)[0].block_until_ready()
    ffi.set_jit_path(None)
    steps["eager"] = lambda gs: hvd.grouped_allreduce(gs, name="bench.eager", op=hvd.Sum)
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            for _ in range(calls):
                step(grads)[0].block_until_ready()
            times[name].append((time.perf_counter() - start) / calls * 1e6)
    if hvd.rank() == 0:
        print(f"jax {jax.__version__}, {hvd.size()} ranks, grouped allreduce of {arrays} x "
              f"{elements} float32, {rounds} rounds x {calls} calls")
        for name, values in times.items():
            print(f"{name:24s} median {np.median(values):8.1f} us   min {min(values):8.1f} us")
    hvd.shutdown()


def compile_unmerged(jitted, *args):
    """Traces and compiles `jitted` (its first call, which jax.jit caches)
    with each collective its own custom call, as before the CPU lowering
    merged a step's separate collectives (Note [One custom call for a step's
    collectives] in hvdlite/jax/merged_calls.py): the same run's A/B."""
    from hvdlite.jax import merged_calls
    merging = merged_calls.merged_call
    merged_calls.merged_call = lambda jax_, target, ctx, operands, attributes, aliased: \
        merged_calls._emit(jax_, target, ctx, operands, aliased, attributes)
    try:
        jax.block_until_ready(jitted(*args))
    finally:
        merged_calls.merged_call = merging


def step(rounds=7, steps=50, tensors=100, elements=1024):
    import torch
    import hvdlite.jax as hvd
    import hvdlite.torch as hvd_torch
    hvd.init()
    hvd_torch.init()
    rank = hvd.rank()
    grads = [jnp.full(elements, float(i + rank), jnp.float32) for i in range(tensors)]
    torch_grads = [torch.full((elements,), float(i + rank)) for i in range(tensors)]
    separate = jax.jit(lambda gs: [hvd.allreduce(g, name=f"bench.step.{i}", op=hvd.Sum)
                                   for i, g in enumerate(gs)])
    grouped = jax.jit(lambda gs: hvd.grouped_allreduce(gs, name="bench.step.grouped", op=hvd.Sum))
    unmerged = jax.jit(lambda gs: [hvd.allreduce(g, name=f"bench.unmerged.{i}", op=hvd.Sum)
                                   for i, g in enumerate(gs)])
    compile_unmerged(unmerged, grads)
    # XLA's own floor for the separate step: as many custom calls that
    # return a completed future, no collective. No JAX effect (as hvdlite's
    # CPU primitive has none), so the step takes JAX's C++ dispatch path.
    with tempfile.TemporaryDirectory() as directory:
        library = build_handler(directory)
    jax.ffi.register_ffi_target("bench_async_copy", jax.ffi.pycapsule(library.AsyncCopy),
                                platform="cpu")
    floor = jax.jit(lambda gs: [
        jax.ffi.ffi_call("bench_async_copy", jax.ShapeDtypeStruct(g.shape, g.dtype))(g) for g in gs])
    # ... and for the merged step: one such call of every array.
    jax.ffi.register_ffi_target("bench_async_copy_all", jax.ffi.pycapsule(library.AsyncCopyAll),
                                platform="cpu")
    floor_one = jax.jit(lambda gs: jax.ffi.ffi_call(
        "bench_async_copy_all", [jax.ShapeDtypeStruct(g.shape, g.dtype) for g in gs])(*gs))

    def torch_step(_):
        handles = [hvd_torch.allreduce_async_(t, name=f"bench.torch.{i}", op=hvd_torch.Sum)
                   for i, t in enumerate(torch_grads)]
        for handle in handles:
            hvd_torch.synchronize(handle)

    ways = {"jit, separate allreduces": lambda gs: jax.block_until_ready(separate(gs)),
            "jit, grouped_allreduce": lambda gs: jax.block_until_ready(grouped(gs)),
            "jit, separate, unmerged": lambda gs: jax.block_until_ready(unmerged(gs)),
            "jit, XLA floor: copy calls": lambda gs: jax.block_until_ready(floor(gs)),
            "jit, XLA floor: one call": lambda gs: jax.block_until_ready(floor_one(gs)),
            "torch, allreduce_async_": torch_step}
    expected = sum(float(r) for r in range(hvd.size()))
    assert np.allclose(np.asarray(separate(grads)[0]), expected), "wrong sum"
    times = {name: [] for name in ways}
    # The process's CPU time a step (all its threads): what a step costs
    # this rank when other processes share the cores and wall times mostly
    # measure the scheduler.
    cpu = {name: [] for name in ways}
    for way in ways.values():
        for _ in range(3):
            way(grads)
    for _ in range(rounds):
        for name, way in ways.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            for _ in range(steps):
                way(grads)
            times[name].append((time.perf_counter() - start) / steps * 1e3)
            cpu[name].append((time.process_time() - start_cpu) / steps * 1e3)
    if rank == 0:
        torch_median = np.median(times["torch, allreduce_async_"])
        print(f"jax {jax.__version__}, {hvd.size()} ranks, a step of {tensors} x {elements * 4} B "
              f"float32 allreduces, {rounds} rounds x {steps} steps, load {os.getloadavg()[0]:.2f}")
        print(f"{'way':26s} {'median ms':>10s} {'min ms':>8s} {'/ torch':>8s} {'cpu ms':>8s}")
        for name, values in times.items():
            print(f"{name:26s} {np.median(values):10.3f} {min(values):8.3f} "
                  f"{np.median(values) / torch_median:8.2f} {np.median(cpu[name]):8.3f}")
    hvd.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collective", action="store_true",
                        help="time a jitted allreduce on every rank (run under hvdliterun)")
    parser.add_argument("--step", action="store_true",
                        help="time a jitted step of 100 separate allreduces against hvdlite.torch's "
                             "asynchronous step (run under hvdliterun)")
    arguments = parser.parse_args()
    if arguments.step:
        step()
    elif arguments.collective:
        collective()
    else:
        main()
