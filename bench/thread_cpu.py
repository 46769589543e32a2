"""CPU time per training step, by thread: the framework's compute thread
against hvdlite's background thread (hvdlite-bg), for the models of train.py.

    hvdliterun -np 2 python bench/thread_cpu.py [--model cnn] [--backend torch]
                                               [--steps 100] [--warmup N] [--groups N]

Each rank prints its step time, its whole process's CPU milliseconds per
step (getrusage: every thread, those that ended included) with its minor page
faults per step, and the CPU milliseconds per step of every thread that used
any (from /proc/self/task/*/stat, 10 ms resolution, so use enough steps).
On a host whose cores all run a rank's compute thread (2 ranks, 2 cores, one
thread each) the process CPU bounds the scaling efficiency: at best
alone's CPU per step / this backend's (see bench/RESULTS.md, "MLP: where the
step's time goes"). --groups is DistributedOptimizer's `groups` (torch
backend).
"""
import argparse
import functools
import os
import resource
import time

from train import MODELS, TorchRun


def cpu_seconds_by_thread():
    """{"name:tid": user+system CPU seconds} of this process's live threads."""
    ticks = os.sysconf("SC_CLK_TCK")
    found = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # a thread that ended meanwhile
        fields = stat[stat.rindex(")") + 2:].split()
        found[f"{name}:{tid}"] = (int(fields[11]) + int(fields[12])) / ticks
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="cnn")
    parser.add_argument("--backend", choices=("torch", "ddp", "alone"), default="torch")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, help="untimed steps first (default: the model's)")
    parser.add_argument("--groups", type=int)
    args = parser.parse_args()
    if args.groups is not None:
        import hvdlite.torch as hvd
        hvd.DistributedOptimizer = functools.partial(hvd.DistributedOptimizer, groups=args.groups)
    run = TorchRun(args.backend, args.model)
    run.train(MODELS[args.model]["warmup"] if args.warmup is None else args.warmup)
    run.sync()
    usage_before = resource.getrusage(resource.RUSAGE_SELF)
    before, start = cpu_seconds_by_thread(), time.perf_counter()
    run.train(args.steps)
    run.sync()
    wall = time.perf_counter() - start
    after = cpu_seconds_by_thread()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    process_ms = ((usage.ru_utime + usage.ru_stime) - (usage_before.ru_utime
                                                       + usage_before.ru_stime)) * 1e3 / args.steps
    faults = (usage.ru_minflt - usage_before.ru_minflt) / args.steps
    per_step = sorted(((after[k] - before.get(k, 0.0)) * 1e3 / args.steps, k.split(":")[0])
                      for k in after if k in before)
    print(f"rank {run.rank}: {wall / args.steps * 1e3:.1f} ms a step; process CPU "
          f"{process_ms:.1f} ms a step ({faults:.0f} minor faults); CPU ms a step by thread: "
          + ", ".join(f"{name} {ms:.1f}" for ms, name in reversed(per_step) if ms > 0.05),
          flush=True)
    run.shutdown()


if __name__ == "__main__":
    main()
