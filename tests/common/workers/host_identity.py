"""Ranks that HVDLITE_HOSTNAME places on different hosts are not local to each
other, whatever gethostname() says (hvdliterun sets it to the host it started
the rank on): each is alone on its "host", and data goes over TCP."""
import os

import numpy as np

import hvdlite.numpy as hvd


def main():
    rank = int(os.environ["HVDLITE_RANK"])
    os.environ["HVDLITE_HOSTNAME"] = f"host-{rank}.example"
    for prefix in ("HVDLITE", "HOROVOD"):  # let the core derive the topology
        for name in ("LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE"):
            os.environ.pop(f"{prefix}_{name}", None)
    hvd.init()
    size = hvd.size()
    assert (hvd.local_rank(), hvd.local_size()) == (0, 1), (hvd.local_rank(), hvd.local_size())
    assert (hvd.cross_rank(), hvd.cross_size()) == (rank, size), (hvd.cross_rank(), hvd.cross_size())
    got = hvd.allreduce(np.arange(100_000, dtype=np.float32) * (rank + 1), op=hvd.Sum, name="x")
    want = np.arange(100_000, dtype=np.float32) * sum(range(1, size + 1))
    assert np.array_equal(got, want)
    print(f"rank {rank}: host identity OK")
    hvd.shutdown()


if __name__ == "__main__":
    main()
