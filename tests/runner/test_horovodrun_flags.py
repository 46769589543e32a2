"""Every flag of horovodrun 0.28.1 on hvdliterun: parsed, mapped to the
variables a rank gets (or to mpirun's command line), or ignored with one line
saying why; horovodrun's config-file layout; real 2-rank runs that check the
ranks get those variables and that the core accepts them."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, mpi_environment, mpirun_path, run_ranks
from hvdlite.runner.arguments import build_parser, ignored_flag_notes, parse_args
from hvdlite.runner.environment import tuning_environment
from hvdlite.runner.hosts import parse_host_list
from hvdlite.runner.mpi import mpirun_command

WORKERS = Path(__file__).resolve().parent / "workers"
MB = 1024 * 1024

# Each of horovodrun 0.28.1's flags (horovod/runner/launch.py), with a value
# where it takes one, and what it must do here: the variables it gives every
# rank (exactly), and the "ignored" line the launcher prints, if any.
HOROVODRUN_FLAGS = [
    # flags, variables, ignored-line fragment
    (["--disable-cache"], {}, "--disable-cache is ignored: hvdliterun keeps no cache"),
    (["--start-timeout", "45"], {}, None),
    (["--network-interfaces", "eth0,eth1"], {"NCCL_SOCKET_IFNAME": "eth0,eth1"}, None),
    (["--network-interface", "eth0"], {"NCCL_SOCKET_IFNAME": "eth0"}, None),
    (["--output-filename", "/tmp/out"], {}, None),
    (["--verbose"], {}, None),
    (["-p", "2222"], {}, None),
    (["--ssh-port", "2222"], {}, None),
    (["-i", "/key"], {}, None),
    (["--ssh-identity-file", "/key"], {}, None),
    (["--fusion-threshold-mb", "32"], {"HVDLITE_FUSION_THRESHOLD": str(32 * MB)}, None),
    (["--cycle-time-ms", "2.5"], {"HVDLITE_CYCLE_TIME": "2.5"}, None),
    (["--cache-capacity", "100000000"], {"HVDLITE_CACHE_CAPACITY": "100000000"}, None),
    (["--hierarchical-allreduce"], {"HVDLITE_HIERARCHICAL_ALLREDUCE": "1"}, None),
    (["--no-hierarchical-allreduce"], {"HVDLITE_HIERARCHICAL_ALLREDUCE": "0"}, None),
    (["--hierarchical-allgather"], {"HVDLITE_HIERARCHICAL_ALLGATHER": "1"}, None),
    (["--no-hierarchical-allgather"], {"HVDLITE_HIERARCHICAL_ALLGATHER": "0"}, None),
    (["--torus-allreduce"], {}, "--torus-allreduce is ignored: hvdlite's NCCL allreduce has "
                                "no 2D-torus variant"),
    (["--no-torus-allreduce"], {}, None),
    (["--autotune"], {"HVDLITE_AUTOTUNE": "1"}, None),
    (["--no-autotune"], {"HVDLITE_AUTOTUNE": "0"}, None),
    (["--autotune-log-file", "t.csv"], {"HVDLITE_AUTOTUNE_LOG": "t.csv"}, None),
    (["--autotune-warmup-samples", "2"], {"HVDLITE_AUTOTUNE_WARMUP_SAMPLES": "2"}, None),
    (["--autotune-steps-per-sample", "4"], {"HVDLITE_AUTOTUNE_STEPS_PER_SAMPLE": "4"}, None),
    (["--autotune-bayes-opt-max-samples", "20"], {},
     "--autotune-bayes-opt-max-samples is ignored: hvdlite's autotuner searches a fixed grid"),
    (["--autotune-gaussian-process-noise", "0.8"], {},
     "--autotune-gaussian-process-noise is ignored"),
    (["--min-np", "2"], {}, None),
    (["--min-num-proc", "2"], {}, None),
    (["--max-np", "4"], {}, None),
    (["--max-num-proc", "4"], {}, None),
    (["--slots-per-host", "2"], {}, None),
    (["--elastic-timeout", "60"], {}, None),
    (["--reset-limit", "3"], {}, None),
    (["--blacklist-cooldown-range", "10", "100"], {}, None),
    (["--timeline-filename", "/tmp/tl.json"], {"HVDLITE_TIMELINE": "/tmp/tl.json"}, None),
    (["--timeline-mark-cycles"], {"HVDLITE_TIMELINE_MARK_CYCLES": "1"}, None),
    (["--no-timeline-mark-cycles"], {"HVDLITE_TIMELINE_MARK_CYCLES": "0"}, None),
    (["--no-stall-check"], {"HVDLITE_STALL_CHECK_DISABLE": "1"}, None),
    (["--stall-check"], {"HVDLITE_STALL_CHECK_DISABLE": "0"}, None),
    (["--stall-check-warning-time-seconds", "5"],
     {"HVDLITE_STALL_CHECK_TIME_SECONDS": "5"}, None),
    (["--stall-check-shutdown-time-seconds", "30"],
     {"HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": "30"}, None),
    (["--mpi-threads-disable"], {}, "--mpi-threads-disable is ignored: hvdlite needs "
                                    "MPI_THREAD_MULTIPLE"),
    (["--no-mpi-threads-disable"], {}, None),
    (["--mpi-args=--map-by ppr:1:node"], {}, "--mpi-args is ignored: it is passed to mpirun, "
                                             "which only --mpi runs"),
    (["--tcp"], {"HVDLITE_CPU_OPERATIONS": "tcp", "NCCL_IB_DISABLE": "1"}, None),
    (["--binding-args=--bind-to core"], {}, "--binding-args is ignored"),
    (["--num-nccl-streams", "2"], {}, "--num-nccl-streams is ignored: hvdlite runs NCCL on "
                                      "one stream per GPU"),
    (["--thread-affinity", "1"], {}, "--thread-affinity is ignored: hvdlite does not pin its "
                                     "background thread"),
    (["--gloo-timeout-seconds", "20"], {"HVDLITE_START_TIMEOUT": "20"}, None),
    (["--log-level", "DEBUG"], {"HVDLITE_LOG_LEVEL": "debug"}, None),
    (["--log-with-timestamp"], {"HVDLITE_LOG_HIDE_TIME": "0"}, None),
    (["--log-without-timestamp"], {"HVDLITE_LOG_HIDE_TIME": "1"}, None),
    (["-prefix-timestamp"], {}, None),
    (["--prefix-output-with-timestamp"], {}, None),
    (["--log-hide-timestamp"], {"HVDLITE_LOG_HIDE_TIME": "1"}, None),
    (["--no-log-hide-timestamp"], {"HVDLITE_LOG_HIDE_TIME": "0"}, None),
    (["-H", "localhost:2"], {}, None),
    (["--hosts", "localhost:2"], {}, None),
    (["-hostfile", "/tmp/hosts"], {}, None),
    (["--hostfile", "/tmp/hosts"], {}, None),
    (["--host-discovery-script", "./discover.sh"], {}, None),
    (["--gloo"], {}, None),
    (["--mpi"], {}, None),
    (["--config-file", "CONFIG"], {}, None),
]
# Flags that end the launcher at once, tested on their own below.
EXITING_FLAGS = {"-v", "--version", "-cb", "--check-build", "--jsrun", "-np", "--num-proc"}


def test_the_enumeration_covers_every_flag_of_hvdliterun():
    parser = build_parser()
    ours = {option for action in parser._actions for option in action.option_strings}
    enumerated = {flags[0].split("=")[0] for flags, _, _ in HOROVODRUN_FLAGS} | EXITING_FLAGS
    hvdlite_only = {"-h", "--help", "--horovod-alias", "--horovod-alias=force", "--slots",
                    "--discovery-interval"}
    assert enumerated - ours == set(), "horovodrun flags hvdliterun does not accept"
    assert ours - enumerated - hvdlite_only == set(), "flags missing from HOROVODRUN_FLAGS"


@pytest.mark.parametrize("flags, variables, ignored", HOROVODRUN_FLAGS,
                         ids=[" ".join(flags) for flags, _, _ in HOROVODRUN_FLAGS])
def test_each_horovodrun_flag(tmp_path, flags, variables, ignored):
    if flags[0] == "--config-file":
        flags = [flags[0], str(tmp_path / "empty.yaml")]
        (tmp_path / "empty.yaml").write_text("{}\n")
    args = parse_args(["-np", "2", *flags, "python", "train.py"])
    assert args.command == ["python", "train.py"]
    assert tuning_environment(args) == variables
    notes = ignored_flag_notes(args)
    if ignored is None:
        assert notes == []
    else:
        assert len(notes) == 1 and notes[0].startswith(ignored), notes


def test_flags_set_what_the_launcher_itself_uses(monkeypatch):
    args = parse_args(["-np", "4", "--network-interfaces", "eth0,eth1", "--network-interface",
                       "eth2", "-hostfile", "h.txt", "--start-timeout", "45",
                       "-prefix-timestamp", "--gloo", "python", "t.py"])
    assert (args.network_interface, args.hostfile, args.start_timeout) == \
        ("eth0,eth1,eth2", "h.txt", 45.0)
    assert args.prefix_output_with_timestamp and args.gloo and not args.mpi
    args = parse_args(["--min-num-proc", "2", "--max-num-proc", "3", "--slots-per-host", "2",
                       "--host-discovery-script", "d.sh", "python", "t.py"])
    assert (args.elastic, args.min_np, args.max_np, args.slots) == (True, 2, 3, 2)
    # horovodrun's defaults come from the environment first.
    monkeypatch.setenv("HOROVOD_START_TIMEOUT", "12")
    monkeypatch.setenv("HOROVOD_ELASTIC_TIMEOUT", "34")
    args = parse_args(["-np", "1", "true"])
    assert (args.start_timeout, args.elastic_timeout) == (12.0, 34.0)
    monkeypatch.delenv("HOROVOD_START_TIMEOUT")
    assert parse_args(["-np", "1", "true"]).start_timeout == 30.0


def test_a_bad_timeout_in_the_environment_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setenv("HVDLITE_START_TIMEOUT", "soon")
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["-np", "1", "true"])
    assert exit_info.value.code == 2
    assert "HVDLITE_START_TIMEOUT='soon' is not a number of seconds" in capsys.readouterr().err


def test_mpi_args_and_binding_args_reach_mpirun():
    args = parse_args(["-np", "2", "--mpi", "--mpi-args=--mca btl self,tcp -x FOO",
                       "--binding-args=--bind-to core --map-by socket", "-prefix-timestamp",
                       "python", "t.py"])
    assert ignored_flag_notes(args) == []
    hosts = parse_host_list("a:2")
    command = mpirun_command(args, hosts, {"PATH"}, "mpirun", ("openmpi", 5))
    assert command[:8] == ["mpirun", "-np", "2", "--host", "a:2", "--bind-to", "core",
                           "--map-by"]
    assert "slot" not in command and "none" not in command
    assert command[command.index("--output") + 1] == "timestamp"
    assert command[-7:] == ["--mca", "btl", "self,tcp", "-x", "FOO", "python", "t.py"]
    older = mpirun_command(args, hosts, {"PATH"}, "mpirun", ("openmpi", 4))
    assert "--timestamp-output" in older
    mpich = mpirun_command(args, hosts, {"PATH"}, "mpirun", ("mpich", None))
    assert mpich[5:9] == ["--bind-to", "core", "--map-by", "socket"]


@pytest.mark.parametrize("lsf, message", [
    ({}, "--jsrun needs an LSF job (LSB_JOBID is not set)"),
    ({"LSB_JOBID": "7"}, "hvdliterun does not start ranks through jsrun"),
])
def test_jsrun_is_refused_clearly(monkeypatch, capsys, lsf, message):
    monkeypatch.delenv("LSB_JOBID", raising=False)
    for name, value in lsf.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["-np", "2", "--jsrun", "python", "t.py"])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_short_aliases_version_and_check_build():
    version = subprocess.run([sys.executable, "-m", "hvdlite.runner", "-v"], capture_output=True,
                             text=True, timeout=60, cwd=REPO)
    assert version.returncode == 0 and version.stdout.startswith("hvdlite "), version
    check = subprocess.run([sys.executable, "-m", "hvdlite.runner", "-cb"], capture_output=True,
                           text=True, timeout=60, cwd=REPO)
    assert check.returncode == 0 and "hvdlite" in check.stdout, check


@pytest.mark.parametrize("value, message", [
    (["--autotune-gaussian-process-noise", "1.5"], "must be in [0, 1]"),
    (["--num-nccl-streams", "-1"], "must not be negative"),
    (["--gloo-timeout-seconds", "0"], "must be positive"),
    (["--log-level", "loud"], "invalid choice: 'loud'"),
])
def test_bad_values_of_horovodrun_flags(capsys, value, message):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["-np", "2", *value, "python", "t.py"])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


# --- horovodrun's config-file layout -------------------------------------------

HOROVOD_CONFIG = """\
params:
  fusion_threshold_mb: 8
  cycle_time_ms: 3
  cache_capacity: 512
  hierarchical_allreduce: true
  hierarchical_allgather: false
