"""Round-trip time of the rendezvous store's Python client against its
server (hvdlite/store/), the server in a process of its own as in a job.

    python bench/store_roundtrip.py [--package hvdlite.store] [--requests 5000]
                                    [--sizes 16 65536] [--rounds 5]

Each round times `requests` set() calls and as many get() calls of an existing
key, one request in flight at a time, and prints the median and 90th
percentile per request of the round with the lowest median (the machine is
shared; the quietest round says most about the code). --package names another
copy of the store package to compare against, e.g. main's, copied under
another name (see bench/RESULTS.md).
"""
import argparse
import importlib
import statistics
import subprocess
import sys
import time

SECRET = "0123456789abcdef0123456789abcdef"


def serve(package):
    store = importlib.import_module(package)
    server = store.StoreServer(SECRET, host="127.0.0.1").start()
    print(server.port, flush=True)
    sys.stdin.read()  # until the benchmark closes our stdin
    server.stop()


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def time_requests(client, requests, size):
    value = b"x" * size
    sets, gets = [], []
    for i in range(requests):
        started = time.perf_counter()
        client.set("k", value)
        sets.append(time.perf_counter() - started)
        started = time.perf_counter()
        client.get("k")
        gets.append(time.perf_counter() - started)
    return sets, gets


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", default="hvdlite.store")
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 65536])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.package)
    store = importlib.import_module(args.package)
    server = subprocess.Popen([sys.executable, __file__, "--serve", "--package", args.package],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        with store.StoreClient("127.0.0.1", port, SECRET) as client:
            for size in args.sizes:
                rounds = [time_requests(client, args.requests, size) for _ in range(args.rounds)]
                for what, index in (("set", 0), ("get", 1)):
                    best = min((r[index] for r in rounds), key=statistics.median)
                    print(f"{args.package} {what} {size} B: median "
                          f"{statistics.median(best) * 1e6:.1f} us, p90 "
                          f"{percentile(best, 0.9) * 1e6:.1f} us")
    finally:
        server.stdin.close()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
