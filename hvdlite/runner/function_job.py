"""The caller's side of a function job (hvdlite.run): what it puts into the
job's rendezvous store before the ranks start, and what it makes of their
results and failures once they have ended. The ranks' side is task.py.
"""
import contextlib
import pickle
import signal
import sys

from hvdlite.runner.failure_rule import CAUSE, CONSEQUENCE, failure_line
from hvdlite.runner.task import MAX_VALUE_SIZE, failure_count_key, failure_key, function_key, \
    result_key
from hvdlite.store import StoreClient, rounds

# Exit codes of a job its caller stopped (launch.py: 128 + the signal).
_INTERRUPTED = {128 + signal.SIGINT, 128 + signal.SIGTERM, 128 + signal.SIGHUP}


class RankFailedError(RuntimeError):
    """A rank of an hvdlite.run job failed: it raised, was killed, or never reported.

    Each argument is kept as the attribute of the same name.

    Args:
        message (str): what happened, as the exception's message.
        rank (int | None): the failed rank; None when unknown.
        host (str | None): where it ran; None when unknown.
        remote_traceback (str | None): the traceback of what the rank raised.
        exception (BaseException | None): the original exception where it unpickles
            here (also set as __cause__).
        exit_code (int | None): the rank's (or the job's) exit status, where it is known.
    """

    def __init__(self, message, rank=None, host=None, remote_traceback=None, exception=None,
                 exit_code=None):
        super().__init__(message)
        self.rank = rank
        self.host = host
        self.remote_traceback = remote_traceback
        self.exception = exception
        self.exit_code = exit_code


def pickled_function(func, args, kwargs):
    """What the ranks fetch: the caller's sys.path and the cloudpickled call.
    Raises TypeError naming what cannot be pickled, before any rank starts."""
    import cloudpickle
    try:
        function = cloudpickle.dumps((func, args, kwargs))
    except Exception as error:  # noqa: BLE001 (pickling raises many kinds)
        raise TypeError(f"hvdlite.run cannot pickle {_unpicklable_part(func, args, kwargs)}: "
                        f"{type(error).__name__}: {error}. Everything the function uses "
                        f"travels to the ranks with cloudpickle: create such objects inside "
                        f"the function instead") from error
    payload = pickle.dumps((list(sys.path), function))
    if len(payload) > MAX_VALUE_SIZE:
        raise ValueError(f"hvdlite.run: the pickled function and arguments take "
                         f"{len(payload) / 2**20:.0f} MiB, more than the "
                         f"{MAX_VALUE_SIZE // 2**20} MiB a rendezvous store value may hold; "
                         f"load large data inside the function instead")
    return payload


def _unpicklable_part(func, args, kwargs):
    import cloudpickle
    parts = [(f"the function {getattr(func, '__qualname__', func)!r}", func)]
    parts += [(f"positional argument {i} (of type {type(a).__qualname__})", a)
              for i, a in enumerate(args)]
    parts += [(f"keyword argument {k!r} (of type {type(v).__qualname__})", v)
              for k, v in kwargs.items()]
    for name, value in parts:
        try:
            cloudpickle.dumps(value)
        except Exception:  # noqa: BLE001
            return name
    return "the function and its arguments"


@contextlib.contextmanager
def attached(function_job, store_addr, store_port, secret, job_id):
    """Around a job's run, while its store serves: publishes the function
    before the ranks start and collects what they left once they ended.
    Does nothing for a job that runs a command (function_job None)."""
    if function_job is None:
        yield
        return
    with StoreClient(store_addr, store_port, secret) as store:
        store.set(function_key(job_id), function_job.payload)
        function_job.live = (store, job_id)
        try:
            yield
        finally:
            function_job.live = None
            function_job.collect(store, job_id)


