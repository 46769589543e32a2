"""hvdlite.jax's sharded optimizer (DistributedOptimizer(..., sharding_stage=1|2),
hvdlite/jax/sharded_optimizer.py) on real ranks, in float64: the same
parameters and state as the unsharded optimizer to 1e-12, and checkpoints
that move between world sizes and to and from an unsharded optimizer.

One job per world size (starting JAX ranks costs more than most checks): the
3-rank job runs the equivalence and then saves; the 2-rank job runs the
equivalence and then loads what the 3 ranks saved (the equivalence alone if
they saved nothing, so that its test still stands on its own)."""
import pytest

pytest.importorskip("jax")
pytest.importorskip("optax")

from pathlib import Path  # noqa: E402

WORKER = Path(__file__).parent / "workers" / "jax_sharded.py"
ENV = {"JAX_PLATFORMS": "cpu"}
# A test's timeout covers the jobs its fixture starts: the 2-rank test's,
# the first, starts the 3-rank job too.
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def sharded_job(tmp_path_factory):
    """sharded_job(np_): the finished job of that world size, run once."""
    from conftest import run_ranks
    saved_in = tmp_path_factory.mktemp("sharded")
    finished = {}

    def job(np_):
        if np_ not in finished:
            parts = ["equivalence"]
            if np_ == 3:
                parts += ["save", saved_in]
            elif np_ == 2:
                saved = job(3)
                if saved.returncode == 0 and all("saved" in saved.lines(r) for r in range(3)):
                    parts += ["load", saved_in]
            finished[np_] = run_ranks(np_, WORKER, *parts, timeout=300 if np_ == 3 else 240,
                                      env=ENV)
        return finished[np_]
    return job


# SGD with momentum, Adam and AdamW over 20 steps, stage 1 in jit and stage 2
# eagerly, on leaves that divide by no size, one with fewer rows than ranks and a
# 0-d one; the state is 1/N and consolidates to the unsharded state; one crossing
# each way per step.
@pytest.mark.parametrize("np_", [2, 3, 4])
def test_sharded_matches_unsharded(sharded_job, np_):
    result = sharded_job(np_).expect_line("equivalence OK", range(np_))
    if np_ == 4:  # its job runs nothing else (the others' exits: the test below)
        result.expect_ok()


# At 3 ranks: refusals (LAMB, Adafactor, optax's clip_by_global_norm, PowerSGD, a
# parameter list that differs), backward passes, clipping across shards, a process
# set, fp16 on the wire, shard files and an unsharded state at the same size; then
# the whole state and the 3 shard files load at 2 ranks, into an unsharded
# optimizer and back, and training goes on as unsharded.
def test_features_and_checkpoints_across_world_sizes(sharded_job):
    sharded_job(3).expect_ok().expect_line("saved", range(3))
    sharded_job(2).expect_ok().expect_line("loaded", range(2))
