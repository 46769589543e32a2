"""The benchmark suite in one command: hvdlite and every installed peer
(PyTorch gloo via torch.distributed, MPI via mpi4py, Horovod via horovodrun)
side by side, in one run.

    python bench/run_all.py [--np 2] [--repeat 3] [--quick] [--out bench/results]

Runs the memory-bandwidth reference, then, for each repetition and each
backend in turn (interleaved, so drifting machine load hits all alike), the
collectives and the fusion step. Prints one table per collective with every
backend's median, p90 and bus bandwidth, and writes everything to
<out>/results.json (each repetition's raw numbers and the median over them).
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

import train
from launch import HERE, available_backends, launch

QUICK_SIZES = "4,1024,65536,1048576,16777216"


def median_rows(runs, key):
    """Per size, the median over repetitions of each number."""
    merged = {}
    for rows in runs:
        for row in rows:
            merged.setdefault(row[key], []).append(row)
    return [{k: float(np.median([r[k] for r in rows])) for k in rows[0]}
            for _, rows in sorted(merged.items())]


def summarize(raw):
    """{script: {backend: [run, ...]}} -> medians over repetitions."""
    summary = {"collectives": {}, "fusion": {}}
    for backend, runs in raw["collectives"].items():
        ops = {op for run in runs for op in run["results"]}
        summary["collectives"][backend] = {
            op: median_rows([run["results"].get(op, []) for run in runs], "bytes") for op in ops}
    for backend, runs in raw["fusion"].items():
        labels = runs[0]["results"].keys()
        summary["fusion"][backend] = {
            label: {k: float(np.median([run["results"][label][k] for run in runs]))
                    for k in runs[0]["results"][label]} for label in labels}
    return summary


def print_tables(summary, np_):
    backends = list(summary["collectives"])
    ops = []
    for per_backend in summary["collectives"].values():
        ops += [op for op in per_backend if op not in ops]
    for op in ops:
        print(f"\n{op}, float32, {np_} ranks: median us / p90 us / busbw GB/s")
        print(f"{'bytes':>10} " + " ".join(f"{b:>28}" for b in backends))
        sizes = sorted({row["bytes"] for b in backends for row in summary["collectives"][b].get(op, [])})
        for size in sizes:
            cells = []
            for b in backends:
                row = next((r for r in summary["collectives"][b].get(op, []) if r["bytes"] == size), None)
                cells.append("-" if row is None else
                             f"{row['median_us']:.1f} / {row['p90_us']:.1f} / {row['busbw_GBps']:.2f}")
            print(f"{int(size):>10} " + " ".join(f"{c:>28}" for c in cells))
    if summary["fusion"]:
        print(f"\nfusion step, {np_} ranks: median ms / p90 ms")
        for b, steps in summary["fusion"].items():
            print(f"{b:>10} " + "  ".join(f"{label}: {v['median_ms']:.2f} / {v['p90_ms']:.2f}"
                                           for label, v in steps.items()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--backends",
                        help="comma-separated subset of hvdlite,hvdlite-mpi,gloo,mpi")
    parser.add_argument("--ops", help="comma-separated subset of the collectives")
    parser.add_argument("--sizes", help="comma-separated byte counts")
    parser.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES}, shorter runs")
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--no-train", action="store_true", help="skip the training benchmark")
    args = parser.parse_args()
    backends = args.backends.split(",") if args.backends else available_backends()
    extra = []
    if args.quick:
        extra += ["--sizes", QUICK_SIZES, "--min-seconds", "0.1"]
    elif args.sizes:
        extra += ["--sizes", args.sizes]
    if args.ops:
        extra += ["--ops", args.ops]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    subprocess.run([sys.executable, str(HERE / "membw.py"), "--processes", str(args.np),
                    "--json", str(out / "membw.json")], check=True)
    raw = {"collectives": {}, "fusion": {}}
    for _ in range(args.repeat):
        for backend in backends:
            for script, extra_args in (("collectives.py", extra),
                                       ("fusion.py", ["--min-seconds", "0.3"] if args.quick else [])):
                result = launch(backend, script, args.np, extra_args, args.timeout)
                if result is not None:
                    raw[script[:-3]].setdefault(backend, []).append(result)
    if not args.no_train:
        train_raw = train.run_suite(args.np, list(train.MODELS), train.available(train.BACKENDS),
                                    args.repeat, 10 if args.quick else None, args.timeout)
        raw["train"] = train_raw
    summary = summarize(raw)
    if not args.no_train:
        summary["train"] = train.summarize(raw["train"], args.np)
    summary["membw"] = json.loads((out / "membw.json").read_text())
    summary["ranks"] = args.np
    summary["repeat"] = args.repeat
    (out / "results.json").write_text(json.dumps({"summary": summary, "raw": raw}, indent=1))
    print_tables(summary, args.np)
    if summary.get("train"):
        train.print_table(summary["train"], args.np)
    print(f"\nmemory copy: one process {summary['membw']['one_process_GBps']:.1f} GB/s, "
          f"{args.np} at once {summary['membw']['each_concurrent_GBps']:.1f} GB/s each")
    print(f"results: {out / 'results.json'}")


if __name__ == "__main__":
    main()
