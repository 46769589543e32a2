"""Tests hvdlite/runner/arguments.py, hosts.py and the tuning flags of
environment.py, in process (no ranks are started)."""
import pytest

from hvdlite.runner.arguments import DEFAULT_HOSTFILE_VARIABLES, parse_args
from hvdlite.runner.environment import tuning_environment
from hvdlite.runner.hosts import HostError, parse_host_list, parse_hostfile, place_ranks


def usage_error(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_ranks_fill_hosts_in_order_with_local_and_cross_ranks():
    placements = place_ranks(parse_host_list("a:2,b:3,c:1"), 5)
    assert [(p.name, p.ranks) for p in placements] == [("a", [0, 1]), ("b", [2, 3, 4])]
    assert placements[0].cross_ranks == [0, 0] and placements[0].cross_sizes == [2, 2]
    assert placements[1].cross_ranks == [1, 1, 0] and placements[1].cross_sizes == [2, 2, 1]
    assert [p.name for p in place_ranks(parse_host_list("a,a:2,[::1]:1"), 4)] == ["a", "::1"]


@pytest.mark.parametrize("text, message", [
    ("host1:x", "malformed host 'host1:x'"),
    ("host1:2,,host2", "malformed host ''"),
    ("host1:0", "has 0 slots"),
    ("bad host:2", "malformed host 'bad host:2'"),
])
def test_malformed_host_lists(text, message):
    with pytest.raises(HostError, match=message):
        parse_host_list(text)


def test_more_ranks_than_slots():
    with pytest.raises(HostError, match=r"-np 5 is more than the 4 slot\(s\) the hosts "
                                        r"offer \(a:2,b:2\)"):
        place_ranks(parse_host_list("a:2,b:2"), 5)


def test_hostfiles(tmp_path):
    good = tmp_path / "hosts"
    good.write_text("# cluster\nnode1 slots=4\n\nnode2   slots = 2  # gpu box\nnode3\n"
                    "node4.job.default.svc:3\n")  # MPICH's (and Intel MPI's) format
    assert [(h.name, h.slots) for h in parse_hostfile(good)] == [
        ("node1", 4), ("node2", 2), ("node3", 1), ("node4.job.default.svc", 3)]
    bad = tmp_path / "bad"
    bad.write_text("node1 slots=4\nnode2 cpus=2\n")
    with pytest.raises(HostError, match=r"bad:2: malformed line 'node2 cpus=2'"):
        parse_hostfile(bad)
    with pytest.raises(HostError, match="cannot read hostfile .*No such file"):
        parse_hostfile(tmp_path / "absent")


@pytest.mark.parametrize("variable", DEFAULT_HOSTFILE_VARIABLES)
def test_without_hosts_mpiruns_default_hostfile_gives_them(monkeypatch, variable):
    # The Kubeflow MPI Operator names /etc/mpi/hostfile in an MPIJob's launcher.
    for name in DEFAULT_HOSTFILE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert parse_args(["-np", "2", "python", "x.py"]).hostfile is None
    monkeypatch.setenv(variable, "/etc/mpi/hostfile")
    args = parse_args(["-np", "2", "python", "x.py"])
    assert (args.hostfile, args.hostfile_variable) == ("/etc/mpi/hostfile", variable)
    # Hosts given on the command line win.
    for hosts, hostfile in ((["-H", "a:2"], None), (["--hostfile", "mine"], "mine"),
                            (["--host-discovery-script", "d.sh", "--min-np", "1"], None)):
        args = parse_args(["-np", "2", *hosts, "python", "x.py"])
        assert (args.hostfile, args.hostfile_variable) == (hostfile, None), hosts


def test_tuning_flags_set_the_cores_variables():
    args = parse_args(["-np", "2", "--fusion-threshold-mb", "32", "--cycle-time-ms", "2.5",
                       "--cache-capacity", "0", "--timeline-filename", "/tmp/t.json",
                       "--timeline-mark-cycles", "--autotune", "--autotune-log-file", "a.csv",
                       "--stall-check-warning-time-seconds", "5",
                       "--stall-check-shutdown-time-seconds", "30", "--log-level", "DEBUG",
                       "--tcp", "python", "train.py", "--lr", "1"])
    assert args.command == ["python", "train.py", "--lr", "1"]
    assert tuning_environment(args) == {
        "HVDLITE_FUSION_THRESHOLD": str(32 * 1024 * 1024), "HVDLITE_CYCLE_TIME": "2.5",
        "HVDLITE_CACHE_CAPACITY": "0", "HVDLITE_TIMELINE": "/tmp/t.json",
        "HVDLITE_TIMELINE_MARK_CYCLES": "1", "HVDLITE_AUTOTUNE": "1",
        "HVDLITE_AUTOTUNE_LOG": "a.csv", "HVDLITE_STALL_CHECK_TIME_SECONDS": "5",
        "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": "30", "HVDLITE_LOG_LEVEL": "debug",
        "HVDLITE_CPU_OPERATIONS": "tcp", "NCCL_IB_DISABLE": "1"}
    assert tuning_environment(parse_args(["-np", "1", "true"])) == {}


def test_config_file_sets_defaults_that_flags_override(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("np: 4\nhosts: a:2,b:2\nfusion-threshold-mb: 8\n"
                      "cycle_time_ms: 3\ncache-capacity: 0\nverbose: true\n")
    args = parse_args(["--config-file", str(config), "--cycle-time-ms", "7", "python", "x.py"])
    assert (args.num_proc, args.hosts, args.verbose) == (4, "a:2,b:2", True)
    assert tuning_environment(args)["HVDLITE_FUSION_THRESHOLD"] == str(8 * 1024 * 1024)
    assert tuning_environment(args)["HVDLITE_CYCLE_TIME"] == "7"
    assert tuning_environment(args)["HVDLITE_CACHE_CAPACITY"] == "0"


@pytest.mark.parametrize("content, message", [
    (None, "cannot read --config-file .*No such file"),
    ("fusion-threshold: 3\n", "unknown key 'fusion-threshold'"),
    ("disable-cache: maybe\n", "'disable-cache' must be true or false"),
    ("cycle-time-ms: fast\n", "'cycle-time-ms' has an invalid value 'fast'"),
    ("log-level: loud\n", "'log-level' must be one of"),
    ("np: [1\n", "is not valid YAML"),
    ("- np\n", "must be a mapping"),
])
def test_bad_config_files(tmp_path, capsys, content, message):
    config = tmp_path / "run.yaml"
    if content is not None:
        config.write_text(content)
    err = usage_error(capsys, ["--config-file", str(config), "-np", "1", "true"])
    assert __import__("re").search(message, err), err


@pytest.mark.parametrize("argv, message", [
    (["-np", "2", "-H", "a:1", "--hostfile", "h", "true"], "not allowed with argument"),
    (["-np", "2", "--mpi", "--gloo", "true"], "not allowed with argument"),
    (["-np", "2", "-p", "70000", "true"], "-p/--ssh-port must be a port number"),
    (["-np", "2", "--fusion-threshold-mb", "-1", "true"], "must not be negative"),
    (["-np", "2", "--log-level", "loud", "true"], "invalid choice: 'loud'"),
])
def test_bad_flags(capsys, argv, message):
    assert message in usage_error(capsys, argv)
