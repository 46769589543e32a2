"""hvdlite/common/exceptions.py: the typed errors a program reads instead of
parsing messages (what the core fills them with: tests/common/test_desync.py)."""
import pickle

import pytest

from hvdlite.common import exceptions as ex


def test_every_kind_is_an_hvdlite_and_a_horovod_internal_error():
    for cls in (ex.CollectiveMismatchError, ex.DivergenceError, ex.PeerLostError,
                ex.StallTimeoutError, ex.ShutdownError):
        with pytest.raises(ex.HorovodInternalError):
            raise cls("boom")
        assert issubclass(cls, RuntimeError)


def test_fields_default_to_empty_and_read_back():
    bare = ex.HvdliteInternalError("plain")
    assert (bare.tensor_names, bare.ranks, bare.missing_ranks, bare.hosts, bare.lost_hosts,
            bare.field, bare.calls, bare.call_sites) == ((), (), (), (), (), "", (), {})
    error = ex.CollectiveMismatchError(
        "allreduce of 'w' failed: ...", tensor_names=["w"], ranks=[0, 1], field="shape",
        calls=[(0, "w", "allreduce", ("train.py", 42, "step"), "[2]", False),
               (1, "w", "allreduce", None, "[3]", True)])
    assert str(error) == "allreduce of 'w' failed: ..."
    assert error.calls[0] == ex.RankCall(0, "w", "allreduce", ex.CallSite("train.py", 42, "step"), "[2]", False)
    assert str(error.calls[0].call_site) == "train.py:42 in step()"
    assert error.call_sites == {0: ex.CallSite("train.py", 42, "step")}  # rank 1's is unknown
    assert error.values == {0: "[2]", 1: "[3]"}
    assert error.fields()["field"] == "shape"


def test_a_pickled_error_keeps_its_type_and_fields():
    # Ray and Spark send a worker's exception to the driver.
    error = ex.PeerLostError("rank 0 lost host b", ranks=[1], hosts=["b"], lost_hosts=["b"],
                             calls=[(0, "x", "allreduce", ("t.py", 1, "f"), "", True)])
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is ex.PeerLostError and str(back) == str(error)
    assert back.fields() == error.fields()


def test_the_core_knows_no_failure_by_an_unknown_message():
    from hvdlite.common import basics
    assert basics.core().exception_for("allreduce of 'nothing' failed: never happened") is None
