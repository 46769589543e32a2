"""The checks every binding's workers share (numpy, torch, TensorFlow, Keras,
JAX). A failed check prints "FAILED: <what>" and exits 1, so the job fails
with the reason in the rank's output, and, unlike assert, still checks under
python -O. Besides check and close: check_job_goes_on, for after a failed
collective, and run_checks, the whole of a worker made of named checks
(run_check_groups: several such workers in one job).
Workers outside this folder put it on sys.path:

    sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
    from checks import check, close
"""
import sys

import numpy as np


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)


def as_float64(value):
    """Any framework's tensor or variable (torch, TensorFlow, Keras, JAX), or an
    array-like, as a float64 NumPy array (bfloat16 included)."""
    if hasattr(value, "detach"):  # torch, whose .numpy() knows no bfloat16
        value = value.detach().cpu().double()
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    return np.asarray(value).astype(np.float64)


def close(got, want, what, atol=1e-5, rtol=1e-5):
    """Checks got has want's shape and values, within atol + rtol * |want|."""
    got, want = as_float64(got), as_float64(want)
    same = got.shape == want.shape and np.allclose(got, want, rtol=rtol, atol=atol)
    difference = f" (max difference {np.abs(got - want).max():.3g})" \
        if got.shape == want.shape and got.size else ""
    check(same, f"{what}: got {got!r}, want {want!r}{difference}")


def check_job_goes_on(hvd, name):
    """After a failed or refused collective the job goes on: an allreduce (of
    hvd, hvdlite.numpy) named `name` sums ones to the number of ranks."""
    got = hvd.allreduce(np.ones(4, np.float32), op=hvd.Sum, name=name)
    check(np.array_equal(got, np.full(4, hvd.size(), np.float32)),
          f"the allreduce {name!r} after the failure gave {got}, want {hvd.size()} everywhere")


def run_checks(hvd, checks, done):
    """A worker made of named checks: starts hvdlite (hvd, any binding), calls
    check(rank, size) for each check named on the command line, in that order,
    or for all of `checks` when none is named (a test runs a subset, e.g. over
    MPI), prints `done` and shuts hvdlite down. `checks` is a list of
    functions, known by their names, or a dict from name to function; a name
    that is not there fails rather than passing with nothing checked."""
    run_check_groups(hvd, [(checks, done)])


def run_check_groups(hvd, groups):
    """run_checks for several workers' checks in one job (tests/common/workers/
    one_job.py): `groups` is [(checks, done), ...], run in that order, each
    group's `done` printed after its checks. Names on the command line pick
    checks of any group; a group none of whose checks was named is left out,
    its `done` unprinted."""
    hvd.init()
    by_group = [(checks if isinstance(checks, dict) else {c.__name__: c for c in checks}, done)
                for checks, done in groups]
    known = [name for by_name, _ in by_group for name in by_name]
    named = sys.argv[1:]
    for name in named:
        check(name in known, f"no check named {name!r} (there are {', '.join(known)})")
    for by_name, done in by_group:
        chosen = [name for name in named if name in by_name] if named else list(by_name)
        if not chosen:
            continue
        for name in chosen:
            by_name[name](hvd.rank(), hvd.size())
        print(done, flush=True)
    hvd.shutdown()
