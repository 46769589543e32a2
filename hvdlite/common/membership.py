"""A worker's side of an elastic job: which round of the job it is in, and
its place there (Note [Elastic rounds] in hvdlite/store/rounds.py).

hvdliterun's elastic driver starts every worker with HVDLITE_ELASTIC=1 and a
worker id; init() then asks here for the layout of the round to join
instead of reading a fixed rank and size from the environment.
"""
import os
import threading
import time

from hvdlite.common import config, defaults, late_joiners, logs
from hvdlite.store import StoreClient, rounds

# The driver decides when the job stops (it waits HVDLITE_ELASTIC_TIMEOUT for
# slots, then stops every worker); a worker gives up waiting for a round only
# this much later, when the driver itself seems gone.
_DRIVER_GONE_MARGIN_S = 60.0
_BARRIER_POLL_S = 0.02


class ElasticJobError(RuntimeError):
    """The elastic driver did not answer in time: no reset can help."""


class LeftJob(SystemExit):
    """This worker is not part of the job's newest round: it leaves (a
    process exits with code 0; a Ray actor's or Spark task's wrapper
    returns)."""


_lock = threading.Lock()
_client = None
_client_for = None  # the job and worker _client is for
_round = None  # the number of the round this worker joined last
_failure = None  # why that round failed here, for the driver (note_failure)
_in_run = 0  # how many hvd.elastic.run calls this thread is inside (entered_run)


def enabled():
    """True in a worker that hvdliterun started in elastic mode."""
    # HVDLITE_ELASTIC only, not Horovod's HOROVOD_ELASTIC: only hvdliterun's
    # driver runs the rounds a worker joins (the optimizers read both names).
    return config.raw("HVDLITE_ELASTIC") == "1"


def join_round(core):
    """Waits for the round this worker takes part in next and returns the
    HVDLITE_* variables that place the core in it (also set in os.environ,
    so HOROVOD_RANK and friends stay true). A worker that is no longer part
    of the job (its host was removed or excluded) leaves here (LeftJob).
    A worker that joins a round whose other workers come from inside
    hvd.elastic.run is alone until it enters run() itself: its collectives
    complete without the others or fail it (Note [Late joiners] in
    hvdlite/common/late_joiners.py); core: hvdlite._core, which makes it so."""
    global _round, _failure
    with _lock:
        store, job_id, worker_id = _store(), _job_id(), _worker_id()
        if _round is None:
            wanted = config.get("HVDLITE_ELASTIC_FIRST_ROUND")
        else:
            # Ask for a new round; the driver ignores this if it published
            # one already (a host update, or it saw the failed worker exit).
            # Why first: the driver reads it once it sees the request.
            store.set(rounds.failure_key(job_id, _round, worker_id), _failure or b"")
            _failure = None
            store.add(rounds.reset_key(job_id, _round), 1)
            wanted = _round + 1
        _get(store, rounds.round_key(job_id, wanted), "a new round of the elastic job")
        while True:
            # The driver sets the round before `latest`: a worker that saw
            # round `wanted` appear may still read the one before as latest.
            latest = max(wanted, int(store.get(rounds.latest_key(job_id))))
            round_ = rounds.Round.from_json(store.get(rounds.round_key(job_id, latest)))
            placement = round_.placements.get(worker_id)
            if placement is None:
                _leave(round_)
            _round = round_.number
            if _all_ready(store, job_id, round_, _in_run > 0):
                break
        _alone_if_late(store, job_id, worker_id, round_, placement, core)
        env = placement.environment(round_.number)
        os.environ.update(env)
        logs.get("elastic").info(
            f"worker {worker_id} joined round {round_.number} of the elastic job as rank "
            f"{config.get('HVDLITE_RANK', env)} of {round_.size}")
        return env


def current_round():
    """The number of the round this worker joined last (None before its
    first init())."""
    return _round


def note_failure(error):
    """Remembers why this worker's round failed (an HvdliteInternalError):
    the next join_round() tells the driver along with its request for a new
    round, so that it learns which host vanished (Note [Silent hosts] in
    hvdlite/runner/elastic/driver.py)."""
    global _failure
    if enabled():
        # The record, not the error: it would keep its traceback's frames
        # (and their tensors) alive until the next round.
        _failure = rounds.failure_record(error)


def report_failed_round(error):
    """Says on stderr why this worker's round did not form; the next
    join_round() asks the driver for a new one."""
    note_failure(error)
    logs.get("elastic").warning(
        f"worker {_worker_id()} could not join round {_round} of the "
        f"elastic job ({error}); joining the next round")


def newer_round():
    """(True, only_removed) if the driver published a round after this
    worker's: only_removed is True when that round has no new workers, so
    the survivors' committed state needs no sync. (False, False) otherwise."""
    if not enabled() or _round is None:
        return False, False
    store, job_id = _store(), _job_id()
    latest = store.try_get(rounds.latest_key(job_id))
    if latest is None or int(latest) <= _round:
        return False, False
    newest = rounds.Round.from_json(store.get(rounds.round_key(job_id, int(latest))))
    mine = rounds.Round.from_json(store.get(rounds.round_key(job_id, _round)))
    return True, set(newest.placements) <= set(mine.placements)


