"""Sharded optimizer state (issue 45): what a rank holds training a 101.8 M
parameter transformer stack with fp32 Adam on 1, 2 and 4 ranks of this
machine, for hvdlite's DistributedOptimizer unsharded and with
sharding_stage=1 and 2, PyTorch's ZeroRedundancyOptimizer (under DDP,
gloo) and FSDP2's fully_shard (gloo), all in one run.

    .venv/bin/python bench/sharded_memory.py [--ranks 1,2,4] [--methods ...]
        [--steps 5] [--warmup 3] [--malloc-mmap-threshold BYTES] [--out FILE] [--size tiny]

Every method and rank count is its own job of bench/sharded_memory_worker.py
under hvdliterun (PyTorch's methods start a gloo group over the same
processes), so each rank process's peak resident set size is that method's
alone. Per rank it reports model-state bytes (parameters, gradients,
optimizer state, counted from the tensors: Note [Counting model state] in the
worker), the bytes of every tensor Python can reach (a check), peak RSS
(ru_maxrss of the rank process) and the median step time of the slowest rank.
Prints a table and the issue's targets, writes
bench/results/sharded_memory.json and, where matplotlib is installed,
sharded_memory.png. MB here is 10^6 bytes.
"""
import argparse
import inspect
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from result_files import draw_beside, write_json
from sharded_memory_worker import LABELS, METHODS, SIZES, STAGES

HERE = Path(__file__).resolve().parent
_ports = itertools.count(29811)  # gloo's store: a fresh port per job, none in TIME_WAIT


def missing(method):
    """Why a method cannot run here, or None."""
    if method in ("hvdlite-stage1", "hvdlite-stage2"):
        import hvdlite.torch as hvd
        if "sharding_stage" not in inspect.signature(hvd.DistributedOptimizer).parameters:
            return "hvdlite.torch.DistributedOptimizer has no sharding_stage in this build"
    if method == "fsdp2":
        try:
            from torch.distributed.fsdp import fully_shard  # noqa: F401
        except ImportError as error:
            return f"torch.distributed.fsdp.fully_shard does not import ({error})"
    return None


def job_environment(args):
    env = {"OMP_NUM_THREADS": "1"}
    if args.malloc_mmap_threshold is not None:
        # glibc: allocations this large or larger are mapped on their own and
        # unmapped when freed, and the threshold no longer grows (to 32 MiB)
        # as large blocks are freed; so RSS follows the live tensors instead of
        # keeping freed ones in the heap.
        env["MALLOC_MMAP_THRESHOLD_"] = str(args.malloc_mmap_threshold)
    return env


def run_job(method, ranks, args):
    """One method on `ranks` ranks: rank 0's record, or one saying why there is none."""
    where = {"method": method, "ranks": ranks}
    if (reason := missing(method)):
        return {**where, "unavailable": reason}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "record.jsonl"
        line = [sys.executable, "-m", "hvdlite.runner", "-np", str(ranks), sys.executable,
                str(HERE / "sharded_memory_worker.py"), "--method", method, "--size", args.size,
                "--steps", str(args.steps), "--warmup", str(args.warmup),
                "--gloo-port", str(next(_ports)), "--json", str(out)]
        print(f"$ hvdliterun -np {ranks} python bench/sharded_memory_worker.py --method {method}"
              f"   (load {os.getloadavg()[0]:.1f})", flush=True)
        started = time.perf_counter()
        try:
            done = subprocess.run(line, cwd=HERE, capture_output=True, text=True,
                                  timeout=args.timeout, env={**os.environ, **job_environment(args)})
            code, tail = done.returncode, (done.stdout + done.stderr)[-2000:]
        except subprocess.TimeoutExpired:
            code, tail = f"timeout after {args.timeout} s", ""
        seconds = time.perf_counter() - started
        record = json.loads(out.read_text()) if out.exists() else None
    if code != 0 or record is None:
        print(f"  failed (exit {code}):\n{tail}", flush=True)
        return {**where, "failed": f"exit {code}", "output_tail": tail}
    print(f"  {seconds:.0f} s", flush=True)
    return {**record, "job_s": seconds}


