"""Prints, as one JSON line, where this rank runs (hvdlite's view and the
launcher's variables) and the sum of every rank's vector, computed with
hvdlite.numpy's allreduce and allgather."""
import json
import os
import socket

import numpy as np

import hvdlite.numpy as hvd
from hvdlite.common.rendezvous import translated_environment
from print_env import pids_with_secret_on_command_line

hvd.init()
# Set by hvdliterun, or derived by init() from mpirun's/srun's/torchrun's variables.
env = {k: v for k, v in os.environ.items() if k.startswith("HVDLITE_")}
env.update(translated_environment())
rank = hvd.rank()
total = hvd.allreduce(np.arange(6, dtype=np.float64) * (rank + 1), op=hvd.Sum)
hosts = hvd.allgather(np.frombuffer(socket.gethostname().encode().ljust(32), np.uint8)[None])
report = json.dumps({
    "rank": rank, "size": hvd.size(), "local_rank": hvd.local_rank(),
    "local_size": hvd.local_size(), "cross_rank": hvd.cross_rank(),
    "cross_size": hvd.cross_size(), "hostname": socket.gethostname(), "uid": os.getuid(),
    "all_hostnames": [bytes(row).decode().strip() for row in hosts],
    "total": total.tolist(),
    # Seen from this host: ssh, sshd, the agent and every rank run here. A
    # job over MPI only has no store, and so no secret.
    "secret_on_command_lines": pids_with_secret_on_command_line(env["HVDLITE_SECRET"])
    if "HVDLITE_SECRET" in env else [],
    "mpi_enabled": hvd.mpi_enabled(),
    "env": {k: v for k, v in env.items() if k != "HVDLITE_SECRET"},
})
# One write() of under PIPE_BUF bytes: whole, even where ranks share one pipe
# (torchrun, mpirun).
os.write(1, (report + "\n").encode())
hvd.shutdown()
