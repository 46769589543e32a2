"""Ten shutdown/init rounds in one process, each at a new size and rank, with
collectives in every round; prints the process's fds, threads and shared-memory
segments (in /dev/shm and mapped) after the first round and after the last.

Started as 3 ranks by hvdliterun. Round k sets HVDLITE_RENDEZVOUS_ROUND=k (the
elastic driver's job) and reorders the ranks; every odd round the launcher's
rank 2 sits out, so the job shrinks to 2 ranks and grows back to 3.
"""
import json
import os
import threading
import time

import numpy as np

import hvdlite.numpy as hvd

ROUNDS = 10
LAUNCH_RANK = int(os.environ["HVDLITE_RANK"])
LAUNCH_SIZE = int(os.environ["HVDLITE_SIZE"])
JOB_ID = os.environ["HVDLITE_JOB_ID"]
LAYOUT = ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE")


def resources():
    segment_prefix = f"hvdlite-{JOB_ID}-"
    with open("/proc/self/maps") as maps:
        mapped = sum(1 for line in maps if "/dev/shm/" + segment_prefix in line)
    return {
        "fds": len(os.listdir("/proc/self/fd")),
        "threads": len(os.listdir("/proc/self/task")),
        "python_threads": threading.active_count(),
        "shm_files": sum(1 for name in os.listdir("/dev/shm") if name.startswith(segment_prefix)),
        "shm_mapped": mapped,
    }


def join_round(round_):
    """Sets this process's place in round `round_`; None when it sits out."""
    members = list(range(LAUNCH_SIZE)) if round_ % 2 == 0 else list(range(LAUNCH_SIZE - 1))
    if LAUNCH_RANK not in members:
        return None
    size = len(members)
    rank = (members.index(LAUNCH_RANK) + round_) % size  # a new rank every round
    for name, value in zip(LAYOUT, (rank, size, rank, size, 0, 1)):
        os.environ[f"HVDLITE_{name}"] = os.environ[f"HOROVOD_{name}"] = str(value)
    os.environ["HVDLITE_RENDEZVOUS_ROUND"] = str(round_)
    return rank, size


def main():
    before = None
    during = {}  # round -> resources while initialised, in the rounds at full size
    for round_ in range(ROUNDS):
        place = join_round(round_)
        if place is None:
            time.sleep(0.2)
            continue
        rank, size = place
        hvd.init()
        assert (hvd.rank(), hvd.size()) == place, ((hvd.rank(), hvd.size()), place)
        total = hvd.allreduce(np.full(1000, rank, np.float32), op=hvd.Sum, name="sum")
        assert np.all(total == sum(range(size))), total[:3]
        root = hvd.broadcast(np.array([rank], np.int64), root_rank=size - 1, name="root")
        assert int(root[0]) == size - 1, root
        gathered = hvd.allgather(np.full(rank + 1, rank, np.int32), name="gather")
        assert gathered.size == size * (size + 1) // 2, gathered
        if size == LAUNCH_SIZE:
            during[round_] = resources()
        hvd.shutdown()
        if before is None:
            before = resources()  # after one round: lazy one-time allocations are done
    full = sorted(during)
    print("resources " + json.dumps({"first": before, "last": resources(),
                                     "first_during": during[full[1]],
                                     "last_during": during[full[-1]]}))


if __name__ == "__main__":
    main()
