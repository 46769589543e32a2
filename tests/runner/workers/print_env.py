"""Prints this rank's hvdliterun environment as one JSON line, after using it
to reach the job's store. Also lists every process whose command line
contains the job secret (there must be none)."""
import json
import os
import sys

from hvdlite.store import StoreClient


def pids_with_secret_on_command_line(secret):
    hits = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if secret.encode() in f.read():
                    hits.append(int(entry))
        except OSError:
            pass  # the process exited meanwhile
    return hits


def main():
    env = os.environ
    rank, size = int(env["HVDLITE_RANK"]), int(env["HVDLITE_SIZE"])
    with StoreClient(env["HVDLITE_STORE_ADDR"], int(env["HVDLITE_STORE_PORT"]),
                     env["HVDLITE_SECRET"], timeout=20) as store:
        store.set(f"rank.{rank}", str(os.getpid()))
        neighbour_pid = store.get(f"rank.{(rank + 1) % size}").decode()
        arrived = store.add("arrived", 1)
    print(json.dumps({
        "env": {k: v for k, v in env.items()
                if k.startswith(("HVDLITE_", "HOROVOD_")) or k == "PYTHONUNBUFFERED"},
        "argv": sys.argv[1:],
        "pid": os.getpid(),
        "neighbour_pid": neighbour_pid,
        "arrived": arrived,
        "secret_on_command_lines": pids_with_secret_on_command_line(env["HVDLITE_SECRET"]),
    }))


if __name__ == "__main__":
    main()
