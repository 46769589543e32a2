"""join() with Horovod's semantics, through hvdlite.numpy: joined ranks add
zeros to allreduces (cached names and fused batches included) and an Average
divides by the whole set (or by the ranks still training, with
HVDLITE_JOIN_AVERAGE_ACTIVE=1); allgather, broadcast, alltoall and
reducescatter fail while a rank has joined; join() returns the last rank to
join on every rank; join cycles repeat without hanging; joins per process set.
Prints "join OK"."""
import os

import numpy as np

import hvdlite.numpy as hvd

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.float16]
SHAPES = [(5,), (17, 3)]
AVERAGE_ACTIVE = os.environ.get("HVDLITE_JOIN_AVERAGE_ACTIVE") == "1"
REFUSED = "is not supported with join() at this time"


def data(rank, seed, shape, dtype):
    return np.random.default_rng(seed * 10 + rank).integers(-100, 100, shape).astype(dtype)


def reduced(arrays, dtype, divisor):
    """Sum (divisor None) or Average of `arrays` as the core computes it: in
    the tensor's dtype, integers truncated toward zero."""
    total = np.sum([a.astype(np.float64) for a in arrays], axis=0)
    if divisor is None:
        return total.astype(dtype)
    if np.issubdtype(dtype, np.integer):
        return (np.sign(total) * (np.abs(total) // divisor)).astype(dtype)
    return (total / divisor).astype(dtype)


def expect(what, got, want):
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape, want.shape)
    if want.dtype == np.float16:
        ok = np.allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-2)
    else:
        ok = np.allclose(got, want, rtol=1e-6, atol=0) if want.dtype.kind == "f" else np.array_equal(got, want)
    assert ok, f"{what}: got {got.ravel()[:6]}, expected {want.ravel()[:6]}"


def same_everywhere(value, what):
    values = hvd.allgather(np.array([value], np.int64), name=f"{what}.gathered")
    assert all(v == value for v in values), f"{what}: ranks returned {list(values)}"


def check_allreduce(rank, size):
    """Every first-joining rank x dtype x shape; the names were negotiated
    (and cached, when the cache is on) by every rank just before."""
    seed = 0
    for dtype in DTYPES:
        for shape in SHAPES:
            for first in range(size):
                seed += 1
                last = (first + 1) % size  # joins after one more allreduce of its own
                mine = [data(rank, seed, shape, dtype), data(rank, seed + 500, shape, dtype)]
                everyone = [[data(r, seed, shape, dtype), data(r, seed + 500, shape, dtype)]
                            for r in range(size)]
                # Everyone negotiates the names once, so the joined round below
                # meets them in the response cache.
                hvd.allreduce(mine[0], op=hvd.Sum, name="join.sum")
                hvd.allreduce(mine[1], op=hvd.Average, name="join.avg")
                if rank != first:
                    active = [r for r in range(size) if r != first]
                    divisor = len(active) if AVERAGE_ACTIVE else size
                    # Two averages fuse into one batch; a sum goes alone.
                    handles = [hvd.allreduce_async(mine[0], op=hvd.Average, name="join.avg.a"),
                               hvd.allreduce_async(mine[1], op=hvd.Average, name="join.avg.b")]
                    got_sum = hvd.allreduce(mine[0], op=hvd.Sum, name="join.sum")
                    got_avg = hvd.allreduce(mine[1], op=hvd.Average, name="join.avg")
                    fused = [hvd.synchronize(h) for h in handles]
                    what = f"{np.dtype(dtype).name}{shape} first={first}"
                    expect(f"Sum {what}", got_sum, reduced([everyone[r][0] for r in active], dtype, None))
                    expect(f"Average {what}", got_avg, reduced([everyone[r][1] for r in active], dtype, divisor))
                    for i in range(2):
                        expect(f"fused Average {i} {what}", fused[i],
                               reduced([everyone[r][i] for r in active], dtype, divisor))
                if rank == last:
                    # Alone now: every other rank has joined.
                    got = hvd.allreduce(mine[0], op=hvd.Sum, name="join.last")
                    expect("allreduce of the last rank alone", got, mine[0])
                returned = hvd.join()
                assert returned == last, f"join() returned {returned}, expected {last} (first={first})"
                same_everywhere(returned, "join")


