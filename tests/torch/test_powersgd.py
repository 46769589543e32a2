"""hvdlite/torch/powersgd.py: PowerSGD's orthogonalisation against DDP's and
its pieces in one process. (On real ranks, in DistributedOptimizer against
DDP's hook: tests/torch/workers/powersgd_checks.py, in test_torch_jobs.py's
jobs.)"""
import pytest

torch = pytest.importorskip("torch")

from hvdlite.torch import powersgd  # noqa: E402


@pytest.mark.parametrize("columns", [1, 2, 4])
@pytest.mark.parametrize("epsilon", [0.0, 1e-8])
def test_orthogonalisation_is_ddps(columns, epsilon):
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ddp
    matrix = torch.randn(9, columns, generator=torch.Generator().manual_seed(columns),
                         dtype=torch.float64)
    want = matrix.clone().unsqueeze(0)
    ddp._orthogonalize(want, epsilon)
    powersgd._orthogonalize(matrix, epsilon)
    assert torch.allclose(matrix, want[0], rtol=0, atol=1e-14)
    if epsilon == 0:
        assert torch.allclose(matrix.T @ matrix, torch.eye(columns, dtype=torch.float64),
                              atol=1e-12)


def test_a_zero_column_stays_zero_instead_of_nan():
    # An unused parameter's gradient is all zeros, and so is its P.
    matrix = torch.zeros(5, 2)
    powersgd._orthogonalize(matrix, 0.0)
    assert torch.equal(matrix, torch.zeros(5, 2))


def test_which_gradients_are_compressed():
    compression = powersgd.PowerSGD(rank=2, min_compression_rate=2.0)
    assert compression._matrix_shape(torch.zeros(16, 12)) == (16, 12)
    assert compression._matrix_shape(torch.zeros(8, 3, 2, 2)) == (8, 12)  # a conv kernel
    assert compression._matrix_shape(torch.zeros(3, 10)) is None  # (3 + 10) * 2 * 2 > 30
    assert compression._matrix_shape(torch.zeros(100)) is None
    assert compression._matrix_shape(torch.zeros(16, 12, dtype=torch.int64)) is None


def test_state_dict_round_trip_keeps_the_seed_sequence():
    compression = powersgd.PowerSGD(rank=2, warm_start=False, seed=7)
    for _ in range(3):
        compression._starting_qs([("w", 0, torch.zeros(6, 5))])
    restored = powersgd.PowerSGD(rank=2, warm_start=False, seed=7)
    restored.load_state_dict(compression.state_dict())
    (next_q,) = compression._starting_qs([("w", 0, torch.zeros(6, 5))])
    (restored_q,) = restored._starting_qs([("w", 0, torch.zeros(6, 5))])
    assert torch.equal(next_q, restored_q)
    with pytest.raises(ValueError, match="rank 2 cannot be loaded"):
        powersgd.PowerSGD(rank=3).load_state_dict(compression.state_dict())


@pytest.fixture
def one_rank(monkeypatch):
    """PowerSGD.reduce in this process alone: its collectives return their input."""
    monkeypatch.setattr(powersgd, "grouped_allreduce_async_", lambda tensors, **options: tensors)
    monkeypatch.setattr(powersgd, "synchronize", lambda handle: handle)

    class OneRank:
        def size(self):
            return 1
    return OneRank()


def reduce_once(compression, grads, process_set):
    from hvdlite.common.ops import ReduceOp
    compression.reduce([f"g{i}" for i in range(len(grads))], grads, "test", ReduceOp.Average,
                       1.0, 1.0, process_set)


def test_full_rank_reconstructs_exactly_and_leaves_no_error(one_rank):
    compression = powersgd.PowerSGD(rank=4, start_iter=0, min_compression_rate=0.0)
    grad = torch.randn(6, 4, dtype=torch.float64)
    want = grad.clone()
    reduce_once(compression, [grad], one_rank)
    assert torch.allclose(grad, want, atol=1e-12)
    assert compression.errors["g0"].abs().max() < 1e-12


def test_low_rank_keeps_what_it_leaves_out_as_error(one_rank):
    compression = powersgd.PowerSGD(rank=1, start_iter=0)
    grad = torch.randn(8, 8, dtype=torch.float64)
    sent = grad.clone()
    reduce_once(compression, [grad], one_rank)
    assert torch.linalg.matrix_rank(grad) == 1
    assert torch.allclose(grad + compression.errors["g0"], sent, atol=1e-12)


def test_a_zero_gradient_gives_zeros_at_every_rank_of_q(one_rank):
    # An unused parameter's gradient is all zeros: Gram-Schmidt (rank <= 2)
    # and QR (rank > 2) must both give zeros, not NaN.
    for rank in (1, 4):
        compression = powersgd.PowerSGD(rank=rank, start_iter=0, min_compression_rate=1.0)
        grad = torch.zeros(16, 12)
        reduce_once(compression, [grad], one_rank)
        assert torch.equal(grad, torch.zeros(16, 12))
        assert torch.equal(compression.errors["g0"], torch.zeros(16, 12))
