"""Assertions for the torch test workers: a failed check prints what differs
(the launcher prefixes it with the rank) and exits non-zero, which stops the
other ranks too."""
import sys

import torch

import hvdlite.torch as hvd


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)


def close(got, want, what, rtol=1e-10, atol=1e-12):
    check(torch.allclose(got, want, rtol=rtol, atol=atol),
          f"{what}: max difference {(got - want).abs().max().item():.3g}\n got {got}\n want {want}")


def same_on_every_rank(tensors, what):
    for name, tensor in tensors:
        flat = tensor.detach().reshape(-1).to(torch.float64)
        spread = hvd.allreduce(flat, op=hvd.Max) - hvd.allreduce(flat, op=hvd.Min)
        check(spread.abs().max().item() == 0, f"{what}: {name} differs across ranks")
