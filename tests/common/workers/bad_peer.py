"""Rank 1 sends the coordinator a malformed request list (argv[1] says how:
Note [Corrupt requests for tests] in csrc/core/controller.cc); every rank's
collective must fail soon with an error naming rank 1, and none may hang."""
import os
import sys
import time

import numpy as np

import hvdlite.numpy as hvd


def main():
    # Only rank 1 misbehaves; the variable is read once, by init().
    if os.environ.get("HVDLITE_RANK") == "1":
        os.environ["HVDLITE_TEST_CORRUPT_REQUESTS"] = sys.argv[1]
    hvd.init()
    rank = hvd.rank()
    start = time.monotonic()
    try:
        hvd.allreduce(np.ones(4, np.float32), name="grad")
    except hvd.HvdliteInternalError as error:
        waited = time.monotonic() - start
        print(f"rank {rank}: {type(error).__name__} after {waited:.2f} s ranks={list(error.ranks)}: {error}",
              flush=True)
        # Later collectives fail at once with the same reason, never hang.
        try:
            hvd.allreduce(np.ones(4, np.float32), name="after")
        except hvd.HvdliteInternalError as again:
            print(f"rank {rank}: again {type(again).__name__}", flush=True)
        sys.exit(0)
    print(f"rank {rank}: no failure", flush=True)
    sys.exit(1)


if __name__ == "__main__":
    main()
