"""Elastic gradient descent (the problem of reference.py, as numpy_elastic.py)
with one flaky host: every worker there exits with code 3 a few steps after
it joined the training. The job commits every step, recording its size, and
runs until it has shrunk twice and trained --steps more steps (at most 3000).

    --flaky HOST:AFTER   workers on HOST (the launcher's host name) exit
                         AFTER steps after they started training
    --step-time S        sleep S seconds in every step (default 0.01: the job
                         takes its time while a host cools down)

Prints "train from step S as rank R of N" and "final <json>" (committed
steps, size, the size of every step, weights).
"""
import argparse
import json
import os
import time

import numpy as np

import hvdlite.numpy as hvd
from reference import DATA_X, DATA_Y, LEARNING_RATE, gradient, initial_weights


def shrinks(sizes):
    return [i for i in range(1, len(sizes)) if sizes[i] < sizes[i - 1]]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--flaky", required=True)
    parser.add_argument("--step-time", type=float, default=0.01)
    args = parser.parse_args()
    flaky_host, after = args.flaky.split(":")
    flaky = os.environ["HVDLITE_ELASTIC_WORKER_ID"].startswith(flaky_host + "/")

    hvd.init()
    state = hvd.elastic.ObjectState(step=0, weights=initial_weights(), sizes=[])

    def done():
        shrunk = shrinks(state.sizes)
        return len(shrunk) >= 2 and state.step >= shrunk[-1] + args.steps or state.step >= 3000

    @hvd.elastic.run
    def train(state):
        print(f"train from step {state.step} as rank {hvd.rank()} of {hvd.size()}", flush=True)
        joined_at = state.step
        while not done():
            if flaky and state.step == joined_at + int(after):
                os._exit(3)  # the others wait in this step's allreduce
            shard = np.arange(hvd.rank(), len(DATA_X), hvd.size())
            local = gradient(state.weights, DATA_X[shard], DATA_Y[shard]) * len(shard)
            total = hvd.allreduce(local, op=hvd.Sum, name="grad")
            state.weights = state.weights - LEARNING_RATE * total / len(DATA_X)
            state.sizes.append(hvd.size())
            state.step += 1
            state.commit()
            time.sleep(args.step_time)

    train(state)
    print("final " + json.dumps({"step": state.step, "size": hvd.size(), "sizes": state.sizes,
                                 "weights": state.weights.tolist()}), flush=True)


if __name__ == "__main__":
    main()
