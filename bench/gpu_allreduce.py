"""Allreduce of CUDA tensors on one real NVIDIA GPU: hvdlite against
torch.distributed's NCCL backend, side by side in one run, and hvdlite's host
path with 2 ranks sharing the GPU. About 30-40 s.

    python bench/gpu_allreduce.py [--out bench/results/gpu_allreduce.json]

(tests/gpu/device_check.sh runs it as its `bench` case, with the hvdlite it
just built.) Rows, all float32, in place, Sum:

  hvdlite 1 rank (NCCL)       hvd.allreduce_: returns once the work is queued,
                              the current stream then waits for it
  torch NCCL 1 rank           dist.all_reduce at world size 1 (a FileStore),
                              the same stream semantics
  hvdlite host path 2 ranks   HVDLITE_GPU_OPERATIONS=host: through pinned host
                              memory and the CPU transport; started by hvdliterun

Each figure: `iterations` calls back to back between two CUDA events on the
current stream, per call, the median of several such runs (after warm-up).
algbw = bytes / time. At world size 1 no byte crosses between ranks: those
rows measure each library's cost per call (negotiation, launches, copies),
not a link. For 2 ranks busbw = algbw * 2(n-1)/n, as nccl-tests define it.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import torch

SIZES = [4, 4 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]
HOST_SIZES = [4, 4 << 10, 1 << 20, 16 << 20, 64 << 20]


def iterations_for(nbytes, host=False):
    if host:
        return 50 if nbytes <= 1 << 20 else 5
    return 200 if nbytes <= 1 << 20 else max(10, (200 << 20) // nbytes * 4)


def time_calls(call, iterations, repeats=5, before_repeat=None):
    """Median microseconds per call, timed with CUDA events."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per_call = []
    for _ in range(repeats):
        if before_repeat is not None:
            before_repeat()
        start.record()
        for _ in range(iterations):
            call()
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) * 1e3 / iterations)
    return statistics.median(per_call)


def row(impl, nbytes, us, iterations, ranks):
    algbw = nbytes / (us * 1e-6) / 1e9
    return {"impl": impl, "bytes": nbytes, "ranks": ranks, "us_per_call": round(us, 2),
            "algbw_GBps": round(algbw, 3),
            "busbw_GBps": round(algbw * 2 * (ranks - 1) / ranks, 3) if ranks > 1 else None,
            "iterations": iterations}


def tensor(nbytes, device):
    return torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=device)


def hvdlite_one_rank(device):
    import hvdlite.torch as hvd
    hvd.init()
    rows = []
    for nbytes in SIZES:
        x = tensor(nbytes, device)
        name = f"bench.{nbytes}"
        iterations = iterations_for(nbytes)
        us = time_calls(lambda: hvd.allreduce_(x, op=hvd.Sum, name=name), iterations)
        rows.append(row("hvdlite 1 rank (NCCL)", nbytes, us, iterations, 1))
    hvd.shutdown()
    return rows


def torch_one_rank(device, folder):
    import torch.distributed as dist
    store = dist.FileStore(os.path.join(folder, "store"), 1)
    dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=device)
    rows = []
    for nbytes in SIZES:
        x = tensor(nbytes, device)
        iterations = iterations_for(nbytes)
        us = time_calls(lambda: dist.all_reduce(x), iterations)
        rows.append(row("torch NCCL 1 rank", nbytes, us, iterations, 1))
    dist.destroy_process_group()
    return rows


def host_worker(path):
    """A rank of the 2-rank host-path job; rank 0 writes the rows to `path`."""
    import hvdlite.torch as hvd
    hvd.init()
    device = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    torch.cuda.set_device(device)
    rows = []
    for nbytes in HOST_SIZES:
        x = tensor(nbytes, device)
        name = f"bench.host.{nbytes}"
        iterations = iterations_for(nbytes, host=True)
        us = time_calls(lambda: hvd.allreduce_(x, op=hvd.Sum, name=name), iterations, repeats=3,
                        before_repeat=hvd.barrier)
        rows.append(row("hvdlite host path 2 ranks", nbytes, us, iterations, hvd.size()))
    if hvd.rank() == 0:
        with open(path, "w") as f:
            json.dump(rows, f)
    hvd.shutdown()


