"""One rank of bench/sharded_memory.py: trains the benchmark's transformer
stack with Adam under one way of keeping model state (METHODS), and writes
what the rank held as one line of JSON.

    hvdliterun -np 4 python bench/sharded_memory_worker.py --method hvdlite-stage2 \
        --json out.jsonl

One method per job, so that each process's peak resident set size (ru_maxrss
never goes down) is that method's alone. hvdlite's methods use hvdlite.torch;
PyTorch's (ZeroRedundancyOptimizer under DDP, FSDP2's fully_shard) run a gloo
process group over the same ranks, as bench/training_multihost_worker.py's
DDP does (hvdliterun only starts them; its HVDLITE_RANK/SIZE say who is who).

What is measured (Note [Counting model state]):
- model state: the bytes of the parameters, the gradients and the optimizer
  state the rank holds, from the tensors themselves;
- a census: every tensor the garbage collector can reach at the same
  points, as a check that nothing Python holds (a copy of rows) went
  uncounted;
- peak RSS: the rank process's resource.getrusage(RUSAGE_SELF).ru_maxrss
  after the timed steps (its whole life: the runtime, the model's
  construction, activations, allocator caches and transient buffers too);
- step time: per step, the slowest rank's time between two barriers; the
  driver takes the median.
"""
import argparse
import gc
import json
import os
import resource
import time
import warnings

import torch

import training_models
from torch_ranks import GLOO, HVDLITE, TorchRank

METHODS = ("hvdlite", "hvdlite-stage1", "hvdlite-stage2", "zero", "fsdp2")
LABELS = {"hvdlite": "hvdlite unsharded", "hvdlite-stage1": "hvdlite stage 1",
          "hvdlite-stage2": "hvdlite stage 2", "zero": "ZeroRedundancyOptimizer (DDP, gloo)",
          "fsdp2": "FSDP2 fully_shard (gloo)"}
STAGES = {"hvdlite": 0, "hvdlite-stage1": 1, "hvdlite-stage2": 2}
# The model: 8 encoder blocks of width 1024 (feed-forward 4096, 8 heads) and
# a 1024-way head: 101.8 M parameters, 407 MB in float32 (1.63 GB of fp32
# model state with Adam). Two sequences of 16 positions per rank: small
# activations, so that model state is what the memory columns compare.
# "tiny" (64 wide, one block: 50 K parameters) is for checking the harness
# in seconds, not for numbers.
SIZES = {"transformer-100m": {"width": 1024, "blocks": 8, "classes": 1024},
         "tiny": {"width": 64, "blocks": 1, "classes": 64}}
BATCH, SEQUENCE = 2, 16
LR = 1e-4

# Note [Counting model state]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Bytes are counted per storage, once: a gradient that is a view of a DDP
# bucket, a rank's rows that are a view of their parameter (hvdlite's Note
# [Shard views]), or a parameter an optimizer shares with the model counts
# where it first appears, in the order parameters, gradients, optimizer
# state. DTensors (FSDP2) count their local shard. Counted twice in the last
# warm-up step, right after backward and right after the step, and each
# category's larger count is reported: stage 2 frees each full gradient
# during backward but gets some reduced rows only in step()'s synchronize, so
# it holds the most gradients after the step; the others hold as many at
# both points. Gradients are the model parameters' .grad and the .grad of
# what the optimizer steps (a sharded optimizer's rows: stage 1 holds both).
# Optimizer state is the `state` of the torch optimizer that runs the update
# (ZeroRedundancyOptimizer's local one), counted after the step; it lives
# from the first step on, so the next backward holds it too. Anything that
# optimizer steps which is not a view of a parameter (a copy of rows) would
# count as optimizer state. The census adds every tensor the garbage
# collector reaches at the same two points: what the categories missed, if
# anything, shows as the difference (tensors only C++ holds, such as DDP's
# buckets when they are not the gradients, or a collective's buffers, show
# only in RSS).


