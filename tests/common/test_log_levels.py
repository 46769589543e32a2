"""The core's log levels on real ranks (HVDLITE_LOG_LEVEL / HOROVOD_LOG_LEVEL,
HVDLITE_LOG_HIDE_TIME / HOROVOD_LOG_HIDE_TIME): what each level adds, in
Horovod's layout, and nothing at the default; and the Python side's
logging.getLogger("hvdlite")."""
import io
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

WORKERS = Path(__file__).parent / "workers"
STAMP = r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}: "


def stderr_of(result, rank):
    return "\n".join(result.lines(rank, "stderr"))


def test_the_default_level_warning_prints_nothing_on_a_healthy_job(world):
    result = world(2, WORKERS / "named_steps.py", timeout=60).expect_ok()
    assert "hvdlite rank" not in result.stderr, result


def test_info_shows_topology_transport_and_settings_with_time_stamps(world):
    result = world(2, WORKERS / "named_steps.py", timeout=60, env={"HVDLITE_LOG_LEVEL": "info"})
    result.expect_ok()
    zero, one = stderr_of(result, 0), stderr_of(result, 1)
    assert re.search(STAMP + r"I hvdlite rank 0\] topology: rank 0 of 2 on host '[^']+', local rank 0 "
                     r"of 2, cross rank 0 of 1", zero), result
    assert re.search(STAMP + r"I hvdlite rank 1\] topology: rank 1 of 2 on host '[^']+', local rank 1 "
                     r"of 2, cross rank 0 of 1", one), result
    assert re.search(r"I hvdlite rank 0\] hosts \(1\): '[^']+': ranks 0, 1; job '\w+', rendezvous round 0",
                     zero), result
    assert "settings: fusion threshold 134217728 B, cycle time 1 ms, response cache 1024 entries" in zero
    assert re.search(r"process set 0 \(ranks 0, 1\): data over shared memory \(all members on host "
                     r"'[^']+'\), negotiation over the same", zero), result
    # Nothing below info.
    assert not re.search(r"[DT] hvdlite rank", result.stderr), result


def test_debug_and_trace_add_segments_cache_summaries_and_responses(world):
    # Horovod's names, and no time stamps; TCP so that the transport's reason differs.
    env = {"HOROVOD_LOG_LEVEL": "trace", "HOROVOD_LOG_HIDE_TIME": "1", "HVDLITE_SHM_DISABLE": "1"}
    result = world(3, WORKERS / "named_steps.py", timeout=60, env=env).expect_ok()
    zero, two = stderr_of(result, 0), stderr_of(result, 2)
    assert not re.search(STAMP, result.stderr), result
    assert "[I hvdlite rank 0] process set 0 (ranks 0, 1, 2): data over tcp (HVDLITE_CPU_OPERATIONS=tcp " \
           "or HVDLITE_SHM_DISABLE=1)" in zero, result
    assert "[D hvdlite rank 2] process set 0: created its tcp communicator (rank 2 of 3)" in two, result
    # The first step's 4 requests go in full (in one cycle or several, as they
    # arrive); the two later steps are cache hits.
    cycles = re.findall(r"\[D hvdlite rank 2\] process set 0 cycle: (\d+) cache hit\(s\), (\d+) "
                        r"request\(s\) sent in full", two)
    assert sum(int(full) for _, full in cycles) == 4, result
    assert sum(int(hits) for hits, _ in cycles) == 8, result
    assert "[T hvdlite rank 0] process set 0 cycle: " in zero, result
    assert "  allreduce 'grad.3' float32 [16] (cached)" in zero, result
    assert "  allreduce 'grad.0' float32 [16]\n" in zero + "\n", result


def test_shared_memory_segments_are_logged_at_debug(world):
    result = world(2, WORKERS / "named_steps.py", timeout=60,
                   env={"HVDLITE_LOG_LEVEL": "debug", "HVDLITE_LOG_HIDE_TIME": "1"}).expect_ok()
    assert re.search(r"\[D hvdlite rank 0\] shared-memory segment '/hvdlite-\S+' of \d+ B created for "
                     r"ranks 0, 1", stderr_of(result, 0)), result
    assert re.search(r"\[D hvdlite rank 1\] shared-memory segment '/hvdlite-\S+' of \d+ B mapped for "
                     r"ranks 0, 1", stderr_of(result, 1)), result
    assert "T hvdlite rank" not in result.stderr, result


def test_an_unknown_level_fails_init_with_the_names_to_use():
    code = "import hvdlite.numpy as hvd\ntry:\n    hvd.init()\nexcept ValueError as e:\n    print(e)\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HVDLITE_", "HOROVOD_"))}
    env["HVDLITE_LOG_LEVEL"] = "loud"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=env, cwd="/").stdout
    assert "HVDLITE_LOG_LEVEL='loud' is not a log level; use trace, debug, info, warning, error or fatal" \
        in out


@pytest.fixture
def hvdlite_logger():
    """The "hvdlite" logger, its level and handlers restored afterwards."""
    from hvdlite.common import logs
    root = logs.get()
    saved = root.level, list(root.handlers)
    yield root
    root.setLevel(saved[0])
    root.handlers[:] = saved[1]


@pytest.mark.parametrize("value, level", [("trace", 5), ("DEBUG", logging.DEBUG), ("info", logging.INFO),
                                          ("fatal", logging.CRITICAL), ("", logging.WARNING)])
def test_the_python_level_follows_the_core_variable(value, level):
    from hvdlite.common import logs
    assert logs.level_from({"HOROVOD_LOG_LEVEL": value}) == level
    assert logs.level_from({"HVDLITE_LOG_LEVEL": "error", "HOROVOD_LOG_LEVEL": value}) == logging.ERROR


def test_launcher_and_elastic_messages_go_through_the_hvdlite_logger(hvdlite_logger, capsys):
    from hvdlite.common import logs
    from hvdlite.runner.output import Console

    class Records(logging.Handler):
        def __init__(self):
            super().__init__()
            self.seen = []

        def emit(self, record):
            self.seen.append((record.name, record.levelno, record.getMessage()))

    records = Records()
    hvdlite_logger.addHandler(records)
    stream = io.StringIO()
    console = Console(stdout=stream, stderr=stream)
    hvdlite_logger.setLevel(logging.WARNING)
    console.message("rank 1 exited with code 3")
    console.message("round 2: rank 0: worker 0 on localhost", logging.INFO)  # below the level
    logs.get("elastic").warning("worker 3 could not join round 1")
    assert records.seen == [("hvdlite.runner", logging.WARNING, "rank 1 exited with code 3"),
                            ("hvdlite.elastic", logging.WARNING, "worker 3 could not join round 1")]
    # The default handler: the launcher's through its console, the rest on stderr.
    assert stream.getvalue() == "hvdliterun: rank 1 exited with code 3\n"
    assert capsys.readouterr().err == "hvdlite: worker 3 could not join round 1\n"
    logs.set_level("info")
    console.message("round 2: rank 0: worker 0 on localhost", logging.INFO)
    assert stream.getvalue().endswith("hvdliterun: round 2: rank 0: worker 0 on localhost\n")
