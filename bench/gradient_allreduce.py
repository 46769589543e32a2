"""One training step's gradient allreduce without the training: the gradients
of train.py's model (the MLP: 21 M parameters, 84 MB of float32) averaged in
place through hvdlite.torch as DistributedOptimizer does (one asynchronous
allreduce per parameter, then synchronize), beside a copy of the same bytes in
the same process, the memory-bandwidth floor an allreduce works against.

    hvdliterun -np 2 python bench/gradient_allreduce.py [--model mlp] [--steps 20]
                                                      [--compete]

Each rank prints the median and fastest wall milliseconds of a step's
allreduces, the process's CPU milliseconds per step (every thread; and of
hvdlite's background thread alone, from /proc's schedstat), and the
median milliseconds of one copy of as many bytes (np.copyto between two
buffers faulted in beforehand). --compete runs a thread per rank that
multiplies 512 x 512 matrices meanwhile, as backward computes while gradients
are reduced: on a host with one core per rank its matrix products per second
show what the allreduce takes from the framework's compute, and the CPU and
run-queue milliseconds of that thread per step (from /proc's schedstat, in
nanoseconds) what it lost while hvdlite ran. Started with the wait counter
preloaded (LD_PRELOAD=$(python bench/wait_counts.py) hvdliterun ...), each rank
also prints the shared-memory waits' yields, futex sleeps and wakes and health
checks per step (medians; bench/wait_counts.py). The first step's
results are checked against the average computed here (rank r sends
(r + 1) x the same tensors): bit for bit at 2 ranks, closely at more.
"""
import argparse
import os
import resource
import threading
import time

import numpy as np

import wait_counts
from train import torch_model


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Competitor:
    """A thread of matrix products, the framework's compute in backward's place."""

    def __init__(self, torch):
        self.torch, self.products, self.running = torch, 0, True
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def times(self):
        """(CPU ns, run-queue wait ns) of the thread so far."""
        return wait_counts.thread_times(self.thread.native_id)

    def run(self):
        a = self.torch.ones(512, 512)
        while self.running:
            self.torch.mm(a, a)
            self.products += 1

    def stop(self):
        self.running = False
        self.thread.join()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("cnn", "mlp"), default="mlp")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--compete", action="store_true")
    args = parser.parse_args()
    import torch
    import hvdlite.torch as hvd
    torch.set_num_threads(1)
    hvd.init()
    torch.manual_seed(0)
    shapes = [p.shape for p in torch_model(args.model).parameters()]
    base = [torch.randn(shape) for shape in shapes]
    grads = [b * (hvd.rank() + 1) for b in base]
    names = [f"gradient.{i}" for i in range(len(grads))]

    def step():
        handles = [hvd.allreduce_async_(g, name=n, op=hvd.Average) for g, n in zip(grads, names)]
        for handle in handles:
            hvd.synchronize(handle)

    step()
    # Two ranks add in either order alike, and halving is exact: bit for bit.
    # More ranks add in another order than this sum and divide by a rounded
    # 1/n: close.
    want = [sum(b * (r + 1) for r in range(hvd.size())) / hvd.size() for b in base]
    same = torch.equal if hvd.size() <= 2 else lambda g, w: torch.allclose(g, w, rtol=1e-6, atol=1e-6)
    matches = all(same(g, w) for g, w in zip(grads, want))
    nbytes = sum(g.numel() * g.element_size() for g in grads)
    competitor = Competitor(torch) if args.compete else None
    walls, cpus, background_cpus, lost, counts = [], [], [], [], []
    background_tid = wait_counts.thread_named("hvdlite-bg")
    started, products = time.perf_counter(), competitor.products if competitor else 0
    for _ in range(args.steps):
        hvd.allreduce(torch.zeros(1), name="gradient.sync")  # start together
        counted, compute = wait_counts.read(), competitor.times() if competitor else None
        background = wait_counts.thread_times(background_tid)[0]
        cpu, t = cpu_seconds(), time.perf_counter()
        step()
        walls.append(time.perf_counter() - t)
        cpus.append(cpu_seconds() - cpu)
        background_cpus.append(wait_counts.thread_times(background_tid)[0] - background)
        if competitor:
            lost.append([after - before for before, after in zip(compute, competitor.times())])
        if counted is not None:
            counts.append(wait_counts.since(counted, wait_counts.read()))
    rate = (competitor.products - products) / (time.perf_counter() - started) if competitor else 0
    if competitor:
        competitor.stop()
    src = np.ones(nbytes // 4, np.float32)
    dst = np.zeros_like(src)
    copies = []
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(dst, src)
        copies.append(time.perf_counter() - t)
    ms = lambda seconds: np.median(seconds) * 1e3
    print(f"rank {hvd.rank()}: {args.model} gradients {nbytes / 1e6:.1f} MB: allreduce "
          f"{ms(walls):.2f} ms a step (fastest {min(walls) * 1e3:.2f}), process CPU "
          f"{ms(cpus):.2f} ms (hvdlite-bg {np.median(background_cpus) / 1e6:.2f}); copy of the same bytes {ms(copies):.2f} ms"
          + (f"; competing matrix products {rate:.0f}/s, their thread's CPU "
             f"{np.median([c for c, _ in lost]) / 1e6:.2f} ms and run-queue wait "
             f"{np.median([w for _, w in lost]) / 1e6:.2f} ms a step" if competitor else "")
          + f"; results {'match' if matches else 'DIFFER'}; load {os.getloadavg()[0]:.1f}", flush=True)
    if counts:
        print(f"rank {hvd.rank()}: per step (median of {len(counts)}): "
              + ", ".join(f"{name} {np.median([c[name] for c in counts]):g}" for name in wait_counts.NAMES),
              flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
