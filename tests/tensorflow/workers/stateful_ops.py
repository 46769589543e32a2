"""Note [Stateful collectives] (csrc/tensorflow/op_definitions.cc) on real
ranks: TensorFlow must never run a collective early (while it builds or
optimizes a graph), nor prune or merge one. With the collectives registered
as pure ops, the unused-result check stalled (rank 0's allreduce was pruned);
the others guard the gradient and merging paths. Prints "stateful OK"."""
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

import hvdlite.tensorflow as hvd

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
from checks import check  # noqa: E402


def allgather_gradient_in_function(rank, size):
    """The allgather gradient computes this rank's offset from an allgather of
    the static row counts: shape inference used to evaluate that allgather
    while tracing, on this rank only."""
    x = tf.Variable(tf.fill([rank + 1, 2], float(rank + 1)))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            gathered = hvd.allgather(x, name="stateful.allgather")
            loss = tf.reduce_sum(gathered * gathered)
        return tape.gradient(loss, x)

    grad = step().numpy()
    # d/dx sum(g^2) = 2 g, the same on every rank, averaged over the ranks
    # (Horovod's definition), then this rank's rows: 2 * x.
    check(np.allclose(grad, 2.0 * (rank + 1)), f"allgather gradient {grad}")


def unused_result_still_runs(rank):
    """A collective whose result nobody reads must still run: its peers wait."""
    @tf.function
    def discard(t):
        hvd.allreduce(t, op=hvd.Sum, name="stateful.unused")
        return t + 1

    if rank == 0:
        discard(tf.ones([4]))
    else:
        hvd.allreduce(tf.ones([4]), op=hvd.Sum, name="stateful.unused")


def identical_calls_both_run(rank, size):
    """Two identical allreduces (same name, same attributes) in one function
    are two operations, one after the other, not one merged by common-
    subexpression elimination: the other ranks, calling eagerly, wait for a
    second one."""
    @tf.function
    def twice(t):
        first = hvd.allreduce(t, op=hvd.Sum, name="stateful.same")
        second = hvd.allreduce(t, op=hvd.Sum, name="stateful.same")
        return first + second

    if rank == 0:
        total = twice(tf.constant(1.0))
    else:
        total = sum(hvd.allreduce(tf.constant(1.0), op=hvd.Sum, name="stateful.same")
                    for _ in range(2))
    check(float(total) == 2.0 * size, f"two allreduces gave {float(total)}")


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    allgather_gradient_in_function(rank, size)
    unused_result_still_runs(rank)
    identical_calls_both_run(rank, size)
    hvd.barrier()
    print("stateful OK", flush=True)


if __name__ == "__main__":
    main()
