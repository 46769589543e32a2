"""The core re-initialises in-process at a new size and rank (what elastic
training does on every reset) without leaking fds, threads or shared memory."""
import json
from pathlib import Path

WORKERS = Path(__file__).parent / "workers"


def test_ten_resets_at_new_sizes_leak_nothing(world):
    result = world(3, WORKERS / "reinit_leaks.py", timeout=120).expect_ok()
    for rank in range(3):
        lines = [line for line in result.lines(rank) if line.startswith("resources ")]
        assert lines, result
        report = json.loads(lines[-1][len("resources "):])
        first, last = report["first"], report["last"]
        assert last == first, f"rank {rank} grew across resets: {first} -> {last}"
        assert last["shm_files"] == 0 and last["shm_mapped"] == 0, report
        # While initialised: the same connections and one mapped segment
        # (ranks of one host share memory) in every round of the same size.
        # Threads too: the worker samples before a barrier, since a peer's
        # shutdown ends this rank's background thread.
        during_first, during_last = dict(report["first_during"]), dict(report["last_during"])
        # One fd more or less while initialised was seen once in two clean
        # runs (7 vs 8, 2026-11-25): a connection being opened or closed at the
        # moment of sampling. A leak would show in `last` after shutdown,
        # checked exactly above; threads and shared memory stay exact here.
        assert abs(during_first.pop("fds") - during_last.pop("fds")) <= 1, report
        assert during_first == during_last, report
        assert report["last_during"]["shm_mapped"] >= 1, report
