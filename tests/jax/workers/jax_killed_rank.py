"""Rank 1 dies between jitted steps; rank 0's next step, whose separate
collectives are all pending at once (XLA FFI futures, Note [Asynchronous calls
on the CPU] in csrc/jax/collective_handler.cc), must fail fast with an error
naming the tensor and the lost rank, not hang (killed_rank_scenario.py)."""
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

import hvdlite.jax as hvd

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
from killed_rank_scenario import ignore_launcher_stop, run_until_failure  # noqa: E402


def main():
    ignore_launcher_stop()
    hvd.init()
    rank = hvd.rank()
    print(f"rank {rank} jit path {hvd.jit_path()}", flush=True)
    step = jax.jit(lambda a: sum(hvd.allreduce(a * i, name=f"killed.grad.{i}") for i in range(8)))
    x = jnp.ones(1000)
    # XLA raises its own runtime error type.
    error = run_until_failure(rank, lambda i: step(x).block_until_ready(), Exception,
                              kill_at=5, steps=100)
    sys.exit(0 if error is None else 17)


if __name__ == "__main__":
    main()
