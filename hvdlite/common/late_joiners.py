"""Collectives that a worker which joined a running elastic job submits
before it enters hvd.elastic.run (Note [Late joiners]).

Note [Late joiners]
A worker that joins a running job (a new host, a free slot, a host back
from its cooldown) runs the script from its start while the others are
inside hvd.elastic.run, where their next collectives are state.sync()'s
broadcasts. A collective the new worker submits before it reaches run()
(a top-level hvd.broadcast_parameters() in a script ported from a static
one, say) is one that nobody else will ever submit: every rank would wait
for the stall shutdown (10 minutes by default), and the job would re-form
and do it again.

So every worker says, as it counts itself in for a round, whether it comes
from inside run() (membership.join_round); a worker that does not, in a
round where others do, is late. Until it enters run(), each collective it
submits fails at once, before it is queued, with
CollectiveOutsideRunError, which first leaves its message in the store
for the round. The late worker then exits (nothing catches the error),
its connections close, the others' sync fails, and run() finds the
message there and raises the same error on every rank instead of
re-forming: every worker of the round failed, and the driver stops the
job with the first failure's output (Note [Failure rules] in
hvdlite/runner/elastic/failures.py). A re-formed job would only fail
again with its next new worker, and the fix is in the script.

The guard replaces, while it is on, the module attributes through which
the bindings submit every collective (ENTRY_POINTS); a binding that is
not loaded submits nothing. Collectives that JAX queues from compiled
code (jit custom calls) bypass them and still wait for the stall
shutdown.
"""
import os
import sys
import sysconfig
import traceback

# hvdlite.numpy and hvdlite.torch (and Keras on torch) call
# requests.enqueue for every collective, hvdlite.tensorflow (and Keras on
# TensorFlow) ops.run_translated.
ENTRY_POINTS = (("hvdlite.common.requests", "enqueue"),
                ("hvdlite.tensorflow.ops", "run_translated"))

ADVICE = ("In an elastic script, call collectives only inside the function that "
          "hvd.elastic.run wraps. run() calls state.sync() first, which broadcasts rank 0's "
          "committed state (model, optimizer and the state's other attributes) to every "
          "rank, new ones included; a broadcast before run() (hvd.broadcast_parameters, "
          "broadcast_optimizer_state, broadcast_variables, BroadcastGlobalVariablesCallback) "
          "is not needed: remove it or move it into the function.")

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_LIBRARIES = tuple(os.path.abspath(sysconfig.get_paths()[name]) for name in ("stdlib", "purelib",
                                                                              "platlib"))


class CollectiveOutsideRunError(RuntimeError):
    """A worker that joined a running elastic job submitted a collective
    before entering hvd.elastic.run (Note [Late joiners]). Not an
    HvdliteInternalError: run() must not retry it, as every new worker
    would submit it again."""


_saved = {}  # (module name, attribute) -> the original


def guard(who, publish):
    """Until unguard(), every collective this process submits fails with
    CollectiveOutsideRunError. who: this worker and its place, e.g.
    "worker w3 (rank 2 of 3), which joined round 4 of the running elastic
    job,"; publish(message) is called before the error is raised."""
    for module_name, attribute in ENTRY_POINTS:
        module = sys.modules.get(module_name)
        if module is not None and (module_name, attribute) not in _saved:
            _saved[(module_name, attribute)] = getattr(module, attribute)
            setattr(module, attribute, _refusal(who, publish))


def unguard():
    for (module_name, attribute), original in _saved.items():
        setattr(sys.modules[module_name], attribute, original)
    _saved.clear()


def guarded():
    return bool(_saved)


def _refusal(who, publish):
    def refuse(*args, **kwargs):
        name = kwargs.get("name")
        what = f"a collective ('{name}')" if name else "a collective"
        message = (f"{who} called {what}{_call_site()} before entering hvd.elastic.run; the "
                   f"other ranks are inside run(), syncing the committed state, and will never "
                   f"submit it, so every rank would wait until the stall shutdown. {ADVICE}")
        publish(message)
        raise CollectiveOutsideRunError(message)

    return refuse


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
