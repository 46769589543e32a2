"""Horovod's TensorFlow semantics on every rank, in one process (TF import is
slow): error types eagerly / in tf.function / in a tf.compat.v1 session;
every collective's gradient against Horovod's definitions computed by hand
(Note [Horovod's gradients]); join; Adasum (ops, tape, Keras optimizer);
object helpers inside tf.function; alltoall's int32 splits. Exits non-zero
with a message on the first mismatch."""
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

import hvdlite.tensorflow as hvd
from tf_checks import check, close, run_checks

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
from adasum_reference import adasum  # noqa: E402


def in_session(build):
    """Builds the ops in a tf.compat.v1 graph and runs them in a Session."""
    with tf.Graph().as_default():
        out = build()
        with tf.compat.v1.Session() as session:
            return session.run(out)


MODES = {"eager": lambda build: build(),
         # autograph=False: AutoGraph cannot convert these tests' lambdas (and says so);
         # hvdlite under AutoGraph: autograph_quiet.py
         "function": lambda build: tf.function(build, autograph=False)(),
         "session": in_session}


def expect(error_type, run, needles, what):
    try:
        run()
    except error_type as error:
        message = getattr(error, "message", None) or str(error)
        for needle in needles:
            check(needle in message, f"{what}: {type(error).__name__} does not say {needle!r}: "
                                     f"{message}")
        return error
    except Exception as error:  # noqa: BLE001 - the wrong type is the failure reported
        check(False, f"{what}: raised {type(error).__name__}: {error}; expected "
                     f"{error_type.__name__}")
    check(False, f"{what}: did not raise {error_type.__name__}")


# --- error types

def run_errors(rank, size):
    for mode, run in MODES.items():
        tag = f"err.{mode}"
        mismatch = tf.errors.FailedPreconditionError
        expect(mismatch, lambda: run(lambda: hvd.allreduce(tf.ones([2 + rank]), name=f"{tag}.shape")),
               [f"'{tag}.shape'", "mismatched shape", "rank 0 has [2]", "rank 1 has [3]"],
               f"{mode} shape mismatch")
        dtype = tf.float32 if rank == 0 else tf.float64
        expect(mismatch, lambda: run(lambda: hvd.allreduce(tf.ones([2], dtype), name=f"{tag}.dtype")),
               [f"'{tag}.dtype'", "mismatched dtype", "rank 0 has float32", "rank 1 has float64"],
               f"{mode} dtype mismatch")
        expect(mismatch, lambda: run(lambda: hvd.broadcast(tf.ones([2]), rank % 2, name=f"{tag}.root")),
               [f"'{tag}.root'", "mismatched root rank", "rank 0 has 0", "rank 1 has 1"],
               f"{mode} root rank mismatch")
        collective = (lambda t: hvd.allreduce(t, name=f"{tag}.op")) if rank == 0 else \
            (lambda t: hvd.allgather(t, name=f"{tag}.op"))
        expect(mismatch, lambda: run(lambda: collective(tf.ones([2]))),
               [f"'{tag}.op'", "mismatched operation", "rank 0 has allreduce",
                "rank 1 has allgather"], f"{mode} op mismatch")

        invalid = tf.errors.InvalidArgumentError
        def rows():  # built in each mode's graph
            return tf.ones([size + 1, 2])
        expect(invalid, lambda: run(lambda: hvd.alltoall(rows(), splits=[1] * size, name=f"{tag}.sp")),
               [f"'{tag}.sp'", f"sum to {size}", f"first dimension is {size + 1}"],
               f"{mode} alltoall splits")
        expect(invalid, lambda: run(lambda: hvd.alltoall(rows(), name=f"{tag}.even")),
               [f"'{tag}.even'", "does not divide evenly"], f"{mode} alltoall rows")
        expect(invalid, lambda: run(lambda: hvd.broadcast(tf.ones([1]), size + 5, name=f"{tag}.bad")),
               [f"'{tag}.bad'", f"root_rank {size + 5}"], f"{mode} bad root rank")

        def sparse():
            return tf.IndexedSlices(tf.ones([1, 2]), tf.constant([rank]), tf.constant([size, 2]))
        for op in (hvd.Min, hvd.Max, hvd.Product):
            expect(NotImplementedError, lambda: run(lambda: hvd.allreduce(sparse(), op=op).values),
                   ["IndexedSlices", op.name], f"{mode} IndexedSlices {op.name}")
        expect(NotImplementedError,
               lambda: run(lambda: hvd.allreduce(sparse(), op=hvd.Sum, prescale_factor=2.0).values),
               ["prescale_factor"], f"{mode} IndexedSlices prescale")
        expect(NotImplementedError, lambda: run(lambda: hvd.reducescatter(rows(), op=hvd.Adasum)),
               ["reducescatter"], f"{mode} reducescatter Adasum")
        close(run(lambda: hvd.allreduce(tf.ones([2]), op=hvd.Sum, name=f"{tag}.after")),
              np.full(2, size), f"{mode} allreduce after the errors")
    # Eagerly, the errors are also hvdlite's Python types (ValueError, as before).
    error = expect(ValueError, lambda: hvd.broadcast(tf.ones([1]), size + 5, name="err.value"),
                   ["root_rank"], "eager bad root rank as ValueError")
    check(isinstance(error, tf.errors.InvalidArgumentError), f"{type(error)}")


