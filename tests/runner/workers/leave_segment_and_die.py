"""Leaves a shared-memory segment named as the core names this job's (as a
rank killed while its set maps one at init would), then rank 0 is killed."""
import os
import signal
import time

name = f"/dev/shm/hvdlite-{os.environ['HVDLITE_JOB_ID']}-leftover-{os.environ['HVDLITE_RANK']}"
with open(name, "w") as segment:
    segment.write("left behind")
print(f"created {name}", flush=True)
if os.environ["HVDLITE_RANK"] == "0":
    time.sleep(0.5)  # let rank 1 create its own first
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(60)  # the launcher stops this rank when rank 0 dies
