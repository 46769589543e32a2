"""hvdlite.tensorflow on real ranks, one job per world size (starting
TensorFlow ranks is most of a worker's cost): each job runs several workers'
checks (tests/common/workers/one_job.py), each worker printing its own line,
which its test reads:

- workers/autograph_quiet.py (2 ranks, first): hvdlite inside a default
  @tf.function (AutoGraph on) makes AutoGraph print no warning;
- workers/grouped_and_local.py (2 and 3 ranks): grouped_allgather and
  grouped_reducescatter (and gradients), broadcast_, local variables,
  PartialDistributedGradientTape, the util helpers;
- workers/horovod_semantics.py (2 and 3 ranks): hvdlite.tensorflow behaves as
  horovod.tensorflow where scripts can tell (PARTS below);
- workers/compressed_collectives.py (2 ranks, last): fp16 and bf16 on the
  wire, PowerSGD in the tape, and a Keras 3 fit with them (Keras 2:
  test_tf_compression.py);
- workers/ops_and_tape.py (3 ranks, an odd size that shows averaging
  mistakes): every op against NumPy (eager and tf.function), gradients,
  DistributedGradientTape against one process, errors, graph mode, init()
  after shutdown().

A check that fails ends its job: the later workers' tests of that size fail
too, pointing at the same FAILED line."""
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")
pytestmark = [pytest.mark.tensorflow_ops, pytest.mark.timeout(500)]

WORKERS = Path(__file__).parent / "workers"
ONE_JOB = Path(__file__).parents[1] / "common" / "workers" / "one_job.py"
ENV = {"TF_CPP_MIN_LOG_LEVEL": "2"}
# The workers of each world size's job, in the order they run: autograph_quiet
# first (its step is the process's first use of the op library), ops_and_tape
# last (its final check shuts hvdlite down and starts it again).
JOB_WORKERS = {2: ["autograph_quiet.py", "grouped_and_local.py", "horovod_semantics.py",
                    "compressed_collectives.py"],
               3: ["grouped_and_local.py", "horovod_semantics.py", "ops_and_tape.py"]}
PARTS = {
    "errors": "error types on every rank, eagerly, in tf.function and in a v1 session",
    "gradients": "Horovod's gradient of every collective, eagerly, in tf.function and v1 graphs",
    "join": "join returns the last rank; joined ranks add zeros; gathering ops fail meanwhile",
    "adasum": "2 ranks: Adasum ops, tape and Keras optimizer against the pairwise formula; "
              "3 ranks: NotImplementedError",
    "objects": "object helpers inside tf.function; alltoall's int32 splits",
}


@pytest.fixture(scope="module")
def tf_job():
    """tf_job(np_): the finished job of JOB_WORKERS[np_], run once per size."""
    from conftest import run_ranks
    finished = {}

    def job(np_):
        if np_ not in finished:
            finished[np_] = run_ranks(np_, ONE_JOB, *(WORKERS / w for w in JOB_WORKERS[np_]),
                                      timeout=450, env=ENV)
        return finished[np_]
    return job


def test_no_autograph_warnings_from_hvdlite(tf_job):
    """A default @tf.function (AutoGraph on) using hvdlite prints no AutoGraph
    warning (nor does any other check of its job)."""
    result = tf_job(2).expect_ok().expect_line("autograph OK", range(2))
    assert "AutoGraph could not transform" not in result.stdout + result.stderr, result


@pytest.mark.parametrize("np_", [3])
def test_ops_tape_and_errors_match_references(tf_job, np_):
    tf_job(np_).expect_ok().expect_line("tensorflow OK", range(np_))


@pytest.mark.parametrize("np_", [2, 3])
def test_grouped_ops_broadcasts_partial_tape_and_util(tf_job, np_):
    tf_job(np_).expect_ok().expect_line("tensorflow api OK", range(np_))


@pytest.mark.parametrize("np_", [2, 3])
def test_horovod_semantics(tf_job, np_):
    result = tf_job(np_)
    failures = [line for line in result.stdout.splitlines() if "FAILED" in line]
    assert result.returncode == 0, (failures, result)
    result.expect_line("semantics OK", range(np_))
    for rank in range(np_):
        for part in PARTS:
            assert f"{part} OK" in result.lines(rank), (part, result)


# Keras 3 on TensorFlow here; Keras 2 (tf_keras) in test_tf_compression.py.
@pytest.mark.parametrize("keras_flavour", ["keras3"])
def test_fp16_and_bf16_compression_on_two_ranks(tf_job, keras_flavour):
    result = tf_job(2).expect_line("compression OK", range(2))
    for rank in range(2):
        assert any(line.startswith("keras keras") for line in result.lines(rank)), result
