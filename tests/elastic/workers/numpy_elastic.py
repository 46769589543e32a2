"""Elastic gradient descent on NumPy state (hvdlite.numpy.elastic.ObjectState).

Every rank holds the same weights; each step averages the gradients of the
ranks' shards of a fixed data set (so the step is the full-batch step at any
size) and commits. Options make one worker die mid-step or add a host.
Prints "final <json>" with the committed step count and the weights.

    --steps N          steps to train
    --kill W:S         worker number W kills itself (SIGKILL) in step S of its first round
    --grow FILE:S      rank 0 adds "127.0.0.3:1" to the discovery file FILE at
                       step S, then every rank commits until the job has grown
    --shrink FILE:S    the same, removing the host "127.0.0.2" from FILE
"""
import argparse
import json
import os
import signal
import time

import numpy as np

import hvdlite.numpy as hvd
from reference import DATA_X, DATA_Y, LEARNING_RATE, gradient, initial_weights


def worker_number():
    return int(os.environ["HVDLITE_ELASTIC_WORKER_ID"].rsplit("/", 1)[1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--kill")
    parser.add_argument("--grow")
    parser.add_argument("--shrink")
    args = parser.parse_args()
    kill_worker, kill_step = map(int, args.kill.split(":")) if args.kill else (None, None)

    hvd.init()
    first_round_size = hvd.size()
    state = hvd.elastic.ObjectState(step=0, weights=initial_weights(), resets=0)
    state.register_reset_callbacks([lambda: print(f"reset: now rank {hvd.rank()} of "
                                                  f"{hvd.size()}", flush=True)])

    @hvd.elastic.run
    def train(state):
        print(f"train from step {state.step} as rank {hvd.rank()} of {hvd.size()}", flush=True)
        while state.step < args.steps:
            shard = np.arange(hvd.rank(), len(DATA_X), hvd.size())
            local = gradient(state.weights, DATA_X[shard], DATA_Y[shard]) * len(shard)
            if worker_number() == kill_worker and state.step == kill_step:
                os.kill(os.getpid(), signal.SIGKILL)  # dies with its peers mid-step
            total = hvd.allreduce(local, op=hvd.Sum, name="grad")
            state.weights = state.weights - LEARNING_RATE * total / len(DATA_X)
            state.step += 1
            state.commit()
            if args.grow:
                change_hosts(args.grow, state, lambda size: size > first_round_size,
                             lambda lines: lines + ["127.0.0.3:1"])
            if args.shrink:
                change_hosts(args.shrink, state, lambda size: size < first_round_size,
                             lambda lines: [line for line in lines
                                            if not line.startswith("127.0.0.2:")])

    train(state)
    print("final " + json.dumps({"step": state.step, "size": hvd.size(),
                                 "weights": state.weights.tolist()}), flush=True)


def change_hosts(spec, state, changed, edit):
    """At the given step, rank 0 rewrites the discovery file with edit(lines);
    every rank then commits until the job has re-formed (changed(size))."""
    path, at = spec.rsplit(":", 1)
    if state.step != int(at) or changed(hvd.size()):
        return
    if hvd.rank() == 0:
        with open(path) as hosts:
            lines = hosts.read().split()
        with open(path, "w") as hosts:
            hosts.write("\n".join(edit(lines)) + "\n")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # commit() raises HostsUpdatedInterrupt
        time.sleep(0.1)
        state.commit()
    raise AssertionError("the job did not re-form within 60 s")


if __name__ == "__main__":
    main()
