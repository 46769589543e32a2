"""Data-parallel PyTorch training on scikit-learn's digits with hvdlite.torch.

    hvdliterun -np 2 python examples/pytorch/train_digits.py
    python examples/pytorch/train_digits.py            # one process, for comparison

A script written for Horovod, with Horovod's five additions (marked HVD) and
only the import changed. Each rank trains on its shard of the training set
with the per-rank batch size; the learning rate grows with the number of ranks
as the global batch does, and the run reaches the test accuracy of one process.
"""
import argparse
import time

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import hvdlite.torch as hvd


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 16, kernel_size=3, padding=1)
        self.fc1 = torch.nn.Linear(16 * 4 * 4, 64)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def datasets():
    digits = load_digits()
    images = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)
    labels = torch.tensor(digits.target)
    x_train, x_test, y_train, y_test = train_test_split(images, labels, test_size=0.25,
                                                        random_state=0)
    return TensorDataset(x_train, y_train), TensorDataset(x_test, y_test)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    parser.add_argument("--lr", type=float, default=0.02, help="learning rate of one process")
    parser.add_argument("--fp16-allreduce", action="store_true", help="send gradients as float16")
    args = parser.parse_args()
    train(args.epochs, args.batch_size, args.lr, args.fp16_allreduce)


def train(epochs=15, batch_size=32, lr=0.02, fp16_allreduce=False):
    """Trains on this rank's shard; returns the test accuracy (the same on
    every rank). examples/ray and examples/spark run this function on their ranks."""
    hvd.init()                                                        # HVD 1: start hvdlite
    torch.set_num_threads(1)                                          # HVD 2: pin a device (CPU:
    if torch.cuda.is_available():                                     # one thread; GPU: its own,
        torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())  # docs/gpus.md)
    torch.manual_seed(hvd.rank())  # different on purpose: the broadcast below aligns the ranks

    train_set, test_set = datasets()
    sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank(), seed=0)
    loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler)

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = Net().to(device)  # CUDA gradients are averaged with NCCL
    optimizer = torch.optim.SGD(model.parameters(), lr=lr * hvd.size(),  # HVD 3: scale lr
                                momentum=0.9)
    compression = hvd.Compression.fp16 if fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer,                   # HVD 4: average gradients
                                         named_parameters=model.named_parameters(),
                                         compression=compression)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)         # HVD 5: start from rank 0's
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)             # model and optimizer state

    start = time.perf_counter()
    for epoch in range(epochs):
        model.train()
        sampler.set_epoch(epoch)
        for images, labels in loader:
            optimizer.zero_grad()
            images, labels = images.to(device), labels.to(device)
            F.cross_entropy(model(images), labels).backward()
            optimizer.step()
    elapsed = time.perf_counter() - start

    # Every rank scores every size-th test sample; the counts are summed.
    model.eval()
    images, labels = (t.to(device) for t in test_set.tensors)
    with torch.no_grad():
        mine = slice(hvd.rank(), None, hvd.size())
        hits = (model(images[mine]).argmax(1) == labels[mine]).sum()
    correct = torch.stack([hits, torch.tensor(len(labels[mine]), device=device)])
    correct = hvd.allreduce(correct, op=hvd.Sum, name="test_accuracy")
    accuracy = int(correct[0]) / int(correct[1])
    if hvd.rank() == 0:
        print(f"{hvd.size()} rank(s): test accuracy {accuracy:.3f} "
              f"after {epochs} epochs in {elapsed:.1f} s")
    return accuracy


if __name__ == "__main__":
    main()
