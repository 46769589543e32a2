"""Ranks that stop agreeing, named where they are (Note [Call sites] in
csrc/core/call_site.h, Note [Divergence] in csrc/core/coordinator.cc), on
real ranks of every binding: numpy, torch (through DistributedOptimizer's
hooks), TensorFlow eagerly and in tf.function, JAX inside jit, Keras' fit.

One job per binding runs every scenario of workers/desync_scenarios.py (a
shape mismatch, ranks on different branches, a reordered pair of blocking
collectives, a rank that skips a step; Keras' run in TensorFlow's job, whose
start is most of either's time) and each scenario's error and warning
must name, for every rank, the file and line of the worker that called the
collective (the `# SITE:` lines). The divergence times are short here
(1 s to report and to fail); one test runs the defaults (5 s, 10 s).
"""
import json
import re
from datetime import datetime
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
# The check time guards against false reports (healthy ranks that briefly
# wait on different names). Once every request is in, the coordinator judges
# the waits in a full round about once a second, so a shutdown time between
# 1 and 2 s would still fail at the 2 s round: at the check time, the report
# and the failure come in one round, the report logged first (the defaults
# test keeps them apart: 5 and 10 s). Each of the 18 divergent scenarios of
# the four jobs waits it out.
CHECK, SHUTDOWN = 1.0, 1.0
FAST = {"HVDLITE_DIVERGENCE_CHECK_TIME_SECONDS": str(CHECK),
        "HVDLITE_DIVERGENCE_SHUTDOWN_TIME_SECONDS": str(SHUTDOWN),
        "TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu"}
# The coordinator says how long the ranks have diverged ("(for 1.5 s)"):
# a report comes within this much of its time (checks run about once a
# second, and a loaded 2-core machine is slow to run them).
LATE = 5.0
# No wait may come near the stall shutdown (600 s): the divergence, not the
# stall inspector, ended it. Generous: a scenario also traces and compiles
# (TensorFlow, JAX) on a loaded machine before its ranks diverge.
NO_HANG = 120.0

# Per binding: its worker and the worker's arguments, and per scenario the
# SITE key each rank's collective must be reported at (rank 0, rank 1).
# numpy and torch share one worker (one body over an adapter).
NUMPY_SITES = {"mismatch": ("mismatch0", "mismatch1"), "branches": ("step", "evaluate"),
               "reorder": ("first", "first"), "skip": ("skip_step", "skip_final")}
ARRAYS_WORKER = "common/workers/desync_arrays.py"
BINDINGS = {
    "numpy": (ARRAYS_WORKER, NUMPY_SITES),
    "torch": (ARRAYS_WORKER, dict(NUMPY_SITES, mismatch=("backward", "backward"))),
    "tensorflow": ("tensorflow/workers/desync_tf.py", {
        **{f"eager.{s}": sites for s, sites in NUMPY_SITES.items()},
        **{f"function.{s}": sites for s, sites in NUMPY_SITES.items()},
        "eager.mismatch": ("mismatch", "mismatch"),
        "function.mismatch": ("mismatch_function", "mismatch_function")}),
    "jax": ("jax/workers/desync_jax.py", dict(NUMPY_SITES, mismatch=("mismatch", "mismatch"))),
    "keras": ("keras/workers/desync_keras.py", {
        "mismatch": ("fit_mismatch", "fit_mismatch"), "branches": ("fit_branch", "evaluate"),
        "reorder": ("fit_first", "after_first"), "skip": ("fit_skip", "skip_final")}),
}


def site_lines(worker):
    """{key: line} of the worker's `# SITE:key` comments."""
    lines = {}
    for number, text in enumerate(worker.read_text().splitlines(), 1):
        found = re.search(r"# SITE:(\w+)", text)
        if found:
            lines[found.group(1)] = number
    return lines


def records(result):
    """{(scenario, rank): record} of the DESYNC lines every rank printed."""
    out = {}
    for rank in range(2):
        for line in result.lines(rank):
            if line.startswith("DESYNC "):
                record = json.loads(line[len("DESYNC "):])
                out[record["scenario"], rank] = record
    return out


def warnings(result, rank):
    """[(time, text)] of the warnings a rank logged (each with its continuation lines)."""
    out = []
    for line in result.lines(rank, "stderr"):
        stamp = re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+): W hvdlite rank \d+\] (.*)", line)
        if stamp:
            out.append([datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp(),
                        stamp.group(2)])
        elif out:
            out[-1][1] += "\n" + line
    return out


