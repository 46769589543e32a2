"""hvdlite.jax's PowerSGD compression on real ranks: exact at full rank, error
feedback that loses nothing, the same steps eagerly and inside jax.jit, state
that checkpoints, training that converges to the uncompressed result, and the
misuses it refuses. Prints "powersgd OK" on every rank.

Run alone, or imported by jax_checks.py (`jax_checks.py powersgd`: one job of
both, as tests/jax/test_jax.py starts it), which then calls run()."""
import jax
import jax.numpy as jnp
import numpy as np
import optax

import hvdlite.jax as hvd
import hvdlite.numpy as hnp

hvd.init()  # nothing to do when imported by a job that started hvdlite
rank, size = hvd.rank(), hvd.size()


def grads_of(step, r, shapes):
    """Rank r's gradients at `step`, any rank can make them."""
    rng = np.random.default_rng(1000 * step + r)
    return {k: jnp.asarray(rng.standard_normal(shape).astype(np.float32)) for k, shape in shapes.items()}


def mean_over_ranks(step, shapes):
    return {k: np.mean([np.asarray(grads_of(step, r, shapes)[k]) for r in range(size)], axis=0)
            for k in shapes}


def run_steps(tx, steps, shapes, jit):
    update = jax.jit(tx.update) if jit else tx.update
    state = tx.init({k: jnp.zeros(s) for k, s in shapes.items()})
    outs = []
    for step in range(steps):
        out, state = update(grads_of(step, rank, shapes), state)
        outs.append({k: np.asarray(v) for k, v in out.items()})
    return outs


def check_full_rank_is_exact():
    # rank = min(n, m) and every matrix compressed: P Q^T is the average itself.
    shapes = {"w": (16, 12), "b": (12,)}
    compression = hvd.Compression.powersgd(rank=12, start_iter=1, min_compression_rate=0.0)
    tx = hvd.DistributedOptimizer(optax.identity(), compression=compression, name="full")
    outs = run_steps(tx, 3, shapes, jit=True)
    for step, out in enumerate(outs):
        want = mean_over_ranks(step, shapes)
        for k in shapes:
            np.testing.assert_allclose(out[k], want[k], rtol=1e-4, atol=1e-5,
                                       err_msg=f"full rank, step {step}, {k}")
    assert compression.iter == 3 and set(compression.errors) == {"full['w']"}, compression.errors


def check_error_feedback_keeps_every_gradient():
    # Rank 1 loses most of each step, but what it leaves out is kept:
    # sum of the outputs + mean of the ranks' errors = sum of the averages.
    shapes = {"w": (20, 10)}
    compression = hvd.Compression.powersgd(rank=1, start_iter=2)
    tx = hvd.DistributedOptimizer(optax.identity(), compression=compression, name="feedback")
    steps = 6
    outs = run_steps(tx, steps, shapes, jit=False)
    for step in range(2):  # warm-up: plain averages
        np.testing.assert_allclose(outs[step]["w"], mean_over_ranks(step, shapes)["w"], rtol=1e-5,
                                   atol=1e-6)
    approximated = outs[2]["w"]
    assert np.linalg.matrix_rank(approximated, tol=1e-4) == 1, "a rank-1 step is rank 1"
    error = compression.errors["feedback['w']"]
    mean_error = hnp.allreduce(error, op=hvd.Average, name="feedback.errors")
    total = sum(out["w"] for out in outs) + mean_error
    want = sum(mean_over_ranks(step, shapes)["w"] for step in range(steps))
    np.testing.assert_allclose(total, want, rtol=1e-4, atol=1e-4, err_msg="error feedback lost mass")