# --- gradients (Note [Horovod's gradients]), hand-derived references

def weights(rank, shape, salt):
    return np.arange(np.prod(shape), dtype=np.float64).reshape(shape) + 10.0 * rank + salt


def gradient_cases(rank, size):
    """(name, forward(x) -> y, x_r for every rank, expected dloss/dx on this rank)
    with loss = sum(y * W_rank), so that the output gradient is W_rank."""
    base = np.array([[1.0, 2.0, 3.0]])
    cases = []
    ws = [weights(r, (1, 3), 1) for r in range(size)]
    cases.append(("allreduce.sum", lambda x: hvd.allreduce(
        x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25, name="g.ar"),
        base * (rank + 1), ws[rank], 0.5 * np.sum(ws, 0)))
    cases.append(("allreduce.avg", lambda x: hvd.allreduce(x, name="g.avg"),
                  base * (rank + 1), ws[rank], np.mean(ws, 0)))
    # grouped: two members, both through one loss
    cases.append(("grouped", lambda x: tf.concat(hvd.grouped_allreduce(
        [x[:, :1], x[:, 1:]], name="g.grp"), 1), base * (rank + 1), ws[rank], np.mean(ws, 0)))
    # allgather: rank r has r+1 rows; its gradient is the ranks' average of W, its rows
    rows = [r + 1 for r in range(size)]
    total = sum(rows)
    wg = [weights(r, (total, 2), 2) for r in range(size)]
    start = sum(rows[:rank])
    cases.append(("allgather", lambda x: hvd.allgather(x, name="g.ag"),
                  np.ones((rows[rank], 2)) * (rank + 1), wg[rank],
                  np.mean(wg, 0)[start:start + rows[rank]]))
    # broadcast from the last rank: the average on the root, zeros elsewhere
    root = size - 1
    cases.append(("broadcast", lambda x: hvd.broadcast(x, root, name="g.bc"), base * (rank + 1),
                  ws[rank], np.mean(ws, 0) if rank == root else np.zeros((1, 3))))
    # alltoall: rank i sends splits[i][j] rows to rank j
    splits = [[(i + j) % 2 + 1 for j in range(size)] for i in range(size)]
    received = [sum(splits[i][j] for i in range(size)) for j in range(size)]
    wa = [weights(j, (received[j], 2), 3) for j in range(size)]
    expected = []
    for j in range(size):  # the block rank j got from this rank, in its received order
        offset = sum(splits[i][j] for i in range(rank))
        expected.append(wa[j][offset:offset + splits[rank][j]])
    cases.append(("alltoall", lambda x: hvd.alltoall(x, splits=splits[rank], name="g.a2a")[0],
                  np.ones((sum(splits[rank]), 2)) * (rank + 1), wa[rank], np.concatenate(expected)))
    # reducescatter of 2*size+1 rows: the first rows % size ranks get one more row
    n = 2 * size + 1
    shares = [n // size + (1 if r < n % size else 0) for r in range(size)]
    wr = [weights(r, (shares[r], 3), 4) for r in range(size)]
    for op, factor in ((hvd.Sum, size), (hvd.Average, 1)):
        cases.append((f"reducescatter.{op.name}", lambda x, op=op: hvd.reducescatter(
            x, op=op, prescale_factor=3.0, name=f"g.rs.{op.name}"), np.ones((n, 3)) * (rank + 1),
            wr[rank], 3.0 * factor * np.concatenate(wr)))
    return cases


def run_gradients(rank, size):
    for name, forward, x, w, expected in gradient_cases(rank, size):
        x = tf.constant(x, tf.float32)
        w = tf.constant(w, tf.float32)

        def taped(x=x, w=w, forward=forward):
            with tf.GradientTape() as tape:
                tape.watch(x)
                loss = tf.reduce_sum(forward(x) * w)
            return tape.gradient(loss, x)

        def graph(x=x, w=w, forward=forward):
            xs = tf.constant(x.numpy())
            return tf.gradients(tf.reduce_sum(forward(xs) * tf.constant(w.numpy())), xs)[0]

        close(taped(), expected, f"eager gradient of {name}", 1e-5)
        close(tf.function(taped)(), expected, f"tf.function gradient of {name}")
        close(in_session(graph), expected, f"tf.compat.v1 graph gradient of {name}")
    # XLA cannot compile hvdlite's ops (CPU kernels of a custom op library):
    # jit_compile=True fails with TensorFlow's error naming the op, on every rank.
    xla = tf.function(lambda t: hvd.allreduce(t, name="g.xla"), jit_compile=True)
    expect(tf.errors.OpError, lambda: xla(tf.ones([2])), ["HvdliteAllreduce"], "jit_compile=True")


# --- join (Horovod's semantics: joined ranks add zeros, Average divides by the set size)

def run_join(rank, size):
    inputs = [np.arange(3, dtype=np.float64) + 10 * r for r in range(size)]
    for mode in ("eager", "function"):
        wrap = (lambda f: f) if mode == "eager" else tf.function
        total = wrap(lambda t, i: hvd.allreduce(t, op=hvd.Sum, name=f"join.{mode}.sum{i}"))
        mean = wrap(lambda t, i: hvd.allreduce(t, name=f"join.{mode}.avg{i}"))
        for step in range(rank + 1):  # rank r runs r+1 steps, then joins
            x = tf.constant(inputs[rank], tf.float32)
            active = [inputs[r] for r in range(size) if r >= step]
            close(total(x, step), np.sum(active, 0), f"{mode} join step {step} Sum")
            close(mean(x, step), np.sum(active, 0) / size, f"{mode} join step {step} Average")
        if rank == size - 1:  # everyone else has joined: gathering ops fail
            expect(tf.errors.FailedPreconditionError,
                   lambda: wrap(lambda: hvd.allgather(tf.ones([1]), name=f"join.{mode}.ag"))(),
                   ["join", f"join.{mode}.ag"], f"{mode} allgather while joined")
        last = wrap(hvd.join)()
        check(int(last) == size - 1, f"{mode} join returned {int(last)}, expected {size - 1}")


# --- Adasum

def run_adasum(rank, size):
    data = [np.array([1.0, -2.0, 3.0, 0.5]) * (r + 1) + np.array([r, 0.0, -r, 2 * r])
            for r in range(size)]
    x = tf.constant(data[rank], tf.float32)
    if size & (size - 1):
        expect(NotImplementedError, lambda: hvd.allreduce(x, op=hvd.Adasum), ["power-of-two"],
               "Adasum on a non-power-of-two size")
        v = tf.Variable(x)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(v * v)
        expect(NotImplementedError,
               lambda: hvd.DistributedGradientTape(tape, op=hvd.Adasum).gradient(loss, v),
               ["power-of-two"], "DistributedGradientTape(op=Adasum) on a non-power-of-two size")
        return
    expected = adasum([d.astype(np.float32) for d in data])
    close(hvd.allreduce(x, op=hvd.Adasum, name="ada.eager"), expected, "eager Adasum", 1e-4)
    close(tf.function(lambda t: hvd.allreduce(t, op=hvd.Adasum, name="ada.fn"))(x), expected,
          "tf.function Adasum", 1e-4)
    close(in_session(lambda: hvd.allreduce(tf.constant(data[rank], tf.float32), op=hvd.Adasum)),
          expected, "session Adasum", 1e-4)
    halves = hvd.grouped_allreduce([x[:2], x[2:]], op=hvd.Adasum, name="ada.grp")
    close(tf.concat(halves, 0), np.concatenate([adasum([d[:2] for d in data]),
                                                adasum([d[2:] for d in data])]),
          "grouped Adasum (each tensor on its own)", 1e-4)
    expect(NotImplementedError, lambda: hvd.allreduce(
        tf.IndexedSlices(x[:1], tf.constant([0]), tf.constant([4])), op=hvd.Adasum),
        ["sparse_as_dense"], "Adasum of IndexedSlices")
    # DistributedGradientTape(op=Adasum): the gradients are Adasum-combined (Horovod's TF semantics)
    v = tf.Variable(data[rank], dtype=tf.float32)

    @tf.function
    def tape_step():
        with tf.GradientTape() as tape:
            loss = 0.5 * tf.reduce_sum(v * v * v)
        return hvd.DistributedGradientTape(tape, op=hvd.Adasum).gradient(loss, v)
    grads = [1.5 * d.astype(np.float32) ** 2 for d in data]
    close(tape_step(), adasum(grads), "DistributedGradientTape(op=Adasum)", 1e-3)
    # Keras DistributedOptimizer(op=Adasum): one SGD step with the Adasum of the gradients
    import keras
    import hvdlite.keras as hvd_keras
    opt = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Adasum)
    w = keras.Variable(data[rank].astype(np.float32))
    opt.apply_gradients([(tf.constant(grads[rank]), w)])
    close(keras.ops.convert_to_numpy(w), data[rank] - 0.1 * adasum(grads), "Keras DistributedOptimizer(op=Adasum)", 1e-3)
    try:
        hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Adasum,
                                       average_aggregated_gradients=True)
        check(False, "Adasum with average_aggregated_gradients did not raise")
    except ValueError as error:
        check("average_aggregated_gradients" in str(error), str(error))


