"""One rank of bench/training_multihost.py: trains each model on synthetic data
with each way of sharing gradients in turn, and rank 0 appends samples/s as a
line of JSON per run.

    hvdliterun -np 4 -H hostA:2,hostB:2 python bench/training_multihost_worker.py \
        --variants hvdlite-flat,ddp --models resnet18 --steps 10 --json out.jsonl

One job runs them all, one after the other (hvd.init/shutdown and DDP's
process group each time), because starting 4 ranks of PyTorch costs more than
a run's steps on this machine.

Variants (VARIANTS): "reference" (one process of plain PyTorch), "alone" (N
processes that never exchange gradients: what compute alone allows N ranks
sharing this machine's cores), hvdlite.torch's DistributedOptimizer
uncompressed ("hvdlite-flat", "hvdlite-two-level": HVDLITE_HIERARCHICAL_ALLREDUCE,
set here before hvd.init(), decides which), with Compression.fp16 and with
its PowerSGD compressor, and PyTorch DDP over gloo, plain and with DDP's
PowerSGD communication hook. One thread per rank.
"""
import argparse
import gc
import itertools
import json
import os
import sys
import time

import torch

import training_models
from torch_ranks import GLOO, HVDLITE, TorchRank

VARIANTS = ("reference", "alone", "hvdlite-flat", "hvdlite-two-level", "hvdlite-fp16",
            "hvdlite-powersgd", "ddp", "ddp-powersgd")
HVDLITE_VARIANTS = ("alone", "hvdlite-flat", "hvdlite-two-level", "hvdlite-fp16",
                    "hvdlite-powersgd")
DDP_VARIANTS = ("ddp", "ddp-powersgd")


def powersgd_missing():
    """Why hvdlite's PowerSGD compressor cannot be measured, or None."""
    import hvdlite.torch as hvd
    if not hasattr(hvd.Compression, "powersgd"):
        return "not available in this build (hvdlite.torch.Compression has no powersgd)"
    return None


class Rank(TorchRank):
    """The model and its optimizer as the variant wraps them."""

    def __init__(self, args, model_name, variant):
        if variant in HVDLITE_VARIANTS:
            super().__init__(HVDLITE)
        elif variant in DDP_VARIANTS:
            super().__init__(GLOO, f"{os.environ['BENCH_GLOO_ADDR']}:"
                                   f"{os.environ['BENCH_GLOO_PORT']}")
        else:  # the reference: one process alone
            super().__init__(None)
        self.variant = variant
        model = training_models.build(model_name)
        self.params = training_models.parameter_count(model)
        if self.hvd:
            self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        elif self.dist:
            if self.variant == "ddp":
                model = torch.nn.parallel.DistributedDataParallel(model)
            else:
                # One bucket: the hook issues its second and third allreduce
                # from future callbacks, which run on gloo's worker threads, so
                # with several buckets in flight ranks issued them in
                # different orders and gloo aborted ("Received data size
                # doesn't match expected size"; ResNet-18 at 2 x 2 here).
                model = torch.nn.parallel.DistributedDataParallel(
                    model, bucket_cap_mb=4 * self.params / 2**20 + 1)
                from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
                state = powerSGD_hook.PowerSGDState(
                    process_group=None, matrix_approximation_rank=args.powersgd_rank,
                    start_powerSGD_iter=args.powersgd_start)
                model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        if self.variant.startswith("hvdlite-"):
            optimizer = self.hvd.DistributedOptimizer(
                optimizer, named_parameters=model.named_parameters(),
                compression=self._compression(args))
        self.model, self.optimizer = model, optimizer
        self.loss = torch.nn.CrossEntropyLoss()
        self.x, self.y = training_models.synthetic_batch(model_name, seed=self.rank)

    def _compression(self, args):
        if self.variant == "hvdlite-fp16":
            return self.hvd.Compression.fp16
        if self.variant == "hvdlite-powersgd":
            if (reason := powersgd_missing()):
                raise RuntimeError(f"hvdlite-powersgd: {reason}; the driver should not have "
                                   "started this run")
            return self.hvd.Compression.powersgd(rank=args.powersgd_rank,
                                                 start_iter=args.powersgd_start)
        return self.hvd.Compression.none

    def train(self, steps):
        for _ in range(steps):
            self.optimizer.zero_grad()
            self.loss(self.model(self.x), self.y).backward()
            self.optimizer.step()


def run(args, model, variant, gloo_port):
    """Warm-up, then the timed steps between two meetings; returns rank 0's
    record (None elsewhere). Every variant builds its own model and library
    state, and leaves nothing running."""
    if variant == "hvdlite-flat":  # read by hvd.init(), as hvdliterun's flag sets it
        os.environ["HVDLITE_HIERARCHICAL_ALLREDUCE"] = "0"
    else:  # the launcher's default: two levels where hosts have several ranks
        os.environ.pop("HVDLITE_HIERARCHICAL_ALLREDUCE", None)
    os.environ["BENCH_GLOO_PORT"] = str(gloo_port)
    rank = Rank(args, model, variant)
    rank.train(args.warmup)
    rank.meet()
    start = time.perf_counter()
    rank.train(args.steps)
    rank.meet()
    seconds = rank.slowest([time.perf_counter() - start])[0]
    batch = training_models.MODELS[model]["batch"]
    record = {"variant": variant, "model": model, "ranks": rank.size, "params": rank.params,
              "batch_per_rank": batch, "steps": args.steps, "seconds": seconds,
              "step_s": seconds / args.steps,
              "samples_per_s": rank.size * batch * args.steps / seconds}
    rank.shutdown()
    return record if rank.rank == 0 else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", required=True,
                        help="comma-separated, run one after the other: " + ",".join(VARIANTS))
    parser.add_argument("--models", required=True,
                        help="comma-separated: " + ",".join(training_models.MODELS))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed steps first; more than --powersgd-start, so that every "
                             "timed step of a PowerSGD variant is compressed")
    parser.add_argument("--powersgd-rank", type=int, default=4)
    parser.add_argument("--powersgd-start", type=int, default=2,
                        help="steps before PowerSGD compresses (DDP's hook needs at least 2)")
    parser.add_argument("--json", required=True, help="rank 0 appends one line per run")
    args = parser.parse_args()
    if args.warmup <= args.powersgd_start:
        sys.exit(f"--warmup {args.warmup} must exceed --powersgd-start {args.powersgd_start}")
    variants, models = args.variants.split(","), args.models.split(",")
    wrong = [v for v in variants if v not in VARIANTS] + \
        [m for m in models if m not in training_models.MODELS]
    if wrong:
        sys.exit(f"unknown variant or model: {', '.join(wrong)}")
    # gloo's store gets a fresh port per DDP run, so none waits out TIME_WAIT.
    ports = itertools.count(int(os.environ.get("BENCH_GLOO_PORT", 29711)))
    for model in models:
        for variant in variants:
            record = run(args, model, variant, next(ports))
            if record:
                with open(args.json, "a") as out:
                    out.write(json.dumps(record) + "\n")
                print(f"{variant} {model} {record['ranks']} rank(s): "
                      f"{record['samples_per_s']:.1f} samples/s", flush=True)
            gc.collect()  # the last variant's model and buffers, before the next one's


if __name__ == "__main__":
    main()
