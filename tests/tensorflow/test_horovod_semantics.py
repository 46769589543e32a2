"""hvdlite.tensorflow behaves as horovod.tensorflow where scripts can tell:
TensorFlow's error types on every rank in every mode, Horovod's gradients of
every collective, join, Adasum, object helpers inside tf.function, alltoall's
int32 splits, no AutoGraph warnings (workers/horovod_semantics.py)."""
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")
pytestmark = pytest.mark.tensorflow_ops

WORKERS = Path(__file__).parent / "workers"
# Below pytest-timeout (300 s), so that a hang is killed by run_ranks, ranks included.
ENV = {"TF_CPP_MIN_LOG_LEVEL": "2"}


PARTS = {
    "errors": "error types on every rank, eagerly, in tf.function and in a v1 session",
    "gradients": "Horovod's gradient of every collective, eagerly, in tf.function and v1 graphs",
    "join": "join returns the last rank; joined ranks add zeros; gathering ops fail meanwhile",
    "adasum": "2 ranks: Adasum ops, tape and Keras optimizer against the pairwise formula; "
              "3 ranks: NotImplementedError",
    "objects": "object helpers inside tf.function; alltoall's int32 splits",
}


# Every part in one job per world size: starting TensorFlow ranks is most of
# a part's cost. A part that fails stops the job; the FAILED lines and the
# last "<part> OK" printed say which one.
@pytest.mark.timeout(420)
@pytest.mark.parametrize("np_", [2, 3])
def test_horovod_semantics(world, np_):
    result = world(np_, WORKERS / "horovod_semantics.py", *PARTS, timeout=400, env=ENV)
    failures = [line for line in result.stdout.splitlines() if "FAILED" in line]
    assert result.returncode == 0, (failures, result)
    for rank in range(np_):
        for part in PARTS:
            assert f"{part} OK" in result.lines(rank), (part, result)


def test_no_autograph_warnings_from_hvdlite(world):
    """A default @tf.function (AutoGraph on) using hvdlite prints no AutoGraph warning."""
    result = world(2, WORKERS / "autograph_quiet.py", timeout=240, env=ENV).expect_ok()
    for rank in range(2):
        assert "autograph OK" in result.lines(rank), result
    assert "AutoGraph could not transform" not in result.stdout + result.stderr, result
