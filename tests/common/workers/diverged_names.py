"""Ranks that wait on names no other rank submits (unnamed tensors after a
rank skipped some, say) must not spin: after the back-off (Note [Backing off
a stall] in csrc/core/runtime_cycles.cc) the process uses little CPU until the
stall inspector fails the tensors. Prints the CPU seconds used while stalled."""
import time

import numpy as np

import hvdlite.numpy as hvd
from checks import check_job_goes_on


def main():
    hvd.init()
    rank = hvd.rank()
    handle = hvd.allreduce_async(np.ones(4, np.float32), name=f"only.on.rank{rank}")
    time.sleep(2.0)  # past the back-off (1 s without progress)
    cpu, wall = time.process_time(), time.monotonic()
    time.sleep(2.0)
    used = time.process_time() - cpu
    print(f"rank {rank}: stalled cpu {used:.3f} s over {time.monotonic() - wall:.1f} s", flush=True)
    try:
        hvd.synchronize(handle)
    except RuntimeError as error:
        assert "stalled" in str(error), error
    else:
        raise AssertionError("a tensor no other rank submitted completed")
    check_job_goes_on(hvd, "after.stall")
    print(f"rank {rank}: diverged names OK", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
