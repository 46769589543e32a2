"""Allreduce bus bandwidth on real GPUs, one rank per GPU, for hvdlite (started
by hvdliterun) or torch.distributed over NCCL (started by
torch.distributed.run), 8 B to 1 GiB of float32 (8 B: two elements), with
nccl-tests' formula: algbw = bytes / time, busbw = algbw * 2 (n - 1) / n.
Each size: warm-up calls, then the median of timed calls, each ended by
torch.cuda.synchronize(). Rank 0 prints one DEVICE_CHECK_RESULT line with
every size, and "busbw OK".

    python busbw.py hvdlite|torch [--max-bytes N]
"""
import argparse
import os
import statistics
import time

import torch

from device_check_helpers import result

parser = argparse.ArgumentParser()
parser.add_argument("backend", choices=["hvdlite", "torch"])
parser.add_argument("--max-bytes", type=int, default=1 << 30)
args = parser.parse_args()

if args.backend == "hvdlite":
    import hvdlite.torch as hvd
    hvd.init()
    rank, size, local_rank = hvd.rank(), hvd.size(), hvd.local_rank()
else:
    import torch.distributed as dist
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank % torch.cuda.device_count())
device = torch.device("cuda", torch.cuda.current_device())
if args.backend == "torch":
    dist.init_process_group("nccl", device_id=device)


def allreduce(x, name):
    if args.backend == "hvdlite":
        hvd.allreduce_(x, op=hvd.Sum, name=name)
    else:
        dist.all_reduce(x)


measured = []
sizes = [8 << (2 * k) for k in range(15) if 8 << (2 * k) <= args.max_bytes]
if args.max_bytes not in sizes:
    sizes.append(args.max_bytes)
for nbytes in sizes:
    x = torch.ones(nbytes // 4, device=device)
    timed = 20 if nbytes < (64 << 20) else 5
    samples = []
    for i in range(3 + timed):
        torch.cuda.synchronize()
        start = time.perf_counter()
        allreduce(x, f"busbw.{nbytes}")
        torch.cuda.synchronize()
        if i >= 3:
            samples.append(time.perf_counter() - start)
    seconds = statistics.median(samples)
    algbw = nbytes / seconds / 1e9
    measured.append({"bytes": nbytes, "us": round(seconds * 1e6, 1), "algbw_gbs": round(algbw, 2),
                     "busbw_gbs": round(algbw * 2 * (size - 1) / size, 2)})
    del x
if rank == 0:
    result(case="busbw", backend=args.backend, ranks=size, sizes=measured)
if args.backend == "torch":
    dist.destroy_process_group()
print("busbw OK", flush=True)
