"""--steps full-batch SGD steps of the least-squares problem of
tests/elastic/workers/reference.py with hvdlite.torch's DistributedOptimizer,
each rank on its own rows; prints, as one JSON line, where the rank ran and
the weights and momentum buffer it ended with. Whatever started it (torchrun
here, as Kubeflow Trainer runs it), every rank must end with the weights of
reference_torch(steps), one process on every row."""
import argparse
import json
import os
import socket
import sys
from pathlib import Path

import torch

import hvdlite.torch as hvd

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "elastic" / "workers"))
from reference import DATA_X, DATA_Y, make_torch_model  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    steps = parser.parse_args().steps
    hvd.init()
    model, optimizer = make_torch_model()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    # Equal shards: the average of the ranks' mean gradients is the mean over all rows.
    rows = slice(hvd.rank() * len(DATA_X) // hvd.size(),
                 (hvd.rank() + 1) * len(DATA_X) // hvd.size())
    x, y = torch.from_numpy(DATA_X[rows]), torch.from_numpy(DATA_Y[rows]).unsqueeze(1)
    for _ in range(steps):
        optimizer.zero_grad()
        (0.5 * ((model(x) - y) ** 2).mean()).backward()
        optimizer.step()
    report = {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
              "local_size": hvd.local_size(), "cross_rank": hvd.cross_rank(),
              "hostname": socket.gethostname(),
              "weights": model.weight.detach().flatten().tolist(),
              "momentum": optimizer.state[model.weight]["momentum_buffer"].flatten().tolist()}
    # One write() of under PIPE_BUF bytes: whole, though the ranks share torchrun's stdout.
    os.write(1, (json.dumps(report) + "\n").encode())
    hvd.shutdown()


if __name__ == "__main__":
    main()
