"""The rank side of hvdlite.run: `python -m hvdlite.runner.task` is the
command every rank of a function job runs (function.py starts it through
hvdliterun's machinery).

It fetches the pickled function from the job's rendezvous store, calls it,
and puts back its pickled return value, or, when it raised, a failure
record (rank, host, traceback, the exception itself where it pickles),
before it exits. Its keys in the store are below; the caller's side that
reads them is function_job.py.
"""
import os
import pickle
import socket
import sys
import traceback

from hvdlite.common import config, defaults, environment, membership
from hvdlite.common.exceptions import HvdliteInternalError
from hvdlite.store import StoreClient, rounds
from hvdlite.store.protocol import MAX_FRAME_SIZE

# What one value in the store may hold, with room for its key and framing.
MAX_VALUE_SIZE = MAX_FRAME_SIZE - 4096

# Note [Pickles from the store]
# Values here are pickles, and unpickling runs code, so they are read only
# through StoreClient: its handshake makes the store prove the job secret and
# every frame's HMAC is checked before the value is returned (Note [Store
# handshake], Note [Store frames] in hvdlite/store/protocol.py). A rogue
# listener or a relay can therefore not hand a rank, or the caller
# (function_job.py), a pickle of its own.
FAILED_EXIT_CODE = 1
INTERRUPTED_EXIT_CODE = 130


def function_key(job_id):
    """pickle of (the caller's sys.path, cloudpickle of (func, args, kwargs))."""
    return f"{job_id}/run/function"


def result_key(job_id, round_, rank):
    """cloudpickle of the return value of `rank` in `round_` (0 unless elastic)."""
    return f"{job_id}/run/result/{round_}/{rank}"


def failure_count_key(job_id):
    return f"{job_id}/run/failures"


def failure_key(job_id, number):
    """pickle of a failure record (a dict, see _report_failure); numbered 1,
    2, ... in the order the ranks failed."""
    return f"{job_id}/run/failure/{number}"


def main():
    job_id = config.required("HVDLITE_JOB_ID")
    with _store() as store:  # Note [Pickles from the store]
        caller_path, function = pickle.loads(store.get(function_key(job_id)))
    # Modules the caller imported from its own folders (a test directory, a
    # notebook's) are found here too; ours stay first.
    sys.path.extend(path for path in caller_path if path not in sys.path)
    import cloudpickle
    try:
        func, args, kwargs = cloudpickle.loads(function)
    except Exception as error:  # noqa: BLE001 (anything unpickling can raise)
        return _report_failure(job_id, error, "could not unpickle the function (is every "
                                              "module it uses installed on this host?)")
    try:
        result = func(*args, **kwargs)
    except KeyboardInterrupt:
        return INTERRUPTED_EXIT_CODE  # the caller was interrupted: not this rank's failure
    except BaseException as error:  # noqa: BLE001 (SystemExit too: no result comes back)
        return _report_failure(job_id, error, None, error.__traceback__.tb_next)
    try:
        data = cloudpickle.dumps(result)
    except Exception as error:  # noqa: BLE001
        return _report_failure(job_id, error, f"returned a value of type "
                                              f"{type(result).__qualname__} that cannot be "
                                              f"pickled")
    if len(data) > MAX_VALUE_SIZE:
        return _report_failure(job_id, ValueError(f"{len(data) / 2**20:.0f} MiB pickled"),
                               f"returned a value too large for the rendezvous store (at "
                               f"most {MAX_VALUE_SIZE // 2**20} MiB): save it to a file "
                               f"instead and return the path")
    try:
        round_, rank = _place()
    except RuntimeError as error:
        return _report_failure(job_id, error, "returned, but its place in the job is unknown")
    with _store() as store:
        store.set(result_key(job_id, round_, rank), data)
    return 0


def _place():
    """(round, rank) of this process when its function returned."""
    if membership.enabled():
        round_ = membership.current_round()
        if round_ is None:
            raise RuntimeError("an elastic hvdlite.run function must call hvd.init() (and "
                               "train under hvd.elastic.run); this one never did")
        with _store() as store:
            placed = rounds.Round.from_json(store.get(rounds.round_key(
                config.required("HVDLITE_JOB_ID"), round_)))
        return round_, placed.placements[config.required("HVDLITE_ELASTIC_WORKER_ID")].rank
    return 0, _static_rank()


def _static_rank():
    rank = config.get("HVDLITE_RANK")
    if rank is not None:
        return rank
    job = environment.detect_foreign_job(os.environ)  # mpirun's variables
    return config.get("HVDLITE_RANK", job.layout) if job is not None else 0


def _report_failure(job_id, error, what, frames=None):
    """Prints the traceback (of `frames`, default the whole) to stderr (the
    caller's output shows it under the rank's prefix) and stores the failure
    record; `what` went wrong, when not the function raising. Returns the
    exit code."""
    import cloudpickle
    text = "".join(traceback.format_exception(type(error), error,
                                              frames or error.__traceback__))
    if what:
        text += f"hvdlite.run: this rank {what}\n"
    sys.stderr.write(text)
    sys.stderr.flush()
    try:
        exception = cloudpickle.dumps(error)
    except Exception:  # noqa: BLE001 (the record still says what it was)
        exception = None
    if membership.enabled():
        rank, round_ = config.get("HVDLITE_RANK"), membership.current_round()
    else:
        rank, round_ = _static_rank(), None
    record = {"rank": rank, "round": round_,
              "worker": config.get("HVDLITE_ELASTIC_WORKER_ID"),
              "host": config.get("HVDLITE_HOSTNAME") or socket.gethostname(),
              "pid": os.getpid(), "summary": _summary(error), "what": what,
              "traceback": text, "exception": exception,
              # Note [One failure rule]: a lost peer's error is no root cause.
              "consequence": isinstance(error, HvdliteInternalError)}
    with _store() as store:
        number = store.add(failure_count_key(job_id), 1)
        store.set(failure_key(job_id, number), pickle.dumps(record))
    return FAILED_EXIT_CODE


def _summary(error):
    message = str(error)
    return f"{type(error).__qualname__}: {message}" if message else type(error).__qualname__


def _store():
    return StoreClient(config.required("HVDLITE_STORE_ADDR"),
                       config.required("HVDLITE_STORE_PORT"), config.required("HVDLITE_SECRET"),
                       timeout=config.get("HVDLITE_START_TIMEOUT",
                                          default=defaults.START_TIMEOUT_S))


if __name__ == "__main__":
    sys.exit(main())
