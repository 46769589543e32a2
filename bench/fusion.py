"""Step time of many gradients submitted asynchronously and then waited on,
as a training step does: 200 x 16 KiB and 50 x 1 MiB float32 allreduces.

    hvdliterun -np 2 python bench/fusion.py --backend hvdlite --json out.json
"""
import argparse

from backends import BACKENDS, finish
from timing import measure

STEPS = {"200x16KiB": (200, 16 << 10), "50x1MiB": (50, 1 << 20)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=sorted(BACKENDS), default="hvdlite")
    parser.add_argument("--min-seconds", type=float, default=1.0)
    parser.add_argument("--json", help="write results here (rank 0)")
    args = parser.parse_args()
    backend = BACKENDS[args.backend]()
    results = {}
    for label, (count, nbytes) in STEPS.items():
        arrays = [backend.array(nbytes // 4) for _ in range(count)]
        median, p90, iterations = measure(backend, lambda: backend.step(arrays, f"step.{label}"),
                                          min_iters=5, min_seconds=args.min_seconds, barrier=True)
        results[label] = {"median_ms": median * 1e3, "p90_ms": p90 * 1e3, "iterations": iterations}
        if backend.rank == 0:
            print(f"{backend.name} step {label}: median {median * 1e3:.2f} ms, "
                  f"p90 {p90 * 1e3:.2f} ms", flush=True)
    finish(backend, results, args.json)


if __name__ == "__main__":
    main()
