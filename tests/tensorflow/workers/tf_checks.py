"""Checks shared by the TensorFlow workers: tests/common/workers/checks.py at
their tolerance. Each exits non-zero with a message on the first mismatch, so
that the test names what differed on which rank."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
from checks import check, close as close_within, run_checks  # noqa: E402, F401 - re-exported


def close(actual, expected, what, atol=1e-6):
    close_within(actual, expected, what, atol=atol)
