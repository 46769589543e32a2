"""Starts hvdlite (so the core parses every variable the launcher set),
allreduces a few tensors, and prints one JSON line: this rank's HVDLITE_*,
HOROVOD_* and NCCL_* variables and the sums."""
import json
import os

import numpy as np

import hvdlite.numpy as hvd

hvd.init()
sums = [hvd.allreduce(np.arange(4.0) * (hvd.rank() + 1) + step, op=hvd.Sum,
                      name=f"t{step}").tolist() for step in range(3)]
env = {key: value for key, value in os.environ.items()
       if key.startswith(("HVDLITE_", "HOROVOD_", "NCCL_"))}
print(json.dumps({"rank": hvd.rank(), "size": hvd.size(), "env": env, "sums": sums}))
hvd.shutdown()
