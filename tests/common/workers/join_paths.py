"""Ranks that take different paths around join() end with an answer or a
clear error, never a hang. Usage: join_paths.py MODE

  cached   every rank reduces 'w' (cached), then rank 0 joins while the
           others reduce 'w' three more times (with rank 0's zeros) and join
  refused  rank 0 joins while the others allgather (refused, naming rank 0),
           then join
  never    rank 0 joins and the others never do (nor submit anything until
           it has failed: peer_done.py): the stall report names the join
           and the missing ranks on every rank, and the stall shutdown
           (HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=2) fails rank 0's join
Prints "join paths OK"."""
import sys
import time

import numpy as np

import hvdlite.numpy as hvd
from peer_done import mark_done, wait_until_done


def cached(rank, size):
    for _ in range(3):
        got = hvd.allreduce(np.full(3, rank + 1.0, np.float32), op=hvd.Sum, name="w")
        assert np.array_equal(got, np.full(3, size * (size + 1) / 2, np.float32)), got
    if rank != 0:
        for _ in range(3):
            got = hvd.allreduce(np.full(3, rank + 1.0, np.float32), op=hvd.Sum, name="w")
            want = size * (size + 1) / 2 - 1  # rank 0 adds zeros
            assert np.array_equal(got, np.full(3, want, np.float32)), got
    assert hvd.join() in range(size)


def refused(rank, size):
    if rank != 0:
        try:
            hvd.allgather(np.ones((1, 2), np.float32), name="g")
        except hvd.HvdliteInternalError as error:
            assert "rank(s) [0] have joined" in str(error), error
        else:
            raise AssertionError("allgather completed while rank 0 had joined")
    assert hvd.join() in range(size)


def never(rank, size):
    if rank == 0:
        start = time.monotonic()
        try:
            hvd.join()
        except hvd.HvdliteInternalError as error:
            text = str(error)
            missing = list(range(1, size))
            assert f"join() stalled for 2 s waiting for ranks {missing}" in text, text
            print(f"join failed after {time.monotonic() - start:.1f} s: {text}", flush=True)
            mark_done()
        else:
            raise AssertionError("join() returned although no other rank joined")
    else:
        wait_until_done()  # until rank 0 failed, in something else than hvdlite


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    {"cached": cached, "refused": refused, "never": never}[sys.argv[1]](rank, size)
    got = hvd.allreduce(np.ones(2, np.float32), op=hvd.Sum, name="after")
    assert np.array_equal(got, np.full(2, size, np.float32)), got
    print(f"rank {rank}: join paths OK", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
