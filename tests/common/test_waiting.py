"""Waiting costs nothing, nothing hangs silently, every job ends with a
reason: real ranks that disagree on a collective, take different paths
around join(), or wait for a peer frozen inside a transport call. Each run
has a timeout; small stall check/shutdown times keep them short."""
import re
from pathlib import Path

import psutil
import pytest

WORKERS = Path(__file__).parent / "workers"
STALL = "HVDLITE_STALL_CHECK_TIME_SECONDS"
SHUTDOWN = "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS"


def text(result, rank, stream):
    return "\n".join(result.lines(rank, stream))


@pytest.mark.parametrize("np_", [3])
def test_disagreeing_collectives_back_off_are_reported_everywhere_and_end_the_job(world, np_):
    # Only the check time is set: the shutdown time defaults to 10 x it (4 s,
    # after the worker's 3 s of measuring).
    result = world(np_, WORKERS / "disagreement.py", timeout=60, env={STALL: "0.4"})
    assert result.returncode != 0, result
    others = [r for r in range(np_) if r != 1]
    for rank in range(np_):
        out, err = text(result, rank, "stdout"), text(result, rank, "stderr")
        used, span = map(float, re.search(r"waiting cpu ([0-9.]+) s over ([0-9.]+) s", out).groups())
        # Spinning costs a core (span s); the back-off about 1% of one.
        assert used < 0.25 * span, result
        # The stall report, on every rank, names both tensors and who is missing.
        assert "stall: these collectives have been waiting for other ranks" in err, result
        assert f"'a' (allreduce, waited" in err and f"missing on ranks [1]" in err, result
        assert f"'b' (allgather, waited" in err and f"missing on ranks {others}" in err, result
        assert "once they have waited 4 s (HVDLITE_STALL_SHUTDOWN_TIME_SECONDS" in err, result
        # The thread blocked in synchronize() reports its own wait too.
        mine = "allgather of 'b'" if rank == 1 else "allreduce of 'a'"
        assert re.search(rf"stall: waited \d+ s for {mine} to complete \(synchronize\(\)", err), result
        # ...and the default shutdown ends the job with it.
        name, missing = ("b", others) if rank == 1 else ("a", [1])
        op = "allgather" if rank == 1 else "allreduce"
        assert f"ended by: {op} of '{name}' stalled for 4 s waiting for ranks {missing}" in out, result
        assert "completed a collective" not in out, result


@pytest.mark.parametrize("mode", ["cached", "refused"])
@pytest.mark.parametrize("np_", [2, 3])
def test_join_paths_that_diverge_complete(world, np_, mode):
    result = world(np_, WORKERS / "join_paths.py", mode, timeout=60).expect_ok()
    for rank in range(np_):
        assert f"rank {rank}: join paths OK" in text(result, rank, "stdout"), result


@pytest.mark.parametrize("np_", [3])
def test_a_join_nobody_else_makes_is_reported_and_failed(world, tmp_path, np_):
    # The report comes after 1 s, the failure after 2 (in the same
    # coordinator cycle, at the latest); the others submit nothing until
    # rank 0's join has failed (workers/peer_done.py).
    result = world(np_, WORKERS / "join_paths.py", "never", timeout=60,
                   env={STALL: "1", SHUTDOWN: "2", "PEER_DONE_MARKER": str(tmp_path / "failed")}
                   ).expect_ok()
    missing = list(range(1, np_))
    for rank in range(np_):
        assert f"rank {rank}: join paths OK" in text(result, rank, "stdout"), result
        err = text(result, rank, "stderr")
        assert f"join() (waited" in err and f"joined on ranks [0], missing on ranks {missing}" in err, \
            result
    assert "join failed after" in text(result, 0, "stdout"), result


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_a_rank_stuck_in_a_transport_call_is_reported_and_ended(world, transport):
    env = {STALL: "1", SHUTDOWN: "2"}
    if transport == "tcp":
        env["HVDLITE_SHM_DISABLE"] = "1"
    result = world(2, WORKERS / "frozen_peer.py", timeout=60, env=env).expect_ok()
    over = "over shared memory" if transport == "shm" else "a transfer over tcp"
    err = text(result, 0, "stderr")
    assert re.search(rf"stalled inside .*{over}: waited [12] s for rank 1, which has not taken part",
                     err), result
    out = text(result, 0, "stdout")
    failed = re.search(r"rank 0: failed after ([0-9.]+) s: (.*)", out)
    assert failed, result
    assert re.search(rf"rank 0 gave up .*{over} after waiting [23] s for rank 1, which never took part "
                     r"\(HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=2\)", failed.group(2)), result
    assert float(failed.group(1)) < 10, result
    assert "rank 1: after the freeze:" in text(result, 1, "stdout"), result


@pytest.mark.parametrize("kind, where, np_", [("int", "synchronize", 2), ("alrm", "synchronize", 2),
                                              ("int", "join", 2), ("alrm", "join", 2),
                                              ("int", "synchronize", 3)])
def test_an_interrupted_wait_raises_at_once_and_stops_every_rank(world, tmp_path, kind, where, np_):
    # Shutdown time 0 (wait forever): only the interrupt can end the waits.
    result = world(np_, WORKERS / "interrupted.py", kind, where, timeout=60,
                   env={STALL: "30", SHUTDOWN: "0", "PEER_DONE_MARKER": str(tmp_path / "interrupted")}
                   ).expect_ok()
    exception = "AlarmTimeout" if kind == "alrm" else "KeyboardInterrupt"
    out1 = text(result, 1, "stdout")
    raised = re.search(rf"rank 1: {exception} after ([0-9.]+) s \(signal at ([0-9.]+)\)", out1)
    # "At once" against a wait that has no end (shutdown time 0, check time
    # 30 s), with room for a loaded 2-core machine.
    assert raised and float(raised.group(1)) < 5.0, result
    why = rf"rank 1 was interrupted by {exception} while it waited for (allreduce of 'x'|join\(\))"
    assert re.search(f"rank 1: later collective: .*{why}", out1), result
    for rank in set(range(np_)) - {1}:
        failed = re.search(rf"rank {rank}: failed at ([0-9.]+) .*{why}", text(result, rank, "stdout"))
        assert failed, result
        if where == "synchronize":  # it was waiting: it fails promptly (it would
            # wait forever otherwise; the bound leaves room for a loaded machine)
            assert float(failed.group(1)) - float(raised.group(2)) < 8.0, result
    # Nothing left behind: the ranks' processes and the job's segments are gone.
    started = [re.search(r"pid (\d+) job (\S*)", text(result, r, "stdout")) for r in range(np_)]
    job = started[0].group(2)
    assert not [s.group(1) for s in started if psutil.pid_exists(int(s.group(1)))], result
    assert job and not list(Path("/dev/shm").glob(f"hvdlite-{job}-*")), result
