"""The machine's memory-bandwidth reference: how fast one process copies a
large buffer, and how fast each of N processes copies at the same time (what
N ranks on one host share). A 2-rank allreduce of B bytes must at least read
and write B per rank, so it cannot beat about B / (per-process copy rate).

    python bench/membw.py [--mib 256] [--processes 2] [--json out.json]
"""
import argparse
import json
import multiprocessing
import time

import numpy as np


def copy_rate(mib, repeats=5):
    """GB/s of np.copyto over `mib` MiB (bytes copied per second; best of repeats)."""
    src = np.ones(mib << 18, np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return src.nbytes / best / 1e9


def _worker(mib, start, out):
    start.wait()
    out.put(copy_rate(mib))


def concurrent_rates(mib, processes):
    start = multiprocessing.Barrier(processes)
    out = multiprocessing.Queue()
    workers = [multiprocessing.Process(target=_worker, args=(mib, start, out))
               for _ in range(processes)]
    for w in workers:
        w.start()
    rates = [out.get() for _ in workers]
    for w in workers:
        w.join()
    return rates


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    single = copy_rate(args.mib)
    together = concurrent_rates(args.mib, args.processes)
    result = {"mib": args.mib, "one_process_GBps": single, "processes": args.processes,
              "each_concurrent_GBps": min(together)}
    print(f"memory copy {args.mib} MiB: one process {single:.1f} GB/s; "
          f"{args.processes} at once {min(together):.1f} GB/s each")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
