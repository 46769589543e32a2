"""Rank 1 dies in the middle of training; the others must fail fast with
HvdliteInternalError naming it, not hang (killed_rank_scenario.py)."""
import sys

import numpy as np

import hvdlite.numpy as hvd
from killed_rank_scenario import ignore_launcher_stop, run_until_failure


def main():
    ignore_launcher_stop()
    hvd.init()
    rank = hvd.rank()
    error = run_until_failure(
        rank, lambda step: hvd.allreduce(np.ones(1000, np.float32), name=f"step.{step % 4}"),
        hvd.HvdliteInternalError, kill_at=20)
    if error is None:
        sys.exit(0)
    # What a program reads instead of the message (the elastic driver: lost_hosts).
    print(f"rank {rank} got {type(error).__name__} ranks={list(error.ranks)} "
          f"hosts={list(error.hosts)} tensors={list(error.tensor_names)}", flush=True)
    sys.exit(17)


if __name__ == "__main__":
    main()
