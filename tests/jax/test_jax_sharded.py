"""hvdlite.jax's sharded optimizer (DistributedOptimizer(..., sharding_stage=1|2),
hvdlite/jax/sharded_optimizer.py) on real ranks, in float64: the same
parameters and state as the unsharded optimizer to 1e-12, and checkpoints
that move between world sizes and to and from an unsharded optimizer."""
import pytest

pytest.importorskip("jax")
pytest.importorskip("optax")

from pathlib import Path  # noqa: E402

WORKER = Path(__file__).parent / "workers" / "jax_sharded.py"
ENV = {"JAX_PLATFORMS": "cpu"}


# SGD with momentum, Adam and AdamW over 20 steps, stage 1 in jit and stage 2
# eagerly, on leaves that divide by no size, one with fewer rows than ranks and a
# 0-d one; the state is 1/N and consolidates to the unsharded state; one crossing
# each way per step.
@pytest.mark.parametrize("np_", [2, 3, 4])
def test_sharded_matches_unsharded(world, np_):
    world(np_, WORKER, "equivalence", timeout=240, env=ENV).expect_ok().expect_line(
        "equivalence OK", range(np_))


# At 3 ranks: refusals (LAMB, Adafactor, optax's clip_by_global_norm, PowerSGD, a
# parameter list that differs), backward passes, clipping across shards, a process
# set, fp16 on the wire, shard files and an unsharded state at the same size; then
# the whole state and the 3 shard files load at 2 ranks, into an unsharded
# optimizer and back, and training goes on as unsharded.
def test_features_and_checkpoints_across_world_sizes(world, tmp_path):
    world(3, WORKER, "save", tmp_path, timeout=240, env=ENV).expect_ok().expect_line(
        "saved", range(3))
    world(2, WORKER, "load", tmp_path, timeout=180, env=ENV).expect_ok().expect_line(
        "loaded", range(2))
