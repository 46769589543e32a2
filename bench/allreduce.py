"""Allreduce latency and bandwidth through hvdlite's full path (negotiation,
response cache, fusion buffer, transport), float32 sum.

    hvdliterun -np 2 python bench/allreduce.py [--sizes 4,65536,67108864] [--json out.json]

Prints median and p90 latency, algorithm bandwidth (bytes / time) and bus
bandwidth (algbw * 2(n-1)/n, as nccl-tests define it).
"""
import argparse
import json
import time

import numpy as np

import hvdlite.numpy as hvd

DEFAULT_SIZES = [4, 64, 1024, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]


def measure(nbytes, min_iters, min_seconds):
    x = np.ones(max(1, nbytes // 4), dtype=np.float32)
    name = f"bench.{nbytes}"
    for _ in range(3):  # warm up: negotiation, cache entry, buffers
        hvd.allreduce(x, op=hvd.Sum, name=name)
    times = []
    start = time.perf_counter()
    while len(times) < min_iters or time.perf_counter() - start < min_seconds:
        hvd.barrier() if nbytes >= (1 << 20) else None
        t0 = time.perf_counter()
        hvd.allreduce(x, op=hvd.Sum, name=name)
        times.append(time.perf_counter() - t0)
        if len(times) >= 10000:
            break
    # Every rank reports the slowest rank's view of each iteration.
    local = np.array(times, dtype=np.float64)
    count = hvd.allreduce(np.array([len(local)], np.int64), op=hvd.Min, name=f"{name}.count")[0]
    worst = hvd.allreduce(local[:count], op=hvd.Max, name=f"{name}.times")
    return np.median(worst), np.percentile(worst, 90)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    parser.add_argument("--min-iters", type=int, default=20)
    parser.add_argument("--min-seconds", type=float, default=1.0)
    parser.add_argument("--json", help="write results here (rank 0)")
    args = parser.parse_args()
    hvd.init()
    n = hvd.size()
    rows = []
    for nbytes in [int(s) for s in args.sizes.split(",")]:
        median, p90 = measure(nbytes, args.min_iters, args.min_seconds)
        algbw = nbytes / median / 1e9
        rows.append({"bytes": nbytes, "median_us": median * 1e6, "p90_us": p90 * 1e6,
                     "algbw_GBps": algbw, "busbw_GBps": algbw * 2 * (n - 1) / n})
    if hvd.rank() == 0:
        print(f"hvdlite allreduce, float32 sum, {n} ranks")
        print(f"{'bytes':>12} {'median us':>11} {'p90 us':>10} {'algbw GB/s':>11} {'busbw GB/s':>11}")
        for r in rows:
            print(f"{r['bytes']:>12} {r['median_us']:>11.1f} {r['p90_us']:>10.1f} "
                  f"{r['algbw_GBps']:>11.3f} {r['busbw_GBps']:>11.3f}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"ranks": n, "results": rows}, f, indent=2)
    hvd.shutdown()


if __name__ == "__main__":
    main()