# --- object helpers inside tf.function, alltoall's splits

def run_objects(rank, size):
    @tf.function
    def exchange(x):
        root = hvd.broadcast_object({"value": x, "twice": [x * 2, 7]}, root_rank=size - 1)
        return root, hvd.allgather_object((x, x * 10))

    for offset in (0, 100):  # the second call runs the traced function again
        root, gathered = exchange(tf.constant(rank + offset))
        last = size - 1 + offset
        close(root["value"], last, "broadcast_object in tf.function")
        close(root["twice"][0], 2 * last, "broadcast_object nested in tf.function")
        close(root["twice"][1], 7, "broadcast_object Python leaf in tf.function")
        check(len(gathered) == size, f"allgather_object gave {len(gathered)} objects")
        for r, (value, tenfold) in enumerate(gathered):
            close(value, r + offset, f"allgather_object rank {r} in tf.function")
            close(tenfold, 10 * (r + offset), f"allgather_object rank {r} in tf.function")
    state = {"epoch": rank, "name": f"rank{rank}"}
    check(hvd.broadcast_object(state, root_rank=1) == {"epoch": 1, "name": "rank1"},
          "eager broadcast_object")
    check(hvd.allgather_object(rank * 3) == [3 * r for r in range(size)], "eager allgather_object")
    broadcast = hvd.broadcast_object_fn(root_rank=0)
    check(broadcast(("step", rank)) == ("step", 0), "broadcast_object_fn")
    with tf.Graph().as_default(), tf.compat.v1.Session():  # tf.compat.v1 graph mode
        check(hvd.broadcast_object([rank], root_rank=size - 1) == [size - 1],
              "broadcast_object in a v1 graph")
        check(hvd.allgather_object(rank) == list(range(size)), "allgather_object in a v1 graph")
    # alltoall: received splits are int32 (Horovod); without splits, only the tensor
    x = tf.ones([size * 2, 3]) * rank
    for mode, wrap in (("eager", lambda f: f), ("function", tf.function)):
        out, received = wrap(lambda t: hvd.alltoall(t, splits=[2] * size, name=f"a2a.{mode}"))(x)
        check(received.dtype == tf.int32, f"{mode} alltoall received splits are {received.dtype}")
        close(received, [2] * size, f"{mode} alltoall received splits")
        only = wrap(lambda t: hvd.alltoall(t, name=f"a2a.plain.{mode}"))(x)
        check(isinstance(only, tf.Tensor), f"{mode} alltoall without splits gave {type(only)}")
        close(only, np.repeat(np.arange(size, dtype=np.float64), 2)[:, None] * np.ones(3),
              f"{mode} alltoall without splits")


def announced(name, part):
    """`part`, then a barrier (every rank finishes the part before any exits:
    a rank that exits early is a lost peer to the others' remaining, local,
    checks), then "<name> OK"."""
    def run_and_announce(rank, size):
        part(rank, size)
        hvd.barrier()
        print(f"{name} OK", flush=True)
    return run_and_announce


PARTS = {"errors": run_errors, "gradients": run_gradients, "join": run_join,
         "adasum": run_adasum, "objects": run_objects}
CHECKS = {name: announced(name, part) for name, part in PARTS.items()}
DONE = "semantics OK"


if __name__ == "__main__":
    run_checks(hvd, CHECKS, DONE)
