"""What submitting a collective costs the caller: allreduce_async_ on 4 KiB
buffers (hvdlite.numpy and hvdlite.torch), and a synchronous 4-byte
allreduce_, in one process (no peer to wait for).

    python bench/submission.py [--calls 200] [--rounds 300]

Prints the minimum over rounds of the time per call: on a shared machine the
minimum is the figure other processes disturb least.
"""
import time

import numpy as np

import hvdlite.numpy as hvd
from timing import best_per_call_us, calls_and_rounds


def submit(binding, buffers, rounds):
    names = [f"submission.{i}" for i in range(len(buffers))]
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        handles = [binding.allreduce_async_(x, op=hvd.Sum, name=names[i])
                   for i, x in enumerate(buffers)]
        best = min(best, (time.perf_counter_ns() - t0) / len(buffers))
        for handle in handles:
            binding.synchronize(handle)
    return best / 1e3


def small(binding, x, rounds):
    return best_per_call_us(binding.allreduce_, 1, rounds, x, op=hvd.Sum, name="submission.small")


def main():
    args = calls_and_rounds(__doc__, 200, 300)
    hvd.init()
    results = {"numpy": (submit(hvd, [np.ones(1024, np.float32) for _ in range(args.calls)],
                                args.rounds),
                         small(hvd, np.ones(1, np.float32), args.rounds * 10))}
    try:
        import torch

        import hvdlite.torch as hvd_torch
        results["torch"] = (submit(hvd_torch, [torch.ones(1024) for _ in range(args.calls)],
                                   args.rounds),
                            small(hvd_torch, torch.ones(1), args.rounds * 10))
    except ImportError:
        pass
    for binding, (per_call, tiny) in results.items():
        print(f"{binding}: allreduce_async_ submission {per_call:.2f} us a call; "
              f"4-byte allreduce_ {tiny:.2f} us", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