def diverged_for(text):
    """The seconds a divergence report says the ranks have diverged."""
    found = re.search(r"so none can complete \(for ([0-9.]+) s\)", text)
    assert found, text
    return float(found.group(1))


def expect_sites(text, worker, lines, keys, what):
    """Every rank's call site, "<worker>:<line>", is in `text`."""
    for rank, key in enumerate(keys):
        site = f"{worker}:{lines[key]}"
        assert f"rank {rank}" in text and site in text, f"{what}: rank {rank}'s {site} missing:\n{text}"


# Bindings whose scenarios run in another binding's job: (worker, arguments).
SHARED_JOBS = {binding: ("tensorflow/workers/desync_tf.py", ["keras"])
               for binding in ("tensorflow", "keras")}
# numpy's job also runs "late" (rank 1 merely late: a stall, never a
# divergence), with the stall check at 1 s to report it; the stall shutdown
# at 60 s, not 10 (ten times the check), stays out of the divergences' way.
LATE_JOB = (ARRAYS_WORKER, ["numpy", "mismatch", "branches", "reorder", "skip", "late"])
STALL_ENV = {"HVDLITE_STALL_CHECK_TIME_SECONDS": "1", "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": "60"}


@pytest.fixture(scope="module")
def desync_job():
    """desync_job(binding): the finished job that ran the binding's scenarios
    (run once for the bindings that share one)."""
    from conftest import run_ranks
    finished = {}

    def job(binding):
        path, _ = BINDINGS[binding]
        worker, arguments = LATE_JOB if binding == "numpy" else SHARED_JOBS.get(
            binding, (path, [binding] if path == ARRAYS_WORKER else []))
        key = (worker, *arguments)
        if key not in finished:
            finished[key] = run_ranks(2, TESTS / worker, *arguments, timeout=300,
                                      env=dict(FAST, **STALL_ENV) if binding == "numpy" else FAST)
        return finished[key]
    return job


def check_binding(result, binding):
    path, expected = BINDINGS[binding]
    worker = TESTS / path
    lines = site_lines(worker)
    got = records(result)
    for scenario, keys in expected.items():
        for rank in range(2):
            record = got.get((scenario, rank))
            assert record, f"{binding} {scenario}: rank {rank} printed nothing\n{result}"
            what = f"{binding} {scenario} on rank {rank}"
            error = record["error"]
            assert error, f"{what}: nothing was raised"
            # The framework's message (TF adds its own lines) holds the core's report.
            expect_sites(error["message"], worker, lines, keys, what)
            typed = record.get("hvdlite_error", error)  # JAX: hvd.hvdlite_error(its error)
            if scenario.endswith("mismatch"):
                assert "mismatched shape across ranks" in error["message"], what
                assert record["elapsed"] < NO_HANG, (what, record["elapsed"])
                expect_kind(typed, "CollectiveMismatchError", "FailedPreconditionError", worker, lines, keys,
                            what, field="shape")
                continue
            assert "the ranks wait on different collectives" in error["message"], what
            expect_kind(typed, "DivergenceError", "InternalError", worker, lines, keys, what)
            # Failed after the divergence shutdown time, never before, and
            # soon after it, not at the stall shutdown.
            assert record["elapsed"] >= SHUTDOWN - 0.1, (what, record["elapsed"])
            assert record["elapsed"] < NO_HANG, (what, record["elapsed"])
            assert SHUTDOWN <= diverged_for(error["message"]) < SHUTDOWN + LATE, (what, error["message"])
            # Every rank warned first, with the same report, after the check time.
            reports = [(t, text) for t, text in warnings(result, rank)
                       if text.startswith("divergence:") and record["start"] <= t]
            assert reports, f"{what}: no divergence warning\n{result}"
            when, text = reports[0]
            expect_sites(text, worker, lines, keys, f"{what} (warning)")
            assert CHECK <= diverged_for(text) < CHECK + LATE, (what, text)
            assert when - record["start"] >= CHECK - 0.1, (what, when - record["start"])
            assert when <= record["start"] + record["elapsed"], f"{what}: warned after it failed"


