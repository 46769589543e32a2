"""Fusion, the response cache, mismatches, join, process sets, lifecycle and a
killed rank, each on real ranks."""
import csv
import json
import re
from pathlib import Path

import pytest

WORKERS = Path(__file__).parent / "workers"


@pytest.mark.parametrize("np_", [2, 3])
def test_fusion_and_cache_from_many_threads(world, np_):
    result = world(np_, WORKERS / "fusion_cache.py", timeout=180).expect_ok()
    assert all("fusion and cache OK" in "".join(result.lines(r)) for r in range(np_)), result


def test_mismatched_collectives_fail_on_every_rank_and_the_job_goes_on(world):
    result = world(2, WORKERS / "mismatch.py", timeout=90).expect_ok()
    for rank in range(2):
        out = "\n".join(result.lines(rank))
        assert "mismatch OK" in out, result
        assert "allreduce of 'bad_shape' failed: mismatched shape" in out, result


def test_join_and_process_sets(world):
    result = world(3, WORKERS / "join_sets.py", timeout=90).expect_ok()
    assert all("join and process sets OK" in "".join(result.lines(r)) for r in range(3)), result


def test_init_shutdown_init_and_timeline(world, tmp_path):
    timeline = tmp_path / "timeline.json"
    result = world(2, WORKERS / "lifecycle.py", timeline, timeout=90).expect_ok()
    assert timeline.exists()
    for rank in range(2):
        out = "\n".join(result.lines(rank))
        assert f"rank {rank}: lifecycle OK" in out, result
        assert re.search(rf"rank {rank}: allreduce after shutdown raised ValueError: .*init\(\)",
                         out), result


def test_killed_rank_fails_the_others_fast(world):
    result = world(3, WORKERS / "killed_rank.py", timeout=60)
    # Every survivor failed on its own, within seconds, naming the lost rank.
    result.expect_fast_failures([0, 2], "rank 1")
    # The launcher names the rank that died.
    assert re.search(r"rank 1 .*signal 9", result.stderr), result
    for rank in (0, 2):
        out = "\n".join(result.lines(rank))
        # A typed error whose fields name the lost rank and its host (the
        # first failure's, recorded for every rank) and the failed tensor.
        assert re.search(rf"rank {rank} got PeerLostError ranks=\[1\] hosts=\['[^']+'\] "
                         r"tensors=\['step\.\d'\]", out), result


def test_stall_inspector_warns_then_fails_the_stalled_tensor(world, tmp_path):
    # Rank 1 submits nothing until rank 0's allreduce has failed (workers/peer_done.py).
    env = {"HVDLITE_STALL_CHECK_TIME_SECONDS": "1", "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": "2",
           "PEER_DONE_MARKER": str(tmp_path / "failed")}
    result = world(2, WORKERS / "stall.py", timeout=60, env=env).expect_ok()
    warning = "\n".join(result.lines(0, "stderr"))
    assert "'lonely' (allreduce, waited" in warning, result
    assert "missing on ranks [1]" in warning, result
    # Where rank 0 waits, and that rank 1 is not waiting on anything: late, not diverged.
    assert re.search(r"rank 0: submitted it at \S+/stall\.py:\d+ in main\(\)", warning), result
    assert "rank 1: nothing submitted to this process set" in warning, result
    assert "divergence:" not in warning, result
    out = "\n".join(result.lines(0))
    assert "StallTimeoutError missing_ranks=[1] tensors=['lonely']" in out, result
    assert all("stall OK" in "".join(result.lines(r)) for r in range(2)), result


def test_horovod_timeline_variable_writes_chrome_trace(world, tmp_path):
    timeline = tmp_path / "trace.json"
    result = world(2, WORKERS / "named_steps.py", timeout=60, env={"HOROVOD_TIMELINE": str(timeline)})
    result.expect_ok()
    events = json.loads(timeline.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    tensors = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert {f"grad.{i}" for i in range(4)} <= tensors, tensors
    phases = {e.get("name") for e in events if e.get("ph") == "B"}
    assert "NEGOTIATE_ALLREDUCE" in phases and "ALLREDUCE" in phases, phases


@pytest.mark.timeout(300)
@pytest.mark.parametrize("prefix", ["HVDLITE_", "HOROVOD_"])
def test_autotune_settles_on_every_rank_alike_and_logs_its_samples(world, tmp_path, prefix):
    log = tmp_path / "autotune.csv"
    env = {f"{prefix}AUTOTUNE": "1", f"{prefix}AUTOTUNE_LOG": str(log),
           f"{prefix}AUTOTUNE_WARMUP_SAMPLES": "1", f"{prefix}AUTOTUNE_STEPS_PER_SAMPLE": "2",
           "HVDLITE_AUTOTUNE_SAMPLES_PER_CANDIDATE": "1", f"{prefix}LOG_LEVEL": "info"}
    result = world(2, WORKERS / "autotune.py", timeout=240, env=env).expect_ok()
    tuned = {}
    for rank in range(2):
        line = next(l for l in result.lines(rank) if l.startswith("TUNED "))
        tuned[rank] = json.loads(line[len("TUNED "):])
    # Rank 0 logs each change at info, the last one as final.
    changes = [re.search(r"\] autotune: fusion threshold \d+ -> (\d+) B, cycle time \S+ -> (\S+) ms(.*)", l)
               for l in result.lines(0, "stderr")]
    changes = [c for c in changes if c]
    assert len(changes) >= 3 and changes[-1].group(3) == " (final: the search is over)", result
    assert int(changes[-1].group(1)) == tuned[0]["final"]["fusion_threshold"], result
    assert float(changes[-1].group(2)) == tuned[0]["final"]["cycle_time_ms"], result
    # Every rank ends with the same parameters, and they passed through changes.
    assert tuned[0]["final"] == tuned[1]["final"]
    assert tuned[0]["final"]["final"] is True
    for rank in range(2):
        thresholds = {p["fusion_threshold"] for p in tuned[rank]["seen"]}
        assert len(thresholds) >= 3, tuned[rank]
    rows = list(csv.DictReader(log.read_text().splitlines()))
    phases = [r["phase"] for r in rows]
    assert phases[0] == "warmup" and "fusion_threshold" in phases and "cycle_time" in phases
    assert phases[-1] == "best" and phases.count("best") == 1
    assert {int(r["fusion_threshold_bytes"]) for r in rows} >= {1 << 20, 4 << 20, 16 << 20}
    scored = [r for r in rows if r["phase"] != "best" and r["discarded"] == "0"]
    assert scored and all(float(r["score_bytes_per_second"]) > 0 for r in scored)
    best = rows[-1]
    assert int(best["fusion_threshold_bytes"]) == tuned[0]["final"]["fusion_threshold"]
    assert float(best["cycle_time_ms"]) == tuned[0]["final"]["cycle_time_ms"]
    # The winner is the candidate with the best score in its phase.
    fusion_scores = {}
    for r in scored:
        if r["phase"] == "fusion_threshold":
            fusion_scores[int(r["fusion_threshold_bytes"])] = float(r["score_bytes_per_second"])
    assert int(best["fusion_threshold_bytes"]) == max(fusion_scores, key=fusion_scores.get)


def test_host_identity_comes_from_hvdlite_hostname(world):
    result = world(2, WORKERS / "host_identity.py", timeout=60).expect_ok()
    for rank in range(2):
        assert f"rank {rank}: host identity OK" in "\n".join(result.lines(rank)), result
