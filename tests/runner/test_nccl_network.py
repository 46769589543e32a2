"""NCCL's network follows hvdlite's (Note [NCCL's network] in
hvdlite/runner/environment.py): --network-interface or
HVDLITE_NETWORK_INTERFACE, else the interface each host reached the launcher
through, become NCCL_SOCKET_IFNAME unless the user set it; NCCL_* variables
reach every rank on every host (ssh and mpirun), the launcher's
CUDA_VISIBLE_DEVICES never reaches another host; --check-build says what
NCCL will use."""
import json
import subprocess
import sys

import pytest

from hvdlite.runner import environment, mpi
from hvdlite.runner.arguments import parse_args
from hvdlite.runner.remote import forwarded_environment
from hvdlite.runner.secret import make_job_id, make_secret
from hvdlite.store import StoreServer, network

from namespaces import running_cluster
from test_agent import AgentSession
from test_launch_hosts import run_launcher
from test_launch_local import rank_lines

PRINT_NCCL = "import os; print('nccl', os.environ.get('NCCL_SOCKET_IFNAME'), flush=True)"


def _an_outside_address():
    """(interface, address) of this machine other than loopback, or skip."""
    for name, addresses in sorted(network.ipv4_addresses().items()):
        for address in addresses:
            if not address.startswith("127."):
                return name, address
    pytest.skip("this machine has no network address but loopback")


def test_the_flag_or_its_variable_names_nccls_interfaces_unless_the_user_did(monkeypatch):
    monkeypatch.delenv("NCCL_SOCKET_IFNAME", raising=False)
    args = parse_args(["-np", "2", "--network-interface", "ib0,eth1", "python", "t.py"])
    assert environment.tuning_environment(args)["NCCL_SOCKET_IFNAME"] == "ib0,eth1"
    monkeypatch.setenv("HVDLITE_NETWORK_INTERFACE", "eth3")
    args = parse_args(["-np", "2", "python", "t.py"])
    assert args.network_interface == "eth3"
    assert environment.tuning_environment(args)["NCCL_SOCKET_IFNAME"] == "eth3"
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "=mlx5_0")  # the user's own choice stays
    assert "NCCL_SOCKET_IFNAME" not in environment.tuning_environment(args)


def test_without_the_flag_a_host_tells_nccl_the_interface_it_reached_the_launcher_through():
    name, address = _an_outside_address()
    assert environment.nccl_network_towards(address, {}) == {"NCCL_SOCKET_IFNAME": name}
    assert environment.nccl_network_towards("127.0.0.1", {}) == {}  # one host: no network
    assert environment.nccl_network_towards(address, {"NCCL_SOCKET_IFNAME": "x"}) == {}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("user_choice", [None, "=ib7"])
def test_a_remote_hosts_ranks_get_the_interface_its_agent_reached_the_store_through(tmp_path, user_choice):
    name, address = _an_outside_address()
    secret = make_secret()
    env = {"HVDLITE_SECRET": secret, "HVDLITE_JOB_ID": make_job_id()}
    if user_choice:
        env["NCCL_SOCKET_IFNAME"] = user_choice
    with StoreServer(secret, host=address) as store:
        agent = AgentSession({"command": [sys.executable, "-c", PRINT_NCCL], "cwd": str(tmp_path),
                              "size": 1, "env": env, "store_port": store.port,
                              "store_candidates": [address], "connect_timeout": 10,
                              "network_interfaces": None,
                              "ranks": [{"rank": 0, "local_rank": 0, "local_size": 1, "cross_rank": 0,
                                         "cross_size": 1}]})
        try:
            agent.control("ready", store_addr=address)
            line = agent.expect(lambda text: text.startswith("[0]<stdout>:nccl"))
            assert line == f"[0]<stdout>:nccl {user_choice or name}", line
            agent.control("exit", rank=0, returncode=0)
        finally:
            agent.process.stdin.close()
            agent.process.wait(timeout=20)


def test_nccl_variables_reach_other_hosts_and_the_launchers_visible_gpus_do_not():
    forwarded = forwarded_environment({"NCCL_IB_HCA": "mlx5_0", "NCCL_DEBUG": "INFO", "PATH": "/bin",
                                       "CUDA_VISIBLE_DEVICES": "3", "NVIDIA_VISIBLE_DEVICES": "3"})
    assert forwarded == {"NCCL_IB_HCA": "mlx5_0", "NCCL_DEBUG": "INFO", "PATH": "/bin"}
    assert {"NCCL_IB_HCA", "NCCL_SOCKET_IFNAME"} <= mpi.forwarded_variables(
        {"NCCL_IB_HCA": "mlx5_0", "NCCL_SOCKET_IFNAME": "eth0", "HOME": "/root"})


def test_check_build_says_what_nccl_will_use():
    env = {"PATH": "/usr/bin:/bin", "NCCL_SOCKET_IFNAME": "eth9", "NCCL_IB_DISABLE": "1"}
    text = subprocess.run([sys.executable, "-m", "hvdlite.runner", "--check-build"], capture_output=True,
                          text=True, timeout=120, env=env).stdout
    assert "NCCL network: NCCL_SOCKET_IFNAME=eth9 (yours" in text, text
    assert "NCCL settings passed to every rank: NCCL_IB_DISABLE=1" in text, text
    assert "hvdliterun sets NCCL_SOCKET_IFNAME to --network-interface" in "\n".join(
        environment.describe_nccl_network({}))



REPORT = ("import json, os; print(json.dumps({k: os.environ.get(k) for k in "
          "('NCCL_SOCKET_IFNAME', 'NCCL_DEBUG', 'CUDA_VISIBLE_DEVICES')}))")


@pytest.mark.timeout(150)
def test_on_real_hosts_each_gets_its_own_interface_nccl_settings_and_not_the_launchers_gpus(tmp_path,
                                                                                            monkeypatch):
    """hostA and hostB (network namespaces reached over ssh, namespaces.py)
    reach the launcher through their eth0, and the launcher's own rank is
    reached at its eth0 (the bridge's address there). NCCL_DEBUG goes
    everywhere, CUDA_VISIBLE_DEVICES only to the launcher's own host."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    monkeypatch.delenv("NCCL_SOCKET_IFNAME", raising=False)
    with running_cluster(tmp_path) as cluster:
        code, out, err = run_launcher(cluster, "-np", 3, "-H", "localhost:1,hostA:1,hostB:1",
                                      sys.executable, "-c", REPORT)
        assert code == 0, err
        reports = {rank: json.loads(lines[-1]) for rank, lines in rank_lines(out).items()}
    assert reports[1] == reports[2] == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "WARN",
                                        "CUDA_VISIBLE_DEVICES": None}, reports
    assert reports[0] == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "WARN", "CUDA_VISIBLE_DEVICES": "7"}, reports
