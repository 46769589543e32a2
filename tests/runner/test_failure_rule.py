"""Note [One failure rule] (hvdlite/runner/failure_rule.py): the rule on
made-up workers (which failure is the root cause, when the decision comes),
and one failure reported alike by hvdliterun and hvdlite.run (Ray's and
Spark's tests check their reports against the same shape, failure_shape.py)."""
import re
import sys
import time
from pathlib import Path

import pytest

import hvdlite
from failure_shape import failure_pattern
from hvdlite.runner import RankFailedError, failure_rule
from hvdlite.runner.failure_rule import CAUSE, CONSEQUENCE, UNKNOWN, Ending, \
    StaticSupervision, root_cause
from test_launch_local import Launcher

WORKERS = Path(__file__).resolve().parent / "workers"


class _Worker:
    def __init__(self, rank):
        self.rank = rank
        self.ending = None


def _failed(rank, certainty):
    worker = _Worker(rank)
    worker.ending = Ending(False, f"failed ({certainty})", exit_code=10 + rank,
                           certainty=certainty)
    return worker


class _Source:
    """Workers that end at made-up times: {rank: (seconds after the start,
    certainty)}; the others run until stop()."""

    def __init__(self, size, ends):
        self._workers = [_Worker(rank) for rank in range(size)]
        self._start = time.monotonic()
        self._ends = dict(ends)
        self.stopped = []

    def workers(self):
        return self._workers

    def next_event(self, timeout):
        now = time.monotonic() - self._start
        for rank, (at, certainty) in sorted(self._ends.items(), key=lambda item: item[1][0]):
            if at <= now:
                del self._ends[rank]
                self._workers[rank].ending = Ending(False, "failed", exit_code=10 + rank,
                                                    certainty=certainty)
                return "exit", self._workers[rank]
        time.sleep(timeout)
        return None

    def stop(self, workers, signum):
        self.stopped = [w.rank for w in workers]
        for worker in workers:  # they end as soon as asked
            self._ends[worker.rank] = (0.0, CONSEQUENCE)

    def kill_all(self):
        pass

    def describe_failure(self, worker, others):
        return f"rank {worker.rank} failed; stopping {others}"


def test_the_root_cause_is_the_most_certain_failure_then_the_earliest():
    consequence, exit_code, signal, later_signal = (
        _failed(0, CONSEQUENCE), _failed(1, UNKNOWN), _failed(2, CAUSE), _failed(3, CAUSE))
    assert root_cause([consequence, exit_code, signal, later_signal]) is signal
    assert root_cause([consequence, exit_code]) is exit_code
    assert root_cause([_failed(5, UNKNOWN), exit_code]).rank == 5


def _supervise(monkeypatch, size, ends, settle_s):
    monkeypatch.setattr(failure_rule, "FAILURE_SETTLE_S", settle_s)
    source, said = _Source(size, ends), []
    started = time.monotonic()
    outcome = StaticSupervision(source, said.append).run()
    return outcome, said, source, time.monotonic() - started


def test_a_peer_that_lost_the_failed_rank_first_is_not_the_root_cause(monkeypatch):
    # Rank 0's collective fails first; rank 2, killed, is reported within the settle time.
    outcome, said, source, _ = _supervise(monkeypatch, 3, {0: (0.0, CONSEQUENCE),
                                                          2: (0.2, CAUSE)}, settle_s=0.6)
    assert outcome.failure.rank == 2 and outcome.exit_code == 12
    assert said == ["rank 2 failed; stopping 1"] and source.stopped == [1]


def test_a_certain_cause_is_decided_at_once_and_an_exit_code_waits(monkeypatch):
    outcome, said, _, elapsed = _supervise(monkeypatch, 3, {1: (0.0, CAUSE)}, settle_s=30)
    assert outcome.failure.rank == 1 and said == ["rank 1 failed; stopping 2"]
    assert elapsed < 5
    outcome, _, _, elapsed = _supervise(monkeypatch, 3, {1: (0.0, UNKNOWN)}, settle_s=0.5)
    assert outcome.failure.rank == 1 and elapsed >= 0.5


def test_a_failure_after_the_settle_time_is_not_judged_with_the_first(monkeypatch):
    outcome, said, _, _ = _supervise(monkeypatch, 3, {0: (0.0, UNKNOWN), 2: (1.0, CAUSE)},
                                     settle_s=0.3)
    assert outcome.failure.rank == 0 and said == ["rank 0 failed; stopping 2"]


def test_the_decision_comes_at_once_when_every_worker_has_ended(monkeypatch):
    outcome, said, _, elapsed = _supervise(monkeypatch, 2, {0: (0.0, UNKNOWN),
                                                           1: (0.1, CAUSE)}, settle_s=30)
    assert outcome.failure.rank == 1 and said == ["rank 1 failed; stopping 0"]
    assert elapsed < 5


@pytest.mark.timeout(60)
def test_hvdliterun_and_hvdlite_run_report_a_raising_rank_alike(monkeypatch):
    launcher = Launcher()
    try:
        code, _, err = launcher.run("-np", 2, sys.executable, WORKERS / "raise_on_rank_one.py")
    finally:
        launcher.cleanup()
    assert code == 1, err
    # A script's exception reaches hvdliterun as an exit code only.
    reports = [text for text in err.splitlines() if text.startswith("hvdliterun: rank")]
    assert len(reports) == 1, err
    assert re.match("hvdliterun: " + failure_pattern(1, "process", r"exited with code 1 "),
                    reports[0]), err

    monkeypatch.syspath_prepend(str(WORKERS))  # the ranks get the caller's sys.path
    from raise_on_rank_one import raise_on_rank_one
    with pytest.raises(RankFailedError, match="hvdlite.run: " + failure_pattern(
            1, "process", r"raised KeyError: 'missing shard 7'; the other ranks were stopped")):
        hvdlite.run(raise_on_rank_one, np=2)
