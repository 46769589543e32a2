"""A cached allreduce of a few bytes through hvdlite.numpy, the path Note [One
exchange for a cached small allreduce] (csrc/core/cached_exchange.cc) takes,
on real ranks over shared memory and TCP (tests/common/workers/cached_small.py)."""
from pathlib import Path

import pytest

WORKER = Path(__file__).parent / "workers" / "cached_small.py"


@pytest.mark.parametrize("np_,env", [(2, {}), (3, {}), (2, {"HVDLITE_SHM_DISABLE": "1"}),
                                     (3, {"HVDLITE_SHM_DISABLE": "1"})],
                         ids=["shm-2", "shm-3", "tcp-2", "tcp-3"])
def test_cached_small_allreduces_match_numpy(world, np_, env):
    result = world(np_, WORKER, timeout=120, env=env).expect_ok()
    for rank in range(np_):
        assert "cached small allreduces OK" in "\n".join(result.lines(rank)), result