def check_sum_op_and_eager_equals_jit():
    shapes = {"w": (24, 8), "v": (8, 3, 4), "b": (8,)}
    runs = []
    for jit in (False, True):
        compression = hvd.Compression.powersgd(rank=2, start_iter=1, seed=7)
        tx = hvd.DistributedOptimizer(optax.identity(), op=hvd.Sum, compression=compression,
                                      name=f"sum.{jit}")
        runs.append(run_steps(tx, 4, shapes, jit=jit))
    for step, (eager, jitted) in enumerate(zip(*runs)):
        for k in shapes:
            np.testing.assert_allclose(eager[k], jitted[k], rtol=1e-5, atol=1e-6,
                                       err_msg=f"eager vs jit, step {step}, {k}")
    # Uncompressed (a bias; warm-up) leaves are plain sums.
    np.testing.assert_allclose(runs[0][0]["w"], size * mean_over_ranks(0, shapes)["w"], rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(runs[0][3]["b"], size * mean_over_ranks(3, shapes)["b"], rtol=1e-5,
                               atol=1e-5)


def check_state_checkpoints():
    shapes = {"w": (16, 16)}
    first = hvd.Compression.powersgd(rank=2, start_iter=1)
    tx = hvd.DistributedOptimizer(optax.identity(), compression=first, name="ckpt")
    state = tx.init({"w": jnp.zeros((16, 16))})
    for step in range(3):
        _, state = tx.update(grads_of(step, rank, shapes), state)
    saved = first.state_dict()
    second = hvd.Compression.powersgd(rank=2, start_iter=1)
    second.load_state_dict(saved)
    tx2 = hvd.DistributedOptimizer(optax.identity(), compression=second, name="ckpt")
    a, _ = tx.update(grads_of(3, rank, shapes), state)
    b, _ = tx2.update(grads_of(3, rank, shapes), tx2.init({"w": jnp.zeros((16, 16))}))
    np.testing.assert_allclose(np.asarray(a["w"]), np.asarray(b["w"]), rtol=1e-6, atol=1e-7)
    try:
        hvd.Compression.powersgd(rank=3).load_state_dict(saved)
    except ValueError as error:
        assert "PowerSGD state of rank 2" in str(error), error
    else:
        raise AssertionError("loaded a rank-2 state into rank 3")


def loss(params, x, y):
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


def problem():
    """This rank's half of a least-squares problem, and the starting parameters."""
    true_w = np.random.default_rng(42).standard_normal((32, 16)).astype(np.float32)
    x = np.random.default_rng(rank).standard_normal((64, 32)).astype(np.float32)
    return x, x @ true_w + 0.5, {"w": jnp.zeros((32, 16)), "b": jnp.zeros(16)}


def train(compression, steps=300):
    """The loss averaged over the ranks after `steps` steps of SGD."""
    x, y, params = problem()
    tx = hvd.DistributedOptimizer(optax.sgd(0.1), compression=compression,
                                  name=f"train.{compression is not None}")
    state = tx.init(params)

    @jax.jit
    def step(params, state):
        grads = jax.grad(loss)(params, x, y)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    for _ in range(steps):
        params, state = step(params, state)
    return float(hnp.allreduce(np.asarray(loss(params, x, y)), op=hvd.Average, name="train.loss"))


def check_training_converges_like_uncompressed():
    x, y, params = problem()
    start = float(hnp.allreduce(np.asarray(loss(params, x, y)), op=hvd.Average, name="train.start"))
    plain = train(None)
    compressed = train(hvd.Compression.powersgd(rank=4, start_iter=10))
    # Both end at under 1 % of the starting loss, within 1 % of it of each other.
    assert plain < 0.01 * start and compressed < 0.01 * start, (start, plain, compressed)
    assert abs(compressed - plain) < 0.01 * start, (start, plain, compressed)
    if rank == 0:
        print(f"training loss: start {start:.3f}, uncompressed {plain:.5f}, PowerSGD rank 4 "
              f"{compressed:.5f}", flush=True)


def check_misuse_is_refused():
    for make, words in [
            (lambda: hvd.DistributedOptimizer(optax.sgd(0.1), compression=hvd.Compression.powersgd),
             "needs its settings"),
            (lambda: hvd.DistributedOptimizer(optax.sgd(0.1), op=hvd.Adasum,
                                              compression=hvd.Compression.powersgd(rank=1)),
             "supports op=hvd.Average and hvd.Sum"),
            (lambda: hvd.Compression.powersgd(rank=0), "rank must be >= 1")]:
        try:
            make()
        except ValueError as error:
            assert words in str(error), error
        else:
            raise AssertionError(f"accepted: {words}")
    shared = hvd.Compression.powersgd(rank=1)
    first = hvd.DistributedOptimizer(optax.sgd(0.1), compression=shared)  # noqa: F841 (kept)
    try:
        hvd.DistributedOptimizer(optax.sgd(0.1), compression=shared)
    except ValueError as error:
        assert "already belongs to another DistributedOptimizer" in str(error), error
    else:
        raise AssertionError("one PowerSGD state served two optimizers")
    try:
        hvd.allreduce(jnp.ones(4), compression=hvd.Compression.powersgd(rank=1), name="per.tensor")
    except TypeError as error:
        assert "not to a single collective" in str(error), error
    else:
        raise AssertionError("a single allreduce took PowerSGD")


def check_backward_passes_per_step():
    # Full rank again, so the reduced step is exact: the sum of each 2 passes'
    # averages on the second pass, zeros on the first, one reduction a step.
    shapes = {"w": (16, 12), "b": (12,)}
    for average_passes in (False, True):
        compression = hvd.Compression.powersgd(rank=12, start_iter=1, min_compression_rate=0.0)
        tx = hvd.DistributedOptimizer(optax.identity(), compression=compression,
                                      name=f"multi.{average_passes}", backward_passes_per_step=2,
                                      average_aggregated_gradients=average_passes)
        outs = run_steps(tx, 6, shapes, jit=True)
        assert compression.iter == 3, compression.iter
        for step, out in enumerate(outs):
            for k in shapes:
                if step % 2 == 0:
                    want = np.zeros(shapes[k], np.float32)
                else:
                    want = mean_over_ranks(step - 1, shapes)[k] + mean_over_ranks(step, shapes)[k]
                    want = want / 2 if average_passes else want
                np.testing.assert_allclose(out[k], want, rtol=1e-4, atol=1e-5,
                                           err_msg=f"pass {step}, {k}, mean {average_passes}")
    # The wrapped optimizer's state moves only on a step's last pass, as with MultiSteps.
    compression = hvd.Compression.powersgd(rank=2, start_iter=0)
    tx = hvd.DistributedOptimizer(optax.adam(0.1), compression=compression, name="multi.adam",
                                  backward_passes_per_step=3)
    state = tx.init({"w": jnp.zeros((16, 12))})
    counts = []
    for step in range(6):
        _, state = jax.jit(tx.update)({"w": grads_of(step, rank, {"w": (16, 12)})["w"]}, state,
                                      {"w": jnp.zeros((16, 12))})
        counts.append(int(state[0].count))
    assert counts == [0, 0, 1, 1, 1, 2], counts


def check_process_set():
    # Ranks 0 and 1 only (run with 3): full rank, so exactly their average.
    subset = hvd.add_process_set([0, 1])
    if rank in (0, 1):
        shapes = {"w": (16, 12)}
        compression = hvd.Compression.powersgd(rank=12, start_iter=0, min_compression_rate=0.0)
        tx = hvd.DistributedOptimizer(optax.identity(), compression=compression, name="subset",
                                      process_set=subset)
        for step, out in enumerate(run_steps(tx, 2, shapes, jit=True)):
            want = np.mean([np.asarray(grads_of(step, r, shapes)["w"]) for r in (0, 1)], axis=0)
            np.testing.assert_allclose(out["w"], want, rtol=1e-4, atol=1e-5,
                                       err_msg=f"process set, step {step}")
    hvd.remove_process_set(subset)


CHECKS = (check_process_set, check_full_rank_is_exact, check_error_feedback_keeps_every_gradient,
          check_sum_op_and_eager_equals_jit, check_state_checkpoints,
          check_training_converges_like_uncompressed, check_misuse_is_refused,
          check_backward_passes_per_step)


def run():
    for check in CHECKS:
        check()
    print("powersgd OK", flush=True)


if __name__ == "__main__":
    run()
    hvd.shutdown()
