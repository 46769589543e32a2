"""Every elastic State's commit/restore/sync, the Keras state callbacks and
the run loop's error handling, in one process."""
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("tensorflow")
pytestmark = pytest.mark.tensorflow_ops

WORKERS = Path(__file__).parent / "workers"


def test_states_restore_exactly_and_run_resets_on_collective_failures(world):
    result = world(1, WORKERS / "states_in_process.py", timeout=180).expect_ok()
    assert "states OK" in "\n".join(result.lines(0)), result
