"""hvd.allreduce inside a default @tf.function (AutoGraph on), first use of
the op library in this process: AutoGraph must not try to convert hvdlite's
internals (it warned "AutoGraph could not transform <function _fscodec...>")."""
import tensorflow as tf

import hvdlite.tensorflow as hvd


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


hvd.init()
out, grad, root = step(tf.ones([2]))
assert float(out[0]) == 2.0 and float(root[0]) == 2.0, (out, root)
print("autograph OK", flush=True)
