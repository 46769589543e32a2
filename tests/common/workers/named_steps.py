"""A few steps of named allreduces, for checks on what the job writes (timeline)."""
import numpy as np

import hvdlite.numpy as hvd


def main():
    hvd.init()
    for step in range(3):
        handles = [hvd.allreduce_async(np.ones(16, np.float32), name=f"grad.{i}") for i in range(4)]
        for h in handles:
            hvd.synchronize(h)
    print(f"rank {hvd.rank()}: steps OK", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
