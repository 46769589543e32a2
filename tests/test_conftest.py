"""Tests the harness in tests/conftest.py: a failing assert in a worker fails
the job even when the test runner has PYTHONOPTIMIZE set (under which every
worker assert would otherwise vanish); the longest files are collected first."""
from pathlib import Path

import pytest

from conftest import LONGEST_FILES, RankResult, run_mpirun

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


def test_the_longest_files_exist_and_are_collected_first(request):
    # A renamed file would silently fall back to the end of the run.
    tests = Path(__file__).resolve().parent
    missing = [name for name in LONGEST_FILES if not (tests / name).is_file()]
    assert not missing, f"tests/conftest.py's LONGEST_FILES names files that are gone: {missing}"
    collected = [item.path for item in request.session.items]
    if (tests / LONGEST_FILES[0]) in collected:  # the whole suite (or that file) was collected
        assert collected[0] == tests / LONGEST_FILES[0], collected[:3]
