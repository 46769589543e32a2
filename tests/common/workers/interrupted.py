"""A rank interrupted while it waits in a blocking call: Ctrl-C (SIGINT)
or a SIGALRM timeout whose handler raises, as pytest-timeout's does
(Note [Interruptible waits] in csrc/python/bind_collectives.cc).

argv: signal ("int" or "alrm"), where rank 1 waits ("synchronize" or "join").
synchronize: rank 1 waits for an allreduce 'x' that the others never submit,
  while they wait for an allgather 'y' that rank 1 never submits.
join: rank 1 waits in join() while the others compute (wait, outside
  hvdlite, until rank 1 has been interrupted: peer_done.py), then start an
  allreduce.
Rank 1 raises the signal on itself a second into its wait and prints how
long the exception took to come out of the call; every other rank prints
how its collective failed and when. Both print their pid and the job id, for the
test to check that nothing is left behind."""
import os
import signal
import sys
import threading
import time

import numpy as np

import hvdlite.numpy as hvd
from peer_done import mark_done, wait_until_done


class AlarmTimeout(Exception):
    """What a SIGALRM-based timeout raises in the waiting thread."""


def on_alarm(signum, frame):
    raise AlarmTimeout("the alarm fired")


def arm(kind):
    """Sends the signal a second from now; returns when it was sent (a list
    the timer fills in)."""
    sent = []
    if kind == "alrm":
        signal.signal(signal.SIGALRM, on_alarm)
        sent.append(time.time() + 1.0)
        signal.setitimer(signal.ITIMER_REAL, 1.0)
    else:
        def interrupt():
            sent.append(time.time())
            os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C in a terminal sends
        threading.Timer(1.0, interrupt).start()
    return sent


def interrupted_rank(kind, where):
    expected = AlarmTimeout if kind == "alrm" else KeyboardInterrupt
    sent = arm(kind)
    try:
        if where == "join":
            hvd.join()
        else:
            hvd.synchronize(hvd.allreduce_async(np.ones(4, np.float32), name="x"))
    except expected as error:
        print(f"rank 1: {type(error).__name__} after {time.time() - sent[0]:.2f} s "
              f"(signal at {sent[0]:.3f})", flush=True)
        mark_done()
    else:
        raise AssertionError(f"rank 1's {where} returned")
    try:
        hvd.allreduce(np.ones(1, np.float32), name="after")
    except hvd.HvdliteInternalError as error:
        print(f"rank 1: later collective: {error}", flush=True)


def peer(rank, where):
    start = time.time()
    try:
        if where == "join":
            wait_until_done()  # computing while rank 1 is interrupted
            hvd.allreduce(np.ones(4, np.float32), name="late")
        else:
            hvd.allgather(np.ones((2, 3), np.float32), name="y")
    except hvd.HvdliteInternalError as error:
        print(f"rank {rank}: failed at {time.time():.3f} ({time.time() - start:.1f} s in): {error}",
              flush=True)
    else:
        raise AssertionError(f"rank {rank}'s collective completed without rank 1")


def main():
    kind, where = sys.argv[1], sys.argv[2]
    hvd.init()
    rank = hvd.rank()
    print(f"rank {rank}: pid {os.getpid()} job {os.environ.get('HVDLITE_JOB_ID', '')}", flush=True)
    hvd.barrier()
    if rank == 1:
        interrupted_rank(kind, where)
    else:
        peer(rank, where)


if __name__ == "__main__":
    main()
