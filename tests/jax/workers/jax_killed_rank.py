"""Rank 1 dies between jitted steps; rank 0's next step, blocked in the XLA FFI
custom call, must fail fast with an error naming the tensor and the lost rank,
not hang."""
import os
import signal
import sys
import time

import jax
import jax.numpy as jnp

import hvdlite.jax as hvd


def main():
    # The launcher stops the survivors once rank 1 dies; ignore its SIGTERM so
    # this test sees the core's own failure detection (SIGKILL still follows).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    hvd.init()
    rank = hvd.rank()
    assert hvd.jit_path() == "ffi", hvd.jit_path()
    step = jax.jit(lambda a: hvd.allreduce(a, name="killed.grad") * 2)
    x = jnp.ones(1000)
    for i in range(100):
        if rank == 1 and i == 5:
            os.kill(os.getpid(), signal.SIGKILL)
        start = time.monotonic()
        try:
            step(x).block_until_ready()
        except Exception as error:  # noqa: BLE001 - XLA raises its own runtime error type
            waited = time.monotonic() - start
            print(f"rank {rank} failed after {waited:.2f} s: {error}", flush=True)
            assert "killed.grad" in str(error) and "rank 1" in str(error), error
            assert waited < 10, waited
            sys.exit(17)
    print("no failure seen")
    sys.exit(0)


if __name__ == "__main__":
    main()
