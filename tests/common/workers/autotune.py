"""Training-like steps under HVDLITE_AUTOTUNE: the same named tensors every
step, checked against the exact sum, until the tuner settles. Prints, per rank,
the parameters it saw in force as JSON."""
import json

import numpy as np

import hvdlite.numpy as hvd
from hvdlite.common.basics import core

# Sizes around the candidate thresholds (1, 4, 16 MiB) and the 1 MiB pipeline
# chunk, so that fusion plans and chunking differ from one candidate to the next.
SIZES = [1000, 65536, 300_000, 700_000, 1_500_000, 3]
MAX_STEPS = 600


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    seen = [core().tuned_parameters()]
    steps = 0
    everyone_final = False
    while not everyone_final and steps < MAX_STEPS:
        handles = [hvd.allreduce_async(np.full(n, rank + k + steps % 5, np.float32), op=hvd.Sum,
                                       name=f"grad.{k}") for k, n in enumerate(SIZES)]
        for k, (n, h) in enumerate(zip(SIZES, handles)):
            got = hvd.synchronize(h)
            want = sum(r + k + steps % 5 for r in range(size))
            assert got.shape == (n,) and np.all(got == want), (steps, k, got[:3], want)
        steps += 1
        now = core().tuned_parameters()
        if now != seen[-1]:
            seen.append(now)
        # A change lands between two steps on some ranks and in the middle of
        # one on others: stop together, once every rank has seen the end.
        flag = np.array([1.0 if now["final"] else 0.0], np.float32)
        everyone_final = hvd.allreduce(flag, op=hvd.Min, name="final")[0] == 1.0
    final = core().tuned_parameters()
    print("TUNED " + json.dumps({"steps": steps, "seen": seen, "final": final}))
    hvd.shutdown()


if __name__ == "__main__":
    main()
