"""A jitted step of many separate hvdlite.jax collectives, as training code
writes them (one call per gradient): every result against NumPy's on every
rank, over several steps. Allreduces of several dtypes and ops, allgathers
and broadcasts mixed in, a step in a process set, and a step that mixes the
non-blocking custom calls with blocking io_callback collectives (Note
[Unordered on the CPU] in hvdlite/jax/ffi.py), and a step of two waves, the
second consuming the first, in turn with a step of one collective, and
collectives of the step's own arguments (kept, donated, used twice). Argument: "fusion" runs only
the step of 100 float32 allreduces that tests/jax/test_jax_fusion.py reads
the timeline of."""
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import hvdlite.jax as hvd
from hvdlite.jax import ffi

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
from checks import check, close as close_values  # noqa: E402

TENSORS = 100


def close(got, want, what):
    """Values within float16's precision, and want's dtype."""
    check(np.asarray(got).dtype == np.asarray(want).dtype, f"{what}: dtype {np.asarray(got).dtype}")
    close_values(got, want, what, rtol=1e-2)


def fusion_step(rank, size):
    grads = [jnp.full(1024, float(i + rank), jnp.float32) for i in range(TENSORS)]
    step = jax.jit(lambda gs: [hvd.allreduce(g, name=f"fused.{i}", op=hvd.Sum) for i, g in enumerate(gs)])
    for run in range(2):
        for i, got in enumerate(step(grads)):
            close(got, np.full(1024, size * i + sum(range(size)), np.float32), f"fused.{i} run {run}")


# Per tensor: (dtype, op, NumPy's reduction over the ranks' inputs).
KINDS = [(jnp.float32, "Sum", np.sum), (jnp.float16, "Sum", np.sum), (jnp.bfloat16, "Max", np.max),
         (jnp.int32, "Sum", np.sum), (jnp.int8, "Min", np.min), (jnp.float32, "Average", np.mean)]


def inputs(rank, step_index):
    """This rank's inputs of one step: 30 allreduce arrays of the kinds above
    (sizes 1 to ~3000 elements), 5 allgather rows, 5 broadcast arrays."""
    reduce_in = [((np.arange(1 + 97 * i) % 7 + rank * (i % 3) + step_index) % 50)
                 .astype(jnp.dtype(KINDS[i % len(KINDS)][0])) for i in range(30)]
    gather_in = [np.full((2, 3), rank * 10 + i + step_index, np.float32) for i in range(5)]
    broadcast_in = [np.full(7 + i, rank + 100 * i + step_index, np.int32) for i in range(5)]
    return reduce_in, gather_in, broadcast_in


def mixed_step(reduce_in, gather_in, broadcast_in):
    reduced = [hvd.allreduce(a * 1, name=f"mixed.r{i}", op=getattr(hvd, KINDS[i % len(KINDS)][1]))
               for i, a in enumerate(reduce_in)]
    gathered = [hvd.allgather(a + 0, name=f"mixed.g{i}") for i, a in enumerate(gather_in)]
    broadcast = [hvd.broadcast(a, root_rank=i % 2, name=f"mixed.b{i}") for i, a in enumerate(broadcast_in)]
    return reduced, gathered, broadcast


def check_mixed(rank, size):
    step = jax.jit(lambda r, g, b: mixed_step(r, g, b))
    for step_index in range(3):
        every = [inputs(r, step_index) for r in range(size)]
        reduced, gathered, broadcast = step(*[[jnp.asarray(a) for a in part] for part in every[rank]])
        for i, got in enumerate(reduced):
            dtype, _, numpy_op = KINDS[i % len(KINDS)]
            want = numpy_op(np.stack([e[0][i].astype(np.float64) for e in every]), axis=0)
            close(got, want.astype(jnp.dtype(dtype)), f"step {step_index} allreduce {i} ({dtype.__name__})")
        for i, got in enumerate(gathered):
            close(got, np.concatenate([e[1][i] for e in every]), f"step {step_index} allgather {i}")
        for i, got in enumerate(broadcast):
            close(got, every[i % 2][2][i], f"step {step_index} broadcast {i}")


def check_process_set(rank, size):
    subset = hvd.add_process_set([0, 1])
    if rank in (0, 1):
        step = jax.jit(lambda xs: [hvd.allreduce(x, name=f"subset.{i}", op=hvd.Sum, process_set=subset)
                                   for i, x in enumerate(xs)])
        for i, got in enumerate(step([jnp.full(64, float(rank + i)) for i in range(20)])):
            close(got, np.full(64, 2 * i + 1, np.float32), f"process set allreduce {i}")
    hvd.remove_process_set(subset)


def check_beside_io_callbacks(rank, size):
    """Blocking io_callback collectives in the same step as the non-blocking
    custom calls (the path is chosen per collective when the step is traced):
    every rank finishes with the right sums."""
    def step(xs):
        out = []
        for i, x in enumerate(xs):
            ffi.set_jit_path("io_callback" if i % 4 == 3 else "ffi")
            out.append(hvd.allreduce(x * 2, name=f"beside.{i}", op=hvd.Sum))
        ffi.set_jit_path(None)
        return out
    jitted = jax.jit(step)
    for run in range(2):
        for i, got in enumerate(jitted([jnp.full(300, float(rank + i + run)) for i in range(12)])):
            close(got, np.full(300, 2 * (size * (i + run) + sum(range(size))), np.float32),
                  f"io_callback neighbour {i} run {run}")


