"""Rank 1 dies in the middle of training; rank 0's torch collectives must
fail fast with HorovodInternalError (a RuntimeError) naming it. No hang."""
import os
import signal
import sys
import time

import torch

import hvdlite.torch as hvd


def main():
    # The launcher stops the survivors once rank 1 dies; ignore its SIGTERM so
    # this test sees the core's own failure detection (SIGKILL still follows).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    hvd.init()
    rank = hvd.rank()
    grad = torch.ones(1000)
    for step in range(1000):
        if rank == 1 and step == 10:
            os.kill(os.getpid(), signal.SIGKILL)
        start = time.monotonic()
        try:
            hvd.allreduce_(grad, name="lost_peer.step")
        except hvd.HorovodInternalError as error:
            waited = time.monotonic() - start
            print(f"rank {rank} allreduce failed after {waited:.2f} s: {error}", flush=True)
            assert isinstance(error, RuntimeError)
            assert "rank 1" in str(error) and waited < 10, (waited, str(error))
            break
    else:
        print("no failure seen", flush=True)
        sys.exit(0)
    try:  # the failed runtime refuses new work at once (or fails it in synchronize)
        hvd.synchronize(hvd.allgather_async(torch.ones(2, 2), name="after.loss"))
    except RuntimeError as error:
        assert isinstance(error, hvd.HorovodInternalError), type(error)
        assert "rank 1" in str(error), str(error)
        print(f"rank {rank} async failed: {error}", flush=True)
        sys.exit(17)


if __name__ == "__main__":
    main()
