"""Collectives that a worker which joined a running elastic job submits
before it enters hvd.elastic.run (Note [Late joiners]).

Note [Late joiners]
A worker that joins a running job (a new host, a free slot, a host back
from its cooldown) runs the script from its start while the others are
inside hvd.elastic.run, where their next collectives are state.sync()'s
broadcasts. A collective the new worker submits before it reaches run()
is one that nobody else will ever submit: a top-level
hvd.broadcast_parameters() kept from a static script, or a whole training
step "to initialize weights before synchronization" as Horovod's own
tensorflow2_synthetic_benchmark_elastic.py does.

So every worker says, as it counts itself in for a round, whether it comes
from inside run() (membership.join_round); a worker that does not, in a
round where others do, is late. Until it enters run(), it is alone: each
collective it submits completes on this worker only, as in a job of one
rank, and never reaches the running workers (Note [Solo collectives] in
csrc/api/solo.h, where every binding's collectives pass: eager calls,
tf.function graphs traced before or inside run(), XLA custom calls). An
allreduce gives the worker's own values, a broadcast its own tensor. That
is harmless: run() starts with state.sync(), which gives the worker rank
0's committed state in place of whatever those results went into. Each
call site is warned about once.

A collective whose result would outlive the sync and differ from the
job's cannot be computed alone, and fails the late worker with
CollectiveOutsideRunError: an allgather, alltoall or reducescatter (their
results depend on the job's size: a data shard count, say), adding or
removing a process set, and a broadcast_object or allgather_object that
the script calls itself (a Python object the joiner cannot know that
sync() restores, such as a resume epoch; the broadcast_object inside
hvdlite's own state broadcasts, broadcast_optimizer_state say, gives this
worker's own object, as in a one-rank job). Only the late worker fails:
the store says that it failed before entering run()
(rounds.late_joiner_key), so the driver cools down its slot, not its host
(Note [Failure rules] in hvdlite/runner/elastic/failures.py), and the
running workers, whose sync lost a peer, re-form without it from the
commit they had just made (the driver waits for the late worker to end
before it plans that round, so that it is not planned in once more).
"""
import os
import pickle
import sysconfig
import traceback

from hvdlite.common import logs
from hvdlite.common.exceptions import CollectiveOutsideRunError

ADVICE = ("In an elastic script, call collectives only inside the function that "
          "hvd.elastic.run wraps. run() calls state.sync() first, which broadcasts rank 0's "
          "committed state (model, optimizer and the state's other attributes) to every "
          "rank, new ones included; a broadcast before run() (hvd.broadcast_parameters, "
          "broadcast_optimizer_state, broadcast_variables, BroadcastGlobalVariablesCallback) "
          "is not needed: remove it or move it into the function.")

WHY_HARMLESS = ("This is harmless: run() calls state.sync() first, which gives this worker "
                "rank 0's committed state (model, optimizer and the state's other attributes) "
                "in place of what this result went into. To avoid the warning, move the call "
                "into the function that hvd.elastic.run wraps, or remove it.")

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_LIBRARIES = tuple(os.path.abspath(sysconfig.get_paths()[name]) for name in ("stdlib", "purelib",
                                                                              "platlib"))
# hvdlite's public broadcast_object wrappers (and the closures through which
# hvdlite.tensorflow runs it), which pass a script's call straight on.
_OBJECT_WRAPPERS = {"broadcast_object", "exchange", "broadcast", "run"}


_who = None  # this worker and its place while alone, else None
_core = None  # hvdlite._core while alone
_warned = set()  # call sites of broadcast_object warned about


def begin(who, core):
    """Until end(), this process's collectives complete on it alone or fail
    (Note [Late joiners]). who: this worker and its place, e.g. "worker w3
    (rank 2 of 3), which joined round 4 of a running elastic job,"; core:
    hvdlite._core. A refusal reaches every binding as the core's own kind
    (kOutsideRun), raised as CollectiveOutsideRunError wherever it leaves
    the core: no entry point is wrapped for it."""
    global _who, _core
    core.begin_solo(who, WHY_HARMLESS, ADVICE)
    _who, _core = who, core
    _warned.clear()


def end():
    global _who, _core
    if _who is not None:
        _core.end_solo()
    _who, _core = None, None


def alone():
    return _who is not None


def broadcast_object_alone(obj, name):
    """hvdlite.numpy.objects.broadcast_object while alone: this worker's own
    `obj` (a copy, as in a one-rank job) when hvdlite's own state broadcasts
    asked, and CollectiveOutsideRunError when the script did."""
    site = _call_site()
    what = f"broadcast_object('{name}')" if name else "broadcast_object"
    if _called_by_script():
        raise CollectiveOutsideRunError(
            f"{_who} called {what}{site} before entering hvd.elastic.run, where the other "
            f"ranks are; a Python object broadcast by the script may be one that "
            f"state.sync() does not restore (a resume epoch, a configuration), so this worker "
            f"cannot stand in for rank 0 with its own. {ADVICE}")
    if site not in _warned:
        _warned.add(site)
        logs.get("elastic").warning(
            f"{_who} called {what}{site} before entering hvd.elastic.run; it gave this "
            f"worker its own object, as in a job of one rank, and the running workers never "
            f"saw it. {WHY_HARMLESS}")
    return pickle.loads(pickle.dumps(obj))


def _called_by_script():
    """Whether the nearest caller of broadcast_object, past hvdlite's public
    wrappers of it, is the script (or a library it uses) rather than hvdlite."""
    frames = traceback.extract_stack()[:-3]  # from the caller of objects.broadcast_object
    for frame in reversed(frames):
        inside = os.path.abspath(frame.filename).startswith(_PACKAGE)
        if not inside:
            return True
        if frame.name not in _OBJECT_WRAPPERS:
            return False
    return True


def _call_site():
    """" at train.py:42 in main": the script's line that led here (the
    innermost frame outside hvdlite and the installed libraries)."""
    frames = [frame for frame in traceback.extract_stack()[:-2]
              if not os.path.abspath(frame.filename).startswith(_PACKAGE)]
    own = [frame for frame in frames
           if not os.path.abspath(frame.filename).startswith(_LIBRARIES)]
    frame = (own or frames or [None])[-1]
    if frame is None:
        return ""
    return f" at {os.path.basename(frame.filename)}:{frame.lineno} in {frame.name}"
