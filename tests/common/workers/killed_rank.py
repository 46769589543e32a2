"""Rank 1 dies in the middle of training; the others must fail fast with
HvdliteInternalError naming it, not hang."""
import os
import signal
import sys
import time

import numpy as np

import hvdlite.numpy as hvd


def main():
    # The launcher stops the survivors once rank 1 dies; ignore its SIGTERM so
    # this test sees the core's own failure detection (SIGKILL still follows).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    hvd.init()
    rank = hvd.rank()
    start = None
    for step in range(1000):
        if rank == 1 and step == 20:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            start = time.monotonic()
            hvd.allreduce(np.ones(1000, np.float32), name=f"step.{step % 4}")
        except hvd.HvdliteInternalError as error:
            waited = time.monotonic() - start
            print(f"rank {rank} failed after {waited:.2f} s: {error}", flush=True)
            # What a program reads instead of the message (the elastic driver: lost_hosts).
            print(f"rank {rank} got {type(error).__name__} ranks={list(error.ranks)} "
                  f"hosts={list(error.hosts)} tensors={list(error.tensor_names)}", flush=True)
            assert "rank 1" in str(error), error
            assert waited < 10, waited
            sys.exit(17)
    print("no failure seen")
    sys.exit(0)


if __name__ == "__main__":
    main()
