"""PyTorch training throughput on synthetic images with hvdlite.torch (img/sec),
like Horovod's pytorch_synthetic_benchmark.py; --ddp runs the same model and
batch with PyTorch DDP (gloo) instead, for comparison.

    hvdliterun -np 2 python examples/pytorch/synthetic_benchmark.py
    python examples/pytorch/synthetic_benchmark.py                     # one process
    torchrun --nproc-per-node 2 examples/pytorch/synthetic_benchmark.py --ddp

--model takes a torchvision model name (e.g. resnet50, with --image-size 224)
when torchvision is installed; the default is a small built-in ResNet that
runs on CPUs in reasonable time.
"""
import argparse
import timeit

import numpy as np
import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, channels_in, channels_out, stride):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(channels_in, channels_out, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(channels_out)
        self.conv2 = torch.nn.Conv2d(channels_out, channels_out, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(channels_out)
        self.shortcut = torch.nn.Sequential()
        if stride != 1 or channels_in != channels_out:
            self.shortcut = torch.nn.Sequential(
                torch.nn.Conv2d(channels_in, channels_out, 1, stride, bias=False),
                torch.nn.BatchNorm2d(channels_out))

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


def make_model(name):
    if name == "small_resnet":
        return SmallResNet()
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
                        help="PyTorch DDP over gloo instead of hvdlite (start with torchrun)")
    return parser.parse_args()


def setup_hvdlite(model, optimizer, args):
    import hvdlite.torch as hvd
    hvd.init()
    if torch.cuda.is_available():  # one GPU per rank; its gradients are averaged with NCCL
        torch.cuda.set_device(hvd.local_rank())
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
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(model)  # broadcasts rank 0's parameters

    def total(value):
        tensor = torch.tensor(value, dtype=torch.float64)
        dist.all_reduce(tensor)
        return float(tensor)
    return model, optimizer, dist.get_rank(), dist.get_world_size(), total, "DDP (gloo)"


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

    def log(text):
        if rank == 0:
            print(text, flush=True)

    log(f"Model: {args.model}, batch size {args.batch_size} per rank, {args.image_size}x"
        f"{args.image_size} images, {backend}, {size} rank(s) with {args.threads} thread(s) each")
    timeit.timeit(benchmark_step, number=args.num_warmup_batches)
    img_secs = []
    for iteration in range(args.num_iters):
        seconds = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
        img_secs.append(args.batch_size * args.num_batches_per_iter / seconds)
        log(f"Iter #{iteration}: {img_secs[-1]:.1f} img/sec per rank")
    mean, conf = float(np.mean(img_secs)), float(1.96 * np.std(img_secs))
    log(f"Img/sec per rank: {mean:.1f} +-{conf:.1f}")
    # The sum of every rank's own rate (Horovod multiplies rank 0's by size).
    overall = total(mean)
    log(f"Total img/sec on {size} rank(s): {overall:.1f} +-{size * conf:.1f}")


if __name__ == "__main__":
    main()
