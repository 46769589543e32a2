"""What a job leaves on a host once all of its ranks there have ended."""
from hvdlite.common import basics


def remove_shared_memory(job_id, keep_round=None):
    """Removes the job's shared-memory segments left in /dev/shm: one exists
    only while a process set's ranks map it at init, so a job killed in that
    window leaves it behind (Note [Segment lifetime] in
    csrc/transport/shm/segment.h). keep_round: spare the segments of that
    rendezvous round (an elastic job's newest), remove those of the others.
    Returns how many were removed."""
    if not job_id:
        return 0
    keep = f"-r{keep_round}-" if keep_round is not None else ""
    return basics.core().remove_job_segments(job_id, keep)
