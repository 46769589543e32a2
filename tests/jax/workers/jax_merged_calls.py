"""A jitted step's separate hvdlite.jax collectives lowered for the CPU merge
into one custom call where nothing can tell the difference, and only there
(Note [One custom call for a step's collectives] in
hvdlite/jax/merged_calls.py): each scenario counts the custom calls in the
lowered program and checks every result against NumPy's on every rank.
Arguments: "cap" runs only the size cap's scenario (the job sets
HOROVOD_FUSION_THRESHOLD); "failure" only the failed member's."""
import re
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import hvdlite.jax as hvd
from hvdlite.common import basics

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
from checks import check, close  # noqa: E402

THIS_FILE = Path(__file__).name


def calls(jitted, *args):
    """The hvdlite custom calls in the program jitted lowers to (bodies of
    loops and branches included), as text lines."""
    text = jitted.lower(*args).as_text()
    return [line for line in text.splitlines() if "hvdlite_collective" in line and "custom_call" in line]


def expect_calls(jitted, args, count, what):
    found = calls(jitted, *args)
    check(len(found) == count, f"{what}: {len(found)} custom calls, want {count}:\n" + "\n".join(found))
    return found


def ranks_sum(size):
    return sum(range(size))


def separate_allreduces(rank, size):
    """100 separate allreduces (one of them named in non-ASCII, one of them
    a scalar) are one custom call, and the compiled step keeps no copy,
    reshape or other instruction beside it (the kept arguments are read
    where they are)."""
    names = [f"merged.{i}" if i != 7 else "merged.grad/é" for i in range(100)]

    def step(xs):
        return [hvd.allreduce(x, name=n, op=hvd.Sum) for x, n in zip(xs, names)]

    jitted = jax.jit(step)
    xs = [jnp.full(() if i == 3 else 1024, float(rank + i)) for i in range(100)]
    expect_calls(jitted, (xs,), 1, "100 separate allreduces")
    compiled = jitted.lower(xs).compile().as_text()
    entry = compiled[compiled.index("ENTRY"):]
    instructions = [re.search(r"([a-z][a-z0-9-]*)\(", line.split(" = ", 1)[1]).group(1)
                    for line in entry.splitlines()[1:] if " = " in line]
    check(sorted(set(instructions)) == ["custom-call", "parameter"],
          f"compiled step keeps other instructions: {sorted(set(instructions))}\n{entry}")
    for run in range(2):
        for i, got in enumerate(jitted([x + run for x in xs])):
            close(got, np.full(() if i == 3 else 1024, size * (i + run) + ranks_sum(size), np.float32),
                  f"merged allreduce {i} run {run}")


def dependent_chain(rank, size):
    """An allreduce of an allreduce's result is not merged with it, and a
    collective after a use of a member's result starts a new call."""
    def step(x, y):
        first = hvd.allreduce(x, name="chain.first", op=hvd.Sum)
        second = hvd.allreduce(first, name="chain.second", op=hvd.Sum)
        third = hvd.allreduce(y, name="chain.third", op=hvd.Sum)  # after a use of first: new call
        return second, third

    jitted = jax.jit(step)
    x, y = jnp.full(16, float(rank + 1)), jnp.full(8, float(rank))
    expect_calls(jitted, (x, y), 2, "a chain of two allreduces and one more")
    second, third = jitted(x, y)
    close(second, np.full(16, size * (size + ranks_sum(size)), np.float32), "allreduce of an allreduce")
    close(third, np.full(8, ranks_sum(size), np.float32), "allreduce after the chain")


def different_attributes(rank, size):
    """Different ops, prescale factors and process sets each start their
    own call; the same attributes again after them start another."""
    subset = hvd.add_process_set([0, 1])

    def step(x):
        return [hvd.allreduce(x, name="attrs.sum", op=hvd.Sum),
                hvd.allreduce(x, name="attrs.max", op=hvd.Max),
                hvd.allreduce(x, name="attrs.pre", op=hvd.Sum, prescale_factor=2.0),
                hvd.allreduce(x, name="attrs.pre2", op=hvd.Sum, prescale_factor=2.0),
                hvd.allreduce(x, name="attrs.sum2", op=hvd.Sum)]

    jitted = jax.jit(step)
    x = jnp.arange(6, dtype=jnp.float32) + rank
    expect_calls(jitted, (x,), 4, "sum, max, prescale x2, sum")
    base = np.arange(6, dtype=np.float32)
    every = np.stack([base + r for r in range(size)])
    want = [every.sum(0), every.max(0), 2 * every.sum(0), 2 * every.sum(0), every.sum(0)]
    for i, (got, expected) in enumerate(zip(jitted(x), want)):
        close(got, expected, f"attributes {i}")
    if rank in (0, 1):
        in_set = jax.jit(lambda v: [hvd.allreduce(v, name="attrs.all", op=hvd.Sum),
                                    hvd.allreduce(v, name="attrs.set", op=hvd.Sum, process_set=subset)])
        expect_calls(in_set, (x,), 2, "global and process set")
    if rank in (0, 1):
        got_all, got_set = in_set(x)
        close(got_all, every.sum(0), "global allreduce beside a process set's")
        close(got_set, every[:2].sum(0), "process set allreduce")
    else:
        close(jax.jit(lambda v: hvd.allreduce(v, name="attrs.all", op=hvd.Sum))(x), every.sum(0),
              "global allreduce off the process set")
    hvd.remove_process_set(subset)


