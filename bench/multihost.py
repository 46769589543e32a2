"""Allreduce across hosts on shaped links: hvdlite's flat ring against its
two-level allreduce (Note [Two-level allreduce]), PyTorch's gloo, Open MPI
over TCP (mpi4py) and Horovod where it is installed, on 2 and 3 hosts built
from network namespaces on this machine (the test cluster of
tests/runner/namespaces.py: own sshd, hostname and /dev/shm per host), each
host's link shaped in both directions with tc tbf (this kernel has no netem:
no added delay). Needs root.

    .venv/bin/python bench/multihost.py --links 1=2x2,2x1,3x2,3x1 10=2x2,2x1

Each --links argument is a link rate in Gbit/s and the layouts (hosts x ranks
per host) measured on it. Prints a table per layout and the issue's targets,
writes bench/results/multihost.json (records with library, hosts,
ranks_per_host, link_gbit, bytes, busbw_gbs, latency_us, and what the link
gives one TCP stream alone: rtt_us, one_stream_gbit) and, where matplotlib is
installed, multihost.png.

busbw = bytes / time x 2(n-1)/n (nccl-tests' allreduce factor). Each way, a
host's link carries 2(n-1)/n x the buffer under a flat ring (one ring edge per
direction crosses it) but 2(H-1)/H x under two levels, so the link allows a
busbw of 1.0 x its rate flat and (n-1)/n / ((H-1)/H) x its rate in two levels:
1.5 at 2 hosts x 2 ranks, 1.25 at 3 x 2.
"""
import argparse
import importlib
import importlib.util
import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from launch import horovodrun, mpirun
from multihost_records import LIBRARIES, find, group, key, two_level_bound
from multihost_net import (HOSTS, kill_strays, one_stream_gbit, round_trip_us, shape,
                           started_cluster, stop_on_sigterm)
from result_files import draw_beside, write_json

HERE = Path(__file__).resolve().parent
SIZES = [4, 1 << 10, 1 << 16, 1 << 20, 1 << 24, 1 << 26]
_ports = itertools.count(29511)  # gloo's store: a fresh port per run, none in TIME_WAIT


def horovod_missing():
    """Why Horovod cannot be measured here, or None."""
    try:
        importlib.import_module("horovod.torch")
    except Exception as error:  # ImportError, or a build that fails to load
        return f"`import horovod.torch` fails ({type(error).__name__}: {error})"
    if horovodrun() is None:
        return "horovodrun is not installed"
    return None


def launch_command(library, hosts_arg, ranks):
    """The launcher line (run in the launcher's namespace) for one library;
    the script and its arguments follow it."""
    if library == "mpi":
        # Open MPI 5 over TCP between hosts, its shared-memory btl inside one
        # (as hvdlite's shm); its default collectives (HAN, hierarchical, where
        # hosts have several ranks). Unbound and yielding while it waits: 4-6
        # ranks that spin share 2 cores here, which made it 20x slower.
        return [mpirun(), "-np", ranks, "--host", hosts_arg,
                "--prefix", Path(sys.executable).parents[1], "--mca", "plm_ssh_agent", "ssh",
                "--mca", "btl", "tcp,sm,self", "--mca", "btl_tcp_if_include", "eth0",
                "--mca", "oob_tcp_if_include", "eth0", "--bind-to", "none",
                "--mca", "mpi_yield_when_idle", "1", "-x", "PATH", "-x", "OMP_NUM_THREADS",
                sys.executable]
    if library == "horovod":
        return [horovodrun(), "-np", ranks, "-H", hosts_arg, "--network-interface", "eth0",
                sys.executable]
    flags = ["--no-hierarchical-allreduce"] if library == "hvdlite-flat" else []
    return [sys.executable, "-m", "hvdlite.runner", "-np", ranks, "-H", hosts_arg,
            "--network-interface", "eth0", *flags, sys.executable]


