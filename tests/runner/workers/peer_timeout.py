"""A rank for the vanished-host tests (HVDLITE_PEER_TIMEOUT_SECONDS=argv[2]).
  loop       allreduce every 50 ms until it fails; then print one JSON line
             {"rank", "failed_at" (time.time()), "error"} and exit 1
  long-step  rank 0 computes (sleeps) argv[3] s between two allreduces, the
             others wait in the second one; prints "long step OK"."""
import json
import os
import sys
import time

MODE, TIMEOUT = sys.argv[1], sys.argv[2]
os.environ["HVDLITE_PEER_TIMEOUT_SECONDS"] = TIMEOUT

import numpy as np  # noqa: E402

import hvdlite.numpy as hvd  # noqa: E402

hvd.init()
x = np.ones(1000, np.float32)
if MODE == "loop":
    print(f"rank {hvd.rank()}: running", flush=True)
    try:
        while True:
            hvd.allreduce(x, name="step", op=hvd.Sum)
            time.sleep(0.05)
    except Exception as error:  # noqa: BLE001 - what the test checks
        print(json.dumps({"rank": hvd.rank(), "failed_at": time.time(), "error": str(error)}),
              flush=True)
        sys.exit(1)
else:
    assert hvd.allreduce(x, name="before", op=hvd.Sum)[0] == hvd.size()
    if hvd.rank() == 0:
        time.sleep(float(sys.argv[3]))
    assert hvd.allreduce(x, name="after", op=hvd.Sum)[0] == hvd.size()
    print(f"rank {hvd.rank()}: long step OK", flush=True)
    hvd.shutdown()