def kept_and_donated(rank, size):
    """Kept arguments, donated ones and computed values merged into one
    call: only the donated and computed ones alias their results (a computed
    value reduced twice and used after both: each alias gets its own
    buffer), and the caller's kept arrays keep their values."""
    def step(kept, donated):
        computed = kept[0] * 3
        reduced = ([hvd.allreduce(x, name=f"alias.kept{i}", op=hvd.Sum) for i, x in enumerate(kept)] +
                   [hvd.allreduce(donated, name="alias.donated", op=hvd.Sum),
                    hvd.allreduce(computed, name="alias.computed", op=hvd.Sum),
                    hvd.allreduce(computed, name="alias.again", op=hvd.Sum)])
        return reduced + [computed + 1]

    jitted = jax.jit(step, donate_argnums=1)
    kept = [jnp.full(32, float(rank + i)) for i in range(3)]
    (call,) = expect_calls(jitted, (kept, jnp.zeros(8)), 1, "kept, donated and computed")
    check(call.count("output_operand_alias<") == 3 and all(
          f"operand_index = {i}," in call for i in (3, 4, 5)), f"aliases of the merged call: {call}")
    for run in range(2):
        donated = jnp.full(8, float(rank + run))
        *reduced, summed, computed, again, after = jitted(kept, donated)
        close(again, np.full(32, 3 * ranks_sum(size), np.float32), f"computed again run {run}")
        close(after, np.full(32, 3 * rank + 1, np.float32), f"computed value used after run {run}")
        for i, got in enumerate(reduced):
            close(got, np.full(32, size * i + ranks_sum(size), np.float32), f"kept {i} run {run}")
        close(summed, np.full(8, size * run + ranks_sum(size), np.float32), f"donated run {run}")
        close(computed, np.full(32, 3 * ranks_sum(size), np.float32), f"computed run {run}")
        for i, x in enumerate(kept):
            close(x, np.full(32, rank + i, np.float32), f"caller's kept argument {i} after run {run}")


def loops_and_branches(rank, size):
    """Allreduces inside scan, fori_loop and cond bodies merge within their
    body only, and every iteration's results are right."""
    def scan_step(x):
        def body(carry, i):
            a = hvd.allreduce(carry, name="scan.a", op=hvd.Sum)
            b = hvd.allreduce(carry * 2, name="scan.b", op=hvd.Sum)
            return (a + b) / (3 * size), i
        return jax.lax.scan(body, x, jnp.arange(3))[0]

    def fori_step(x):
        def body(i, carry):
            reduced = [hvd.allreduce(c, name=f"fori.{k}", op=hvd.Average) for k, c in enumerate(carry)]
            return [r + 1 for r in reduced]
        return jax.lax.fori_loop(0, 3, body, [x, x * 2])

    def cond_step(x, flag):
        def yes(v):
            return hvd.allreduce(v, name="cond.y0", op=hvd.Sum) + hvd.allreduce(v, name="cond.y1", op=hvd.Sum)

        def no(v):
            return hvd.allreduce(v, name="cond.n0", op=hvd.Max)
        before = hvd.allreduce(x, name="cond.before", op=hvd.Sum)
        return before, jax.lax.cond(flag, yes, no, x)

    x = jnp.full(4, float(rank + 1))
    expect_calls(jax.jit(scan_step), (x,), 1, "scan body of two allreduces")
    expect_calls(jax.jit(fori_step), (x,), 1, "fori_loop body of two allreduces")
    expect_calls(jax.jit(cond_step), (x, True), 3, "one before a cond, two in one branch, one in the other")
    mean = np.mean([r + 1 for r in range(size)])
    # scan: carry c -> (size*mean(c) + 2*size*mean(c)) / (3*size) = mean over ranks of c.
    close(jax.jit(scan_step)(x), np.full(4, mean, np.float32), "scan")
    want = [np.full(4, mean + 3, np.float32), np.full(4, 2 * mean + 3, np.float32)]
    for i, (got, expected) in enumerate(zip(jax.jit(fori_step)(x), want)):
        close(got, expected, f"fori_loop carry {i}")
    total = sum(r + 1 for r in range(size))
    for flag, branch in ((True, 2 * total), (False, size)):
        before, got = jax.jit(cond_step)(x, flag)
        close(before, np.full(4, total, np.float32), f"allreduce before cond {flag}")
        close(got, np.full(4, branch, np.float32), f"cond branch {flag}")


