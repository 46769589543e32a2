"""One process made alone as a late joiner is (Note [Late joiners]):
prints what its collectives give, or the error they raise, then the same
after late_joiners.end(). Checked by test_late_joiners.py."""
import numpy as np

import hvdlite.numpy as hvd
from hvdlite.common import basics, late_joiners
from hvdlite.numpy import elastic as numpy_elastic, objects


def outcome(call):
    try:
        value = call()
    except Exception as error:  # noqa: BLE001 - printed for the test
        return f"{type(error).__name__}: {error}"
    return value.tolist() if isinstance(value, np.ndarray) else value


def main():
    hvd.init()
    late_joiners.begin("worker w9 (rank 0 of 1), which joined round 3 of a running elastic job,",
                       basics.core())
    x = np.arange(4, dtype=np.float32)
    for _ in range(3):  # one warning for the three calls
        summed = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=3.0,
                               name="sum")
    print("allreduce", summed.tolist(), flush=True)
    print("average", hvd.allreduce(x, name="average").tolist(), flush=True)
    print("broadcast", hvd.broadcast(x, root_rank=0, name="broadcast").tolist(), flush=True)
    # hvdlite's own state broadcasts (here the one ObjectState.sync uses)
    # call broadcast_object for the script: the worker's own object.
    print("optimizer state", numpy_elastic.bcast_object({"lr": 0.5}, "optimizer"), flush=True)
    print("allgather", outcome(lambda: hvd.allgather(x, name="gather")), flush=True)
    print("allgather_object", outcome(lambda: objects.allgather_object(3)), flush=True)
    print("script's broadcast_object", outcome(lambda: objects.broadcast_object({"epoch": 3})),
          flush=True)
    late_joiners.end()
    print("after end: allgather", hvd.allgather(x, name="gather").tolist(), flush=True)


if __name__ == "__main__":
    main()
