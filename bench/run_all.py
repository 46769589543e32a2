"""The benchmark suite in one command: hvdlite and every installed peer
(PyTorch gloo via torch.distributed, MPI via mpi4py) side by side, in one run.

    python bench/run_all.py [--np 2] [--repeat 3] [--quick] [--out bench/results]

Runs the memory-bandwidth reference, then, for each repetition and each
backend in turn (interleaved, so drifting machine load hits all alike), the
collectives and the fusion step. Prints one table per collective with every
backend's median, p90 and bus bandwidth, and writes everything to
<out>/results.json (each repetition's raw numbers and the median over them).
"""
import argparse
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from backends import MPIRUN_BACKENDS

HERE = Path(__file__).resolve().parent
QUICK_SIZES = "4,1024,65536,1048576,16777216"


def available_backends():
    found = ["hvdlite"]
    if importlib.util.find_spec("torch") is not None:
        found.append("gloo")
    if mpirun() is not None and _hvdlite_has_mpi():
        found.append("hvdlite-mpi")
    if importlib.util.find_spec("mpi4py") is not None and mpirun() is not None:
        found.append("mpi")
    return found


def _hvdlite_has_mpi():
    from hvdlite.common import basics
    return basics.mpi_built()


def mpirun():
    beside = Path(sys.executable).parent / "mpirun"
    return str(beside) if beside.exists() else shutil.which("mpirun")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(backend, script, np_, extra, timeout):
    """Runs script on np_ ranks under the backend's launcher; returns its JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        args = [str(HERE / script), "--backend", backend, "--json", str(out), *extra]
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        if backend in MPIRUN_BACKENDS:
            command = [mpirun(), "--oversubscribe", "-np", str(np_), sys.executable, *args]
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        else:
            command = [sys.executable, "-m", "hvdlite.runner", "-np", str(np_), sys.executable, *args]
            env["BENCH_GLOO_PORT"] = str(free_port())
        print(f"$ {' '.join(command)}", flush=True)
        done = subprocess.run(command, env=env, timeout=timeout, cwd=str(HERE))
        if done.returncode != 0 or not out.exists():
            print(f"  {backend} {script} failed (exit {done.returncode}); left out", flush=True)
            return None
        return json.loads(out.read_text())


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
    summary = summarize(raw)
    summary["membw"] = json.loads((out / "membw.json").read_text())
    summary["ranks"] = args.np
    summary["repeat"] = args.repeat
    (out / "results.json").write_text(json.dumps({"summary": summary, "raw": raw}, indent=1))
    print_tables(summary, args.np)
    print(f"\nmemory copy: one process {summary['membw']['one_process_GBps']:.1f} GB/s, "
          f"{args.np} at once {summary['membw']['each_concurrent_GBps']:.1f} GB/s each")
    print(f"results: {out / 'results.json'}")


if __name__ == "__main__":
    main()
