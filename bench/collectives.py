"""Latency and bandwidth of allreduce, allgather, broadcast, reducescatter and
alltoall (float32) for one backend, and the latency of an allreduce through
the asynchronous path (allreduce_async: submit, then wait; up to
ASYNC_MAX_BYTES, where the path's own cost shows); started by run_all.py under
its launcher:

    hvdliterun -np 2 python bench/collectives.py --backend hvdlite --json out.json

`bytes` is what each rank contributes (allreduce, broadcast, reducescatter
input, alltoall) or receives (allgather output), as nccl-tests count it.
algbw = bytes / time; busbw = algbw * factor, the nccl-tests factors:
2(n-1)/n for allreduce, (n-1)/n for allgather, reducescatter and alltoall, 1
for broadcast.
"""
import argparse

from backends import BACKENDS, finish
from timing import measure

DEFAULT_SIZES = [4 << (2 * i) for i in range(14)]  # 4 B, 16 B, ... 256 MiB
OPS = ["allreduce", "allreduce_async", "allgather", "broadcast", "reducescatter", "alltoall"]
ASYNC_MAX_BYTES = 64 << 10


def bus_factor(op, n):
    return {"allreduce": 2 * (n - 1) / n, "allreduce_async": 2 * (n - 1) / n,
            "broadcast": 1.0}.get(op, (n - 1) / n)


def input_count(op, nbytes, n):
    """Elements each rank passes in so that the op moves `nbytes` as defined above."""
    count = max(1, nbytes // 4)
    if op == "allgather":
        return max(1, count // n)
    if op in ("reducescatter", "alltoall"):
        return max(n, count // n * n)
    return count


def run_op(backend, op, nbytes, min_seconds):
    n = backend.size
    x = backend.array(input_count(op, nbytes, n))
    fn = getattr(backend, op)
    tag = f"bench.{op}.{nbytes}"
    median, p90, iterations = measure(backend, lambda: fn(x, tag), min_seconds=min_seconds,
                                      barrier=nbytes >= (1 << 20))
    algbw = nbytes / median / 1e9
    return {"bytes": nbytes, "median_us": median * 1e6, "p90_us": p90 * 1e6,
            "algbw_GBps": algbw, "busbw_GBps": algbw * bus_factor(op, n),
            "iterations": iterations}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=sorted(BACKENDS), default="hvdlite")
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    parser.add_argument("--min-seconds", type=float, default=0.3)
    parser.add_argument("--json", help="write results here (rank 0)")
    args = parser.parse_args()
    backend = BACKENDS[args.backend]()
    results = {}
    for op in args.ops.split(","):
        rows = []
        for nbytes in map(int, args.sizes.split(",")):
            if op == "allreduce_async" and nbytes > ASYNC_MAX_BYTES:
                continue
            try:
                rows.append(run_op(backend, op, nbytes, args.min_seconds))
            except RuntimeError as error:  # e.g. an op this backend does not offer
                if backend.rank == 0:
                    print(f"{backend.name} {op}: not measured: {error}".splitlines()[0], flush=True)
                break
        results[op] = rows
        if backend.rank == 0 and rows:
            print(f"{backend.name} {op}: 4 B median {rows[0]['median_us']:.1f} us, "
                  f"largest busbw {rows[-1]['busbw_GBps']:.2f} GB/s", flush=True)
    finish(backend, results, args.json)


if __name__ == "__main__":
    main()
