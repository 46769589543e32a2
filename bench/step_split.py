"""Where the time of a fusion step goes: submitting N allreduce_async_ calls
(in place, as bench/fusion.py does),
waiting for them, and, for comparison, one allreduce of the same bytes.

    hvdliterun -np 2 python bench/step_split.py [--count 200] [--kib 16]

Rank 0 prints the medians (after a warm-up) of each part.
"""
import argparse
import time

import numpy as np

import hvdlite.numpy as hvd


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--kib", type=int, default=16)
    parser.add_argument("--iterations", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=50)
    args = parser.parse_args()
    hvd.init()
    elements = args.kib * 256
    arrays = [np.ones(elements, np.float32) for _ in range(args.count)]
    fused = np.ones(elements * args.count, np.float32)
    submit, wait, single = [], [], []
    for _ in range(args.iterations):
        hvd.barrier()
        t0 = time.perf_counter()
        handles = [hvd.allreduce_async_(a, op=hvd.Sum, name=f"split.{i}")
                   for i, a in enumerate(arrays)]
        t1 = time.perf_counter()
        for handle in handles:
            hvd.synchronize(handle)
        t2 = time.perf_counter()
        submit.append(t1 - t0)
        wait.append(t2 - t1)
        hvd.barrier()
        t0 = time.perf_counter()
        hvd.allreduce_(fused, op=hvd.Sum, name="split.fused")
        single.append(time.perf_counter() - t0)
    ms = lambda values: float(np.median(values[args.warmup:])) * 1e3  # noqa: E731
    if hvd.rank() == 0:
        print(f"{args.count} x {args.kib} KiB step: {ms(submit) + ms(wait):.2f} ms = "
              f"submit {ms(submit):.2f} ms ({ms(submit) / args.count * 1e3:.1f} us a call) "
              f"+ wait {ms(wait):.2f} ms; one allreduce of the same "
              f"{fused.nbytes / 1e6:.1f} MB: {ms(single):.2f} ms", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
