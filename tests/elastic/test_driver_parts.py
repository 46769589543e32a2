"""The elastic driver's pure parts: round layouts, the planner, discovery
output, host exclusion and the command-line checks."""
import pytest

from hvdlite.runner.arguments import parse_args
from hvdlite.runner.elastic.discovery import DiscoveryError, ScriptDiscovery, \
    parse_discovery_output
from hvdlite.runner.elastic import exclusion
from hvdlite.runner.elastic.exclusion import HostExclusions, silent_hosts
from hvdlite.runner.elastic.planner import plan_round
from hvdlite.common.exceptions import PeerLostError
from hvdlite.store.rounds import Round, failure_record, read_failure_record


class FakeWorker:
    def __init__(self, host, slot):
        self.host, self.slot = host, slot

    def __repr__(self):
        return f"{self.host}/{self.slot}"


def test_round_layout_and_json_round_trip():
    round_ = Round.assign(4, [("a0", "a"), ("b0", "b"), ("a1", "a")])
    p = round_.placements
    assert (p["a0"].rank, p["b0"].rank, p["a1"].rank) == (0, 1, 2)
    assert (p["a0"].local_rank, p["a1"].local_rank, p["b0"].local_rank) == (0, 1, 0)
    assert (p["a0"].local_size, p["b0"].local_size) == (2, 1)
    assert (p["a0"].cross_rank, p["b0"].cross_rank, p["a1"].cross_rank) == (0, 1, 0)
    assert (p["a0"].cross_size, p["a1"].cross_size) == (2, 1)
    assert Round.from_json(round_.to_json()) == round_
    env = p["a1"].environment(4)
    assert env["HVDLITE_RANK"] == env["HOROVOD_RANK"] == "2"
    assert env["HVDLITE_RENDEZVOUS_ROUND"] == "4" and env["HVDLITE_HOSTNAME"] == "a"


def test_planner_keeps_survivors_first_and_fills_free_slots():
    a0, b0 = FakeWorker("a", 0), FakeWorker("b", 0)
    plan = plan_round({"a": 2, "b": 1, "c": 1}, [b0, a0], lambda h: False, max_np=None)
    assert plan.keep == [b0, a0] and plan.leave == []
    assert plan.start == [("a", 1), ("c", 0)]
    capped = plan_round({"a": 2, "b": 1, "c": 1}, [b0, a0], lambda h: False, max_np=3)
    assert capped.start == [("a", 1)] and capped.size == 3


def test_planner_drops_removed_and_excluded_hosts_and_shrunk_slots():
    a0, a1, b0 = FakeWorker("a", 0), FakeWorker("a", 1), FakeWorker("b", 0)
    plan = plan_round({"a": 1, "c": 1}, [a0, a1, b0], lambda h: h == "c", max_np=None)
    assert plan.keep == [a0] and plan.leave == [a1, b0] and plan.start == []


def test_discovery_output_format():
    text = "# hosts\nhost1:2\n\nhost2\n127.0.0.2:1  # comment\nhost3:0\n"
    assert parse_discovery_output(text, 4, "x") == {"host1": 2, "host2": 4, "127.0.0.2": 1}
    with pytest.raises(DiscoveryError, match="line 1 'a b'"):
        parse_discovery_output("a b\n", 1, "x")


def test_discovery_script_failure_is_reported(tmp_path):
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho 'cannot reach the scheduler' >&2\nexit 3\n")
    script.chmod(0o755)
    with pytest.raises(DiscoveryError, match="exited with code 3: cannot reach the scheduler"):
        ScriptDiscovery(str(script), 1).find()
    script.write_text("#!/bin/sh\necho localhost:2\n")
    assert ScriptDiscovery(str(script), 1).find() == {"localhost": 2}