# ----------------------------------------------------------------- report --

def mb(n):
    return n / 1e6


def worst(record, key):
    """The largest value over the ranks (what a job must provision for)."""
    return max(record["per_rank"][key])


def model_state(record, rank=None):
    per_rank = record["per_rank"]
    keys = ("parameters", "gradients", "optimizer_state")
    if rank is not None:
        return sum(per_rank[k][rank] for k in keys)
    return max(sum(per_rank[k][r] for k in keys) for r in range(record["ranks"]))


def find(records, method, ranks):
    found = [r for r in records if (r["method"], r["ranks"]) == (method, ranks)]
    return found[0] if found and "per_rank" in found[0] else None


def print_table(records, args):
    params = next((r["params"] for r in records if "params" in r), 0)
    print(f"\ntransformer stack ({args.size}), {params / 1e6:.2f} M fp32 parameters, Adam; per "
          f"rank, the largest over the ranks; MB = 10^6 bytes; step time: median of "
          f"{args.steps} steps (slowest rank each)\n")
    print("| method | ranks | parameters | gradients | optimizer state | model state | "
          "all tensors held | peak RSS | step (s) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for method in args.methods:
        for ranks in args.ranks:
            row = [r for r in records if (r["method"], r["ranks"]) == (method, ranks)]
            if not row or "per_rank" not in row[0]:
                why = row[0].get("unavailable") or row[0].get("failed") if row else "not run"
                print(f"| {LABELS[method]} | {ranks} | {why} | | | | | | |")
                continue
            r = row[0]
            print(f"| {LABELS[method]} | {ranks} | {mb(worst(r, 'parameters')):.0f} | "
                  f"{mb(worst(r, 'gradients')):.0f} | {mb(worst(r, 'optimizer_state')):.0f} | "
                  f"{mb(model_state(r)):.0f} | {mb(worst(r, 'tensors_held')):.0f} | "
                  f"{mb(worst(r, 'peak_rss')):.0f} | {statistics.median(r['step_s']):.2f} |")


def print_trace(records, args):
    """Where the memory went, at the most ranks: each method's peak RSS so far
    (and RSS then) at each mark of the worker, the largest over the ranks."""
    ranks = max(args.ranks)
    mine = [r for r in (find(records, m, ranks) for m in args.methods) if r and "rss_trace" in r]
    if not mine:
        return
    print(f"\nwhere the memory went at {ranks} ranks: peak RSS so far (RSS now), MB, the "
          "largest over the ranks\n")
    print("| when | " + " | ".join(LABELS[r["method"]] for r in mine) + " |")
    print("| --- |" + " ---: |" * len(mine))
    for index, mark in enumerate(mine[0]["rss_trace"]):
        cells = [f"{mb(max(r['rss_trace'][index]['peak_rss'])):.0f} "
                 f"({mb(max(r['rss_trace'][index]['rss'])):.0f})" for r in mine]
        print(f"| {mark['where']} | " + " | ".join(cells) + " |")


def targets(records, args):
    """The issue's targets, each as (text, met or None when not measurable)."""
    out = []
    for stage in ("hvdlite-stage1", "hvdlite-stage2"):
        for ranks in (2, 4):
            sharded, plain = find(records, stage, ranks), find(records, "hvdlite", ranks)
            if not (sharded and plain):
                out.append((f"{stage} at {ranks}: optimizer state not measured", None))
                continue
            share = plain["per_rank"]["optimizer_state"][0] / ranks
            states = sharded["per_rank"]["optimizer_state"]
            off = max(abs(s / share - 1) for s in states)
            out.append((f"{LABELS[stage]}, {ranks} ranks: optimizer state per rank "
                        f"{'/'.join(f'{mb(s):.1f}' for s in states)}"
                        f" MB vs 1/{ranks} of unsharded {mb(share):.1f} MB: at most "
                        f"{100 * off:.2f}% off (target <= 2%)", off <= 0.02))
    stage2, plain, zero = (find(records, m, 4) for m in ("hvdlite-stage2", "hvdlite", "zero"))
    if stage2 and plain:
        cut = 1 - model_state(stage2) / model_state(plain)
        out.append((f"stage 2, 4 ranks: model state {mb(model_state(stage2)):.0f} MB vs unsharded "
                    f"{mb(model_state(plain)):.0f} MB: {100 * cut:.1f}% less (target >= 50%)",
                    cut >= 0.5))
        rss, rss_plain = worst(stage2, "peak_rss"), worst(plain, "peak_rss")
        cut = 1 - rss / rss_plain
        text = (f"stage 2, 4 ranks: peak RSS {mb(rss):.0f} MB vs unsharded {mb(rss_plain):.0f} MB:"
                f" {100 * cut:.1f}% less (target >= 35%)")
        met = cut >= 0.35
        if zero:
            text += (f"; ZeroRedundancyOptimizer {mb(worst(zero, 'peak_rss')):.0f} MB "
                     "(target: below)")
            met = met and rss < worst(zero, "peak_rss")
        out.append((text, met))
    else:
        out.append(("stage 2 or unsharded at 4 ranks not measured", None))
    for stage in ("hvdlite-stage1", "hvdlite-stage2"):
        for ranks in (2, 4):
            sharded, plain = find(records, stage, ranks), find(records, "hvdlite", ranks)
            if sharded and plain:
                a, b = statistics.median(sharded["step_s"]), statistics.median(plain["step_s"])
                out.append((f"{LABELS[stage]}, {ranks} ranks: step {a:.2f} s vs unsharded "
                            f"{b:.2f} s: {100 * (a / b - 1):+.1f}% (target within 10%)",
                            a <= 1.1 * b))
    return out


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="1,2,4", help="comma-separated rank counts")
    parser.add_argument("--methods", default=",".join(METHODS),
                        help="comma-separated subset of " + ",".join(METHODS))
    parser.add_argument("--size", default="transformer-100m", choices=SIZES,
                        help="the model; tiny: seconds a job, to check the harness, not numbers")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per job")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=400, help="seconds per job")
    parser.add_argument("--out", default=str(HERE / "results" / "sharded_memory.json"))
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--malloc-mmap-threshold", type=int, metavar="BYTES",
                        help="glibc's MALLOC_MMAP_THRESHOLD_ for every rank: peak RSS then "
                             "follows the live tensors, not what the heap kept after frees")
    args = parser.parse_args()
    args.ranks = [int(n) for n in args.ranks.split(",")]
    args.methods = args.methods.split(",")
    if (wrong := [m for m in args.methods if m not in METHODS]):
        parser.error(f"unknown method: {', '.join(wrong)}")
    return args


