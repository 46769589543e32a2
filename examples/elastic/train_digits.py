"""Elastic PyTorch training on scikit-learn's digits with hvdlite.torch.

    export HOSTS_FILE=$(mktemp -d)/hosts.txt; echo 127.0.0.1:1 > $HOSTS_FILE
    hvdliterun --min-np 1 --max-np 3 \
        --host-discovery-script examples/elastic/discover_hosts.sh \
        python examples/elastic/train_digits.py

While it runs, add a host (`echo 127.0.0.2:1 >> $HOSTS_FILE`):
the job grows at the next commit and the new worker receives the model,
the optimizer state and the epoch's progress. Kill a worker instead
(`kill -9 <pid>` of one of them): the others return to the last commit and
go on without it. A script written for Horovod's elastic mode, with only the
import changed.
"""
import argparse
import time

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

import hvdlite.torch as hvd


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    parser.add_argument("--lr", type=float, default=0.02, help="learning rate of one process")
    parser.add_argument("--batches-per-commit", type=int, default=5)
    parser.add_argument("--step-delay", type=float, default=0.05,
                        help="seconds to sleep per batch, so there is time to change hosts")
    args = parser.parse_args()

    hvd.init()
    torch.set_num_threads(1)
    digits = load_digits()
    data = TensorDataset(torch.tensor(digits.data / 16.0, dtype=torch.float32),
                         torch.tensor(digits.target))
    # Shares out what is left of each epoch among the ranks there are now.
    sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    # Everything that must survive a reset; new workers receive it from rank 0.
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0)

    def on_reset():  # the global batch changed with the number of ranks
        for group in optimizer.param_groups:
            group["lr"] = args.lr * hvd.size()
        if hvd.rank() == 0:
            print(f"re-formed at {hvd.size()} rank(s), epoch {state.epoch}", flush=True)

    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state):
        while state.epoch < args.epochs:
            # After a reset the loader yields only this rank's share of the
            # samples not yet processed (committed) in this epoch.
            for batch, (x, y) in enumerate(loader):
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
                sampler.record_batch(batch, args.batch_size)
                time.sleep(args.step_delay)
                if (batch + 1) % args.batches_per_commit == 0:
                    state.commit()
            state.epoch += 1
            sampler.set_epoch(state.epoch)
            state.commit()

    train(state)
    if hvd.rank() == 0:
        with torch.no_grad():
            x, y = data.tensors
            accuracy = (model(x).argmax(1) == y).float().mean().item()
        print(f"training accuracy {accuracy:.3f} after {args.epochs} epochs, finishing at "
              f"{hvd.size()} rank(s)")


if __name__ == "__main__":
    main()
