"""One hvdlite rank as a Spark barrier task: what runs on the executors.

Spark gang-schedules the tasks of a barrier stage (all start, or none) and
fails the whole stage when one fails. Each task registers in the driver's
rendezvous store, learns every task's executor host from the barrier
context, takes its place in the job (rank = partition index; local ranks
count the tasks of one executor host) and runs the user's function.
"""
import contextlib
import io
import os
import traceback

from hvdlite.common import basics, late_joiners
from hvdlite.common.exceptions import HvdliteInternalError
from hvdlite.common.rendezvous import address_towards
from hvdlite.runner import environment as runner_environment
from hvdlite.store import StoreClient, network


def registered_key(job_id, index):
    return f"{job_id}/spark/registered/{index}"


def error_key(job_id, index):
    return f"{job_id}/spark/error/{index}"


class TaskSpec:
    """What the driver ships to every task (pickled with the closure)."""

    def __init__(self, fn, args, kwargs, store_addr, store_port, secret, job_id,
                 start_timeout, env, nics, capture_output, elastic_timeout=None):
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.store_addr, self.store_port, self.secret = store_addr, store_port, secret
        self.job_id, self.start_timeout = job_id, start_timeout
        self.env, self.nics, self.capture_output = env, nics, capture_output
        self.elastic_timeout = elastic_timeout  # run_elastic's, for its workers

    @classmethod
    def for_job(cls, fn, args, kwargs, store, env, nics, stdout, stderr, elastic_timeout=None):
        """The spec of a job whose rendezvous store (ClusterStore) is `store`."""
        return cls(fn, tuple(args), dict(kwargs), store.address, store.port, store.secret,
                   store.job_id, store.start_timeout, env,
                   nics.split(",") if isinstance(nics, str) else nics,
                   capture_output=stdout is not None or stderr is not None,
                   elastic_timeout=elastic_timeout)


def run_task(spec, layout_of):
    """The body of a barrier task. layout_of(tasks, round) -> {index: layout
    variables}, with tasks the (index, host) of every task; returns the
    partition's one element: (rank, result, stdout, stderr)."""
    from pyspark import BarrierTaskContext
    context = BarrierTaskContext.get()
    index = context.partitionId()
    host = context.getTaskInfos()[index].address.rsplit(":", 1)[0]
    with StoreClient(spec.store_addr, spec.store_port, spec.secret,
                     timeout=spec.start_timeout) as store:
        store.set(registered_key(spec.job_id, index), host)
        # A retried stage must not meet the attempt before it in the store:
        # its rendezvous round is the highest attempt of any of its tasks.
        attempts = context.allGather(str(context.attemptNumber()))
        round_ = max(int(attempt) for attempt in attempts)
        hosts = [info.address.rsplit(":", 1)[0] for info in context.getTaskInfos()]
        env = job_environment(spec)
        env.update(layout_of(list(enumerate(hosts)), round_)[index])
        env.update(spec.env or {})
        try:
            with environment_set(env):
                result, out, err = call(spec)
        except BaseException as error:
            store.set(error_key(spec.job_id, index), describe(error))
            raise
    return [(index, result, out, err)]


def job_environment(spec):
    """The variables every rank of the job gets (the layout comes on top)."""
    if spec.nics:
        bind_addr = network.interface_address(spec.nics)
    else:
        bind_addr = address_towards(spec.store_addr)
    return runner_environment.job_environment(
        store_addr=spec.store_addr, store_port=spec.store_port, secret=spec.secret,
        job_id=spec.job_id, bind_addr=bind_addr, start_timeout=f"{spec.start_timeout:g}")


def call(spec):
    """fn's result, and what it printed when the driver asked for it."""
    if not spec.capture_output:
        return spec.fn(*spec.args, **spec.kwargs), "", ""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        result = spec.fn(*spec.args, **spec.kwargs)
    return result, out.getvalue(), err.getvalue()


@contextlib.contextmanager
def environment_set(env):
    """Spark reuses its Python workers for later tasks: the job's variables
    and its core are gone again when the task ends, and so is an elastic
    late joiner's solo mode (Note [Late joiners] in hvdlite/common/late_joiners.py)."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        basics.shutdown()
        late_joiners.end()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def describe(error):
    kind = "consequence" if isinstance(error, HvdliteInternalError) else "cause"
    text = "".join(traceback.format_exception_only(type(error), error)).strip()
    return f"{kind}\n{text}\n{traceback.format_exc()}"
