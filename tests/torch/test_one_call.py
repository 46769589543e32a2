"""The synchronous collectives on CPU tensors in one call into the core
(Note [Torch collectives in one call] in csrc/python/torch_one_call.cc):
allreduce(_), broadcast(_), allgather and grouped_allreduce(_) give the same
bytes or error as the general path for every dtype and op, the general path
takes everything the one call declines (gradients kept), and ranks that
disagree all raise, naming the tensor; allreduce_async(_) in one call
(Note [Asynchronous allreduce of a tensor in one call]) likewise, its
handles taken by poll() and synchronize() as the general path's."""
from pathlib import Path

import pytest

pytest.importorskip("torch")

WORKERS = Path(__file__).parent / "workers"


def test_one_call_allreduce_matches_the_general_path(world):
    result = world(2, WORKERS / "one_call_checks.py", timeout=180).expect_ok()
    for rank in range(2):
        assert f"rank {rank}: one call OK" in "\n".join(result.lines(rank)), result


def test_async_one_call_matches_the_general_path(world):
    result = world(2, WORKERS / "one_call_async_checks.py", timeout=180).expect_ok()
    for rank in range(2):
        assert f"rank {rank}: async one call OK" in "\n".join(result.lines(rank)), result


def test_public_collectives_without_a_frame_match_their_defs(world):
    result = world(2, WORKERS / "fast_entry_checks.py", timeout=180).expect_ok()
    for rank in range(2):
        assert f"rank {rank}: fast entry OK" in "\n".join(result.lines(rank)), result


def test_public_collectives_without_a_frame_look_like_their_defs():
    """inspect, help(), pickle and methods see the def (Note [A public
    collective without a Python frame])."""
    import inspect
    import pickle
    import pydoc

    import hvdlite.numpy
    import hvdlite.torch

    for public in (hvdlite.numpy.allreduce_, hvdlite.torch.allreduce_,
                   hvdlite.torch.allreduce_async, hvdlite.torch.allreduce_async_):
        definition = public.__wrapped__
        assert inspect.isfunction(definition) and not inspect.isfunction(public)
        assert inspect.signature(public) == inspect.signature(definition)
        for attribute in ("__doc__", "__name__", "__qualname__", "__module__", "__defaults__"):
            assert getattr(public, attribute) == getattr(definition, attribute), attribute
        assert pickle.loads(pickle.dumps(public)) is public
        assert repr(public) == repr(definition)
        assert inspect.isroutine(public)
        text = pydoc.render_doc(public)
        assert str(inspect.signature(definition)) in text and definition.__doc__.split("\n")[0] in text

        class Holder:
            method = public
        assert Holder().method.__self__.__class__ is Holder
