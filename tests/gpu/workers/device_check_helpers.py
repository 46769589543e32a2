"""What the workers of tests/gpu/device_check.sh share (device_cases.py,
jax_cases.py, keras_cases.py): the key-number lines summary.json is made
of, the check that a rank runs the build under test, medians, NumPy
comparisons that say where they differ, and the main that runs one case.
Imports nothing but NumPy, so that a JAX or Keras worker loads no torch."""
import json
import os
import statistics
import sys

import numpy as np

checks = 0  # comparisons made by close(), reported by the cases


def result(**numbers):
    """One line of key numbers for summary.json and for a human to paste."""
    print("DEVICE_CHECK_RESULT " + json.dumps(numbers, sort_keys=True, default=str), flush=True)


def check_build_under_test(hvdlite_module):
    """Exits when this rank imported hvdlite from elsewhere than the build
    device_check.sh made (DEVICE_CHECK_SITE): the check would test another."""
    site = os.environ.get("DEVICE_CHECK_SITE")
    if site and not os.path.realpath(hvdlite_module.__file__).startswith(os.path.realpath(site)):
        raise SystemExit(f"this rank imported hvdlite from {hvdlite_module.__file__}, not from the "
                         f"build under test in {site}: the launcher did not pass PYTHONPATH on")


def median_ms(samples):
    return round(statistics.median(samples), 3)


def close(what, got, want, rtol=1e-6, atol=1e-6):
    """got equals want (NumPy-convertible) in shape and dtype, within
    tolerance (exactly for integers); the message names the first difference."""
    global checks
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AssertionError(f"{what}: got {got.dtype} {got.shape}, expected {want.dtype} {want.shape}")
    wide_got, wide_want = got.astype(np.float64), want.astype(np.float64)
    if np.issubdtype(want.dtype, np.integer) or want.dtype == np.bool_:
        bad = wide_got != wide_want
    else:
        bad = ~np.isclose(wide_got, wide_want, rtol=rtol, atol=atol)
    if bad.any():
        where = np.flatnonzero(bad)
        first = int(where[0])
        raise AssertionError(
            f"{what}: {where.size} of {bad.size} elements differ (rtol {rtol}, atol {atol}), the "
            f"first at {first}: got {wide_got.flat[first]!r}, expected {wide_want.flat[first]!r}; "
            f"largest difference {float(np.abs(wide_got - wide_want).max()):.3g}")
    checks += 1


def run_case(case, ranks, cases, hvd, before=None):
    """Runs cases[case] on hvd's ranks (hvd: the binding, already imported)
    and prints "<case> OK" last; `before()` runs after init()."""
    if case not in ranks:
        raise SystemExit(f"usage: {os.path.basename(sys.argv[0])} CASE, one of {', '.join(ranks)}")
    hvd.init()
    if hvd.size() != ranks[case]:
        raise SystemExit(f"case {case} runs on {ranks[case]} rank(s), not {hvd.size()}")
    if before is not None:
        before()
    cases[case]()
    hvd.shutdown()
    print(f"{case} OK", flush=True)