def main():
    args = parse_args()
    import torch
    load_start = os.getloadavg()
    started = time.time()
    print(f"load average at the start: {load_start}", flush=True)
    records = [run_job(method, ranks, args) for ranks in args.ranks for method in args.methods]
    load_end = os.getloadavg()
    print(f"load average at the end: {load_end}; {time.time() - started:.0f} s in all")
    print_table(records, args)
    print_trace(records, args)
    print("\ntargets (reported, not asserted):")
    met = targets(records, args)
    for text, ok in met:
        print(f"  [{'met' if ok else 'MISSED' if ok is False else '?'}] {text}")
    out = Path(args.out)
    write_json(out, {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "load_start": load_start, "load_end": load_end, "cpus": os.cpu_count(),
        "memory_gb": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9,
        "torch": torch.__version__, "size": args.size, "steps": args.steps, "warmup": args.warmup,
        "environment": job_environment(args),
        "stages": STAGES, "labels": LABELS, "records": records,
        "targets": [{"text": t, "met": ok} for t, ok in met]})
    if not args.no_plot:
        draw_beside(out, "sharded_memory_plot", "bench-sharded")
    failed = [f"{r['method']} at {r['ranks']} ({r['failed']})" for r in records if "failed" in r]
    if failed:
        raise SystemExit(f"{len(failed)} job(s) failed: {', '.join(failed)}; their output is in {out}")


if __name__ == "__main__":
    main()
