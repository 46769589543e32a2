"""Timing loop shared by the benchmarks: every rank runs the same number of
iterations (agreed collectively, so no rank waits for a partner that stopped),
and each iteration counts as long as its slowest rank took; and, for one
process, the least time a call took (best_per_call_us, calls_and_rounds)."""
import argparse
import time

import numpy as np


def agreed_iterations(backend, run_once, min_iters, max_iters, min_seconds):
    """Warms up, estimates the time of one iteration, and returns the number of
    iterations to run, the same on every rank."""
    for _ in range(3):  # negotiation, response cache, buffers, connections
        run_once()
    start = time.perf_counter()
    probes = 3
    for _ in range(probes):
        run_once()
    per_iteration = max((time.perf_counter() - start) / probes, 1e-7)
    wanted = min(max(min_iters, int(min_seconds / per_iteration)), max_iters)
    return int(backend.max_of([wanted])[0])


def measure(backend, run_once, min_iters=10, max_iters=5000, min_seconds=0.5, barrier=False):
    """Median and 90th percentile in seconds of run_once(), slowest rank per iteration.
    barrier=True lines the ranks up before each iteration (large messages, where
    a rank that starts late would otherwise count as slow transfer)."""
    iterations = agreed_iterations(backend, run_once, min_iters, max_iters, min_seconds)
    times = np.empty(iterations)
    for i in range(iterations):
        if barrier:
            backend.barrier()
        t0 = time.perf_counter()
        run_once()
        times[i] = time.perf_counter() - t0
    worst = backend.max_of(times)
    return float(np.median(worst)), float(np.percentile(worst, 90)), iterations


def best_per_call_us(call, calls, rounds, *args, **kwargs):
    """Microseconds per call of call(*args, **kwargs), the minimum over
    `rounds` rounds of `calls` calls each: in one process on a shared machine
    the minimum is the figure other processes disturb least. The arguments are
    passed through rather than bound in a lambda, whose frame would count."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            call(*args, **kwargs)
        best = min(best, (time.perf_counter_ns() - t0) / calls)
    return best / 1e3


def calls_and_rounds(doc, calls, rounds):
    """The command line of a best_per_call_us benchmark: --calls and --rounds
    with these defaults, described by the first paragraph of `doc`."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=calls)
    parser.add_argument("--rounds", type=int, default=rounds)
    return parser.parse_args()