autotune:
  enabled: true
  log_file: tune.csv
  warmup_samples: 1
  steps_per_sample: 5
timeline:
  filename: tl.json
  mark_cycles: true
stall_check:
  enabled: false
  warning_time_seconds: 7
  shutdown_time_seconds: 70
library_options:
  gloo_timeout_seconds: 25
logging:
  level: INFO
  with_timestamp: false
controller: gloo
num-proc: 2
"""


def test_horovod_layout_config_file_with_flags_overriding_it(tmp_path):
    config = tmp_path / "horovod.yaml"
    config.write_text(HOROVOD_CONFIG)
    args = parse_args(["--config-file", str(config), "--cycle-time-ms", "9", "--stall-check",
                       "--no-autotune", "python", "t.py"])
    assert (args.num_proc, args.gloo, args.mpi) == (2, True, False)
    assert tuning_environment(args) == {
        "HVDLITE_FUSION_THRESHOLD": str(8 * MB), "HVDLITE_CYCLE_TIME": "9",
        "HVDLITE_CACHE_CAPACITY": "512", "HVDLITE_HIERARCHICAL_ALLREDUCE": "1",
        "HVDLITE_HIERARCHICAL_ALLGATHER": "0",
        "HVDLITE_AUTOTUNE": "0", "HVDLITE_AUTOTUNE_LOG": "tune.csv",
        "HVDLITE_AUTOTUNE_WARMUP_SAMPLES": "1", "HVDLITE_AUTOTUNE_STEPS_PER_SAMPLE": "5",
        "HVDLITE_TIMELINE": "tl.json", "HVDLITE_TIMELINE_MARK_CYCLES": "1",
        "HVDLITE_STALL_CHECK_DISABLE": "0", "HVDLITE_STALL_CHECK_TIME_SECONDS": "7",
        "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": "70", "HVDLITE_START_TIMEOUT": "25",
        "HVDLITE_LOG_LEVEL": "info", "HVDLITE_LOG_HIDE_TIME": "1"}
    # Without the flags, the file's values stand.
    env = tuning_environment(parse_args(["--config-file", str(config), "python", "t.py"]))
    assert (env["HVDLITE_CYCLE_TIME"], env["HVDLITE_AUTOTUNE"],
            env["HVDLITE_STALL_CHECK_DISABLE"]) == ("3", "1", "1")
    # A controller given on the command line wins over the file's.
    mpi = parse_args(["--config-file", str(config), "--mpi", "python", "t.py"])
    assert (mpi.mpi, mpi.gloo) == (True, False)


@pytest.mark.parametrize("content, message", [
    ("params:\n  fusion_threshold: 3\n", "unknown key 'fusion_threshold' in section 'params'"),
    ("stall_check:\n  enabled: maybe\n", "'stall_check.enabled' must be true or false"),
    ("params: 3\n", "section 'params' must be a mapping"),
    ("controller: jsrun\n", "controller must be gloo or mpi"),
    ("logging:\n  level: loud\n", "'logging.level' must be one of"),
])
def test_bad_horovod_layout_config_files(tmp_path, capsys, content, message):
    config = tmp_path / "bad.yaml"
    config.write_text(content)
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--config-file", str(config), "-np", "1", "true"])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


# --- real runs ------------------------------------------------------------------

def rank_reports(result, size):
    reports = {}
    for rank in range(size):
        lines = [line for line in result.lines(rank) if line.startswith("{")]
        assert lines, result
        reports[rank] = json.loads(lines[-1])
    return reports


@pytest.mark.timeout(120)
def test_ranks_get_the_flags_variables_and_the_core_accepts_them(tmp_path):
    config = tmp_path / "horovod.yaml"
    config.write_text("params: {cache_capacity: 0}\nstall_check: {warning_time_seconds: 30}\n"
                      "logging: {level: warning}\n")
    result = run_ranks(
        2, WORKERS / "flags_allreduce.py", timeout=100, launcher_args=[
            "--config-file", config, "--fusion-threshold-mb", "1", "--cycle-time-ms", "2",
            "--no-hierarchical-allreduce", "--hierarchical-allgather", "--torus-allreduce",
            "--autotune", "--autotune-warmup-samples", "1", "--autotune-steps-per-sample", "2",
            "--autotune-bayes-opt-max-samples", "5", "--no-timeline-mark-cycles",
            "--stall-check", "--stall-check-shutdown-time-seconds", "90",
            "--mpi-threads-disable", "--num-nccl-streams", "2", "--thread-affinity", "0",
            "--gloo-timeout-seconds", "25", "--log-without-timestamp", "--tcp",
            "--disable-cache", "-hostfile", _hostfile(tmp_path), "--gloo"]).expect_ok()
    expected = {"HVDLITE_FUSION_THRESHOLD": str(MB), "HVDLITE_CYCLE_TIME": "2",
                "HVDLITE_CACHE_CAPACITY": "0", "HVDLITE_HIERARCHICAL_ALLREDUCE": "0",
                "HVDLITE_HIERARCHICAL_ALLGATHER": "1",
                "HVDLITE_AUTOTUNE": "1", "HVDLITE_AUTOTUNE_WARMUP_SAMPLES": "1",
                "HVDLITE_AUTOTUNE_STEPS_PER_SAMPLE": "2", "HVDLITE_TIMELINE_MARK_CYCLES": "0",
                "HVDLITE_STALL_CHECK_DISABLE": "0", "HVDLITE_STALL_CHECK_TIME_SECONDS": "30",
                "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": "90", "HVDLITE_START_TIMEOUT": "25",
                "HVDLITE_LOG_LEVEL": "warning", "HVDLITE_LOG_HIDE_TIME": "1",
                "HVDLITE_CPU_OPERATIONS": "tcp", "NCCL_IB_DISABLE": "1"}
    reference = [(sum(range(1, 3)) * __import__("numpy").arange(4.0) + 2 * step).tolist()
                 for step in range(3)]
    for rank, report in rank_reports(result, 2).items():
        assert (report["rank"], report["size"]) == (rank, 2)
        assert {k: report["env"].get(k) for k in expected} == expected
        assert report["sums"] == reference
    for flag in ("--torus-allreduce",
                 "--autotune-bayes-opt-max-samples", "--mpi-threads-disable",
                 "--num-nccl-streams", "--thread-affinity", "--disable-cache"):
        # One line each, from the launcher, not one per rank.
        assert result.stderr.count(f"hvdliterun: {flag} is ignored: ") == 1, result


def _hostfile(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("localhost slots=2\n")
    return path


@pytest.mark.timeout(60)
def test_a_failing_rank_traceback_once_with_timestamps_and_verbose_hosts(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text("import os, time\n"
                      "if os.environ['HVDLITE_RANK'] == '1':\n"
                      "    raise ValueError('boom on rank 1')\n"
                      "time.sleep(30)\n")
    result = run_ranks(2, script, timeout=50, launcher_args=[
        "-H", "localhost:3", "--verbose", "-prefix-timestamp"])
    assert result.returncode == 1, result
    assert "hvdliterun: hosts: localhost ranks 0-1" in result.stderr, result
    assert result.stderr.count("ValueError: boom on rank 1") == 1, result
    assert result.stderr.count("raise ValueError") == 1, result
    assert re.search(r"rank 1 \(host .*\) exited with code 1 \(its stderr is above, lines "
                     r"\[1\]<stderr>\); stopping the other 1 rank\.", result.stderr), result
    stamped = re.compile(r"^\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\[1\]<stderr>:")
    rank_lines = [line for line in result.stderr.splitlines() if "[1]<stderr>:" in line]
    assert rank_lines and all(stamped.match(line) for line in rank_lines), result


@pytest.mark.timeout(90)
def test_sigint_to_hvdliterun_mpi_says_so_and_exits_130(tmp_path):
    mpirun_path()
    script = tmp_path / "sleep.py"
    script.write_text("import os, time\n"
                      "print('started', os.environ.get('FL_MARK'), flush=True)\n"
                      "time.sleep(60)\n")
    env = mpi_environment()
    command = [sys.executable, "-m", "hvdlite.runner", "--mpi", "-np", "2",
               "--mpi-args=-x FL_MARK=from-mpi-args", sys.executable, str(script)]
    launcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env, cwd=tmp_path)
    try:
        started = 0
        deadline = time.monotonic() + 60
        while started < 2 and time.monotonic() < deadline:
            line = launcher.stdout.readline()
            started += line.strip() == "started from-mpi-args"  # --mpi-args reached mpirun
        assert started == 2, "the ranks did not start under mpirun"
        launcher.send_signal(signal.SIGINT)
        out, err = launcher.communicate(timeout=30)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.communicate()
    assert launcher.returncode == 130, err
    assert "hvdliterun: received SIGINT; mpirun stops every rank" in err, err
    assert "hvdliterun: the job was stopped by SIGINT" in err, err


# --- launcher messages -----------------------------------------------------------

# Stands in for `ssh host python -m hvdlite.runner.agent`: reads the job's
# spec, says (like the agent) that it reached the store when told to, then
# dies as ssh does when its connection is cut (exit 255, ssh's message).
FAKE_SSH = """\
import json, sys, time
sys.stdin.readline()
if sys.argv[1] == "ran":
    print("@hvdlite-agent " + json.dumps({"kind": "ready", "store_addr": "10.0.0.1",
          "hostname": "node7", "bind_addr": "10.0.0.2"}), flush=True)
    time.sleep(0.3)
    print("Timeout, server node7 not responding.", file=sys.stderr, flush=True)
