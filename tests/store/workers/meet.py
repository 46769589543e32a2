"""One rank of the store attack tests (tests/store/test_store_attacks_on_jobs.py):
init(), one allreduce, then prints how long that took as one JSON line. A
failed init() prints its error to stderr and exits 1."""
import json
import sys
import time

import numpy as np

import hvdlite.numpy as hvd


def main():
    started = time.monotonic()
    try:
        hvd.init()
    except Exception as error:  # noqa: BLE001 (what a user would see is the point)
        print(f"init failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        return 1
    total = hvd.allreduce(np.ones(4) * (hvd.rank() + 1), op=hvd.Sum)
    print(json.dumps({"rank": hvd.rank(), "total": total.tolist(),
                      "seconds": time.monotonic() - started}), flush=True)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
