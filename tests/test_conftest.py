"""Tests the harness in tests/conftest.py: a failing assert in a worker fails
the job even when the test runner has PYTHONOPTIMIZE set (under which every
worker assert would otherwise vanish)."""
import pytest

from conftest import RankResult, run_mpirun

FAILING_WORKER = """
assert False, "the worker's assert ran"
print("assert compiled away")
"""


@pytest.fixture
def failing_worker(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONOPTIMIZE", "1")
    script = tmp_path / "failing_worker.py"
    script.write_text(FAILING_WORKER)
    return script


def test_a_workers_assert_fails_the_job_under_pythonoptimize(world, failing_worker):
    result = world(2, failing_worker, timeout=60)
    assert result.returncode != 0, result
    assert "the worker's assert ran" in result.stderr, result
    assert "assert compiled away" not in result.stdout, result


def test_a_workers_assert_fails_an_mpirun_job_under_pythonoptimize(failing_worker):
    result = run_mpirun(2, failing_worker, timeout=60)
    assert result.returncode != 0, result
    assert "the worker's assert ran" in result.stderr + result.stdout, result
    assert "assert compiled away" not in result.stdout, result


def test_expect_ok_returns_the_result_or_fails_with_its_output(world, tmp_path):
    script = tmp_path / "exits.py"
    script.write_text("import sys\nprint('ran')\nsys.exit(int(sys.argv[1]))\n")
    ok = world(1, script, 0, timeout=60)
    assert ok.expect_ok() is ok and ok.lines(0) == ["ran"]
    with pytest.raises(AssertionError, match="exit [1-9]"):
        world(1, script, 3, timeout=60).expect_ok()


def test_expect_line_wants_the_whole_line_from_every_rank_named():
    result = RankResult(0, "[0]<stdout>:helpers OK\n[1]<stdout>:helpers OK, but\n", "")
    assert result.expect_line("helpers OK", [0]) is result
    with pytest.raises(AssertionError, match="helpers OK"):
        result.expect_line("helpers OK", range(2))