def local(tensor):
    """The tensor this rank holds (a DTensor's local shard)."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


class Ledger:
    """Bytes by category, each storage counted once (Note [Counting model state])."""

    def __init__(self):
        self.seen, self.bytes = set(), {}

    def add(self, category, tensors):
        self.bytes.setdefault(category, 0)
        for tensor in tensors:
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = local(tensor).untyped_storage()
            if storage.data_ptr() in self.seen or storage.nbytes() == 0:
                continue
            self.seen.add(storage.data_ptr())
            self.bytes[category] += storage.nbytes()


def census():
    """Bytes of every distinct storage of a tensor the garbage collector
    reaches (tensors only C++ holds, such as DDP's buckets when they are not
    the gradients, are not found)."""
    ledger = Ledger()
    with warnings.catch_warnings():  # isinstance() reads deprecated torch.distributed aliases
        warnings.simplefilter("ignore", FutureWarning)
        ledger.add("all", [o for o in gc.get_objects() if isinstance(o, torch.Tensor)])
    return ledger.bytes["all"]


def stepping_optimizer(method, optimizer):
    """The torch optimizer that runs the update and keeps the state:
    ZeroRedundancyOptimizer's local one; hvdlite's DistributedOptimizer is an
    instance of the wrapped optimizer's own class, whose parameter groups hold
    this rank's rows when sharded (Note [Shard views] in
    hvdlite/torch/sharded_optimizer.py)."""
    return optimizer.optim if method == "zero" else optimizer


class Rank(TorchRank):
    """The model, and its optimizer as the method wraps it."""

    def __init__(self, method, size, gloo_port):
        super().__init__(HVDLITE if method in STAGES else GLOO, f"127.0.0.1:{gloo_port}")
        self.method = method
        self.trace = []  # (where, RSS now, peak RSS so far): where the memory went
        self.mark("runtime started")
        spec = SIZES[size]
        model = training_models.TransformerStack(spec["width"], spec["classes"], spec["blocks"])
        self.params = training_models.parameter_count(model)
        self.mark("model built")
        self.model, self.optimizer = self._wrap(model)
        self.mark("optimizer wrapped")
        self.loss = torch.nn.CrossEntropyLoss()
        generator = torch.Generator().manual_seed(self.rank)
        self.x = torch.randn(BATCH, SEQUENCE, spec["width"], generator=generator)
        self.y = torch.randint(0, spec["classes"], (BATCH * SEQUENCE,), generator=generator)

    def _wrap(self, model):
        if self.hvd:
            self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            stage = STAGES[self.method]
            extra = {"sharding_stage": stage} if stage else {}  # stage 0: today's call
            return model, self.hvd.DistributedOptimizer(
                torch.optim.Adam(model.parameters(), lr=LR),
                named_parameters=model.named_parameters(), **extra)
        if self.method == "zero":
            from torch.distributed.optim import ZeroRedundancyOptimizer
            # Gradients as views of DDP's buckets: without, DDP keeps a second
            # copy of every gradient in its buckets, which would not be
            # ZeroRedundancyOptimizer's doing.
            model = torch.nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=True)
            return model, ZeroRedundancyOptimizer(model.parameters(),
                                                  optimizer_class=torch.optim.Adam, lr=LR)
        from torch.distributed.fsdp import fully_shard
        for block in model.blocks.layers:  # one unit per block, as FSDP2's examples do
            fully_shard(block)
        fully_shard(model)
        return model, torch.optim.Adam(model.parameters(), lr=LR)

    def step(self, count=False):
        """One training step; with count, what is held after backward and
        after the step (Note [Counting model state])."""
        self.optimizer.zero_grad()
        self.loss(self.model(self.x), self.y).backward()
        if count:
            self.mark("counted step: after backward")
            self.after_backward = self.count()
        self.optimizer.step()
        if count:
            self.mark("counted step: after step")
            self.after_step = self.count()

    def mark(self, where):
        self.trace.append((where, rss_now(), peak_rss()))

    def count(self):
        """Bytes held by category, and the census, now."""
        ledger = Ledger()
        parameters = list(self.model.parameters())
        inner = stepping_optimizer(self.method, self.optimizer)
        stepped = [p for group in inner.param_groups for p in group["params"]]
        ledger.add("parameters", parameters)
        ledger.add("gradients", [p.grad for p in parameters + stepped if p.grad is not None])
        ledger.add("optimizer_state", [v for s in inner.state.values() for v in s.values()])
        ledger.add("optimizer_state", stepped)  # copies of rows, if an optimizer made them
        return {**ledger.bytes, "census": census()}


def peak_rss():
    """ru_maxrss of this process, in bytes (Linux counts it in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def rss_now():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run(args):
    rank = Rank(args.method, args.size, args.gloo_port)
    for index in range(args.warmup - 1):
        rank.step()
        if index == 0:
            rank.mark("first step done (optimizer state made)")
    rank.mark("counted step: start")
    rank.step(count=True)  # the last warm-up step: the state the first step made is held
    times = []
    for _ in range(args.steps):
        rank.meet()
        start = time.perf_counter()
        rank.step()
        times.append(time.perf_counter() - start)
    rank.meet()
    rank.mark("timed steps done")
    held = {key: max(rank.after_backward[key], rank.after_step[key])
            for key in ("parameters", "gradients", "census")}
    per_rank = {
        "parameters": rank.everyone(held["parameters"]),
        "gradients": rank.everyone(held["gradients"]),
        "optimizer_state": rank.everyone(rank.after_step["optimizer_state"]),
        "gradients_after_backward": rank.everyone(rank.after_backward["gradients"]),
        "gradients_after_step": rank.everyone(rank.after_step["gradients"]),
        "tensors_held": rank.everyone(held["census"]),
        "peak_rss": rank.everyone(peak_rss()),
        "rss_end": rank.everyone(rss_now()),
    }
    # Where the memory went: RSS now and peak RSS so far at each mark, per rank.
    trace = [{"where": where, "rss": rank.everyone(now), "peak_rss": rank.everyone(peak)}
             for where, now, peak in rank.trace]
    record = {"method": args.method, "size": args.size, "ranks": rank.size, "params": rank.params,
              "batch_per_rank": BATCH, "sequence": SEQUENCE, "warmup": args.warmup,
              "step_s": rank.slowest(times), "per_rank": per_rank, "rss_trace": trace}
    rank.shutdown()
    return record if rank.rank == 0 else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", required=True, choices=METHODS)
    parser.add_argument("--size", default="transformer-100m", choices=SIZES)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (at least 2)")
    parser.add_argument("--gloo-port", type=int, default=29811)
    parser.add_argument("--json", required=True, help="rank 0 appends its record")
    args = parser.parse_args()
    if args.warmup < 2:
        parser.error("--warmup must be at least 2: the last warm-up step is the one counted, "
                     "and optimizer state exists only after the first")
    record = run(args)
    if record:
        with open(args.json, "a") as out:
            out.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
