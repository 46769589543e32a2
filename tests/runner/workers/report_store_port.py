"""Rank 0 writes the job's store port and the address each rank reached it
at to argv[1]/port.json, then every rank waits until argv[1]/done exists
(or 60 s pass), so that the test can look at the launcher's listening
sockets while the job runs."""
import json
import os
import sys
import time
from pathlib import Path

from hvdlite.store import StoreClient


def main():
    folder = Path(sys.argv[1])
    env = os.environ
    rank, size = int(env["HVDLITE_RANK"]), int(env["HVDLITE_SIZE"])
    port = int(env["HVDLITE_STORE_PORT"])
    with StoreClient(env["HVDLITE_STORE_ADDR"], port, env["HVDLITE_SECRET"],
                     timeout=20) as store:
        store.set(f"reached.{rank}", env["HVDLITE_STORE_ADDR"].encode())
        if rank == 0:
            reached = {r: store.get(f"reached.{r}", timeout=20).decode() for r in range(size)}
            (folder / "port.tmp").write_text(json.dumps({"port": port, "reached": reached}))
            (folder / "port.tmp").rename(folder / "port.json")
    deadline = time.monotonic() + 60
    while not (folder / "done").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    print(f"rank {rank}: done")


if __name__ == "__main__":
    main()
