"""Allreduce across hosts on shaped links: hvdlite's flat ring against its
two-level allreduce (Note [Two-level allreduce]) and PyTorch's gloo, on 2
hosts x 2 ranks built from network namespaces on this machine (the test
cluster of tests/runner/namespaces.py: own sshd, hostname and /dev/shm per
host), each host's link shaped in both directions with tc tbf (this kernel
has no netem: no added delay). Needs root.

    .venv/bin/python bench/multihost.py --link-gbit 1

Prints a table and writes bench/results/multihost.json: records with
library, hosts, ranks_per_host, link_gbit, bytes, busbw_gbs, latency_us.
busbw = bytes / time x 2(n-1)/n (nccl-tests' allreduce factor, 1.5 with 4
ranks). Each way, a host's link carries 2(n-1)/n x the buffer under the flat
ring (at most one ring edge per direction crosses it) but 2(H-1)/H x under
two levels (1x with 2 hosts), so the link allows a busbw of 1.0 x its rate
flat and 1.5 x its rate in two levels with 2 hosts x 2 ranks.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "runner"))
from namespaces import HOSTS, Cluster  # noqa: E402

SIZES = [4, 1 << 10, 1 << 16, 1 << 20, 1 << 24, 1 << 26]

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


def round_trip_us(cluster):
    a, b = list(HOSTS)
    server = subprocess.Popen(["ip", "netns", "exec", cluster.namespaces[a], sys.executable, "-c",
                               ECHO_SERVER, HOSTS[a]], stdout=subprocess.PIPE, text=True)
    try:
        server.stdout.readline()
        client = subprocess.run(["ip", "netns", "exec", cluster.namespaces[b], sys.executable,
                                 "-c", ECHO_CLIENT, HOSTS[a]], capture_output=True, text=True,
                                timeout=60, check=True)
        return float(client.stdout)
    finally:
        server.kill()
        server.wait()


def shape(cluster, gbit):
    """tbf on both ends of every host's veth: the host's egress and the bridge's."""
    rate = f"{gbit}gbit"
    for index, name in enumerate(HOSTS):
        for namespace, device in ((cluster.namespaces[name], "eth0"),
                                  (cluster.namespaces["launcher"], f"port{index}")):
            subprocess.run(["ip", "netns", "exec", namespace, "tc", "qdisc", "replace", "dev",
                            device, "root", "tbf", "rate", rate, "burst", "512kb",
                            "latency", "100ms"], check=True)


def run(cluster, library, gbit, hosts_arg, ranks, min_seconds):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        backend = "gloo" if library == "gloo" else "hvdlite"
        flags = ["--no-hierarchical-allreduce"] if library == "hvdlite-flat" else []
        env = {"OMP_NUM_THREADS": "1", "BENCH_GLOO_PORT": "29511",
               "BENCH_GLOO_ADDR": list(HOSTS.values())[0], "GLOO_SOCKET_IFNAME": "eth0"}
        command = cluster.launcher_command(
            "env", *[f"{k}={v}" for k, v in env.items()], sys.executable, "-m", "hvdlite.runner",
            "-np", ranks, "-H", hosts_arg, "--network-interface", "eth0", *flags, sys.executable,
            HERE / "collectives.py", "--backend", backend, "--ops", "allreduce",
            "--sizes", ",".join(map(str, SIZES)), "--min-seconds", min_seconds, "--json", out)
        print("$", " ".join(map(str, command[6:])), flush=True)
        done = subprocess.run(command, timeout=900, cwd=str(HERE))
        if done.returncode != 0 or not out.exists():
            print(f"  {library}: failed (exit {done.returncode}); left out", flush=True)
            return []
        rows = json.loads(out.read_text())["results"]["allreduce"]
    per_host = ranks // len(hosts_arg.split(","))
    return [{"library": library, "hosts": len(hosts_arg.split(",")), "ranks_per_host": per_host,
             "link_gbit": gbit, "bytes": r["bytes"], "busbw_gbs": r["busbw_GBps"] * 8,
             "latency_us": r["median_us"]} for r in rows]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--link-gbit", type=float, default=1.0)
    parser.add_argument("--libraries", default="hvdlite-flat,hvdlite-two-level,gloo")
    parser.add_argument("--min-seconds", default="1.0")
    parser.add_argument("--layouts", default="2x2,2x1", help="hosts x ranks per host (2 hosts)")
    parser.add_argument("--out", default=str(HERE / "results" / "multihost.json"))
    args = parser.parse_args()
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(tmp)
        try:
            cluster.start()
            if args.link_gbit > 0:  # 0: the veths unshaped
                shape(cluster, args.link_gbit)
            rtt = round_trip_us(cluster)
            for layout in args.layouts.split(","):
                per_host = int(layout.split("x")[1])
                hosts_arg = ",".join(f"{h}:{per_host}" for h in HOSTS)
                for library in args.libraries.split(","):
                    if library == "hvdlite-two-level" and per_host == 1:
                        continue  # one rank per host: nothing to do in two levels
                    records += run(cluster, library, args.link_gbit, hosts_arg,
                                   per_host * len(HOSTS), args.min_seconds)
        finally:
            cluster.close()
    print(f"\nallreduce on {args.link_gbit} Gbit/s links (0: unshaped), TCP round trip "
          f"{rtt:.0f} us; busbw Gbit/s / median latency us")
    for layout in args.layouts.split(","):
        per_host = int(layout.split("x")[1])
        rows = [r for r in records if r["ranks_per_host"] == per_host]
        libraries = [lib for lib in args.libraries.split(",") if any(r["library"] == lib for r in rows)]
        print(f"\n2 hosts x {per_host} rank(s)")
        print(f"{'bytes':>10}  " + "  ".join(f"{lib:>22}" for lib in libraries))
        for size in SIZES:
            cells = []
            for lib in libraries:
                row = next((r for r in rows if r["library"] == lib and r["bytes"] == size), None)
                cells.append(f"{row['busbw_gbs']:9.3f} / {row['latency_us']:10.1f}" if row else "-")
            print(f"{size:>10}  " + "  ".join(f"{c:>22}" for c in cells))
    for record in records:
        record["rtt_us"] = rtt
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(records, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
