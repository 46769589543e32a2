"""A/B of HVDLITE_PIPELINE_CHUNK over both transports, interleaved in one job
(hvdlite is re-initialized per setting, so drifting machine load hits every
setting alike): a 64 MiB allreduce and a fused step of 50 x 1 MiB.

    hvdliterun -np 2 python bench/pipeline_chunk.py [--rounds 3] [--iterations 6]
"""
import argparse
import os
import time

import numpy as np

import hvdlite.numpy as hvd

SETTINGS = [("shm", "0"), ("shm", "1048576"), ("tcp", "0"), ("tcp", "1048576")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=6)
    args = parser.parse_args()
    big = np.ones(16 << 20, np.float32)
    small = [np.ones(1 << 18, np.float32) for _ in range(50)]

    def step():
        handles = [hvd.allreduce_async(a, op=hvd.Sum, name=f"step.{i}") for i, a in enumerate(small)]
        for h in handles:
            hvd.synchronize(h)

    work = {"64MiB": lambda: hvd.allreduce(big, op=hvd.Sum, name="big"), "50x1MiB": step}
    times = {s: {label: [] for label in work} for s in SETTINGS}
    for _ in range(args.rounds):
        for transport, chunk in SETTINGS:
            os.environ["HVDLITE_PIPELINE_CHUNK"] = chunk
            os.environ["HVDLITE_SHM_DISABLE"] = "1" if transport == "tcp" else "0"
            hvd.init()
            for label, run in work.items():
                run()  # warm-up: negotiation, cache, buffers
                for _ in range(args.iterations):
                    hvd.barrier()
                    start = time.perf_counter()
                    run()
                    mine = np.array([time.perf_counter() - start])
                    times[(transport, chunk)][label].append(
                        float(hvd.allreduce(mine, op=hvd.Max, name="elapsed")[0]))
            rank = hvd.rank()
            hvd.shutdown()
    if rank == 0:
        print(f"load average {' '.join(open('/proc/loadavg').read().split()[:3])}")
        print(f"{'transport, chunk':>22} " + " ".join(f"{label + ' best/median ms':>26}" for label in work))
        for (transport, chunk), per_label in times.items():
            cells = [f"{min(v) * 1e3:.1f} / {np.median(v) * 1e3:.1f}" for v in per_label.values()]
            print(f"{transport + ', ' + chunk:>22} " + " ".join(f"{c:>26}" for c in cells))


if __name__ == "__main__":
    main()
