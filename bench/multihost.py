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
    parser.add_argument("--out", default=str(HERE / "results" / "multihost.json"))
    args = parser.parse_args()
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(tmp)
        try:
            cluster.start()
            if args.link_gbit > 0:  # 0: the veths unshaped
                shape(cluster, args.link_gbit)
            for library in args.libraries.split(","):
                records += run(cluster, library, args.link_gbit, "hostA:2,hostB:2", 4,
                               args.min_seconds)
        finally:
            cluster.close()
    print(f"\nallreduce, 2 hosts x 2 ranks, {args.link_gbit} Gbit/s links (busbw Gbit/s / "
          "median latency us)")
    libraries = [lib for lib in args.libraries.split(",") if any(r["library"] == lib for r in records)]
    print(f"{'bytes':>10}  " + "  ".join(f"{lib:>22}" for lib in libraries))
    for size in SIZES:
        cells = []
        for lib in libraries:
            row = next((r for r in records if r["library"] == lib and r["bytes"] == size), None)
            cells.append(f"{row['busbw_gbs']:9.3f} / {row['latency_us']:10.1f}" if row else "-")
        print(f"{size:>10}  " + "  ".join(f"{c:>22}" for c in cells))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(records, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