class FunctionJob:
    """One hvdlite.run call: its payload, and after the job the results
    (rank order) and failure records it found in the store."""

    def __init__(self, payload, num_proc, elastic):
        self.payload = payload
        self.first_failure = None  # processes.Rank that stopped a static job, set by launch.py
        self._num_proc = num_proc
        self._elastic = elastic
        self._results = None  # {rank: pickled result} of the round that finished
        self._failures = []  # failure records, in the order they happened
        self.live = None  # (StoreClient, job id) while the job runs

    def collect(self, store, job_id):
        """Reads the failure records and results; `store` is a StoreClient,
        the only way a pickle from the store may be read (Note [Pickles from
        the store] in task.py)."""
        count = int(store.try_get(failure_count_key(job_id)) or 0)
        # A rank killed between counting its failure and storing it left a gap.
        records = [store.try_get(failure_key(job_id, number)) for number in range(1, count + 1)]
        self._failures = [pickle.loads(record) for record in records if record is not None]
        if self._elastic:
            self._results = _final_round_results(store, job_id)
        else:
            self._results = _round_results(store, job_id, 0, self._num_proc)

    def certainty_of(self, rank):
        """How surely a failed static rank's failure is its own (Note [One
        failure rule]), read from its failure record while the job runs:
        CONSEQUENCE when its function raised HvdliteInternalError, CAUSE
        for another exception, None without a record (killed, lost)."""
        if self.live is None:
            return None
        store, job_id = self.live
        for number in range(int(store.try_get(failure_count_key(job_id)) or 0), 0, -1):
            data = store.try_get(failure_key(job_id, number))
            record = pickle.loads(data) if data is not None else None
            if record is not None and record["rank"] == rank:
                return CONSEQUENCE if record.get("consequence") else CAUSE
        return None

    def outcome(self, exit_code):
        """The ranks' return values in rank order, or raises what failed:
        RankFailedError, or KeyboardInterrupt when the caller was interrupted."""
        if exit_code == 0 and self._results is not None:
            return [_unpickle_result(rank, data) for rank, data in sorted(self._results.items())]
        failure = self._first_failure_record()
        if failure is not None:
            raise _raised_error(failure)
        if self.first_failure is not None:
            rank = self.first_failure
            line = failure_line(f"rank {rank.rank}", f"host {rank.host}, pid {rank.pid}",
                                rank.describe_exit())
            raise RankFailedError(f"hvdlite.run: {line}; the other ranks were stopped",
                                  rank=rank.rank, host=rank.host, exit_code=rank.exit_code())
        if exit_code in _INTERRUPTED:
            raise KeyboardInterrupt(f"hvdlite.run was stopped by "
                                    f"{signal.Signals(exit_code - 128).name}; every rank "
                                    f"was stopped")
        if exit_code == 0:
            raise RankFailedError("hvdlite.run: every rank exited cleanly, but the ranks of "
                                  "the final round did not all return a result (did a rank "
                                  "leave the job after the others finished?)", exit_code=0)
        raise RankFailedError(f"hvdlite.run: the job failed (exit code {exit_code}) before "
                              f"every rank returned; its output above says why",
                              exit_code=exit_code)

    def _first_failure_record(self):
        """The record of the rank that stopped the job, else the first one."""
        if self.first_failure is not None:
            for record in self._failures:
                if record["rank"] == self.first_failure.rank:
                    return record
            return None  # it was killed or lost: no record of its own
        return self._failures[0] if self._failures else None


def _round_results(store, job_id, round_, size):
    """{rank: pickled result} when every rank of the round returned, else None."""
    results = {rank: store.try_get(result_key(job_id, round_, rank)) for rank in range(size)}
    return None if any(data is None for data in results.values()) else results


def _final_round_results(store, job_id):
    """The results of the newest round whose ranks all returned (a round the
    driver published while the workers were finishing has none)."""
    latest = store.try_get(rounds.latest_key(job_id))
    for number in range(int(latest) if latest is not None else -1, -1, -1):
        size = rounds.Round.from_json(store.get(rounds.round_key(job_id, number))).size
        results = _round_results(store, job_id, number, size)
        if results is not None:
            return results
    return None


def _unpickle_result(rank, data):
    import cloudpickle
    try:
        return cloudpickle.loads(data)
    except Exception as error:  # noqa: BLE001
        raise RankFailedError(f"hvdlite.run: the return value of rank {rank} cannot be "
                              f"unpickled here: {type(error).__name__}: {error}", rank=rank,
                              exception=error) from error


def _raised_error(record):
    import cloudpickle
    exception = None
    if record["exception"] is not None:
        try:
            exception = cloudpickle.loads(record["exception"])
        except Exception:  # noqa: BLE001 (its type may not exist here)
            exception = None
    where = f"rank {record['rank']}" if record["rank"] is not None else \
        f"elastic worker {record['worker']}"
    what = record["what"] or f"raised {record['summary']}"
    if record["what"]:
        what += f" ({record['summary']})"
    line = failure_line(where, f"host {record['host']}, pid {record['pid']}", what)
    error = RankFailedError(
        f"hvdlite.run: {line}; the other ranks were stopped.\n\nRemote traceback of "
        f"{where}:\n{record['traceback'].rstrip()}",
        rank=record["rank"], host=record["host"], remote_traceback=record["traceback"],
        exception=exception, exit_code=1)
    error.__cause__ = exception
    return error
