"""How the elastic test workers change their own job: a worker that kills
itself, or hosts added or removed at a given step by editing the file the
test's discovery script prints."""
import os
import signal
import time


def worker_number():
    """The launcher's number of this worker (its output prefix), fixed for life."""
    return int(os.environ["HVDLITE_ELASTIC_WORKER_ID"].rsplit("/", 1)[1])


def kill_self_if(spec, step):
    """spec "W:S": worker W dies by SIGKILL when it reaches step S (in the
    middle of the job: its peers are in, or about to enter, a collective)."""
    if spec:
        worker, at = map(int, spec.split(":"))
        if worker_number() == worker and step == at:
            os.kill(os.getpid(), signal.SIGKILL)


def add_host(lines):
    return lines + ["127.0.0.3:1"]


def remove_host(lines):
    return [line for line in lines if not line.startswith("127.0.0.2:")]


def change_hosts(hvd, spec, state, first_size, edit):
    """spec "FILE:STEP": at that step of the first round, rank 0 rewrites FILE
    with edit(lines); every rank then commits until commit() raises
    HostsUpdatedInterrupt (the job re-forms, and train() starts again)."""
    path, at = spec.rsplit(":", 1)
    if state.step != int(at) or hvd.size() != first_size:
        return
    if hvd.rank() == 0:
        with open(path) as hosts:
            lines = hosts.read().split()
        with open(path, "w") as hosts:
            hosts.write("\n".join(edit(lines)) + "\n")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # commit() raises HostsUpdatedInterrupt
        time.sleep(0.1)
        state.commit()
    raise AssertionError("the job did not re-form within 60 s")
