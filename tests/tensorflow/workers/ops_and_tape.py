"""hvdlite.tensorflow on every rank, in one process (TF import is slow): every
op x dtype x shape against NumPy, eagerly and in tf.function; op gradients;
DistributedGradientTape against a single-process run with the global batch;
error paths. Exits non-zero with a message on the first mismatch."""
import zlib

import numpy as np
import tensorflow as tf

tf.get_logger().setLevel("ERROR")  # retracing warnings: the checks trace many small functions

import hvdlite.tensorflow as hvd
from tf_checks import check, close, run_checks

DTYPES = [tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16, tf.bfloat16,
          tf.float32, tf.float64, tf.bool]
SHAPES = [(), (1,), (5, 3), (2, 3, 4)]


def data(name, rank, shape, dtype):
    rng = np.random.default_rng(zlib.crc32(f"{name}/{rank}".encode()))
    if dtype == tf.bool:
        return rng.integers(0, 2, size=shape).astype(np.float64)
    low = 0 if dtype.is_unsigned else -2
    return rng.integers(low, 3, size=shape).astype(np.float64)  # exact in every dtype


def reduce_ops(dtype):
    ops = [hvd.Sum, hvd.Min, hvd.Max, hvd.Product]
    return ops if dtype == tf.bool else ops + [hvd.Average]


def reference(op, inputs, dtype):
    """op over the ranks' inputs (float64 arrays of data()) as `dtype` computes it."""
    if dtype == tf.bool:
        stacked = np.stack(inputs) != 0
        return stacked.any(0) if op in (hvd.Sum, hvd.Max) else stacked.all(0)
    if op == hvd.Average:
        mean = np.mean(inputs, 0)
        return mean if dtype.is_floating else np.trunc(mean)  # integer averages truncate
    return {hvd.Sum: np.sum, hvd.Min: np.min, hvd.Max: np.max, hvd.Product: np.prod}[op](inputs, 0)


def tolerance(op, dtype):
    # Averages of small integers are inexact in 16-bit floats.
    return 1e-2 if op == hvd.Average and dtype.size == 2 and dtype.is_floating else 1e-6