def expect_kind(error, hvdlite_type, tf_type, worker, lines, keys, what, field=""):
    """hvdlite's type with its fields where the binding raises it; else the
    framework's own type (TF inside a graph, JAX) with the same words."""
    if "HvdliteInternalError" not in error["types"]:
        assert tf_type in error["types"] or "JaxRuntimeError" in error["types"] \
            or "XlaRuntimeError" in error["types"], (what, error["types"])
        return
    assert hvdlite_type in error["types"], (what, error["types"])
    fields = error["fields"]
    assert fields["field"] == field, (what, fields)
    assert sorted(fields["ranks"]) == [0, 1], (what, fields)
    by_rank = {}
    for rank, tensor, op, site, value, blocked in fields["calls"]:
        by_rank.setdefault(rank, []).append(site)
    for rank, key in enumerate(keys):
        assert [str(worker), lines[key]] in [s[:2] for s in by_rank[rank] if s], (what, fields["calls"])


@pytest.mark.timeout(400)
@pytest.mark.parametrize("binding", [
    "numpy", "torch", pytest.param("tensorflow", marks=pytest.mark.tensorflow_ops), "jax",
    pytest.param("keras", marks=pytest.mark.tensorflow_ops)])
def test_every_report_names_each_ranks_call_site(desync_job, binding):
    pytest.importorskip({"numpy": "numpy", "torch": "torch", "tensorflow": "tensorflow", "jax": "jax",
                         "keras": "keras"}[binding])
    if binding in SHARED_JOBS:
        pytest.importorskip("keras")  # the shared job runs both
    result = desync_job(binding).expect_ok()
    check_binding(result, binding)
    for rank in range(2):
        assert any("desync scenarios" in line for line in result.lines(rank)), result
    if binding == "numpy":
        check_late(result)


def check_late(result):
    """Late: completes, reported as a stall naming where rank 0 waits and
    that rank 1 submitted nothing; no divergence, although rank 1 is late
    for longer than the divergence check time."""
    worker = TESTS / ARRAYS_WORKER
    lines = site_lines(worker)
    got = records(result)
    for rank in range(2):
        late = got["late", rank]
        assert late["error"] is None, late
        stalls = [text for t, text in warnings(result, rank)
                  if text.startswith("stall: these collectives") and t >= late["start"]]
        assert stalls, result
        assert f"rank 0: submitted it at {worker}:{lines['late']}" in stalls[0], stalls[0]
        assert "rank 1: nothing submitted to this process set" in stalls[0], stalls[0]
        assert not [t for t, text in warnings(result, rank)
                    if text.startswith("divergence:") and t >= late["start"]], result


def test_defaults_warn_within_seconds_and_fail_blocked_ranks_in_about_ten(world):
    # The defaults: the report after 5 s, the failure after 10 s (not the
    # stall shutdown's 600). (A merely late rank: numpy's job, check_late.)
    worker = TESTS / ARRAYS_WORKER
    result = world(2, worker, "numpy", "branches", timeout=120)
    result.expect_ok()
    lines = site_lines(worker)
    got = records(result)
    for rank in range(2):
        record = got["branches", rank]
        assert "DivergenceError" in record["error"]["types"], record
        assert 10.0 - 0.1 <= record["elapsed"] < NO_HANG, record["elapsed"]
        assert 10.0 <= diverged_for(record["error"]["message"]) < 10.0 + LATE, record
        reports = [(t, text) for t, text in warnings(result, rank) if text.startswith("divergence:")]
        assert len(reports) == 1, reports
        when, text = reports[0]
        assert 5.0 <= diverged_for(text) < 5.0 + LATE, text
        assert 5.0 - 0.1 <= when - record["start"], when - record["start"]
        assert when <= record["start"] + record["elapsed"], "warned after it failed"
        expect_sites(text, worker, lines, ("step", "evaluate"), "defaults")
        assert "HVDLITE_DIVERGENCE_SHUTDOWN_TIME_SECONDS" in text


def test_call_sites_off_reports_no_site_and_still_finds_the_divergence(world):
    worker = TESTS / ARRAYS_WORKER
    result = world(2, worker, "numpy", "mismatch", "branches", timeout=120, env=dict(FAST, HVDLITE_CALL_SITES="0"))
    result.expect_ok()
    got = records(result)
    for rank in range(2):
        assert "rank 0 has [2], rank 1 has [3]" in got["mismatch", rank]["error"]["message"]
        divergence = got["branches", rank]["error"]
        assert "DivergenceError" in divergence["types"], divergence
        assert str(worker) not in divergence["message"], divergence["message"]
        assert all(call[3] is None for call in divergence["fields"]["calls"]), divergence