def check_refused(rank, size):
    """Collectives whose result depends on who joined fail on the other ranks
    while one has joined, naming the tensor and the joined rank; the job goes on."""
    first = size - 1
    if rank != first:
        x = np.arange(size * 2, dtype=np.float32).reshape(size * 2, 1)
        attempts = {
            "refused.allgather": lambda: hvd.allgather(x, name="refused.allgather"),
            "refused.broadcast": lambda: hvd.broadcast(x, root_rank=0, name="refused.broadcast"),
            "refused.alltoall": lambda: hvd.alltoall(x, name="refused.alltoall"),
            "refused.reducescatter": lambda: hvd.reducescatter(x, name="refused.reducescatter"),
        }
        for name, attempt in attempts.items():
            try:
                attempt()
            except RuntimeError as error:
                text = str(error)
                op = name.split(".")[1]
                assert f"{op} of '{name}' failed: {op} {REFUSED}: rank(s) [{first}] have joined" in text, text
            else:
                raise AssertionError(f"{name} succeeded while rank {first} had joined")
    hvd.join()
    # Everyone has joined: the same collectives work again.
    got = hvd.allgather(np.full((1, 2), rank, np.int32), name="refused.after")
    assert np.array_equal(got[:, 0], np.arange(size)), got
    got = hvd.broadcast(np.full(3, rank, np.int64), root_rank=size - 1, name="refused.after.bc")
    assert np.array_equal(got, np.full(3, size - 1)), got


def check_cycles(rank, size, epochs=20):
    """A join every epoch, a different rank running out first each time."""
    for epoch in range(epochs):
        first = epoch % size
        steps = [1 if r == first else 3 + (r + epoch) % 2 for r in range(size)]
        for step in range(steps[rank]):
            got = hvd.allreduce(np.ones(4, np.float32), op=hvd.Sum, name=f"cycle.step{step}")
            want = sum(1 for r in range(size) if step < steps[r])
            assert np.array_equal(got, np.full(4, want, np.float32)), (epoch, step, got, want)
        returned = hvd.join()
        assert steps[returned] == max(steps), (epoch, returned, steps)
    same_everywhere(returned, "cycles")


def check_process_sets(rank, size):
    """A join on the global set leaves another set's negotiation alone, and a
    set has joins of its own (3 ranks: rank 0 joins globally while ranks 1
    and 2 use their pair, where rank 1 joins)."""
    pair = hvd.add_process_set(hvd.ProcessSet([1, 2]))
    if rank == 0:
        assert hvd.join() == 2
    else:
        got = hvd.allreduce(np.full(3, rank, np.int64), op=hvd.Sum, name="pair.sum", process_set=pair)
        assert np.array_equal(got, np.full(3, 3)), got
        if rank == 1:
            assert hvd.join(process_set=pair) == 2
        else:
            got = hvd.allreduce(np.full(2, 4.0), op=hvd.Average, name="pair.avg", process_set=pair)
            want = 4.0 if AVERAGE_ACTIVE else 2.0  # rank 1 adds zeros; Average divides by 2
            assert np.allclose(got, want), got
            assert hvd.join(process_set=pair) == 2
            # Ranks 0 and 1 have joined the global set by now.
            got = hvd.allreduce(np.full(2, 5.0), op=hvd.Sum, name="global.alone")
            assert np.allclose(got, 5.0), got
        assert hvd.join() == 2
    hvd.remove_process_set(pair)


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    check_allreduce(rank, size)
    check_refused(rank, size)
    check_cycles(rank, size)
    if size == 3:
        check_process_sets(rank, size)
    hvd.barrier()
    print(f"rank {rank}: join OK")
    hvd.shutdown()


if __name__ == "__main__":
    main()