def entered_run():
    """hvd.elastic.run's function is about to run (state.sync() first): this
    worker is no longer late (Note [Late joiners])."""
    global _in_run
    _in_run += 1
    if late_joiners.alone():
        late_joiners.end()
        _store().set(rounds.late_joiner_key(_job_id(), _worker_id()), b"")


def left_run():
    global _in_run
    _in_run -= 1


def _alone_if_late(store, job_id, worker_id, round_, placement, core):
    """Note [Late joiners]: late is a worker that does not come from inside
    run() (its first init, or a retry of it) in a round where others do.
    Every worker of the round counted in before the barrier let this one
    through, so the count is final. The store says so until it enters run(),
    for the driver to tell its failure from its host's."""
    late_joiners.end()
    if _in_run or int(store.try_get(rounds.in_run_key(job_id, round_.number)) or 0) == 0:
        return
    store.set(rounds.late_joiner_key(job_id, worker_id), b"1")
    late_joiners.begin(f"worker {worker_id} (rank {placement.rank} of {round_.size}), which "
                       f"joined round {round_.number} of a running elastic job,", core)


def _all_ready(store, job_id, round_, in_run):
    """Counts this worker in (and whether it comes from inside run()) and
    waits for the round's other workers; False if the driver published a
    newer round meanwhile (one of them is lost). Leaves the job (LeftJob)
    when another worker finished training instead of joining."""
    if in_run:
        store.add(rounds.in_run_key(job_id, round_.number), 1)
    store.add(rounds.ready_key(job_id, round_.number), 1)
    deadline = time.monotonic() + _elastic_timeout()
    while time.monotonic() < deadline:
        ready = int(store.try_get(rounds.ready_key(job_id, round_.number)) or 0)
        if ready >= round_.size:
            return True
        finished = store.try_get(rounds.training_over_key(job_id))
        if finished is not None:
            _leave_finished_job(round_, finished.decode("utf-8", "replace"))
        if int(store.try_get(rounds.latest_key(job_id)) or 0) > round_.number:
            return False
        time.sleep(_BARRIER_POLL_S)
    raise ElasticJobError(
        f"round {round_.number} of the elastic job: only {ready} of {round_.size} workers "
        f"arrived within {_elastic_timeout():g} s; the others may "
        f"have failed to start, see their output")


def _leave(round_):
    logs.get("elastic").warning(
        f"this worker ({_worker_id()}) is not part of round "
        f"{round_.number} of the elastic job (its host was removed, excluded after a failure, "
        f"or is beyond --max-np); exiting")
    raise LeftJob(0)


def _leave_finished_job(round_, finished):
    """Note [Training over] in hvdlite/runner/elastic/driver.py: round_
    cannot form any more, and nothing is left to train."""
    logs.get("elastic").warning(
        f"this worker ({_worker_id()}) was to join round {round_.number} of the elastic job, "
        f"but training is over ({finished}): nothing is left to train; exiting")
    raise LeftJob(0)


def _get(store, key, what):
    try:
        return store.get(key, timeout=_elastic_timeout())
    except TimeoutError as error:
        raise ElasticJobError(
            f"waited {_elastic_timeout():g} s for {what}, but the "
            f"elastic driver (hvdliterun) published none; is it still running?") from error


def _store():
    """The client of this worker's job store. A process may be the worker of
    several jobs one after another (Spark reuses its Python workers for later
    tasks): a new job or worker id starts afresh, with no round joined."""
    global _client, _client_for, _round, _failure
    try:
        where = (config.required("HVDLITE_STORE_ADDR"), config.required("HVDLITE_STORE_PORT"),
                 config.required("HVDLITE_SECRET"))
    except KeyError as error:
        raise ValueError(f"HVDLITE_ELASTIC=1 but {error.args[0]} is not set: elastic "
                         f"workers are started by `hvdliterun --min-np ...`") from None
    job = (where, _job_id(), config.get("HVDLITE_ELASTIC_WORKER_ID"))
    if _client is None or _client_for != job:
        if _client is not None:
            _client.close()
        _client, _client_for, _round, _failure = None, None, None, None
        _client = StoreClient(*where, timeout=config.get("HVDLITE_START_TIMEOUT",
                                                         default=defaults.START_TIMEOUT_S))
        _client_for = job
    return _client


def _job_id():
    return config.get("HVDLITE_JOB_ID", default="job")


def _worker_id():
    return config.required("HVDLITE_ELASTIC_WORKER_ID")


def _elastic_timeout():
    return config.get("HVDLITE_ELASTIC_TIMEOUT") + \
        _DRIVER_GONE_MARGIN_S
