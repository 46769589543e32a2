"""The network side of bench/multihost.py: a cluster of three namespace hosts,
its links shaped with tc tbf, and what those links give one TCP stream (round
trip, and throughput as iperf would measure it) with nothing else running."""
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "runner"))
import namespaces  # noqa: E402

# The test cluster has hostA and hostB, and names hostC as the address nobody
# has (its unreachable-host tests). The benchmark runs in its own process, so
# it gives hostC a namespace of its own instead, for the 3-host rows.
namespaces.HOSTS["hostC"] = f"{namespaces.SUBNET}.4"
namespaces.UNREACHABLE.clear()
HOSTS = namespaces.HOSTS
Cluster, Unavailable = namespaces.Cluster, namespaces.Unavailable

# A TCP ping-pong of 4 bytes between hostA (server) and hostB: the link's
# round-trip time as a collective's messages see it.
ECHO_SERVER = """
import socket, sys
listener = socket.create_server((sys.argv[1], 29600))
print("listening", flush=True)
connection, _ = listener.accept()
connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while (data := connection.recv(4)):
    connection.sendall(data)
"""
ECHO_CLIENT = """
import socket, statistics, sys, time
connection = socket.create_connection((sys.argv[1], 29600))
connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
times = []
for _ in range(500):
    start = time.perf_counter()
    connection.sendall(b"ping")
    connection.recv(4)
    times.append(time.perf_counter() - start)
print(statistics.median(times[50:]) * 1e6)
"""
# One TCP stream from hostB to hostA for argv[2] seconds (2 by default; 1 MiB
# writes, default socket buffers): the server counts what arrives and answers
# the count at EOF, so the client's clock covers delivery, not just its
# kernel's send buffer.
STREAM_SERVER = """
import socket, sys
listener = socket.create_server((sys.argv[1], 29601))
print("listening", flush=True)
connection, _ = listener.accept()
buffer, total = bytearray(1 << 20), 0
while (n := connection.recv_into(buffer)):
    total += n
connection.sendall(str(total).encode())
"""
STREAM_CLIENT = """
import socket, sys, time
connection = socket.create_connection((sys.argv[1], 29601))
chunk = bytes(1 << 20)
start = time.perf_counter()
while time.perf_counter() - start < float(sys.argv[2]):
    connection.sendall(chunk)
connection.shutdown(socket.SHUT_WR)
total = int(connection.recv(64))
print(total * 8 / (time.perf_counter() - start) / 1e9)
"""


def _client_server(cluster, server, client, *client_args):
    """Runs server on hostA and client on hostB (its arguments: hostA's
    address, then client_args); returns the client's number."""
    a, b = "hostA", "hostB"
    process = subprocess.Popen(["ip", "netns", "exec", cluster.namespaces[a], sys.executable,
                                "-c", server, HOSTS[a]], stdout=subprocess.PIPE, text=True)
    try:
        process.stdout.readline()
        done = subprocess.run(["ip", "netns", "exec", cluster.namespaces[b], sys.executable,
                               "-c", client, HOSTS[a], *map(str, client_args)],
                              capture_output=True, text=True,
                              timeout=60, check=True)
        return float(done.stdout)
    finally:
        process.kill()
        process.wait()


def round_trip_us(cluster):
    return _client_server(cluster, ECHO_SERVER, ECHO_CLIENT)


def one_stream_gbit(cluster, seconds=2.0):
    return _client_server(cluster, STREAM_SERVER, STREAM_CLIENT, seconds)


def shape(cluster, gbit):
    """tbf on both ends of every host's veth: the host's egress and the
    bridge's. The bucket holds 4 ms at the rate (512 KiB at 1 Gbit/s), enough
    for the kernel's timer to keep a fast link busy."""
    burst = f"{max(512, int(512 * gbit))}kb"
    for index, name in enumerate(HOSTS):
        for namespace, device in ((cluster.namespaces[name], "eth0"),
                                  (cluster.namespaces["launcher"], f"port{index}")):
            subprocess.run(["ip", "netns", "exec", namespace, "tc", "qdisc", "replace", "dev",
                            device, "root", "tbf", "rate", f"{gbit}gbit", "burst", burst,
                            "latency", "100ms"], check=True)


@contextlib.contextmanager
def started_cluster(script):
    """A started Cluster in a temporary folder, closed (namespaces deleted)
    afterwards; exits, saying why, on a machine that cannot host one."""
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(tmp)
        try:
            cluster.start()
        except Unavailable as error:
            cluster.close()
            sys.exit(f"{script}: this machine cannot host the namespace cluster: {error}")
        try:
            yield cluster
        finally:
            cluster.close()


def kill_strays(cluster):
    """Ends whatever a failed or timed-out run left in the cluster (ranks, Open
    MPI's prted, a launcher), keeping the hosts' sshd."""
    for pid in cluster.pids():
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() != "sshd":
                os.kill(pid, signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError):
            pass


def stop_on_sigterm():
    """SIGTERM (a timeout, a CI cancel) unwinds like Ctrl-C, so the `finally`
    that deletes the cluster runs."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, handler)
