"""PyTorch training throughput on synthetic images with hvdlite.torch (img/sec),
like Horovod's pytorch_synthetic_benchmark.py; --ddp runs the same model and
batch with PyTorch DDP instead (NCCL on GPUs, gloo on CPUs), for comparison.

    hvdliterun -np 2 python examples/pytorch/synthetic_benchmark.py
    python examples/pytorch/synthetic_benchmark.py                     # one process
    torchrun --nproc-per-node 2 examples/pytorch/synthetic_benchmark.py --ddp
    hvdliterun -np 8 python examples/pytorch/synthetic_benchmark.py --model resnet50 --image-size 224

On a machine with GPUs each rank trains on its own GPU (GPU 0 when it sees one,
else its local rank's) and every timed interval ends with
torch.cuda.synchronize(), so img/sec counts finished work: hvdlite's step()
and DDP's backward() return once the GPU work is queued. --model resnet50 is
ResNet-50 defined here (no torchvision needed); other names are torchvision's
when it is installed; the default is a small ResNet that runs on CPUs in
reasonable time.
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.nn.functional as F


def shortcut(channels_in, channels_out, stride):
    """A residual block's skip path: the input itself, or a 1x1 projection where
    the block changes the resolution or the channel count."""
    if stride == 1 and channels_in == channels_out:
        return torch.nn.Identity()
    return torch.nn.Sequential(torch.nn.Conv2d(channels_in, channels_out, 1, stride, bias=False),
                               torch.nn.BatchNorm2d(channels_out))


class Block(torch.nn.Module):
    def __init__(self, channels_in, channels_out, stride):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(channels_in, channels_out, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(channels_out)
        self.conv2 = torch.nn.Conv2d(channels_out, channels_out, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(channels_out)
        self.shortcut = shortcut(channels_in, channels_out, stride)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class SmallResNet(torch.nn.Module):
    """A ResNet-18-shaped network at a quarter of the width (about 0.7 M parameters)."""

    def __init__(self, num_classes=1000, width=16):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, width, 3, 1, 1, bias=False),
                                        torch.nn.BatchNorm2d(width), torch.nn.ReLU())
        layers, channels = [], width
        for stage, out in enumerate([width, 2 * width, 4 * width, 8 * width]):
            stride = 1 if stage == 0 else 2
            layers += [Block(channels, out, stride), Block(out, out, 1)]
            channels = out
        self.layers = torch.nn.Sequential(*layers)
        self.fc = torch.nn.Linear(channels, num_classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class Bottleneck(torch.nn.Module):
    def __init__(self, channels_in, width, stride):
        super().__init__()
        channels_out = 4 * width
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(channels_in, width, 1, bias=False), torch.nn.BatchNorm2d(width), torch.nn.ReLU(),
            torch.nn.Conv2d(width, width, 3, stride, 1, bias=False), torch.nn.BatchNorm2d(width),
            torch.nn.ReLU(),
            torch.nn.Conv2d(width, channels_out, 1, bias=False), torch.nn.BatchNorm2d(channels_out))
        self.shortcut = shortcut(channels_in, channels_out, stride)

    def forward(self, x):
        return F.relu(self.body(x) + self.shortcut(x))


class ResNet50(torch.nn.Module):
    """torchvision's resnet50 layout (3, 4, 6, 3 bottlenecks; 25.6 M parameters)."""

    def __init__(self, num_classes=1000):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 7, 2, 3, bias=False), torch.nn.BatchNorm2d(64),
                                        torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1))
        layers, channels = [], 64
        for stage, (blocks, width) in enumerate([(3, 64), (4, 128), (6, 256), (3, 512)]):
            for block in range(blocks):
                layers.append(Bottleneck(channels, width, 2 if stage > 0 and block == 0 else 1))
                channels = 4 * width
        self.layers = torch.nn.Sequential(*layers)
        self.fc = torch.nn.Linear(channels, num_classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def make_model(name):
    if name == "small_resnet":
        return SmallResNet()
    if name == "resnet50":
        return ResNet50()
    try:
        from torchvision import models
    except ImportError:
        raise SystemExit(f"--model {name} needs torchvision (pip install torchvision); "
                         "the built-in model is small_resnet") from None
    return getattr(models, name)()


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="small_resnet")
    parser.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--num-warmup-batches", type=int, default=5)
    parser.add_argument("--num-batches-per-iter", type=int, default=5)
    parser.add_argument("--num-iters", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    parser.add_argument("--fp16-allreduce", action="store_true")
    parser.add_argument("--ddp", action="store_true",
                        help="PyTorch DDP instead of hvdlite, over NCCL on GPUs and gloo on CPUs "
                             "(start with torchrun)")
    parser.add_argument("--json", action="store_true", help="rank 0 also prints one JSON line of the results")
    return parser.parse_args()


def setup_hvdlite(model, optimizer, args):
    import hvdlite.torch as hvd
    hvd.init()
    if torch.cuda.is_available():  # one GPU per rank (docs/gpus.md); gradients averaged with NCCL
        torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
        model.cuda()  # the parameters stay the objects the optimizer holds
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    def total(value):
        return float(hvd.allreduce(torch.tensor(value, dtype=torch.float64), op=hvd.Sum))
    return model, optimizer, hvd.rank(), hvd.size(), total, "hvdlite"


def setup_ddp(model, optimizer, args):
    import torch.distributed as dist
    if torch.cuda.is_available():  # the same GPU choice as hvdlite's above
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
        torch.cuda.set_device(device)
        model.cuda()
        dist.init_process_group("nccl", device_id=device)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index])
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
        model = torch.nn.parallel.DistributedDataParallel(model)  # broadcasts rank 0's parameters

    def total(value):
        tensor = torch.tensor(value, dtype=torch.float64, device=device)
        dist.all_reduce(tensor)
        return float(tensor)
    return model, optimizer, dist.get_rank(), dist.get_world_size(), total, f"DDP ({dist.get_backend()})"


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    model = make_model(args.model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    setup = setup_ddp if args.ddp else setup_hvdlite
    model, optimizer, rank, size, total, backend = setup(model, optimizer, args)

    device = next(model.parameters()).device
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    target = torch.randint(0, 1000, (args.batch_size,), device=device)

    def benchmark_step():
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()

    # Work queued on the GPU is not work done: each interval ends when the GPU is idle.
    finish = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def timed(steps):
        finish()
        start = time.perf_counter()
        for _ in range(steps):
            benchmark_step()
        finish()
        return time.perf_counter() - start

    def log(text):
        if rank == 0:
            print(text, flush=True)

    log(f"Model: {args.model}, batch size {args.batch_size} per rank, {args.image_size}x"
        f"{args.image_size} images, {backend}, {size} rank(s) with {args.threads} thread(s) each, on "
        f"{device}")
    timed(args.num_warmup_batches)
    img_secs = []
    for iteration in range(args.num_iters):
        seconds = timed(args.num_batches_per_iter)
        img_secs.append(args.batch_size * args.num_batches_per_iter / seconds)
        log(f"Iter #{iteration}: {img_secs[-1]:.1f} img/sec per rank")
    mean, conf = float(np.mean(img_secs)), float(1.96 * np.std(img_secs))
    log(f"Img/sec per rank: {mean:.1f} +-{conf:.1f}")
    # The sum of every rank's own rate (Horovod multiplies rank 0's by size).
    overall = total(mean)
    log(f"Total img/sec on {size} rank(s): {overall:.1f} +-{size * conf:.1f}")
    if args.json:
        log(json.dumps({"backend": backend, "model": args.model, "ranks": size, "device": device.type,
                        "batch_size": args.batch_size, "img_per_sec_per_rank": mean, "img_per_sec": overall}))


if __name__ == "__main__":
    main()
