"""The sharded optimizers' shared layout (hvdlite/common/sharding.py) and
their state on NumPy (hvdlite/numpy/sharding.py); each binding's sharded
optimizer is tested in its own folder."""
from pathlib import Path

import pytest

from hvdlite.common import sharding

WORKER = Path(__file__).parent / "workers" / "sharding_state.py"


@pytest.mark.parametrize("rows,size", [(10, 4), (3, 4), (1, 3), (0, 2), (12, 3)])
def test_rows_are_split_as_the_cores_reducescatter_splits_them(rows, size):
    ranges = [sharding.row_range(rows, size, r) for r in range(size)]
    assert sum(count for _, count in ranges) == rows
    assert [start for start, _ in ranges] == [sum(c for _, c in ranges[:r]) for r in range(size)]
    assert [count for _, count in ranges] == [rows // size + (r < rows % size) for r in range(size)]


def test_a_scalar_parameter_is_one_row_and_state_is_told_apart_by_shape():
    layout = sharding.ShardLayout([(), (5, 2)], 2, 1)
    assert layout.shard_shape(0) == (0,) and layout.shard_shape(1) == (2, 2)
    assert layout.is_row_state(1, (2, 2)) and not layout.is_row_state(1, ())
    assert layout.owned_elements() == 4


def test_stages_and_unshardable_optimizers_are_refused_by_name():
    assert sharding.check_stage(2) == 2
    for bad in (3, True, "1"):
        with pytest.raises(ValueError, match="sharding_stage must be 0"):
            sharding.check_stage(bad)

    class LAMB:
        pass

    class MyLamb(LAMB):
        pass

    with pytest.raises(ValueError, match="MyLamb cannot be sharded: its trust ratio"):
        sharding.refuse_unshardable(MyLamb(), "hvdlite.torch.DistributedOptimizer")
    sharding.refuse_unshardable(object(), "x")  # anything else passes


def test_clipping_coefficient_is_unsharded_clippings():
    norm, coefficient = sharding.clip_coefficient(16.0, 2.0)
    assert norm == 4.0 and coefficient == pytest.approx(2.0 / (4.0 + 1e-6))
    assert sharding.clip_coefficient(1.0, 5.0)[1] == 1.0


@pytest.mark.parametrize("np_", [2, 3])
def test_state_moves_between_rows_and_whole_and_shard_files(world, tmp_path, np_):
    world(np_, WORKER, str(tmp_path), timeout=90).expect_ok().expect_line("sharding OK", range(np_))
