"""Rank 0 of a job another launcher started (srun, mpirun): finds and hosts
the job's rendezvous store as init() does, prints where the ranks are told
to meet as one JSON line (never the secret), and keeps the store open until
its standard input closes."""
import json
import os
import sys

from hvdlite.common import rendezvous

env = rendezvous.foreign_job_environment(os.environ)
print(json.dumps({"address": env["HVDLITE_STORE_ADDR"], "port": int(env["HVDLITE_STORE_PORT"])}),
      flush=True)
sys.stdin.read()
