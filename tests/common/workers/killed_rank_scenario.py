"""The killed-rank scenario every binding's workers share (numpy, torch,
TensorFlow, JAX): rank 1 SIGKILLs itself before step `kill_at`; each
survivor's next collective must fail fast with an error naming rank 1, not
hang. Each survivor prints one line the test reads from its own output
(RankResult.failures in tests/conftest.py):

    rank <r> at step <kill_at - 1>      (every rank, before that step)
    rank <r> failed after <seconds> s: <the error's message>

so the bound on "fast" and the lost rank's name are checked in the test,
where a worker that printed nothing, or an assert compiled away, cannot pass.
A survivor may then check, with expect_work_refused, that new work fails too.
"""
import os
import signal
import sys
import time


def ignore_launcher_stop():
    """The launcher stops the survivors once rank 1 dies; ignoring its SIGTERM
    lets the test see the core's own failure detection (SIGKILL still follows)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def run_until_failure(rank, step, errors, kill_at, steps=1000, message=str):
    """Calls step(i) for each i; rank 1 kills itself before step kill_at. Returns
    the first error of type `errors` after printing its line (message(error)
    gives the text), or None after printing "no failure seen"."""
    for i in range(steps):
        if i == kill_at - 1:
            # Every rank prints this before the step rank 1 must share with it
            # to reach kill_at: the test knows who was training when it died.
            print(f"rank {rank} at step {i}", flush=True)
        if rank == 1 and i == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        start = time.monotonic()
        try:
            step(i)
        except errors as error:
            waited = time.monotonic() - start
            print(f"rank {rank} failed after {waited:.2f} s: {message(error)}", flush=True)
            return error
    print("no failure seen", flush=True)
    return None


def expect_work_refused(rank, what, work, hvd, error_name):
    """After the failure the runtime refuses new work at once: work() must
    raise a RuntimeError. Prints "rank <r> <what> failed (<error_name>: <whether
    it is hvd.<error_name>>): <message>" for the test to read and exits 17, a
    survivor's status; exits 1, saying so, if work() completed."""
    try:
        work()
    except RuntimeError as error:
        print(f"rank {rank} {what} failed ({error_name}: "
              f"{isinstance(error, getattr(hvd, error_name))}): {error}", flush=True)
        sys.exit(17)
    print(f"rank {rank}: {what} work after the failure completed", flush=True)
    sys.exit(1)
