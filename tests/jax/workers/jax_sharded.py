"""hvdlite.jax's sharded optimizer (sharding_stage=1|2) on real ranks, in
float64: the same parameters as the unsharded DistributedOptimizer (SGD with
momentum, Adam, AdamW; each stage; eagerly and inside jax.jit) over uneven
leaves, backward passes, clipping by the global norm, a process set, fp16 on
the wire, the state consolidated and re-sharded, and what it refuses.

    python jax_sharded.py equivalence  optimizers x stages vs unsharded; "equivalence OK"
    python jax_sharded.py save DIR     the other checks, then a whole state and shard files
    python jax_sharded.py load DIR     at another size: loads them, trains on as unsharded

Several parts run in one job in the order given (`equivalence save DIR`):
starting JAX ranks costs more than most parts, so tests/jax/test_jax_sharded.py
starts one job per world size.
"""
import os
import pickle
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import hvdlite.jax as hvd  # noqa: E402
from hvdlite.common.sharding import ShardLayout  # noqa: E402

hvd.init()
rank, size = hvd.rank(), hvd.size()

# Uneven on purpose: 7 rows divide by none of 2, 3, 4; "c" has fewer rows than
# ranks; "s" is 0-d (one row).
SHAPES = {"w": (7, 5), "m": (4, 3, 2), "b": (2,), "c": (1, 3), "s": ()}
STEPS = 20
OPTIMIZERS = {"sgd_momentum": lambda: optax.sgd(0.05, momentum=0.9),
              "adam": lambda: optax.adam(0.01),
              "adamw": lambda: optax.adamw(0.01, weight_decay=0.1)}


def start_params():
    rng = np.random.default_rng(7)
    return {k: jnp.asarray(rng.standard_normal(s)) for k, s in SHAPES.items()}


def grads_of(step, r):
    """Rank r's gradients at `step` (any rank can make anyone's)."""
    rng = np.random.default_rng(1000 * step + r)
    return {k: jnp.asarray(rng.standard_normal(s)) for k, s in SHAPES.items()}


def train(tx, steps, jit, params=None, state=None, first_step=0):
    params = start_params() if params is None else params
    state = tx.init(params) if state is None else state

    def step(params, state, grads):
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    step = jax.jit(step) if jit else step
    for i in range(first_step, first_step + steps):
        params, state = step(params, state, grads_of(i, rank))
    return params, state


def assert_trees_close(got, want, what, rtol=1e-12, atol=1e-12):
    got_leaves, got_tree = jax.tree_util.tree_flatten(got)
    want_leaves, want_tree = jax.tree_util.tree_flatten(want)
    assert got_tree == want_tree, (what, got_tree, want_tree)
    for index, (a, b) in enumerate(zip(got_leaves, want_leaves)):
        assert np.shape(a) == np.shape(b), (what, index, np.shape(a), np.shape(b))
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol,
                                   err_msg=f"{what}, leaf {index}")


def element_count(tree):
    return sum(int(np.size(leaf)) for leaf in jax.tree_util.tree_leaves(tree))


def check_matches_unsharded():
    # Each optimizer: unsharded (jit), stage 1 (jit), stage 2 (jit; AdamW's eagerly:
    # the first eager run of each op compiles it, seconds on a loaded machine).
    layout = ShardLayout(list(SHAPES.values()), size, rank)
    for label, make in OPTIMIZERS.items():
        plain = hvd.DistributedOptimizer(make(), name=f"plain.{label}")
        want_params, want_state = train(plain, STEPS, jit=True)
        for stage, jit in ((1, True), (2, label != "adamw")):
            tx = hvd.DistributedOptimizer(make(), name=f"zero{stage}.{label}", sharding_stage=stage)
            params, state = train(tx, STEPS, jit=jit)
            what = f"{label}, stage {stage}, {'jit' if jit else 'eager'}"
            assert_trees_close(params, want_params, what)
            # The state is this rank's rows: 1/N of the moments, counts kept whole.
            moments = 1 if label == "sgd_momentum" else 2
            scalars = element_count(want_state) - moments * sum(int(np.prod(s)) for s in SHAPES.values())
            assert element_count(state) == moments * layout.owned_elements() + scalars, what
            assert_trees_close(tx.consolidated_state(state, params), want_state, what + ", state")


def check_one_crossing_each_way():
    # Every gradient leaf in one reducescatter call, every update in one allgather.
    tx = hvd.DistributedOptimizer(optax.adam(0.01), name="count", sharding_stage=1)
    params = start_params()
    jaxpr = jax.make_jaxpr(tx.update)(grads_of(0, rank), tx.init(params), params)
    calls = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "hvdlite_collective"]
    if hvd.jit_path() == "ffi":
        assert len(calls) == 2, jaxpr