def run_ops(mode, rank, size):
    """mode 'eager' or 'function': the same checks, run both ways."""
    wrap = (lambda f: f) if mode == "eager" else (lambda f: tf.function(f, autograph=False))
    for dtype in DTYPES:
        for shape in SHAPES:
            tag = f"{mode}/{dtype.name}/{shape}"
            inputs = [data(tag, r, shape, dtype) for r in range(size)]
            x = tf.cast(inputs[rank], dtype)
            for op in reduce_ops(dtype):
                out = wrap(lambda t: hvd.allreduce(t, op=op, name=f"ar.{tag}.{op.name}"))(x)
                close(out, reference(op, inputs, dtype), f"allreduce {op.name} {tag}",
                      atol=tolerance(op, dtype))
            out = wrap(lambda t: hvd.broadcast(t, size - 1, name=f"bc.{tag}"))(x)
            close(out, inputs[size - 1], f"broadcast {tag}")
            if shape:
                out = wrap(lambda t: hvd.allgather(t, name=f"ag.{tag}"))(x)
                close(out, np.concatenate(inputs), f"allgather {tag}")
        run_rows_ops(wrap, mode, dtype, rank, size)
    # Every dtype in one group (fused per dtype by the core), for every op.
    for op in reduce_ops(tf.float32):
        dtypes = [d for d in DTYPES if op in reduce_ops(d)]
        tag = f"{mode}/grp.every_dtype.{op.name}"
        inputs = [[data(f"{tag}.{i}", r, (4, i + 1), d) for i, d in enumerate(dtypes)]
                  for r in range(size)]
        mine = [tf.cast(inputs[rank][i], d) for i, d in enumerate(dtypes)]
        outs = wrap(lambda *ts: hvd.grouped_allreduce(list(ts), op=op, name=tag))(*mine)
        for i, d in enumerate(dtypes):
            check(outs[i].dtype == d, f"{tag}: {d.name} came back as {outs[i].dtype.name}")
            close(outs[i], reference(op, [inputs[r][i] for r in range(size)], d),
                  f"grouped allreduce {op.name} {d.name}", atol=tolerance(op, d))
    # Allgather with a different first dimension on every rank.
    x = tf.fill([rank + 1, 2], float(rank))
    expected = np.concatenate([np.full([r + 1, 2], float(r)) for r in range(size)])
    close(wrap(lambda t: hvd.allgather(t, name=f"ag.ragged.{mode}"))(x), expected, "ragged allgather")
    # Grouped allreduce with mixed dtypes; prescale / postscale.
    a, b = tf.constant([1.0, 2.0]) * (rank + 1), tf.constant([rank], tf.int32)
    ga, gb = wrap(lambda p, q: hvd.grouped_allreduce([p, q], op=hvd.Sum, name=f"grp.{mode}"))(a, b)
    tri = size * (size + 1) / 2
    close(ga, [tri, 2 * tri], "grouped allreduce float")
    close(gb, [size * (size - 1) / 2], "grouped allreduce int")
    # 3.0 x 0.5, not a product of 1: a dropped or doubled scale shows.
    out = wrap(lambda t: hvd.allreduce(t, op=hvd.Sum, prescale_factor=3.0, postscale_factor=0.5,
                                       name=f"scaled.{mode}"))(tf.ones([3]))
    close(out, np.full(3, 1.5 * size), "scaled allreduce")
    # Alltoall: rank r sends r+1 rows... to everyone: splits [rank+1]*size.
    rows = (rank + 1) * size
    x = tf.reshape(tf.range(rows * 2, dtype=tf.float32) + 100 * rank, [rows, 2])
    out, splits = wrap(lambda t: hvd.alltoall(t, splits=[rank + 1] * size, name=f"a2a.{mode}"))(x)
    expected = np.concatenate([
        (np.arange((r + 1) * size * 2, dtype=np.float32) + 100 * r).reshape(-1, 2)[
            rank * (r + 1):(rank + 1) * (r + 1)] for r in range(size)])
    close(out, expected, "alltoall")
    close(splits, [r + 1 for r in range(size)], "alltoall received splits")
    # Reducescatter of (2*size, 3): each rank gets 2 rows of the sum.
    full = [data(f"rs.{mode}", r, (2 * size, 3), tf.float32) for r in range(size)]
    out = wrap(lambda t: hvd.reducescatter(t, op=hvd.Sum, name=f"rs.{mode}"))(
        tf.constant(full[rank], tf.float32))
    close(out, np.sum(full, 0)[2 * rank:2 * rank + 2], "reducescatter")
    close(wrap(lambda: (hvd.rank_op(), hvd.size_op()))(), [rank, size], "rank_op/size_op")


