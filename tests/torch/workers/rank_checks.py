"""Assertions for the torch test workers: a failed check prints what differs
(the launcher prefixes it with the rank) and exits non-zero, which stops the
other ranks too."""
import sys
from pathlib import Path

import torch

import hvdlite.torch as hvd

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
from checks import check, close as close_within  # noqa: E402


def close(got, want, what, rtol=1e-10, atol=1e-12):
    """Float64 throughout: the references agree to the last bits by default."""
    close_within(got, want, what, atol=atol, rtol=rtol)


def same_on_every_rank(tensors, what):
    for name, tensor in tensors:
        flat = tensor.detach().reshape(-1).to(torch.float64)
        spread = hvd.allreduce(flat, op=hvd.Max) - hvd.allreduce(flat, op=hvd.Min)
        check(spread.abs().max().item() == 0, f"{what}: {name} differs across ranks")


def expect_error(error_type, text, action, what):
    """Checks that action() raises error_type with `text` in its message."""
    try:
        action()
    except error_type as error:
        check(text in str(error), f"{what}: message {str(error)!r} lacks {text!r}")
        return
    check(False, f"{what}: no {error_type.__name__} raised")