def run(cluster, library, gbit, hosts, per_host, sizes, min_seconds):
    hosts_arg = ",".join(f"{h}:{per_host}" for h in list(HOSTS)[:hosts])
    ranks = hosts * per_host
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        backend = {"hvdlite-flat": "hvdlite", "hvdlite-two-level": "hvdlite"}.get(library, library)
        env = {"OMP_NUM_THREADS": "1", "BENCH_GLOO_PORT": next(_ports),
               "BENCH_GLOO_ADDR": HOSTS["hostA"], "GLOO_SOCKET_IFNAME": "eth0",
               "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
        script = [HERE / "collectives.py", "--backend", backend, "--ops", "allreduce",
                  "--sizes", ",".join(map(str, sizes)), "--min-seconds", min_seconds,
                  "--json", out]
        line = [*launch_command(library, hosts_arg, ranks), *script]
        command = cluster.launcher_command("env", *[f"{k}={v}" for k, v in env.items()], *line)
        print(f"$ {' '.join(map(str, line))}   (load {os.getloadavg()[0]:.1f})", flush=True)
        try:
            done = subprocess.run(command, timeout=900, cwd=str(HERE))
            code = done.returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
        if code != 0 or not out.exists():
            print(f"  {library}: failed (exit {code}); left out", flush=True)
            kill_strays(cluster)
            return []
        rows = json.loads(out.read_text())["results"]["allreduce"]
    return [{"library": library, "hosts": hosts, "ranks_per_host": per_host, "link_gbit": gbit,
             "bytes": r["bytes"], "busbw_gbs": r["busbw_GBps"] * 8, "latency_us": r["median_us"]}
            for r in rows]


def measure_link(cluster, gbit, layouts, libraries, sizes, min_seconds, stream_seconds=2.0):
    if gbit > 0:  # 0: the veths unshaped
        shape(cluster, gbit)
    link = {"rtt_us": round_trip_us(cluster),
            "one_stream_gbit": one_stream_gbit(cluster, stream_seconds)}
    print(f"\n{gbit} Gbit/s links: TCP round trip {link['rtt_us']:.0f} us, one TCP stream "
          f"alone {link['one_stream_gbit']:.2f} Gbit/s", flush=True)
    records = []
    for hosts, per_host in layouts:
        for library in libraries:
            if library == "hvdlite-two-level" and per_host == 1:
                continue  # one rank per host: nothing to do in two levels
            records += run(cluster, library, gbit, hosts, per_host, sizes, min_seconds)
    return [{**r, **link} for r in records]


def print_tables(records, sizes):
    print("\nallreduce float32; busbw Gbit/s / median latency us")
    for (gbit, hosts, per_host), rows in group(records).items():
        libraries = [lib for lib in LIBRARIES if any(r["library"] == lib for r in rows)]
        print(f"\n{hosts} hosts x {per_host} rank(s), {gbit} Gbit/s links (round trip "
              f"{rows[0]['rtt_us']:.0f} us, one stream {rows[0]['one_stream_gbit']:.2f} Gbit/s)")
        print(f"{'bytes':>10}  " + "  ".join(f"{lib:>22}" for lib in libraries))
        for size in sizes:
            cells = [find(rows, lib, size) for lib in libraries]
            cells = [f"{c['busbw_gbs']:9.3f} / {c['latency_us']:10.1f}" if c else "-"
                     for c in cells]
            print(f"{size:>10}  " + "  ".join(f"{c:>22}" for c in cells))


def print_targets(records):
    """The issue's targets: 64 MiB at 2 x 2, two levels >= 0.9 of their bound,
    >= 1.4x flat, ahead of gloo and Open MPI; 2 x 1 busbw >= 0.9 of the link,
    4-byte latency <= 2 RTT + 50 us."""
    big = max(r["bytes"] for r in records)
    for (gbit, hosts, per_host), rows in group(records).items():
        if gbit == 0:
            continue  # unshaped: no rate to compare with
        at = {r["library"]: r for r in rows if r["bytes"] == big}
        if per_host > 1 and "hvdlite-two-level" in at:
            two = at["hvdlite-two-level"]["busbw_gbs"]
            others = ", ".join(f"{lib} {at[lib]['busbw_gbs']:.3f}" for lib in LIBRARIES
                               if lib in at and lib != "hvdlite-two-level")
            print(f"{gbit} Gbit/s {hosts}x{per_host} {big >> 20} MiB: two levels {two:.3f} Gbit/s ="
                  f" {two / (gbit * two_level_bound(hosts, per_host)):.2f} of their bound; "
                  f"{others}")
        if per_host == 1 and "hvdlite-flat" in at:
            small = find(rows, "hvdlite-flat", min(r["bytes"] for r in rows))
            print(f"{gbit} Gbit/s {hosts}x1 {big >> 20} MiB: hvdlite "
                  f"{at['hvdlite-flat']['busbw_gbs'] / gbit:.2f} of the link; {small['bytes']} B "
                  f"latency {small['latency_us']:.1f} us vs 2 RTT + 50 = "
                  f"{2 * small['rtt_us'] + 50:.0f} us")


def parse_links(values):
    links = []
    for value in values:
        gbit, _, layouts = value.partition("=")
        links.append((float(gbit), [tuple(map(int, layout.split("x")))
                                    for layout in (layouts or "2x2,2x1").split(",")]))
    return links


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--links", nargs="+", default=["1=2x2,2x1,3x2,3x1", "10=2x2,2x1"],
                        help="GBIT=HOSTSxRANKS,... per link rate (0: unshaped)")
    parser.add_argument("--libraries", default=",".join(LIBRARIES))
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--min-seconds", default="0.5")
    parser.add_argument("--stream-seconds", type=float, default=2.0,
                        help="how long the one-TCP-stream measure of each link rate runs")
    parser.add_argument("--out", default=str(HERE / "results" / "multihost.json"))
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--merge", action="store_true",
                        help="keep --out's records of the layouts and libraries not run now "
                             "(rerunning some rows)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    libraries = args.libraries.split(",")
    if "horovod" in libraries and (reason := horovod_missing()):
        print(f"horovod: not measured: {reason}", flush=True)
        libraries.remove("horovod")
    if "mpi" in libraries and (mpirun() is None or importlib.util.find_spec("mpi4py") is None):
        print("mpi: not measured: needs mpi4py and mpirun (make bench-deps)", flush=True)
        libraries.remove("mpi")
    print(f"load average at the start: {os.getloadavg()}", flush=True)
    stop_on_sigterm()
    records = []
    with started_cluster("multihost") as cluster:
        for gbit, layouts in parse_links(args.links):
            records += measure_link(cluster, gbit, layouts, libraries, sizes, args.min_seconds,
                                    args.stream_seconds)
    print(f"load average at the end: {os.getloadavg()}")
    out = Path(args.out)
    if args.merge and out.exists():
        done = {key(r) for r in records}
        records = [r for r in json.loads(out.read_text()) if key(r) not in done] + records
    print_tables(records, sizes)
    print()
    print_targets(records)
    write_json(out, records)
    if not args.no_plot:
        draw_beside(out, "multihost_plot", "bench-multihost")


if __name__ == "__main__":
    main()