def run_rows_ops(wrap, mode, dtype, rank, size):
    """The collectives along the first dimension for one dtype: ragged allgather,
    alltoall with uneven splits, reducescatter of uneven rows with every op."""
    tag = f"{mode}/{dtype.name}"
    inputs = [data(f"ag.ragged.{tag}", r, (r, 2), dtype) for r in range(size)]  # rank 0: no rows
    out = wrap(lambda t: hvd.allgather(t, name=f"ag.ragged.{tag}"))(tf.cast(inputs[rank], dtype))
    check(out.dtype == dtype, f"ragged allgather {tag}: came back as {out.dtype.name}")
    close(out, np.concatenate(inputs), f"ragged allgather {tag}")
    # Rank r sends (r + k) % 3 rows to rank k.
    splits = [[(r + k) % 3 for k in range(size)] for r in range(size)]
    inputs = [data(f"a2a.{tag}", r, (sum(splits[r]), 2), dtype) for r in range(size)]
    out, received = wrap(lambda t: hvd.alltoall(t, splits=splits[rank], name=f"a2a.{tag}"))(
        tf.cast(inputs[rank], dtype))
    parts = [inputs[r][sum(splits[r][:rank]):sum(splits[r][:rank + 1])] for r in range(size)]
    check(out.dtype == dtype, f"alltoall {tag}: came back as {out.dtype.name}")
    close(out, np.concatenate(parts), f"alltoall {tag}")
    close(received, [splits[r][rank] for r in range(size)], f"alltoall received splits {tag}")
    rows = size + 1  # uneven: rank 0 gets two rows
    base, extra = divmod(rows, size)
    start = rank * base + min(rank, extra)
    mine = slice(start, start + base + (1 if rank < extra else 0))
    for op in reduce_ops(dtype):
        inputs = [data(f"rs.{tag}.{op.name}", r, (rows, 3), dtype) for r in range(size)]
        out = wrap(lambda t: hvd.reducescatter(t, op=op, name=f"rs.{tag}.{op.name}"))(
            tf.cast(inputs[rank], dtype))
        check(out.dtype == dtype, f"reducescatter {tag}: came back as {out.dtype.name}")
        close(out, reference(op, inputs, dtype)[mine], f"reducescatter {op.name} {tag}",
              atol=tolerance(op, dtype))


def run_gradients(rank, size):
    x = tf.Variable([1.0, 2.0, 3.0])
    with tf.GradientTape() as tape:
        y = hvd.allreduce(x * (rank + 1.0), op=hvd.Sum, name="grad.ar")
        loss = tf.reduce_sum(y * y)
    # d/dx sum((sum_r (r+1) x)^2) on rank r = (r+1) * allreduce_sum(2 * y)
    tri = size * (size + 1) / 2
    close(tape.gradient(loss, x), (rank + 1) * size * 2 * tri * x.numpy(), "allreduce gradient")
    with tf.GradientTape() as tape:
        g = hvd.allgather(tf.reshape(x, [3, 1]) * (rank + 1.0), name="grad.ag")
        loss = tf.reduce_sum(g * tf.cast(tf.range(3 * size)[:, None] + 1, tf.float32))
    weights = np.arange(3 * size).reshape(size, 3) + 1
    # Horovod's: the ranks' average of the output gradient (the same W here), this rank's rows
    close(tape.gradient(loss, x), (rank + 1.0) * weights[rank], "allgather gradient")
    with tf.GradientTape() as tape:
        b = hvd.broadcast(x, 0, name="grad.bc")
        loss = tf.reduce_sum(b)
    close(tape.gradient(loss, x), np.full(3, 1.0 if rank == 0 else 0.0), "broadcast gradient")


def run_tape(rank, size, steps=3, per_rank=4):
    """N ranks with batch b end with the same weights as one process with batch N*b."""
    rng = np.random.default_rng(0)
    features = rng.normal(size=(steps, size * per_rank, 3)).astype(np.float32)
    targets = rng.normal(size=(steps, size * per_rank, 1)).astype(np.float32)

    def train(distributed):
        w = tf.Variable(np.ones((3, 1), np.float32) * (rank + 1))  # differs until broadcast
        bias = tf.Variable([0.5])
        if distributed:
            hvd.broadcast_variables([w, bias], root_rank=0)
        else:
            w.assign(np.ones((3, 1), np.float32))
        opt = tf.keras.optimizers.SGD(0.1)

        @tf.function
        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(xb, w) + bias - yb) ** 2)
            if distributed:
                tape = hvd.DistributedGradientTape(tape)
            grads = tape.gradient(loss, [w, bias])
            opt.apply_gradients(zip(grads, [w, bias]))

        for s in range(steps):
            if distributed:
                sl = slice(rank * per_rank, (rank + 1) * per_rank)
                step(features[s, sl], targets[s, sl])
            else:
                step(features[s], targets[s])
        return w.numpy(), bias.numpy()

    dist, single = train(True), train(False)
    close(dist[0], single[0], "DistributedGradientTape weights vs single process")
    close(dist[1], single[1], "DistributedGradientTape bias vs single process")
    # IndexedSlices gradients (embedding lookups), allgathered or densified.
    for sparse_as_dense in (False, True):
        emb = tf.Variable(np.zeros((4, 2), np.float32))
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.nn.embedding_lookup(emb, [rank % 4]))
        grad = hvd.DistributedGradientTape(tape, sparse_as_dense=sparse_as_dense).gradient(loss, emb)
        expected = np.zeros((4, 2))
        for r in range(size):
            expected[r % 4] += 1.0 / size
        close(tf.convert_to_tensor(grad), expected, f"sparse gradient sparse_as_dense={sparse_as_dense}")


