"""Rank 1 stops itself (SIGSTOP, as a debugger or a frozen host would) while
rank 0 runs an allreduce: rank 0 waits inside a transport call for a peer
that never takes part. The stall limits report it on rank 0, then fail it
(Note [Stalled transfers]); rank 0 checks the error, continues rank 1
(SIGCONT), whose next collective fails because rank 0 stopped the job."""
import os
import signal
import time

import numpy as np

import hvdlite.numpy as hvd


def failed_allreduce(name, when):
    """The HvdliteInternalError that an allreduce named `name` raises; fails
    the worker, saying `when`, if the allreduce completes instead."""
    try:
        hvd.allreduce(np.ones(4, np.float32), name=name)
    except hvd.HvdliteInternalError as error:
        return error
    raise AssertionError(f"the allreduce {name!r} completed {when}")


def main():
    hvd.init()
    rank = hvd.rank()
    pids = hvd.allgather(np.array([os.getpid()], np.int64), name="pids")
    if rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)
        error = failed_allreduce("after.freeze", "after rank 0 gave up on it")
        print(f"rank 1: after the freeze: {error}", flush=True)
        return
    time.sleep(0.5)  # rank 1 is stopped by now
    start = time.monotonic()
    try:
        error = failed_allreduce("x", "while rank 1 was stopped")
    finally:
        os.kill(int(pids[1]), signal.SIGCONT)
    print(f"rank 0: failed after {time.monotonic() - start:.1f} s: {error}", flush=True)


if __name__ == "__main__":
    main()