def check_backward_passes():
    # optax.MultiSteps around the sharded update, as around the unsharded one.
    plain = hvd.DistributedOptimizer(optax.adam(0.01), name="plain.passes",
                                     backward_passes_per_step=2)
    want_params, want_state = train(plain, 8, jit=True)
    tx = hvd.DistributedOptimizer(optax.adam(0.01), name="zero.passes", sharding_stage=2,
                                  backward_passes_per_step=2)
    params, state = train(tx, 8, jit=True)
    assert_trees_close(params, want_params, "backward passes")
    assert int(state.inner_opt_state[0].count) == 4, state
    assert_trees_close(tx.consolidated_state(state, params), want_state, "backward passes, state")


def check_clipping():
    # max_norm well under the norms of these gradients: every step clips.
    plain = hvd.DistributedOptimizer(optax.chain(optax.clip_by_global_norm(0.5), optax.adam(0.01)),
                                     name="plain.clip")
    want, _ = train(plain, 6, jit=True)
    # jit only: eager sharded steps are checked above (the first eager run of
    # each op compiles it, seconds on a loaded 2-core machine).
    tx = hvd.DistributedOptimizer(optax.chain(hvd.sharded_clip_by_global_norm(0.5), optax.adam(0.01)),
                                  name="zero.clip", sharding_stage=1)
    got, _ = train(tx, 6, jit=True)
    assert_trees_close(got, want, "clipping")
    mean = [np.mean([np.asarray(grads_of(0, r)[k]) for r in range(size)], axis=0) for k in SHAPES]
    assert np.sqrt(sum(np.sum(g * g) for g in mean)) > 1.0, "max_norm 0.5 would not clip"
    # Outside a sharded optimizer it is optax's own (eagerly).
    one = {"w": jnp.asarray([3.0, 4.0])}
    clipped, _ = hvd.sharded_clip_by_global_norm(1.0).update(one, None)
    np.testing.assert_allclose(np.asarray(clipped["w"]), [0.6, 0.8], rtol=1e-15)


def check_process_set():
    # Ranks 0 and 1 of the world: a set of 2 whatever the world's size.
    subset = hvd.add_process_set([0, 1])
    if rank in (0, 1):
        plain = hvd.DistributedOptimizer(optax.adamw(0.01), name="plain.subset", process_set=subset)
        want, want_state = train(plain, 5, jit=True)
        tx = hvd.DistributedOptimizer(optax.adamw(0.01), name="zero.subset", process_set=subset,
                                      sharding_stage=1)
        got, state = train(tx, 5, jit=True)
        assert_trees_close(got, want, "process set")
        assert_trees_close(tx.consolidated_state(state, got), want_state, "process set, state")
    hvd.remove_process_set(subset)


def check_fp16_on_the_wire():
    # Both send float16: equal up to float16's rounding of the sums.
    plain = hvd.DistributedOptimizer(optax.sgd(0.1), name="plain.fp16",
                                     compression=hvd.Compression.fp16)
    want, _ = train(plain, 3, jit=True)
    tx = hvd.DistributedOptimizer(optax.sgd(0.1), name="zero.fp16", sharding_stage=1,
                                  compression=hvd.Compression.fp16)
    got, _ = train(tx, 3, jit=True)
    assert_trees_close(got, want, "fp16", rtol=2e-3, atol=2e-3)
    exact, _ = train(hvd.DistributedOptimizer(optax.sgd(0.1), name="plain.fp64"), 3, True)
    assert not np.array_equal(np.asarray(got["w"]), np.asarray(exact["w"])), "fp16 was not used"


def check_checkpoint_same_size(directory):
    """Whole state and shard files at this size, and an unsharded state in."""
    tx = hvd.DistributedOptimizer(optax.adam(0.01), name="ckpt", sharding_stage=2)
    params, state = train(tx, 4, jit=True)
    whole = tx.consolidated_state(state, params)
    assert_trees_close(tx.shard_state(whole, params), state, "shard_state(consolidated)")
    path = os.path.join(directory, f"same.{rank}")
    tx.save_shard(path, state, params)
    hvd.barrier()
    files = [os.path.join(directory, f"same.{r}") for r in range(size)]
    assert_trees_close(tx.load_shards(files, params), state, "load_shards at the same size")
    plain = hvd.DistributedOptimizer(optax.adam(0.01), name="ckpt.plain")
    plain_params, plain_state = train(plain, 4, jit=True)
    assert_trees_close(tx.shard_state(plain_state, plain_params), state, "unsharded state in")


