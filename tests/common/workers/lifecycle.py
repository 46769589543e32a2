"""init -> shutdown -> init in one process; errors before init; a timeline."""
import json
import sys

import numpy as np

import hvdlite.numpy as hvd


def main():
    timeline_path = sys.argv[1]
    try:
        hvd.rank()
    except ValueError as error:
        assert "init()" in str(error), error
    else:
        raise AssertionError("rank() before init() did not fail")

    for round_ in range(3):
        hvd.init()
        assert hvd.is_initialized()
        got = hvd.allreduce(np.full(5, round_ + hvd.rank(), np.float32), op=hvd.Sum, name="r")
        assert np.array_equal(got, np.full(5, sum(round_ + r for r in range(hvd.size())))), got
        hvd.shutdown()
        assert not hvd.is_initialized()

    hvd.init()
    hvd.start_timeline(timeline_path)
    for step in range(3):
        hvd.allreduce(np.ones(8, np.float32), name="timeline.tensor")
    hvd.stop_timeline()
    if hvd.rank() == 0:
        events = json.load(open(timeline_path))
        names = json.dumps(events)
        assert "timeline.tensor" in names, names[:500]
    # A collective after shutdown fails clearly (the test reads the line).
    rank = hvd.rank()
    hvd.shutdown()
    try:
        hvd.allreduce(np.ones(1), name="late")
    except ValueError as error:
        print(f"rank {rank}: allreduce after shutdown raised ValueError: {error}", flush=True)
    else:
        raise AssertionError("an allreduce after shutdown() succeeded")
    print(f"rank {rank}: lifecycle OK")


if __name__ == "__main__":
    main()
