"""Collecting what the ranks' Ray calls returned, and reporting the rank
whose failure caused the others'."""
import time

import ray
from ray.exceptions import RayActorError, RayError, RayTaskError

from hvdlite.common.exceptions import HvdliteInternalError
from hvdlite.runner.cluster import WorkerError

# After one rank failed, the others fail within seconds (their collectives
# lose a peer); a function that runs no collective is waited for this long.
FAILURE_GRACE_S = 10.0
_POLL_S = 1.0


def gather(refs, hosts, callbacks=None):
    """The results of `refs` (one per rank, in rank order). When ranks fail,
    raises WorkerError for the first root cause: a rank that raised or died
    rather than one whose collective failed because of it."""
    pending = dict(zip(refs, range(len(refs))))
    results = [None] * len(refs)
    errors = []
    give_up_at = None
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=_POLL_S)
        for ref in ready:
            rank = pending.pop(ref)
            try:
                results[rank] = ray.get(ref)
            except RayError as error:
                errors.append((rank, error))
                continue
            for callback in callbacks or ():
                callback(results[rank])
        if errors and give_up_at is None:
            give_up_at = time.monotonic() + FAILURE_GRACE_S
        if give_up_at is not None and time.monotonic() >= give_up_at:
            break
    if errors:
        rank, error = min(errors, key=lambda item: _is_consequence(item[1]))
        node_id, ip = hosts[rank]
        raise WorkerError(rank, f"Ray node {ip} ({node_id[:12]})", describe(error)) \
            from (error.cause if isinstance(error, RayTaskError) else error)
    return results


def describe(error):
    if isinstance(error, RayTaskError):
        cause = error.cause
        return f"{type(cause).__name__}: {cause}" if cause is not None else str(error)
    if isinstance(error, RayActorError):
        return (f"its Ray actor died ({type(error).__name__}): the worker process was "
                f"killed or its node was lost; see the node's Ray logs")
    return f"{type(error).__name__}: {error}"


def _is_consequence(error):
    """True for a rank that failed only because another one did."""
    return isinstance(error, RayTaskError) and isinstance(error.cause, HvdliteInternalError)