def host_path_two_ranks(folder):
    """Rows of the 2-rank host-path job, or (None, why) when it failed."""
    path = os.path.join(folder, "host.json")
    env = dict(os.environ, HVDLITE_GPU_OPERATIONS="host")
    command = [sys.executable, "-m", "hvdlite.runner", "-np", "2", sys.executable,
               os.path.abspath(__file__), "--host-worker", path]
    # Not from the source tree: there `import hvdlite` finds the sources, without the core.
    done = subprocess.run(command, env=env, cwd=folder, capture_output=True, text=True, timeout=120)
    if done.returncode != 0 or not os.path.exists(path):
        return None, f"exit {done.returncode}: {(done.stdout + done.stderr)[-2000:]}"
    with open(path) as f:
        return json.load(f), None


def size_text(nbytes):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


def print_table(rows):
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    by = {(r["impl"], r["bytes"]): r for r in rows}
    print(f"{'size':>8} | " + " | ".join(f"{impl:>28}" for impl in impls))
    print(f"{'':>8} | " + " | ".join(f"{'us/call':>12} {'GB/s (alg/bus)':>15}" for _ in impls))
    for nbytes in sorted({r["bytes"] for r in rows}):
        cells = []
        for impl in impls:
            r = by.get((impl, nbytes))
            if r is None:
                cells.append(f"{'-':>28}")
            else:
                bw = r["busbw_GBps"] if r["busbw_GBps"] is not None else r["algbw_GBps"]
                cells.append(f"{r['us_per_call']:>12.1f} {bw:>15.2f}")
        print(f"{size_text(nbytes):>8} | " + " | ".join(cells))


def key_numbers(rows):
    """A few figures for tests/gpu/device_check.sh's summary."""
    by = {(r["impl"], r["bytes"]): r for r in rows}
    picks = {"hvdlite_4B_us": ("hvdlite 1 rank (NCCL)", 4, "us_per_call"),
             "torch_4B_us": ("torch NCCL 1 rank", 4, "us_per_call"),
             "hvdlite_4KiB_us": ("hvdlite 1 rank (NCCL)", 4 << 10, "us_per_call"),
             "torch_4KiB_us": ("torch NCCL 1 rank", 4 << 10, "us_per_call"),
             "hvdlite_256MiB_algbw_GBps": ("hvdlite 1 rank (NCCL)", 256 << 20, "algbw_GBps"),
             "torch_256MiB_algbw_GBps": ("torch NCCL 1 rank", 256 << 20, "algbw_GBps"),
             "host2_4B_us": ("hvdlite host path 2 ranks", 4, "us_per_call"),
             "host2_64MiB_busbw_GBps": ("hvdlite host path 2 ranks", 64 << 20, "busbw_GBps")}
    return {key: by[(impl, nbytes)][field] for key, (impl, nbytes, field) in picks.items()
            if (impl, nbytes) in by}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                      "results", "gpu_allreduce.json"))
    parser.add_argument("--host-worker", metavar="PATH", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.host_worker:
        return host_worker(args.host_worker)
    if not torch.cuda.is_available():
        raise SystemExit("bench/gpu_allreduce.py needs a CUDA GPU (torch.cuda.is_available() is False)")
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    with tempfile.TemporaryDirectory(prefix="gpu-allreduce-") as folder:
        rows = hvdlite_one_rank(device) + torch_one_rank(device, folder)
        torch.cuda.empty_cache()  # room for the two ranks
        host_rows, host_error = host_path_two_ranks(folder)
    rows += host_rows or []
    properties = torch.cuda.get_device_properties(device)
    report = {"gpu": properties.name, "torch": torch.__version__, "cuda": torch.version.cuda,
              "rows": rows, "host_path_error": host_error}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"allreduce, float32, in place, Sum, on {properties.name} (torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}); saved to {args.out}")
    print_table(rows)
    print("DEVICE_CHECK_RESULT " + json.dumps(key_numbers(rows), sort_keys=True), flush=True)
    if host_error:
        raise SystemExit(f"the 2-rank host-path job failed: {host_error}")
    print("bench OK", flush=True)


if __name__ == "__main__":
    main()
