"""Elastic TensorFlow 2 training written as Horovod's
examples/elastic/tensorflow2/tensorflow2_synthetic_benchmark_elastic.py
writes it: a Keras model and optimizer, a tf.function step with
DistributedGradientTape, work done before hvd.elastic.run, and
TensorFlowKerasState. It solves reference.py's least-squares problem by
plain gradient descent (SGD at LEARNING_RATE), so the weights after N
committed steps are reference_weights(N), plus one for --before-run step.

    --steps N        steps to train inside hvd.elastic.run
    --grow FILE:S    at step S rank 0 adds a host to the discovery file FILE
    --before-run W   comma-separated, done by every worker before hvd.elastic.run (the
                     first round's together, a worker that joins later alone):
                     broadcast  hvd.broadcast_variables of the model and optimizer
                     step       one train_one_batch() ("to initialize weights")
                     allgather  hvd.allgather of each rank's row count

Prints "final <json>": committed steps, size and weights.
"""
import argparse
import json

import keras
import numpy as np
import tensorflow as tf

import hvdlite.tensorflow as hvd
from job_changes import add_host, change_hosts
from reference import DATA_X, DATA_Y, LEARNING_RATE


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--grow")
    parser.add_argument("--before-run", default="")
    args = parser.parse_args()
    before_run = set(filter(None, args.before_run.split(",")))

    hvd.init()
    first_size = hvd.size()
    model = keras.Sequential([keras.Input((DATA_X.shape[1],), dtype="float64"),
                              keras.layers.Dense(1, use_bias=False, dtype="float64",
                                                 kernel_initializer="zeros")])
    optimizer = keras.optimizers.SGD(LEARNING_RATE)

    def shard():
        rows = np.arange(hvd.rank(), len(DATA_X), hvd.size())
        return tf.constant(DATA_X[rows]), tf.constant(DATA_Y[rows][:, None])

    @tf.function
    def train_one_batch(x, y):
        with tf.GradientTape() as tape:
            loss = 0.5 * tf.reduce_mean((model(x, training=True) - y) ** 2)
        tape = hvd.DistributedGradientTape(tape)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))

    optimizer.build(model.trainable_variables)
    if "broadcast" in before_run:
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(optimizer.variables, root_rank=0)
    if "step" in before_run:
        train_one_batch(*shard())
    if "allgather" in before_run:
        hvd.allgather(tf.constant([len(shard()[0])]), name="rows")
    state = hvd.elastic.TensorFlowKerasState(model, optimizer, step=0)

    @hvd.elastic.run
    def train(state):
        print(f"train from step {state.step} as rank {hvd.rank()} of {hvd.size()}", flush=True)
        while state.step < args.steps:
            train_one_batch(*shard())  # traced before run() on a late joiner: the same graph
            state.step += 1
            state.commit()
            if args.grow:
                change_hosts(hvd, args.grow, state, first_size, add_host)

    train(state)
    print("final " + json.dumps({"step": state.step, "size": hvd.size(),
                                 "weights": model.get_weights()[0].flatten().tolist()}),
          flush=True)


if __name__ == "__main__":
    main()
