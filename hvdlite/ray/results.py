"""Collecting what the ranks' Ray calls returned; when ranks fail, the one
reported is chosen by Note [One failure rule] (hvdlite/runner/failure_rule.py),
as for every launcher."""
import time

import ray
from ray.exceptions import RayActorError, RayError, RayTaskError

from hvdlite.runner.cluster import WorkerError
from hvdlite.runner.failure_rule import CAUSE, Ending, StaticSupervision, failure_line, raised


def gather(refs, hosts, callbacks=None):
    """The results of `refs` (one per rank, in rank order). When ranks fail,
    raises WorkerError for the root cause: a rank that raised or died
    rather than one whose collective failed because of it."""
    source = _CallSource(refs, hosts, callbacks or ())
    outcome = StaticSupervision(source).run()
    if outcome.failure is not None:
        call = outcome.failure
        raise WorkerError(call.rank, call.where(), call.ending.what) from call.cause
    return [call.result for call in source.workers()]


class _Call:
    """One rank's pending Ray call, as StaticSupervision reads a worker."""

    def __init__(self, rank, ref, host):
        self.rank = rank
        self.ref = ref
        self.host = host  # (node id, ip)
        self.ending = None
        self.result = None
        self.cause = None  # the exception to chain WorkerError from

    def where(self):
        node_id, ip = self.host
        return f"Ray node {ip} ({node_id[:12]})"


class _CallSource:
    """The ranks' calls of one run(): a call ends when its ref is ready."""

    def __init__(self, refs, hosts, callbacks):
        self._calls = [_Call(rank, ref, hosts[rank]) for rank, ref in enumerate(refs)]
        self._callbacks = callbacks
        self._abandoned = []  # calls stop() gave up on, each reported ended once

    def workers(self):
        return self._calls

    def next_event(self, timeout):
        if self._abandoned:
            return "exit", self._abandoned.pop(0)
        finished = next_finished(self._calls, timeout)
        if finished is None:
            return None
        call, result, error = finished
        if error is not None:
            call.ending = ending_of(error)
            call.cause = error.cause if isinstance(error, RayTaskError) else error
            return "exit", call
        call.result, call.ending = result, Ending(True, "returned")
        for callback in self._callbacks:
            callback(call.result)
        return "exit", call

    def stop(self, calls, signum=None):
        # A running actor call cannot be interrupted: the calls left are
        # abandoned here, and RayExecutor.shutdown() kills their actors
        # (the failure marks the executor for that clean-up).
        for call in calls:
            call.ending = Ending(False, "was still running when the job stopped")
            self._abandoned.append(call)

    def kill_all(self):
        pass

    def describe_failure(self, call, others):
        return failure_line(f"rank {call.rank}", call.where(), call.ending.what)


def next_finished(runs, timeout):
    """The first of `runs` (each with the ref of its Ray call and an ending,
    None while it runs) whose call finishes within `timeout` seconds, as
    (run, result, None), or (run, None, error) when the call failed with a
    RayError; None when none finished (or none runs: then after `timeout`)."""
    running = {run.ref: run for run in runs if run.ending is None}
    if not running:
        time.sleep(timeout)
        return None
    ready, _ = ray.wait(list(running), num_returns=1, timeout=timeout)
    if not ready:
        return None
    run = running[ready[0]]
    try:
        return run, ray.get(run.ref), None
    except RayError as error:
        return run, None, error


def ending_of(error):
    """The Ending of a rank whose call failed with `error` (a RayError)."""
    if isinstance(error, RayActorError):
        return Ending(False, f"was lost: {describe(error)}", exit_code=1, certainty=CAUSE)
    if isinstance(error, RayTaskError) and error.cause is not None:
        return raised(error.cause)
    return Ending(False, f"raised {describe(error)}", exit_code=1, certainty=CAUSE)


def describe(error):
    if isinstance(error, RayTaskError):
        cause = error.cause
        return f"{type(cause).__name__}: {cause}" if cause is not None else str(error)
    if isinstance(error, RayActorError):
        return (f"its Ray actor died ({type(error).__name__}): the worker process was "
                f"killed or its node was lost; see the node's Ray logs")
    return f"{type(error).__name__}: {error}"