def check_chained_and_changing(rank, size):
    """A step whose second wave of collectives consumes the first wave's
    results (its calls come while the first wave's are being reported), run
    in turn with a step of one collective, so that the driver's expected
    burst size is wrong every time (Note [Driving a step's calls] in
    csrc/jax/call_driver.cc): every result is right."""
    def chained(xs):
        first = [hvd.allreduce(x, name=f"chain.a{i}", op=hvd.Sum) for i, x in enumerate(xs)]
        total = sum(jnp.sum(f) for f in first)
        return [hvd.allreduce(f + total, name=f"chain.b{i}", op=hvd.Sum) for i, f in enumerate(first)]
    chained_step = jax.jit(chained)
    single_step = jax.jit(lambda x: hvd.allreduce(x, name="chain.single", op=hvd.Sum))
    ranks_sum = sum(range(size))
    first_wave = [size * i + ranks_sum for i in range(20)]
    total = 300 * sum(first_wave)
    for run in range(3):
        for i, got in enumerate(chained_step([jnp.full(300, float(rank + i)) for i in range(20)])):
            close(got, np.full(300, size * (first_wave[i] + total), np.float32), f"chained {i} run {run}")
        close(single_step(jnp.full(300, float(rank + run))), np.full(300, size * run + ranks_sum, np.float32),
              f"single run {run}")


def check_arguments_read_where_they_are(rank, size):
    """Collectives of the step's own arguments read them where they are and
    write their results elsewhere, donated arguments and computed values are
    reduced in place (Note [Arguments read where they are] in
    hvdlite/jax/ffi.py): the lowering aliases exactly those, every result
    equals NumPy's, and the caller's arrays keep their values."""
    ranks_sum = sum(range(size))

    def step(kept, twice, donated):
        reduced = [hvd.allreduce(x, name=f"args.kept{i}", op=hvd.Sum) for i, x in enumerate(kept)]
        # One argument twice in one call and again in another; an argument
        # beside a computed value in one grouped call; a broadcast of an argument.
        pair = hvd.grouped_allreduce([twice, twice, twice * 2], name="args.group", op=hvd.Sum)
        again = hvd.allreduce(twice, name="args.again", op=hvd.Average)
        sent = hvd.broadcast(kept[0], root_rank=size - 1, name="args.broadcast")
        inner = jax.jit(lambda y: hvd.allreduce(y, name="args.inner", op=hvd.Sum))(kept[1])
        return reduced, pair, again, sent, inner, hvd.allreduce(donated, name="args.donated", op=hvd.Sum)

    jitted = jax.jit(step, donate_argnums=2)
    kept = [jnp.full(200, float(rank + i)) for i in range(4)]
    twice = jnp.arange(50, dtype=jnp.float32) + rank
    lowered = jitted.lower(kept, twice, jnp.zeros(8)).as_text()
    calls = [line for line in lowered.splitlines() if "hvdlite_collective" in line and "custom_call" in line]
    aliased = [line for line in calls if "output_operand_alias" in line]
    # The kept arguments' allreduces and the grouped call merge into one call
    # (Note [One custom call for a step's collectives] in
    # hvdlite/jax/merged_calls.py), whose computed member alone is aliased;
    # the Average, the broadcast, the inner jit's and the donated argument's
    # are calls of their own, the last two aliased.
    check(len(calls) == 5 and len(aliased) == 3, f"{len(calls)} calls, {len(aliased)} aliased:\n{lowered}")
    check(aliased[0].count("output_operand_alias<") == 1 and "operand_index = 6," in aliased[0],
          f"the merged call aliases its computed member only:\n{aliased[0]}")
    for run in range(3):
        donated = jnp.full(8, float(rank + run))
        reduced, pair, again, sent, inner, summed = jitted(kept, twice, donated)
        for i, got in enumerate(reduced):
            close(got, np.full(200, size * i + ranks_sum, np.float32), f"argument {i} run {run}")
        twice_sum = size * np.arange(50, dtype=np.float32) + ranks_sum
        close(pair[0], twice_sum, f"grouped argument run {run}")
        close(pair[1], twice_sum, f"grouped argument again run {run}")
        close(pair[2], 2 * twice_sum, f"grouped computed value run {run}")
        close(again, twice_sum / size, f"argument in a second call run {run}")
        close(sent, np.full(200, size - 1, np.float32), f"broadcast argument run {run}")
        close(inner, np.full(200, size + ranks_sum, np.float32), f"nested jit argument run {run}")
        close(summed, np.full(8, size * run + ranks_sum, np.float32), f"donated argument run {run}")
        for i, x in enumerate(kept):
            close(x, np.full(200, rank + i, np.float32), f"caller's argument {i} after run {run}")
        close(twice, np.arange(50, dtype=np.float32) + rank, f"caller's twice-used argument after run {run}")


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    check(hvd.jit_path() == "ffi", f"jit path is {hvd.jit_path()}")
    if sys.argv[1:] == ["fusion"]:
        fusion_step(rank, size)
    else:
        check_mixed(rank, size)
        check_process_set(rank, size)
        check_beside_io_callbacks(rank, size)
        check_chained_and_changing(rank, size)
        check_arguments_read_where_they_are(rank, size)
    hvd.shutdown()
    print("jax fused step OK", flush=True)


if __name__ == "__main__":
    main()