def broadcasts_and_allgathers(rank, size):
    """Broadcasts from one root merge, another root starts a new call;
    allgathers merge; every rank gets the right values."""
    def step(xs):
        sent = [hvd.broadcast(x, root_rank=0, name=f"bcast.r0.{i}") for i, x in enumerate(xs)]
        other = hvd.broadcast(xs[0], root_rank=size - 1, name="bcast.last")
        gathered = [hvd.allgather(x[:2], name=f"gather.{i}") for i, x in enumerate(xs)]
        return sent, other, gathered

    jitted = jax.jit(step)
    xs = [jnp.full(5, float(10 * rank + i)) for i in range(4)]
    expect_calls(jitted, (xs,), 3, "4 broadcasts from 0, 1 from the last rank, 4 allgathers")
    sent, other, gathered = jitted(xs)
    for i, got in enumerate(sent):
        close(got, np.full(5, i, np.float32), f"broadcast {i}")
    close(other, np.full(5, 10 * (size - 1), np.float32), "broadcast from the last rank")
    for i, got in enumerate(gathered):
        close(got, np.concatenate([np.full(2, 10 * r + i, np.float32) for r in range(size)]),
              f"allgather {i}")


def size_cap(rank, size):
    """HOROVOD_FUSION_THRESHOLD (64 KiB, set by the test) splits 100
    allreduces of 4 KiB (8 KiB of input and output each) into calls of 8."""
    check(int(basics.core().tuned_parameters()["fusion_threshold"]) == 64 * 1024,
          "the test sets HOROVOD_FUSION_THRESHOLD=65536")
    jitted = jax.jit(lambda xs: [hvd.allreduce(x, name=f"cap.{i}", op=hvd.Sum) for i, x in enumerate(xs)])
    xs = [jnp.full(1024, float(rank + i)) for i in range(100)]
    found = expect_calls(jitted, (xs,), 13, "100 x 8 KiB under a 64 KiB cap")
    check(all(line.count("output_operand_alias<") == 0 for line in found), "kept arguments aliased")
    for i, got in enumerate(jitted(xs)):
        close(got, np.full(1024, size * i + ranks_sum(size), np.float32), f"capped allreduce {i}")


def failed_member(rank, size):
    """A member whose shape differs on one rank fails the merged call with a
    report that names that member and its own line of the step."""
    def step(a, b, c):
        first = hvd.allreduce(a, name="fail.first")  # SITE:first
        odd = hvd.allreduce(b, name="fail.odd")  # SITE:odd
        last = hvd.allreduce(c, name="fail.last")  # SITE:last
        return first, odd, last

    lines = {key: number for number, text in enumerate(Path(__file__).read_text().splitlines(), 1)
             for key in ("first", "odd", "last") if text.endswith(f"# SITE:{key}")}
    jitted = jax.jit(step)
    args = (jnp.ones(4), jnp.ones(3 if rank == 1 else 5), jnp.ones(6))
    expect_calls(jitted, args, 1, "three allreduces, one of them mismatched")
    try:
        jax.block_until_ready(jitted(*args))
    except Exception as error:  # noqa: BLE001 - checked below
        message = str(hvd.hvdlite_error(error) or error)
        check("fail.odd" in message and f"{THIS_FILE}:{lines['odd']}" in message,
              f"the report names fail.odd and its line {lines['odd']}: {message}")
        check(f"{THIS_FILE}:{lines['first']}" not in message and "fail.first" not in message,
              f"the report names only the failed member: {message}")
        print("failed member reported", flush=True)
        return
    check(False, "a step with a mismatched member did not fail")


def lowered_before_init():
    """Before hvdlite.init() the core's fusion threshold is unknown: a step
    lowered then keeps its calls separate (and lowers at all)."""
    jitted = jax.jit(lambda xs: [hvd.allreduce(x, name=f"early.{i}", op=hvd.Sum) for i, x in enumerate(xs)])
    expect_calls(jitted, ([jnp.ones(3)] * 3,), 3, "three allreduces lowered before init()")


def main():
    lowered_before_init()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    check(hvd.jit_path() == "ffi", f"jit path is {hvd.jit_path()}")
    if sys.argv[1:] == ["cap"]:
        size_cap(rank, size)
    elif sys.argv[1:] == ["failure"]:
        failed_member(rank, size)
    else:
        for scenario in (separate_allreduces, dependent_chain, different_attributes, kept_and_donated,
                         loops_and_branches, broadcasts_and_allgathers):
            scenario(rank, size)
    hvd.shutdown()
    print("jax merged calls OK", flush=True)


if __name__ == "__main__":
    main()
