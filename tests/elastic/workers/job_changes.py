"""How the elastic test workers change their own job: a worker that kills
itself (mid-step, or in the rendezvous), hosts added or removed at a given
step by editing the file the test's discovery script prints, and a leftover
shared-memory segment for the launcher to clean up."""
import argparse
import os
import signal
import time
from pathlib import Path

from hvdlite.common import membership


def job_options(steps):
    """The parser of the options the training workers (numpy_elastic.py,
    torch_elastic.py, jax_elastic.py) share, each adding its own: --steps N
    (default `steps`), --kill W:S (kill_self_if) and --grow FILE:S (rank 0
    adds a host to the discovery file FILE at step S: change_hosts)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--kill")
    parser.add_argument("--grow")
    return parser


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


def die_as_rank_if(spec, rank, step):
    """spec "R:S:HOW": the worker that is rank R at step S ends, by
    os._exit(9) (HOW exit9: a failure with an exit code) or SIGKILL."""
    if spec:
        at_rank, at_step, how = spec.split(":")
        if rank == int(at_rank) and step == int(at_step):
            if how == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(9)


def record_pid(directory):
    """Writes this worker's pid to directory/<worker number> (whole, or not at all)."""
    path = Path(directory, str(worker_number()))
    Path(f"{path}.tmp").write_text(str(os.getpid()))
    os.replace(f"{path}.tmp", path)


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
    _edit_and_wait(hvd, path, state, edit)


def visit(hvd, spec, visitor, state):
    """spec "FILE:ADD:REMOVE": at step ADD rank 0 adds the discovery line
    `visitor` (host:slots) to FILE, and at step REMOVE removes that host
    again; both times every rank commits until the job re-forms. Which of
    the two happened is part of the committed state (state.visits), so that
    a worker that joined in between agrees with the others."""
    path, add_at, remove_at = spec.rsplit(":", 2)
    host = visitor.split(":")[0]
    if state.step == int(add_at) and state.visits == 0:
        state.visits = 1
        _edit_and_wait(hvd, path, state, lambda lines: lines + [visitor])
    elif state.step == int(remove_at) and state.visits == 1:
        state.visits = 2
        _edit_and_wait(hvd, path, state,
                       lambda lines: [line for line in lines if line.split(":")[0] != host])


def _edit_and_wait(hvd, path, state, edit):
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


def die_in_rendezvous_if(spec):
    """spec "W:R": worker W dies by SIGKILL right after it counted itself in
    for round R (Note [Elastic rounds]): its peers are then already on their
    way into the core's rendezvous, where they would wait for it."""
    if not spec:
        return
    worker, round_ = map(int, spec.split(":"))
    count_in = membership._all_ready

    def count_in_then_die(store, job_id, round_of_job, in_run):
        everyone = count_in(store, job_id, round_of_job, in_run)
        if everyone and round_of_job.number == round_ and worker_number() == worker:
            os.kill(os.getpid(), signal.SIGKILL)
        return everyone

    membership._all_ready = count_in_then_die


def leave_segment():
    """Creates a /dev/shm file named like this job's shared-memory segments
    of round 0 (what a worker killed while its process set maps one leaves
    behind); returns its path."""
    path = Path("/dev/shm", f"{_LEFTOVER_PREFIX}{os.environ['HVDLITE_JOB_ID']}-r0-leftover-"
                            f"{worker_number()}")
    path.write_text("left behind")
    return path


def leftover_segments():
    """The names of this job's leave_segment() files still in /dev/shm here."""
    mine = f"{_LEFTOVER_PREFIX}{os.environ['HVDLITE_JOB_ID']}-r0-leftover-"
    return sorted(name for name in os.listdir("/dev/shm") if name.startswith(mine))


_LEFTOVER_PREFIX = "hvdlite-"
