"""join() with uneven work per rank, and process sets given at init and added
and removed at run time."""
import numpy as np

import hvdlite.numpy as hvd
from hvdlite.common import basics
from hvdlite.common.ops import OpType


def check_join(rank, size):
    steps = 3 + 2 * rank  # rank r has 3 + 2r batches
    for step in range(steps):
        active = sum(1 for r in range(size) if step < 3 + 2 * r)
        got = hvd.allreduce(np.full(4, 1.0, np.float32), op=hvd.Sum, name=f"join.step{step}")
        assert np.array_equal(got, np.full(4, active, np.float32)), (step, got, active)
        got = hvd.allreduce(np.full(2, 6.0, np.float64), op=hvd.Average, name=f"join.avg{step}")
        assert np.allclose(got, 6.0 * active / size), got  # joined ranks add zeros
    last = hvd.join()
    assert last == size - 1, last
    # After everyone joined, collectives run normally again.
    got = hvd.allreduce(np.ones(1, np.float32), op=hvd.Sum, name="after_join")
    assert got[0] == size
    # A join the core is handed under another name still completes (the
    # coordinator answers every join under one name).
    core = basics.core()
    _, _, _, last = core.wait(core.enqueue(op=int(OpType.JOIN), name=f"my-join.{rank}"))
    assert 0 <= last < size, last


def check_process_sets(rank, size, evens):
    if evens.included():
        x = np.full(3, rank, np.int64)
        got = hvd.allreduce(x, op=hvd.Sum, name="evens", process_set=evens)
        assert np.array_equal(got, np.full(3, sum(evens.ranks))), got
        assert evens.rank() == evens.ranks.index(rank)
        got = hvd.broadcast(np.full(2, rank, np.int32), root_rank=evens.ranks[-1], name="evens.bc",
                            process_set=evens)
        assert np.array_equal(got, np.full(2, evens.ranks[-1])), got
    else:
        assert evens.rank() == -1
        try:
            hvd.allreduce(np.ones(1), name="not_member", process_set=evens)
        except ValueError as error:
            assert "not a member" in str(error), error
        else:
            raise AssertionError("a non-member could use the set")
    last_two = hvd.add_process_set(hvd.ProcessSet([size - 2, size - 1]))
    if last_two.included():
        got = hvd.allgather(np.array([rank]), name="pair", process_set=last_two)
        assert list(got) == [size - 2, size - 1], got
    hvd.remove_process_set(last_two)
    hvd.barrier()


def main():
    evens = hvd.ProcessSet(range(0, 3, 2))
    hvd.init(process_sets=[evens])
    rank, size = hvd.rank(), hvd.size()
    check_join(rank, size)
    check_process_sets(rank, size, evens)
    print(f"rank {rank}: join and process sets OK")
    hvd.shutdown()


if __name__ == "__main__":
    main()
