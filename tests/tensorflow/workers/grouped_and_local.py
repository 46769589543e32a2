"""hvdlite.tensorflow's Horovod API beyond the basic ops, on every rank:
grouped_allgather / grouped_reducescatter against NumPy (eager and
tf.function) and their gradients, broadcast_ and broadcast_variables with
local variables, PartialDistributedGradientTape and register_local_source,
and the horovod.tensorflow.util helpers. Exits non-zero on the first mismatch."""
import sys
import zlib
from pathlib import Path

import numpy as np
import tensorflow as tf

tf.get_logger().setLevel("ERROR")

import hvdlite.tensorflow as hvd

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
from checks import check, close, run_checks  # noqa: E402


def data(name, rank, shape):
    rng = np.random.default_rng(zlib.crc32(f"{name}/{rank}".encode()))
    return rng.integers(-3, 4, size=shape).astype(np.float64)


def run_grouped(rank, size):
    for mode in ("eager", "function"):
        wrap = (lambda f: f) if mode == "eager" else (lambda f: tf.function(f, autograph=False))
        # Rows differ per rank and per member; dtypes differ per member; a scalar member.
        a = [data(f"a{mode}", r, (r + 1, 3)) for r in range(size)]
        b = [data(f"b{mode}", r, (2,)) for r in range(size)]
        c = [data(f"c{mode}", r, ()) for r in range(size)]
        for name in (None, f"ga.{mode}"):
            out = wrap(lambda x, y, z: hvd.grouped_allgather([x, y, z], name=name))(
                tf.constant(a[rank], tf.float32), tf.constant(b[rank], tf.int32),
                tf.constant(c[rank], tf.float64))
            check(len(out) == 3 and out[1].dtype == tf.int32, f"grouped_allgather {mode} types")
            close(out[0], np.concatenate(a), f"grouped_allgather {mode} member 0")
            close(out[1], np.concatenate(b), f"grouped_allgather {mode} member 1")
            close(out[2], np.stack(c), f"grouped_allgather {mode} scalar member")
        x = [data(f"x{mode}", r, (2 * size, 3)) for r in range(size)]
        y = [data(f"y{mode}", r, (size, 2, 2)) for r in range(size)]
        for op, pre, post in [(hvd.Sum, 1.0, 1.0), (hvd.Average, 1.0, 1.0), (hvd.Sum, 2.0, 0.5),
                              (hvd.Average, 3.0, 1.0)]:
            out = wrap(lambda u, v: hvd.grouped_reducescatter(
                [u, v], op=op, prescale_factor=pre, postscale_factor=post))(
                tf.constant(x[rank], tf.float32), tf.constant(y[rank], tf.float32))
            scale = pre * post / (size if op == hvd.Average else 1)
            what = f"grouped_reducescatter {mode} {op.name} x{pre * post}"
            close(out[0], np.sum(x, 0)[2 * rank:2 * rank + 2] * scale, what + " member 0")
            close(out[1], np.sum(y, 0)[rank:rank + 1] * scale, what + " member 1")
    check(hvd.grouped_allgather([]) == [] and hvd.grouped_reducescatter([]) == [],
          "empty groups are not empty lists")
    try:
        hvd.grouped_reducescatter([tf.ones([size]), tf.constant(1.0)])
        check(False, "grouped_reducescatter of a scalar did not raise")
    except ValueError as error:
        check("member 1" in str(error) and "scalar" in str(error), str(error))


def run_grouped_gradients(rank, size):
    # Horovod's definitions: grouped allgather averages the gradient over the
    # ranks, then keeps this rank's rows; grouped reducescatter allgathers it
    # (times the set's size for Sum).
    weights = [data("w", r, (sum(q + 1 for q in range(size)), 2)) for r in range(size)]
    offset = sum(q + 1 for q in range(rank))
    x = tf.constant(data("gx", rank, (rank + 1, 2)), tf.float32)
    z = tf.constant(data("gz", rank, (3,)), tf.float32)
    for mode in ("eager", "function"):
        def grads(x, z):
            with tf.GradientTape() as tape:
                tape.watch([x, z])
                gx, gz = hvd.grouped_allgather([x, z])
                loss = tf.reduce_sum(gx * tf.constant(weights[rank], tf.float32)) + \
                    tf.reduce_sum(gz) * float(rank + 1)
            return tape.gradient(loss, [x, z])
        fn = grads if mode == "eager" else tf.function(grads, autograph=False)
        dx, dz = fn(x, z)
        close(dx, np.mean(weights, 0)[offset:offset + rank + 1], f"grouped_allgather grad {mode}")
        close(dz, np.full(3, np.mean(np.arange(size) + 1.0)), f"grouped_allgather grad {mode} 2")
    coefficients = [data("coef", r, (2, 2)) for r in range(size)]
    for op in (hvd.Sum, hvd.Average):
        u = tf.constant(data("u", rank, (2 * size, 2)), tf.float32)
        with tf.GradientTape() as tape:
            tape.watch(u)
            out, = hvd.grouped_reducescatter([u], op=op)
            loss = tf.reduce_sum(out * tf.constant(coefficients[rank], tf.float32))
        expected = np.concatenate(coefficients) * (size if op == hvd.Sum else 1)
        close(tape.gradient(loss, u), expected, f"grouped_reducescatter grad {op.name}")


