"""Ranks that submit different collectives: rank 1 an allgather 'b', every
other rank an allreduce 'a'. Nothing can complete, so every rank backs off
(Note [Backing off a stall] in csrc/core/runtime_cycles.cc): prints the process CPU
seconds it used over a stretch of its wait in synchronize(), which then raises the
stall shutdown's error (the test's HVDLITE_STALL_CHECK_TIME_SECONDS sets a
short default shutdown time). Every rank prints it, then raises it: the job
ends with that reason."""
import threading
import time

import numpy as np

import hvdlite.numpy as hvd


def measure(rank):
    """Prints the CPU seconds this process (every thread) used over 2.5 s."""
    time.sleep(0.5)
    cpu, wall = time.process_time(), time.monotonic()
    time.sleep(2.5)
    used, span = time.process_time() - cpu, time.monotonic() - wall
    print(f"rank {rank}: waiting cpu {used:.3f} s over {span:.2f} s", flush=True)


def main():
    hvd.init()
    rank = hvd.rank()
    if rank == 1:
        handle = hvd.allgather_async(np.ones((2, 3), np.float32), name="b")
    else:
        handle = hvd.allreduce_async(np.ones(4, np.float32), name="a")
    # Measured while this thread is blocked in synchronize() (it wakes every
    # 100 ms to run signal handlers: Note [Interruptible waits]).
    meter = threading.Thread(target=measure, args=(rank,))
    meter.start()
    try:
        hvd.synchronize(handle)
    except hvd.HvdliteInternalError as error:
        meter.join()
        print(f"rank {rank}: ended by: {error}", flush=True)
        # Every rank has printed before any exits (the launcher then stops the rest).
        hvd.allreduce(np.ones(1, np.float32), name="printed")
        raise
    print(f"rank {rank}: completed a collective no other rank submitted", flush=True)


if __name__ == "__main__":
    main()