else:
    print("ssh: connect to host node7 port 22: Connection refused", file=sys.stderr, flush=True)
sys.exit(255)
"""


@pytest.mark.timeout(30)
@pytest.mark.parametrize("history, lost, setup", [
    ("ran", "host node7 was lost 0 s after its agent started: the ssh connection ended "
            "(Timeout, server node7 not responding.); the host went down", False),
    ("never", "cannot reach host node7 over ssh (ssh: connect to host node7 port 22: "
              "Connection refused)", True),
])
def test_a_host_lost_after_it_ran_is_called_lost(monkeypatch, tmp_path, history, lost, setup):
    import io
    import queue
    from hvdlite.runner import remote
    from hvdlite.runner.output import Console

    fake = tmp_path / "fake_ssh.py"
    fake.write_text(FAKE_SSH)
    monkeypatch.setattr(remote, "ssh_command",
                        lambda host, options: [sys.executable, str(fake), history])
    events, stderr = queue.SimpleQueue(), io.StringIO()
    options = remote.RemoteOptions(store_candidates=["127.0.0.1"], store_port=1,
                                   connect_timeout=5)
    host = remote.RemoteHost("node7", ["python", "t.py"], {}, options,
                             Console(stdout=io.StringIO(), stderr=stderr), events, size=2)
    host.start(str(tmp_path), [{"rank": 1, "local_rank": 0, "local_size": 1,
                                "cross_rank": 1, "cross_size": 2}])
    kind, rank = events.get(timeout=20)
    host.wait(10)
    assert kind == "exit" and rank.rank == 1
    described = rank.describe_exit()
    assert described.startswith("was lost: ") and lost in described, described
    assert ("check the host name, -p/--ssh-port" in described) == setup, described


THREE_HOSTS = "127.0.0.1:1,127.0.0.2:1,127.0.0.3:1"
ELASTIC_FAST = ["--discovery-interval", "0.2", "--start-timeout", "20"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("launcher_args, worker_args, reason", [
    # Round 0 takes every usable slot up to --max-np, as Horovod's first round
    # does: no re-form, and no cooldown line.
    (["-np", "2", "--min-np", "2", "--max-np", "3"], ["--size", "3"], None),
    # Worker 1 is lost, its host excluded for 1-1.1 s, and then used again.
    (["-np", "3", "--min-np", "2", "--blacklist-cooldown-range", "1", "1"],
     ["--size", "3", "--min-steps", "10", "--kill", "1"],
     "re-forming the job at 3 rank(s) (round 2): the cooldown of excluded host(s) 127.0.0.2 "
     "ended"),
])
def test_the_cooldown_line_only_when_an_excluded_host_returns(launcher_args, worker_args,
                                                              reason):
    result = run_ranks(2, WORKERS / "elastic_until_size.py", *worker_args, timeout=100,
                       launcher_args=[*launcher_args, "-H", THREE_HOSTS, *ELASTIC_FAST]).expect_ok()
    if reason is None:
        assert "re-forming" not in result.stderr, result
    else:
        assert reason in result.stderr, result
    assert result.stderr.count("cooldown") == ("--kill" in worker_args), result
