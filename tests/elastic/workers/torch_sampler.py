"""hvdlite.torch.elastic.ElasticSampler across a growing job: every rank
"processes" its share of each batch; what all ranks processed is gathered
into the committed state. A host is added in the middle of epoch 0, so the
rest of that epoch is shared out among 3 ranks instead of 2.

Prints "final <json>" with the samples processed per epoch (committed).
"""
import argparse
import json

import torch

import hvdlite.torch as hvd
from job_changes import add_host, change_hosts

SAMPLES = 40
BATCH = 4
EPOCHS = 2


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--grow", required=True)
    args = parser.parse_args()

    hvd.init()
    first_size = hvd.size()
    dataset = torch.utils.data.TensorDataset(torch.arange(SAMPLES))
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=5)
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, sampler=sampler)
    state = hvd.elastic.TorchState(sampler=sampler, epoch=0, step=0,
                                   seen={epoch: [] for epoch in range(EPOCHS)})

    @hvd.elastic.run
    def train(state):
        while state.epoch < EPOCHS:
            for batch_index, (ids,) in enumerate(loader):
                gathered = hvd.allgather(ids, name="ids")
                state.seen[state.epoch].extend(gathered.tolist())
                sampler.record_batch(batch_index, BATCH)
                state.step += 1
                state.commit()
                change_hosts(hvd, args.grow, state, first_size, add_host)
            state.epoch += 1
            sampler.set_epoch(state.epoch)
            state.commit()

    train(state)
    print("final " + json.dumps({"size": hvd.size(), "seen": state.seen}), flush=True)


if __name__ == "__main__":
    main()
