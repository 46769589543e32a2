"""A fixed number of 200 x 16 KiB allreduce_async_ + synchronize steps (bench/fusion.py's
loop), for counting instructions on a machine too loaded for wall time: run it twice under
callgrind, with 0 and with N measured steps, and divide the difference by N.

    hvdliterun -np 2 bench/step_profile.sh OUT python bench/step_profile.py numpy 5 20
    hvdliterun -np 2 bench/step_profile.sh OUT python bench/step_profile.py numpy 5 0

bench/step_profile.sh runs rank 0 under `valgrind --tool=callgrind --separate-threads=yes`
(OUT.<pid>-01 is the Python thread, -02 the background thread) and the other ranks as they
are. Prints each rank's CPU time and wall time per measured step (meaningful without valgrind).
"""
import argparse
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binding", choices=("numpy", "torch"))
    parser.add_argument("warmup", type=int)
    parser.add_argument("steps", type=int)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--bytes", type=int, default=16 << 10)
    args = parser.parse_args()
    if args.binding == "torch":
        import torch

        import hvdlite.torch as hvd
        arrays = [torch.ones(args.bytes // 4) for _ in range(args.count)]
    else:
        import numpy as np

        import hvdlite.numpy as hvd
        arrays = [np.ones(args.bytes // 4, np.float32) for _ in range(args.count)]
    hvd.init()
    names = [f"step.{i}" for i in range(args.count)]

    def step():
        handles = [hvd.allreduce_async_(a, op=hvd.Sum, name=names[i]) for i, a in enumerate(arrays)]
        for handle in handles:
            hvd.synchronize(handle)

    for _ in range(args.warmup):
        step()
    hvd.barrier()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(args.steps):
        step()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    hvd.barrier()
    if args.steps:
        print(f"rank {hvd.rank()}: cpu {cpu / args.steps * 1e3:.3f} ms a step, "
              f"wall {wall / args.steps * 1e3:.3f} ms a step", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
