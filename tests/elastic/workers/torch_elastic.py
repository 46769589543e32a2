"""Elastic PyTorch training (hvdlite.torch.elastic.TorchState) of a linear
model with SGD and momentum, on the least-squares problem of reference.py:
each rank's shard is an equal part of the data, so the averaged gradient is
the full-batch one at any size, and the result must equal reference_torch().

    --steps N        optimizer steps to train
    --kill W:S       worker W kills itself (SIGKILL) between forward and backward of step S
    --die R:S:HOW    whichever worker is rank R at step S ends there, between forward
                     and backward: HOW is exit9 (os._exit(9)) or sigkill
    --commit-every N commit every N steps (default 1)
    --grow FILE:S    at step S rank 0 adds a host to the discovery file FILE
    --broadcast-first  broadcast the parameters and optimizer state before
                     hvd.elastic.run, as a script ported from a static job does
    --step-first     one training step (DistributedOptimizer) before hvd.elastic.run, on
                     every worker of the first round and on each one that joins later
    --allgather-first  allgather each rank's row count before hvd.elastic.run: a result
                     a worker joining later cannot compute alone
    --powersgd       compress with PowerSGD from step 2 (rank 1 of the 1 x d weight:
                     exact, so the result is still reference_torch's)
    --sharding-stage S  DistributedOptimizer(sharding_stage=S): the momentum is
                     sharded and re-sharded at every re-form

Prints "final <json>": committed steps, optimizer steps taken, weights.
"""
import json

import torch

import hvdlite.torch as hvd
from job_changes import add_host, change_hosts, die_as_rank_if, job_options, kill_self_if
from reference import DATA_X, DATA_Y, make_torch_model


def main():
    parser = job_options(steps=12)
    parser.add_argument("--die")
    parser.add_argument("--commit-every", type=int, default=1)
    parser.add_argument("--broadcast-first", action="store_true")
    parser.add_argument("--step-first", action="store_true")
    parser.add_argument("--allgather-first", action="store_true")
    parser.add_argument("--powersgd", action="store_true")
    parser.add_argument("--sharding-stage", type=int, default=0)
    args = parser.parse_args()

    hvd.init()
    first_size = hvd.size()
    model, optimizer = make_torch_model()
    compression = (hvd.Compression.powersgd(rank=1, start_iter=2, min_compression_rate=0.5)
                   if args.powersgd else hvd.Compression.none)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression,
                                         sharding_stage=args.sharding_stage)
    if args.broadcast_first:
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    x, y = torch.from_numpy(DATA_X), torch.from_numpy(DATA_Y).unsqueeze(1)
    if args.step_first:
        rows = torch.arange(hvd.rank(), len(x), hvd.size())
        optimizer.zero_grad()
        (0.5 * ((model(x[rows]) - y[rows]) ** 2).mean()).backward()
        optimizer.step()
    if args.allgather_first:
        hvd.allgather(torch.tensor([len(range(hvd.rank(), len(x), hvd.size()))]), name="rows")
    # `applied` counts optimizer steps in the state's own history: a step
    # rolled back by restore() is not counted, one applied twice would be.
    state = hvd.elastic.TorchState(model, optimizer, step=0, applied=0)

    @hvd.elastic.run
    def train(state):
        print(f"train from step {state.step} as rank {hvd.rank()} of {hvd.size()}", flush=True)
        while state.step < args.steps:
            rows = torch.arange(hvd.rank(), len(x), hvd.size())
            optimizer.zero_grad()
            loss = 0.5 * ((model(x[rows]) - y[rows]) ** 2).mean()
            kill_self_if(args.kill, state.step)
            die_as_rank_if(args.die, hvd.rank(), state.step)
            loss.backward()
            optimizer.step()
            state.applied += 1
            state.step += 1
            if state.step % args.commit_every == 0:
                state.commit()
            if args.grow:
                change_hosts(hvd, args.grow, state, first_size, add_host)

    train(state)
    if args.sharding_stage:  # each rank holds its rows: gather the whole
        momentum = optimizer.consolidated_state_dict(root_rank=None)["state"][0]["momentum_buffer"]
    else:
        momentum = optimizer.state[model.weight]["momentum_buffer"]
    print("final " + json.dumps({"step": state.step, "applied": state.applied,
                                 "size": hvd.size(),
                                 "weights": model.weight.detach().flatten().tolist(),
                                 "momentum": momentum.flatten().tolist(),
                                 "compressed_steps": getattr(compression, "iter", None)}),
          flush=True)


if __name__ == "__main__":
    main()