def run_errors(rank, size):
    try:
        hvd.allreduce(tf.ones([2 + rank]), name="mismatch")
        check(False, "mismatched shapes did not raise")
    except tf.errors.FailedPreconditionError as error:  # as Horovod's
        check("'mismatch'" in error.message, f"mismatch error does not name the tensor: {error}")
    try:
        hvd.broadcast(tf.ones([1]), root_rank=size + 5, name="badroot")
        check(False, "bad root did not raise")
    except ValueError as error:
        check("root" in str(error).lower(), f"bad-root error: {error}")
    close(hvd.allreduce(tf.ones([2]), name="after.errors"), np.ones(2), "allreduce after errors")


def run_graph_mode(rank, size):
    """tf.compat.v1 sessions: the hook makes every rank start from rank 0's variables."""
    with tf.Graph().as_default():
        v = tf.compat.v1.get_variable("v", initializer=tf.constant([float(rank), 1.0]))
        hook = hvd.BroadcastGlobalVariablesHook(0)
        total = hvd.allreduce(v * (rank + 1), op=hvd.Sum)
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as session:
            close(session.run(v), [0.0, 1.0], "BroadcastGlobalVariablesHook")
            close(session.run(total), [0.0, size * (size + 1) / 2], "allreduce in a v1 session")
    # In-place broadcasts in a session, on reference (TF1) and resource
    # variables: the session runs what they return, so that must assign.
    for dtype in (tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int8, tf.int32, tf.int64):
        for resource in (False, True):
            for how in ("broadcast_", "broadcast_variables"):
                with tf.Graph().as_default():
                    initial = tf.constant([rank + 1, 2 * rank + 3], dtype)
                    v = tf.compat.v1.Variable(initial, use_resource=resource)
                    kind = type(v).__name__
                    check(kind == ("ResourceVariable" if resource else "RefVariable"), kind)
                    out = hvd.broadcast_([v], 1) if how == "broadcast_" else \
                        hvd.broadcast_variables([v], 1)
                    with tf.compat.v1.Session() as session:
                        session.run(tf.compat.v1.global_variables_initializer())
                        got = session.run(out)
                        what = f"{how} of a {kind} of {dtype.name} in a session"
                        if how == "broadcast_":
                            close(got[0], [2.0, 5.0], what + " (its result)")
                        close(session.run(v), [2.0, 5.0], what)
    try:
        hvd.broadcast_global_variables(0)
        check(False, "eager broadcast_global_variables did not raise")
    except RuntimeError as error:  # Horovod's type; also a ValueError, as hvdlite's API errors
        check(isinstance(error, ValueError) and "broadcast_variables" in str(error), repr(error))


def run_reinit(rank, size):
    """init() after shutdown() works."""
    hvd.shutdown()
    hvd.init()
    close(hvd.allreduce(tf.ones([1]), name="reinit"), [1.0], "allreduce after re-init")


# A subset by name, e.g. for the MPI runs.
CHECKS = {"eager": lambda rank, size: run_ops("eager", rank, size),
          "function": lambda rank, size: run_ops("function", rank, size),
          "gradients": run_gradients, "tape": run_tape, "errors": run_errors,
          "graph_mode": run_graph_mode, "reinit": run_reinit}
DONE = "tensorflow OK"


if __name__ == "__main__":
    run_checks(hvd, CHECKS, DONE)
