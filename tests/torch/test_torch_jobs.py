"""hvdlite.torch on real ranks, one job per world size (starting torch ranks
costs more than most workers' checks): each job runs several workers' checks
(workers/torch_job.py), each worker printing its own line, which its test
reads:

- workers/helpers_checks.py: the broadcast helpers, SyncBatchNorm and join()
  with uneven batches;
- workers/optimizer_checks.py: DistributedOptimizer against one process;
- workers/sharded_checks.py: DistributedOptimizer(sharding_stage=1|2) against
  the unsharded one, then options, checkpoints across sizes, refusals;
- workers/adasum_checks.py: op=hvd.Adasum in allreduce, grouped_allreduce and
  DistributedOptimizer (hvdlite/torch/adasum_optimizer.py) against NumPy/torch
  references at 2 and 4 ranks, and the errors at 3;
- workers/powersgd_checks.py: Compression.powersgd in DistributedOptimizer
  against DDP's powerSGD_hook (gloo beside hvdlite), wire sizes, elastic
  state; at 3 ranks a process set;
- workers/collectives.py: every collective x dtype x shape x op against a
  torch reference (fewer shapes at 3 ranks), errors, join, re-init;
- workers/autograd_checks.py (last: its process-set phase leaves the ranks
  outside the set behind on automatic names): the gradients of the
  collectives (hvdlite/torch/autograd_ops.py) against Horovod's definitions.

A check that fails ends its job: the later workers' tests of that size fail
too, pointing at the same FAILED line. (Over MPI: test_optimizer.py,
test_autograd.py and test_mpi_ops.py; PowerSGD in one process: test_powersgd.py.)"""
from pathlib import Path

import pytest

pytest.importorskip("torch")
# A test's timeout covers the job its fixture starts for it.
pytestmark = pytest.mark.timeout(600)

WORKERS = Path(__file__).parent / "workers"
# Three ranks: uneven batch sizes, a process set of two, two ranks joining
# early; two ranks, the even case, runs a part of them.
JOB_WORKERS = {
    2: ["helpers_checks.py:check_broadcast_model_and_optimizer,"
        "check_optimizer_state_without_gradients,check_fresh_optimizer_state,"
        "check_non_tensor_state",
        "optimizer_checks.py:check_unused_parameters",
        "sharded_checks.py:check_equivalence",
        "adasum_checks.py",
        "powersgd_checks.py:check_all_in_gloo",
        "collectives.py",
        "autograd_checks.py:check_everywhere"],
    3: ["helpers_checks.py", "optimizer_checks.py", "sharded_checks.py", "adasum_checks.py",
        "powersgd_checks.py:check_process_set_in_gloo", "collectives.py",
        "autograd_checks.py:check_everywhere"],
    4: ["sharded_checks.py:check_equivalence", "adasum_checks.py"],
}
JOB_TIMEOUTS = {2: 300, 3: 420, 4: 300}


@pytest.fixture(scope="module")
def torch_job():
    """torch_job(np_): the finished job of JOB_WORKERS[np_], run once per size."""
    from conftest import run_ranks
    finished = {}

    def job(np_):
        if np_ not in finished:
            finished[np_] = run_ranks(np_, WORKERS / "torch_job.py",
                                      *(str(WORKERS / w) for w in JOB_WORKERS[np_]),
                                      timeout=JOB_TIMEOUTS[np_])
        return finished[np_]
    return job


def test_broadcasts_sync_batch_norm_and_join(torch_job):
    torch_job(3).expect_line("helpers OK", range(3))


def test_optimizer_state_broadcast_at_two_ranks(torch_job):
    # The three-rank run above covers these too; two ranks is the even case.
    torch_job(2).expect_line("helpers OK", range(2))


def test_distributed_optimizer_matches_one_process(torch_job):
    torch_job(3).expect_line("optimizer OK", range(3))


def test_parameters_without_gradients_at_two_ranks(torch_job):
    # The three-rank run above covers them too; two ranks is the even case.
    torch_job(2).expect_line("optimizer OK", range(2))


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_sharded_matches_unsharded(torch_job, np_):
    # SGD with momentum, Adam and AdamW, stages 1 and 2, 20 steps, uneven parameters.
    torch_job(np_).expect_line("sharded OK", range(np_))


def test_sharded_options_checkpoints_and_errors(torch_job):
    # Three ranks: passes, clipping, a process set of two, fp16, checkpoints
    # from 3 ranks into 2 and into unsharded torch, elastic state, refusals
    # (in the same worker as the equivalence at 3 ranks, after it).
    torch_job(3).expect_line("sharded OK", range(3))


@pytest.mark.parametrize("np_", [2, 4, 3])
def test_adasum_matches_references_or_explains_why_not(torch_job, np_):
    result = torch_job(np_).expect_line("torch adasum OK", range(np_))
    if np_ == 4:  # last in its job: its exit is the job's
        result.expect_ok()


def test_powersgd_matches_ddp_hook_and_keeps_elastic_state(torch_job):
    torch_job(2).expect_line("powersgd OK", range(2))


def test_powersgd_over_a_process_set(torch_job):
    torch_job(3).expect_line("powersgd OK", range(3))


@pytest.mark.parametrize("np_", [2, 3])
def test_every_collective_matches_torch(torch_job, np_):
    torch_job(np_).expect_line("torch collectives OK", range(np_))


@pytest.mark.parametrize("np_", [2, 3])
def test_gradients_are_horovods(torch_job, np_):
    # Last in each job; its exit is the job's: 0 once every worker passed and
    # hvdlite shut down.
    torch_job(np_).expect_line("autograd OK", range(np_)).expect_ok()

