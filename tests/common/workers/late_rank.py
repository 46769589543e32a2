"""Rank HVDLITE_TEST_LATE_RANK calls init() only once the file
HVDLITE_TEST_GO_FILE exists, so that a test can act on the data ports of the
ranks already listening (tests/common/test_data_links.py,
test_shared_memory_names.py). Every rank then prints when its init() returned
and checks an allreduce."""
import os
import sys
import time

import numpy as np

import hvdlite.numpy as hvd


def main():
    rank = int(os.environ["HVDLITE_RANK"])
    if rank == int(os.environ["HVDLITE_TEST_LATE_RANK"]):
        give_up = time.time() + 60
        while not os.path.exists(os.environ["HVDLITE_TEST_GO_FILE"]):
            if time.time() > give_up:
                sys.exit(f"rank {rank}: the test never created the go file")
            time.sleep(0.02)
    hvd.init()
    print(f"init returned at {time.time():.3f}", flush=True)
    size = hvd.size()
    got = hvd.allreduce(np.arange(100_000, dtype=np.float32) * (rank + 1), op=hvd.Sum, name="x")
    want = np.arange(100_000, dtype=np.float32) * sum(range(1, size + 1))
    assert np.array_equal(got, want), f"rank {rank}: wrong allreduce"
    print(f"rank {rank}: allreduce OK", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
