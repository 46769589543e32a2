"""The latency of a 4-byte allreduce (float32 sum, in place) at 2 ranks,
hvdlite against Open MPI (mpi4py) and torch gloo, and against another build
of hvdlite, in one run: the backends take turns, round after round, in
rotating order, so that the load of a shared machine falls on all alike.

    python bench/small_latency.py [--rounds 3] [--iterations 20000] \\
        [--baseline ../main] [--backends hvdlite,mpi,gloo]

Each run times every iteration on every rank and keeps the slowest rank's
time per iteration (bench/timing.py's rule), for a fixed number of
iterations (collectives.py sizes its runs from a probe, which a loaded
machine can leave at a dozen). Prints, per backend, the median over rounds
of each run's 10th percentile, median and 90th percentile in us: on a
machine shared with other work the low percentile is what the library
costs when both ranks have a core, the median how often they do not.
`--baseline DIR`: DIR's .venv with its own hvdlite build (an editable
install of DIR) runs the same script as "hvdlite (baseline)".
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
STATS = ("p10_us", "median_us", "p90_us")


def worker(args):
    from backends import BACKENDS, finish
    backend = BACKENDS[args.backend]()
    x = backend.array(1)
    for _ in range(200):  # negotiation, response cache, connections
        backend.allreduce(x, "bench.small")
    times = np.empty(args.iterations)
    for i in range(args.iterations):
        t0 = time.perf_counter()
        backend.allreduce(x, "bench.small")
        times[i] = time.perf_counter() - t0
    worst = backend.max_of(times) * 1e6
    finish(backend, {"p10_us": float(np.percentile(worst, 10)), "median_us": float(np.median(worst)),
                     "p90_us": float(np.percentile(worst, 90))}, args.json)


def launch_one(args):
    """Under the interpreter of the build being measured: start the ranks."""
    from launch import launch
    result = launch(args.launch, Path(__file__).name, 2, ["--iterations", str(args.iterations)], 600)
    Path(args.json).write_text(json.dumps(result["results"] if result else None))


def run(python, backend, iterations):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        subprocess.run([str(python), str(Path(__file__)), "--launch", backend, "--json", str(out),
                        "--iterations", str(iterations)], cwd=str(HERE), check=True,
                       stdout=subprocess.DEVNULL, timeout=900)
        return json.loads(out.read_text())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=20000)
    parser.add_argument("--baseline", type=Path, help="a checkout with its own .venv and build")
    parser.add_argument("--backends", default="hvdlite,mpi,gloo")
    parser.add_argument("--backend", help=argparse.SUPPRESS)  # a rank, under its launcher
    parser.add_argument("--launch", help=argparse.SUPPRESS)   # start one backend's ranks
    parser.add_argument("--json", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    if args.backend:
        return worker(args)
    if args.launch:
        return launch_one(args)
    runs = [(b, Path(sys.executable), b) for b in args.backends.split(",")]
    if args.baseline:
        runs.append(("hvdlite (baseline)", args.baseline.resolve() / ".venv/bin/python", "hvdlite"))
    results = {label: [] for label, _, _ in runs}
    for round_ in range(args.rounds):
        order = runs[round_ % len(runs):] + runs[:round_ % len(runs)]
        for label, python, backend in order:
            result = run(python, backend, args.iterations)
            if result is None:
                print(f"round {round_ + 1} {label}: failed", flush=True)
                continue
            results[label].append(result)
            print(f"round {round_ + 1} {label}: " + ", ".join(f"{k} {result[k]:.2f}" for k in STATS), flush=True)
    print(f"\n4-byte allreduce, 2 ranks, median over {args.rounds} rounds of {args.iterations} iterations "
          "(us; each run's p10 / median / p90)")
    print("| backend | p10 | median | p90 | runs (median) |\n| --- | ---: | ---: | ---: | --- |")
    for label, rows in results.items():
        if not rows:
            continue
        cells = [statistics.median(r[k] for r in rows) for k in STATS]
        print(f"| {label} | " + " | ".join(f"{c:.2f}" for c in cells) + " | " +
              " ".join(f"{r['median_us']:.2f}" for r in rows) + " |")


if __name__ == "__main__":
    main()