def check_refusals():
    def refused(make, *words):
        try:
            make()
        except ValueError as error:
            assert all(w in str(error) for w in words), (words, error)
        else:
            raise AssertionError(f"accepted: {words}")

    refused(lambda: hvd.DistributedOptimizer(optax.lamb(0.01), sharding_stage=1),
            "optax.scale_by_trust_ratio cannot be sharded", "trust ratio")
    refused(lambda: hvd.DistributedOptimizer(optax.adafactor(0.01), sharding_stage=2),
            "scale_by_factored_rms")
    refused(lambda: hvd.DistributedOptimizer(
        optax.chain(optax.clip_by_global_norm(1.0), optax.adam(0.01)), sharding_stage=1),
        "clip_by_global_norm", "sharded_clip_by_global_norm")
    refused(lambda: hvd.DistributedOptimizer(
        optax.sgd(0.1), sharding_stage=1, compression=hvd.Compression.powersgd(rank=1)),
        "PowerSGD does not compose", "low-rank factors")
    refused(lambda: hvd.DistributedOptimizer(optax.sgd(0.1), sharding_stage=3), "sharding_stage")
    refused(lambda: hvd.DistributedOptimizer(optax.sgd(0.1), sharding_stage=1, op=hvd.Max),
            "op=Average or op=Sum")
    # A parameter list that differs: every rank raises, naming it.
    tx = hvd.DistributedOptimizer(optax.sgd(0.1), sharding_stage=1, name="differs")
    params = {"w": jnp.zeros((4, 2))} if rank else {"w": jnp.zeros((4, 3))}
    refused(lambda: tx.init(params), "parameter 0 is", "['w']", "on rank 1")


def run_checks(*checks):
    for check in checks:
        began = time.perf_counter()
        check()
        if os.environ.get("SHARDED_TIMES"):
            print(f"{check.__name__}: {time.perf_counter() - began:.1f} s", flush=True)


# -- across world sizes: saved by 3 ranks, loaded by 2 ------------------------
def saved_optimizer(stage):
    return hvd.DistributedOptimizer(optax.adamw(0.01, weight_decay=0.1), name=f"across.{stage}",
                                    sharding_stage=stage)


def save(directory):
    """The other checks at this size, then a save for load() at another size."""
    run_checks(check_refusals, check_backward_passes, check_clipping, check_process_set,
               check_fp16_on_the_wire, lambda: check_checkpoint_same_size(directory))
    tx = saved_optimizer(1)
    params, state = train(tx, 5, jit=True)
    whole = tx.consolidated_state(state, params)
    tx.save_shard(os.path.join(directory, f"shard.{rank}"), state, params)
    if rank == 0:
        with open(os.path.join(directory, "whole.pkl"), "wb") as f:
            pickle.dump({"params": jax.device_get(params), "state": jax.device_get(whole)}, f)
    print("saved", flush=True)


def load(directory):
    with open(os.path.join(directory, "whole.pkl"), "rb") as f:
        saved = pickle.load(f)
    params = jax.tree_util.tree_map(jnp.asarray, saved["params"])
    # Into an unsharded optimizer: the same structure as its own init.
    plain = hvd.DistributedOptimizer(optax.adamw(0.01, weight_decay=0.1), name="across.plain")
    want_tree = jax.tree_util.tree_structure(plain.init(params))
    assert jax.tree_util.tree_structure(saved["state"]) == want_tree
    want_params, want_state = train(plain, 5, jit=True, params=params, state=saved["state"],
                                     first_step=5)
    # Into a sharded one at 2 ranks, from the whole state and from 3 shard files.
    tx = saved_optimizer(2)
    shard = tx.shard_state(saved["state"], params)
    files = [os.path.join(directory, f"shard.{r}") for r in range(3)]
    assert_trees_close(tx.load_shards(files, params), shard, "3 shard files at 2 ranks")
    got_params, got_state = train(tx, 5, jit=True, params=params, state=shard, first_step=5)
    assert_trees_close(got_params, want_params, "resumed at 2 ranks")
    # And back: the unsharded state re-sharded, the sharded one consolidated.
    assert_trees_close(tx.consolidated_state(got_state, got_params), want_state, "back")
    assert_trees_close(tx.shard_state(want_state, want_params), got_state, "unsharded in")
    print("loaded", flush=True)


def equivalence():
    run_checks(check_matches_unsharded, check_one_crossing_each_way)
    print("equivalence OK", flush=True)


arguments = sys.argv[1:]
assert arguments, "name at least one part: equivalence, save DIR, load DIR"
while arguments:
    part = arguments.pop(0)
    if part == "equivalence":
        equivalence()
    else:
        assert part in ("save", "load") and arguments, f"unknown part or no DIR: {part!r}"
        {"save": save, "load": load}[part](arguments.pop(0))
hvd.shutdown()
