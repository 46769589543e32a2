"""Every rank but the last submits an allreduce the last never does; the last
shuts down. The others must be told which rank never submitted it."""
import sys
import time

import numpy as np

import hvdlite.numpy as hvd
from hvdlite.common.exceptions import HvdliteInternalError


def main():
    hvd.init()
    rank = hvd.rank()
    both = hvd.allreduce(np.ones(4, np.float32), name="everyone", op=hvd.Sum)
    assert np.array_equal(both, np.full(4, hvd.size(), np.float32)), both
    if hvd.rank() != hvd.size() - 1:
        try:
            hvd.allreduce(np.ones(4, np.float32), name="not.on.last")
        except HvdliteInternalError as error:
            print(f"rank {hvd.rank()}: error: {error}", flush=True)
            print(f"rank {hvd.rank()}: {type(error).__name__} asked by {list(error.ranks)}, "
                  f"missing {list(error.missing_ranks)}", flush=True)
        else:
            print(f"rank {hvd.rank()}: no error", flush=True)
            sys.exit(1)
    else:
        time.sleep(0.5)  # the others submit their part before this rank shuts down
    hvd.shutdown()
    print(f"rank {rank}: done", flush=True)


if __name__ == "__main__":
    main()
