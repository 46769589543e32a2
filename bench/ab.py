"""A same-run A/B of two builds of hvdlite: the 4-byte allreduce latency and
the fusion steps (200 x 16 KiB, 50 x 1 MiB) at 2 ranks, each round running
both checkouts' bench/run_all.py with their own venvs, in alternating order
(A B, B A, ...) so that a loaded machine's drift hits both alike.

    python bench/ab.py --baseline ../main --candidate . [--rounds 15] [--np 2] [--mpi]

Each checkout must have its own .venv with hvdlite installed from it (an
editable install builds in its own build/). Prints every run's median and
the median over runs, for bench/RESULTS.md. --mpi also measures Open MPI's
4-byte allreduce (mpi4py) in the candidate's runs, for a same-run ratio.
"""
import argparse
import json
import statistics
import subprocess
import tempfile
from pathlib import Path

METRICS = (("4 B allreduce (us)", lambda s: s["collectives"]["hvdlite"]["allreduce"][0]["median_us"]),
           ("200 x 16 KiB step (ms)", lambda s: s["fusion"]["hvdlite"]["200x16KiB"]["median_ms"]),
           ("50 x 1 MiB step (ms)", lambda s: s["fusion"]["hvdlite"]["50x1MiB"]["median_ms"]))


def mpi_latency(summary):
    return summary["collectives"]["mpi"]["allreduce"][0]["median_us"]


def run_once(checkout, np_, with_mpi=False):
    """The METRICS of one run of hvdlite (then Open MPI's 4-byte latency, with_mpi)."""
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([str(checkout / ".venv/bin/python"), "bench/run_all.py", "--np", str(np_),
                        "--repeat", "1", "--no-train", "--backends",
                        "hvdlite,mpi" if with_mpi else "hvdlite", "--ops", "allreduce",
                        "--sizes", "4", "--out", out],
                       cwd=checkout, check=True, capture_output=True, text=True, timeout=600)
        summary = json.loads((Path(out) / "results.json").read_text())["summary"]
    return [metric(summary) for _, metric in METRICS] + ([mpi_latency(summary)] if with_mpi else [])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--candidate", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--mpi", action="store_true",
                        help="also Open MPI's 4-byte allreduce in the candidate's runs")
    args = parser.parse_args()
    builds = {"baseline": args.baseline.resolve(), "candidate": args.candidate.resolve()}
    runs = {name: [] for name in builds}
    for round_ in range(args.rounds):
        order = list(builds) if round_ % 2 == 0 else list(reversed(builds))
        for name in order:
            runs[name].append(run_once(builds[name], args.np, args.mpi and name == "candidate"))
            print(f"round {round_ + 1} {name}: " +
                  ", ".join(f"{v:.2f}" for v in runs[name][-1]), flush=True)
    print(f"\n| | baseline, {args.rounds} runs | candidate, {args.rounds} runs | median before -> after |")
    print("| --- | --- | --- | --- |")
    for i, (label, _) in enumerate(METRICS):
        before = [r[i] for r in runs["baseline"]]
        after = [r[i] for r in runs["candidate"]]
        a, b = statistics.median(before), statistics.median(after)
        print(f"| {label} | {' '.join(f'{v:.2f}' for v in before)} | {' '.join(f'{v:.2f}' for v in after)} "
              f"| {a:.2f} -> {b:.2f} ({(b - a) / a * 100:+.1f} %) |")
    if args.mpi:
        mpi = [r[len(METRICS)] for r in runs["candidate"]]
        ratios = [r[0] / r[len(METRICS)] for r in runs["candidate"]]
        print(f"\nOpen MPI 4 B allreduce (us), the candidate's runs: {' '.join(f'{v:.2f}' for v in mpi)}; "
              f"median {statistics.median(mpi):.2f}")
        print(f"candidate / Open MPI, run by run: {' '.join(f'{v:.2f}' for v in ratios)}; median "
              f"{statistics.median(ratios):.2f}; of the medians "
              f"{statistics.median(r[0] for r in runs['candidate']) / statistics.median(mpi):.2f}")


if __name__ == "__main__":
    main()
