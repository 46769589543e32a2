"""Rank 1 dies in the middle of training; rank 0's TF collectives must fail
fast, naming it: inside tf.function as tf.errors.InternalError, eagerly as
HvdliteInternalError (a RuntimeError). No hang."""
import os
import signal
import sys
import time

import tensorflow as tf

import hvdlite.tensorflow as hvd


def main():
    # The launcher stops the survivors once rank 1 dies; ignore its SIGTERM so
    # this test sees the core's own failure detection (SIGKILL still follows).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    hvd.init()
    rank = hvd.rank()
    step_fn = tf.function(lambda x: hvd.allreduce(x, name="lost_peer.step"))
    for step in range(1000):
        if rank == 1 and step == 10:
            os.kill(os.getpid(), signal.SIGKILL)
        start = time.monotonic()
        try:
            step_fn(tf.ones([1000]))
        except tf.errors.InternalError as error:
            waited = time.monotonic() - start
            print(f"rank {rank} tf.function failed after {waited:.2f} s: {error.message}", flush=True)
            assert "rank 1" in error.message and waited < 10, (waited, error.message)
            break
    else:
        print("no failure seen", flush=True)
        sys.exit(0)
    try:
        hvd.allreduce(tf.ones([2]), name="after.loss")
    except RuntimeError as error:
        assert isinstance(error, hvd.HvdliteInternalError), type(error)
        print(f"rank {rank} eager failed: {error}", flush=True)
        sys.exit(17)


if __name__ == "__main__":
    main()
