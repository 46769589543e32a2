"""init(comm=...) with mpi4py communicators and rank lists, and what
mpi_built()/mpi_enabled()/mpi_threads_supported() say, on 3 ranks that
mpirun started. Prints "mpi comm OK" on success."""
import numpy as np
from mpi4py import MPI

import hvdlite.numpy as hvd


def check_sum(members, name):
    """An allreduce among `members` (world ranks) and the layout hvdlite reports."""
    world_rank = MPI.COMM_WORLD.Get_rank()
    assert hvd.size() == len(members), (hvd.size(), members)
    assert hvd.rank() == members.index(world_rank), (hvd.rank(), members)
    assert hvd.local_size() == len(members) and hvd.mpi_enabled() and not hvd.gloo_enabled()
    got = hvd.allreduce(np.full(5, world_rank + 1, np.float64), op=hvd.Sum, name=name)
    want = sum(r + 1 for r in members)
    assert np.array_equal(got, np.full(5, want)), (name, got, want)
    # Process sets inside the communicator's job are MPI communicators, too.
    first_two = hvd.add_process_set(list(range(min(2, hvd.size()))))
    if first_two.included():
        got = hvd.allgather(np.full(1, hvd.rank(), np.int32), name=name + ".ag",
                            process_set=first_two)
        assert got.tolist() == list(range(first_two.size())), got
    hvd.remove_process_set(first_two)


def main():
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    assert world.Get_size() == 3
    assert hvd.mpi_built() and not hvd.mpi_enabled()

    # A communicator from Split: ranks 0 and 2 form one job, rank 1 its own.
    part = world.Split(color=rank % 2, key=rank)
    hvd.init(comm=part)
    check_sum([0, 2] if rank % 2 == 0 else [1], "split")
    assert hvd.mpi_threads_supported()  # mpi4py asks for MPI_THREAD_MULTIPLE
    hvd.shutdown()
    part.Free()

    # A list of MPI_COMM_WORLD ranks; a rank outside it gets a clear error.
    if rank in (1, 2):
        hvd.init(comm=[2, 1])  # the list's order is the job's rank order
        check_sum([2, 1], "list")
        hvd.shutdown()
    else:
        try:
            hvd.init(comm=[2, 1])
        except ValueError as error:
            assert "not in the list" in str(error), error
        else:
            raise AssertionError("init(comm=[2, 1]) on world rank 0 did not fail")

    # The whole world again, after two shutdowns (MPI stays initialised).
    hvd.init(comm=world)
    check_sum([0, 1, 2], "world")
    hvd.shutdown()
    print(f"rank {rank}: mpi comm OK", flush=True)


if __name__ == "__main__":
    main()
