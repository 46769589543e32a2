"""Start-up cost of hvdlite.run beside hvdliterun, for a trivial function.

    python bench/run_startup.py [--sizes 2 4] [--repeats 5] [--init]

hvdlite.run: the time from calling run(trivial, np=N) until the list of
results is back (in this process, so without an interpreter start of its own).
hvdliterun: the wall time of `hvdliterun -np N python this-file --rank-script`,
whose ranks do the same as the function and print the result; this includes
the launcher's own interpreter start, as a user at a shell pays it.
--init: the function (and script) also call hvdlite.numpy's init() and one
allreduce, so that the ranks' rendezvous is part of what is measured.
Runs alternate between the two, and each line gives the median and the minimum.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import hvdlite


def trivial(init):
    if init:
        import numpy as np
        import hvdlite.numpy as hvd
        hvd.init()
        hvd.allreduce(np.ones(1), name="startup")
        return hvd.rank()
    return int(os.environ["HVDLITE_RANK"])


def time_run(size, init):
    started = time.perf_counter()
    results = hvdlite.run(trivial, args=(init,), np=size)
    elapsed = time.perf_counter() - started
    assert results == list(range(size)), results
    return elapsed


def time_hvdliterun(size, init):
    command = [sys.executable, "-m", "hvdlite.runner", "-np", str(size), sys.executable,
               os.path.abspath(__file__), "--rank-script"] + (["--init"] if init else [])
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    return elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--init", action="store_true")
    parser.add_argument("--rank-script", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_script:
        print(trivial(args.init))
        return
    time_run(1, args.init)  # warm: imports, page cache
    what = "init + allreduce" if args.init else "trivial"
    print(f"{what} function, {args.repeats} runs each, seconds (median / min)")
    for size in args.sizes:
        times = {"hvdlite.run": [], "hvdliterun": []}
        for _ in range(args.repeats):
            times["hvdlite.run"].append(time_run(size, args.init))
            times["hvdliterun"].append(time_hvdliterun(size, args.init))
        for name, values in times.items():
            print(f"  np={size}  {name:<12} {statistics.median(values):6.3f} / "
                  f"{min(values):6.3f}", flush=True)


if __name__ == "__main__":
    # hvdlite.run's output goes to our stdout; keep the table readable.
    sys.exit(main())