def run_broadcasts(rank, size):
    root = size - 1
    values = [data("v", r, (3, 2)) for r in range(size)]
    for mode in ("eager", "function"):
        v1 = tf.Variable(values[rank], dtype=tf.float32)
        v2 = tf.Variable(float(rank), dtype=tf.float64)
        if mode == "eager":
            out = hvd.broadcast_([v1, v2], root)
        else:
            out = tf.function(lambda: hvd.broadcast_([v1, v2], root, name="bc_fn"),
                              autograph=False)()
        close(v1, values[root], f"broadcast_ {mode} variable")
        close(v2, float(root), f"broadcast_ {mode} scalar variable")
        close(out[0], values[root], f"broadcast_ {mode} returned value")
    try:
        hvd.broadcast_([tf.constant(1.0)], 0)
        check(False, "broadcast_ of a tensor did not raise")
    except ValueError as error:
        check("variables" in str(error), str(error))
    shared = tf.Variable(float(rank))
    local = tf.Variable(float(rank) + 10)
    hvd.broadcast_variables([shared, local], 0, local_variables=[local])
    close(shared, 0.0, "broadcast_variables shared variable")
    close(local, rank + 10.0, "broadcast_variables changed a local variable")
    hvd.broadcast_variables([local], 0, inplace=True)
    close(local, 10.0, "broadcast_variables(inplace=True)")


def model_and_batch(rank):
    tf.keras.utils.set_random_seed(0)
    layers = [tf.keras.layers.Dense(3, activation="tanh"), tf.keras.layers.Dense(1)]
    model = tf.keras.Sequential([tf.keras.Input((4,))] + layers)
    rng = np.random.default_rng(rank)
    return model, layers, rng.normal(size=(5, 4)).astype("float32"), \
        rng.normal(size=(5, 1)).astype("float32")


def run_partial_tape(rank, size):
    for scale in (True, False):
        model, layers, x, y = model_and_batch(rank)
        variables = model.trainable_variables
        local_ids = {id(v) for v in layers[0].trainable_weights}
        with tf.GradientTape(persistent=True) as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        plain = tape.gradient(loss, variables)
        for kind in ("partial", "registered"):
            if kind == "partial":
                dtape = hvd.PartialDistributedGradientTape(tape, local_layers=layers[0],
                                                           scale_local_gradients=scale)
            else:
                dtape = hvd.DistributedGradientTape(tape, scale_local_gradients=scale)
                for v in layers[0].trainable_weights:
                    dtape.register_local_source(v)
            grads = dtape.gradient(loss, variables)
            for v, g, p in zip(variables, grads, plain):
                what = f"{kind} tape scale={scale} {v.name}"
                if id(v) in local_ids:
                    close(g, p.numpy() / (size if scale else 1), what + " (local)")
                else:
                    close(g, hvd.allreduce(p, name=f"ref.{kind}.{scale}.{v.name}"), what)
    try:
        hvd.PartialDistributedGradientTape(tf.GradientTape(), local_layers=[tf.Variable(1.0)])
        check(False, "local_layers of variables did not raise")
    except ValueError as error:
        check("local_layers must be Keras layers" in str(error), str(error))


def run_util(rank, size):
    check(hvd._executing_eagerly() and hvd.util._executing_eagerly(), "_executing_eagerly eager")
    inside = tf.function(lambda: tf.constant(hvd.util._executing_eagerly()))()
    check(not bool(inside), "_executing_eagerly inside tf.function")
    calls = []
    cached = hvd.util._cache(lambda a: calls.append(a) or len(calls))
    check(cached(1) == 1 and cached(1) == 1 and cached(2) == 2, "_cache did not memoize")
    double = hvd.util._make_subgraph(lambda t: t * 2)
    check(isinstance(double, type(tf.function(lambda: 0))) and float(double(tf.constant(2.0))) == 4,
          "_make_subgraph is not a tf.function")
    v = [tf.Variable(1.0), [tf.Variable(2.0)]]
    refs = hvd.vars_to_refs(v)
    hash(refs)
    back = hvd.refs_to_vars(refs)
    check(back[0] is v[0] and back[1][0] is v[1][0], "refs_to_vars(vars_to_refs(v)) is not v")


CHECKS = {"grouped": run_grouped, "grouped_gradients": run_grouped_gradients,
          "broadcasts": run_broadcasts, "partial_tape": run_partial_tape, "util": run_util}
DONE = "tensorflow api OK"


if __name__ == "__main__":
    run_checks(hvd, CHECKS, DONE)