def test_exclusion_for_good_or_for_a_growing_cooldown(monkeypatch):
    now = [0.0]
    forever = HostExclusions(clock=lambda: now[0])
    assert forever.record_failure("a") is None
    now[0] = 1e9
    assert forever.is_excluded("a") and not forever.is_excluded("b")
    # Note [Cooldown length]: LOW * 2**n + U(0, 1) * LOW, within [LOW, HIGH],
    # as Horovod's code computes it; U's two ends first, then at random.
    for jitter, lengths in ((0.0, [20, 40, 80, 100]), (1.0, [30, 50, 90, 100])):
        monkeypatch.setattr(exclusion.random, "uniform", lambda low, high: jitter)
        now[0] = 0.0
        cooling = HostExclusions((10, 100), clock=lambda: now[0])
        for expected in lengths:
            assert cooling.record_failure("a") == expected
            now[0] += expected - 0.01
            assert cooling.is_excluded("a")
            now[0] += 0.02
            assert not cooling.is_excluded("a")
    monkeypatch.undo()
    cooling = HostExclusions((1, 2), clock=lambda: now[0])
    assert cooling.record_failure("b") == 2  # Horovod's elastic tests' range: 2 to 3, capped
    short = HostExclusions((10, 25), clock=lambda: now[0])
    first, second = short.record_failure("c"), short.record_failure("c")
    assert 20 <= first <= 25 and second == 25


def _timed_out(rank, host, peer):
    # What a survivor's PeerLostError says when a host stopped answering
    # (Link::fail in csrc/transport/tcp/link.cc, Runtime::failureOf).
    text = (f"allreduce of 'grad' failed: rank {rank} lost host {host}: rank {peer} there (tcp "
            f"10.77.0.3:41835) did not answer for 3 s (HVDLITE_PEER_TIMEOUT_SECONDS); the host "
            f"is down or its network link is cut, or the process is frozen")
    return read_failure_record(failure_record(
        PeerLostError(text, ranks=[peer], hosts=[host], lost_hosts=[host])))


def test_a_host_named_lost_and_silent_itself_is_given_up():
    # hostB's link is cut: the survivors (here and on hostA) name it; it sends nothing.
    here, on_a = _timed_out(1, "hostB", 2), _timed_out(1, "hostB", 2)
    assert silent_hosts([("w0", "vm", *here), ("w1", "hostA", *on_a)]) == {"hostB": ("w0", here[0])}
    # hostA and hostB lost only each other: both still reach the driver.
    a_lost = _timed_out(2, "hostA", 1)
    assert silent_hosts([("w0", "vm", *here), ("w1", "hostA", *here),
                         ("w2", "hostB", *a_lost)]) == {}
    # A worker that exited (a reset connection, not a silent host: the core
    # leaves lost_hosts empty) is the exit handler's business; so is a
    # mismatch, and a worker's own host.
    crashed = read_failure_record(failure_record(PeerLostError(
        "allreduce of 'grad' failed: rank 0 lost its connection to rank 2 on host hostB "
        "(tcp 10.77.0.3:41835, Connection reset by peer). Rank 2 probably exited",
        ranks=[2], hosts=["hostB"])))
    assert crashed == (crashed[0], set())
    assert silent_hosts([("w0", "vm", *crashed), ("w1", "hostA", *_timed_out(1, "hostA", 0))]) \
        == {}
    # A worker that asked for a new round without an error.
    assert read_failure_record(failure_record(None)) == ("", set())
    assert silent_hosts([("w0", "vm", *read_failure_record(b""))]) == {}


def test_elastic_arguments():
    args = parse_args(["--min-np", "2", "--max-np", "4", "--host-discovery-script", "./d.sh",
                       "python", "t.py"])
    assert args.elastic and (args.num_proc, args.min_np, args.max_np) == (2, 2, 4)
    args = parse_args(["-np", "3", "--reset-limit", "2", "--blacklist-cooldown-range", "1",
                       "5", "python", "t.py"])
    assert args.elastic and args.min_np == 3 and args.blacklist_cooldown_range == [1.0, 5.0]
    assert not parse_args(["-np", "2", "python", "t.py"]).elastic


@pytest.mark.parametrize("argv, message", [
    (["--min-np", "3", "-np", "2"], "-np 2 is below --min-np 3"),
    (["--min-np", "2", "--max-np", "1"], "--max-np 1 is below -np 2"),
    (["--min-np", "2", "--mpi"], "--mpi cannot be combined"),
    (["--min-np", "2", "--host-discovery-script", "d", "-H", "a:2"], "not both"),
    (["--min-np", "1", "--blacklist-cooldown-range", "5", "1"], "0 < LOW <= HIGH"),
])
def test_bad_elastic_arguments_are_explained(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv + ["python", "t.py"])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
