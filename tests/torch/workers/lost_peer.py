"""Rank 1 dies in the middle of training; rank 0's torch collectives must
fail fast with HorovodInternalError (a RuntimeError) naming it, no hang
(killed_rank_scenario.py); later work fails at once too."""
import sys
from pathlib import Path

import torch

import hvdlite.torch as hvd

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
from killed_rank_scenario import ignore_launcher_stop, run_until_failure  # noqa: E402
from killed_rank_scenario import expect_work_refused  # noqa: E402


def main():
    ignore_launcher_stop()
    hvd.init()
    rank = hvd.rank()
    grad = torch.ones(1000)
    error = run_until_failure(rank, lambda step: hvd.allreduce_(grad, name="lost_peer.step"),
                              hvd.HorovodInternalError, kill_at=10)
    if error is None:
        sys.exit(0)
    print(f"rank {rank} got {type(error).__name__}, a RuntimeError: "
          f"{isinstance(error, RuntimeError)}", flush=True)
    # The failed runtime refuses new work at once (or fails it in synchronize).
    expect_work_refused(rank, "async", lambda: hvd.synchronize(
        hvd.allgather_async(torch.ones(2, 2), name="after.loss")), hvd, "HorovodInternalError")


if __name__ == "__main__":
    main()
