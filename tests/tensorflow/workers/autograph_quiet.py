"""hvd.allreduce inside a default @tf.function (AutoGraph on), first use of
the op library in this process: AutoGraph must not try to convert hvdlite's
internals (it warned "AutoGraph could not transform <function _fscodec...>").
In a job of several workers (tests/tensorflow/test_tf_jobs.py) it runs first."""
import tensorflow as tf

import hvdlite.tensorflow as hvd
from tf_checks import check, run_checks


@tf.function
def step(x):
    if tf.reduce_sum(x) > 0:  # AutoGraph converts this function's own control flow
        x = x * 2.0
    tape_x = tf.identity(x)
    with tf.GradientTape() as tape:
        tape.watch(tape_x)
        loss = tf.reduce_sum(hvd.allreduce(tape_x, op=hvd.Sum) ** 2)
    grad = hvd.DistributedGradientTape(tape).gradient(loss, tape_x)
    return hvd.allreduce(x, name="quiet"), grad, hvd.broadcast_object(x, root_rank=0)


def check_autograph_quiet(rank, size):
    out, grad, root = step(tf.ones([2]))
    check(float(out[0]) == 2.0 and float(root[0]) == 2.0, f"step gave {out}, {root}")


CHECKS = [check_autograph_quiet]
DONE = "autograph OK"


if __name__ == "__main__":
    run_checks(hvd, CHECKS, DONE)
