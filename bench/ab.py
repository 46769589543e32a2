"""A same-run A/B of two builds of hvdlite, beside Open MPI: the 4-byte
allreduce latency through hvdlite.numpy and hvdlite.torch, each synchronous
(allreduce_) and asynchronous (allreduce_async_ + synchronize), and the fusion
steps (200 x 16 KiB, 50 x 1 MiB) through both, at 2 ranks. Each round runs
this checkout's bench/run_all.py once with each build's venv, in alternating
order (A B, B A, ...), so that a loaded machine's drift hits both alike; the
harness is the same for both, only the hvdlite they import differs.

    python bench/ab.py --baseline ../main --candidate . [--rounds 15] [--np 2] [--mpi]
    python bench/ab.py --candidate . --mpi        # the candidate alone, beside Open MPI

Each checkout must have its own .venv with hvdlite installed from it (an
editable install builds in its own build/). Prints every run's median, the
median over runs and the fast mode (below), for bench/RESULTS.md. --mpi also
measures Open MPI's 4-byte allreduce (mpi4py: Allreduce, and Iallreduce +
Wait) in the candidate's runs, and prints hvdlite / Open MPI run by run.

Note [Fast mode]
On a virtual machine the 4-byte latency of every library switches between a
fast and a slow speed from one run to the next (scheduling: whether each
rank's thread has a core; bench/RESULTS.md). The median over runs mixes the
two in whatever proportion the load gave, so beside it we report the fast
mode: the median of the runs within FAST_MODE_BAND of the fastest run, the
speed both libraries reach when the machine lets them.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FAST_MODE_BAND = 1.2  # runs within 20 % of the fastest make the fast mode


def _latency(backend, op):
    return lambda s: s["collectives"][backend][op][0]["median_us"]


def _step(backend, label):
    return lambda s: s["fusion"][backend][label]["median_ms"]


METRICS = (("numpy 4 B allreduce_ (us)", _latency("hvdlite", "allreduce")),
           ("numpy 4 B async (us)", _latency("hvdlite", "allreduce_async")),
           ("torch 4 B allreduce_ (us)", _latency("hvdlite-torch", "allreduce")),
           ("torch 4 B async (us)", _latency("hvdlite-torch", "allreduce_async")),
           ("numpy 200 x 16 KiB step (ms)", _step("hvdlite", "200x16KiB")),
           ("torch 200 x 16 KiB step (ms)", _step("hvdlite-torch", "200x16KiB")),
           ("numpy 50 x 1 MiB step (ms)", _step("hvdlite", "50x1MiB")),
           ("torch 50 x 1 MiB step (ms)", _step("hvdlite-torch", "50x1MiB")))
MPI_METRICS = (("Open MPI 4 B Allreduce (us)", _latency("mpi", "allreduce")),
               ("Open MPI 4 B Iallreduce + Wait (us)", _latency("mpi", "allreduce_async")))
# hvdlite / Open MPI, each against the same-run MPI figure of its kind.
RATIOS = (("numpy allreduce_ / MPI Allreduce", 0, 0), ("torch allreduce_ / MPI Allreduce", 2, 0),
          ("numpy async / MPI Iallreduce", 1, 1), ("torch async / MPI Iallreduce", 3, 1))


def run_once(checkout, np_, with_mpi=False):
    """The METRICS of one run of `checkout`'s hvdlite (then MPI_METRICS, with_mpi)."""
    backends = "hvdlite,hvdlite-torch" + (",mpi" if with_mpi else "")
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([str(checkout / ".venv/bin/python"), str(HERE / "run_all.py"), "--np", str(np_),
                        "--repeat", "1", "--no-train", "--backends", backends,
                        "--ops", "allreduce,allreduce_async", "--sizes", "4", "--out", out],
                       cwd=HERE, check=True, capture_output=True, text=True, timeout=900)
        summary = json.loads((Path(out) / "results.json").read_text())["summary"]
    metrics = METRICS + (MPI_METRICS if with_mpi else ())
    return [metric(summary) for _, metric in metrics]


def fast_mode(values):
    """Note [Fast mode]."""
    fastest = min(values)
    return statistics.median(v for v in values if v <= fastest * FAST_MODE_BAND)


def row(label, values):
    return (f"| {label} | {' '.join(f'{v:.2f}' for v in values)} | {statistics.median(values):.2f} | "
            f"{fast_mode(values):.2f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="a checkout with its own .venv (none: the candidate alone)")
    parser.add_argument("--candidate", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--mpi", action="store_true",
                        help="also Open MPI's 4-byte allreduce in the candidate's runs")
    args = parser.parse_args()
    builds = {"candidate": args.candidate.resolve()}
    if args.baseline:
        builds = {"baseline": args.baseline.resolve(), **builds}
    runs = {name: [] for name in builds}
    for round_ in range(args.rounds):
        order = list(builds) if round_ % 2 == 0 else list(reversed(builds))
        for name in order:
            runs[name].append(run_once(builds[name], args.np, args.mpi and name == "candidate"))
            print(f"round {round_ + 1} {name}: " + ", ".join(f"{v:.2f}" for v in runs[name][-1]), flush=True)
    for name in builds:
        print(f"\n{name} ({builds[name]}), {args.rounds} runs; fast mode: Note [Fast mode] in bench/ab.py\n")
        print("| | runs | median | fast mode |")
        print("| --- | --- | --- | --- |")
        labels = [label for label, _ in METRICS + (MPI_METRICS if args.mpi and name == "candidate" else ())]
        for i, label in enumerate(labels):
            print(row(label, [r[i] for r in runs[name]]))
    if "baseline" in runs:
        print("\n| | baseline median -> candidate median | fast mode |")
        print("| --- | --- | --- |")
        for i, (label, _) in enumerate(METRICS):
            before = [r[i] for r in runs["baseline"]]
            after = [r[i] for r in runs["candidate"]]
            a, b = statistics.median(before), statistics.median(after)
            fa, fb = fast_mode(before), fast_mode(after)
            print(f"| {label} | {a:.2f} -> {b:.2f} ({(b - a) / a * 100:+.1f} %) | "
                  f"{fa:.2f} -> {fb:.2f} ({(fb - fa) / fa * 100:+.1f} %) |")
    if args.mpi:
        candidate = runs["candidate"]
        print("\n| candidate / Open MPI, same runs | run by run | median of ratios | of the medians | "
              "of the fast modes |")
        print("| --- | --- | --- | --- | --- |")
        for label, mine, theirs in RATIOS:
            ours = [r[mine] for r in candidate]
            mpi = [r[len(METRICS) + theirs] for r in candidate]
            ratios = [a / b for a, b in zip(ours, mpi)]
            print(f"| {label} | {' '.join(f'{v:.2f}' for v in ratios)} | {statistics.median(ratios):.2f} | "
                  f"{statistics.median(ours) / statistics.median(mpi):.2f} | "
                  f"{fast_mode(ours) / fast_mode(mpi):.2f} |")
    print(f"\n$ {' '.join([Path(sys.executable).name] + sys.argv)}")


if __name__ == "__main__":
    main()
