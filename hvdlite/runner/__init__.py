"""hvdliterun and its parts: the launcher (local ranks, remote hosts over
ssh through agent.py, mpirun) and the elastic driver. The rendezvous store
it serves for each job is in hvdlite.store, which the workers share. Pure
Python; the compiled core is loaded only to answer --check-build, to ask
whether it has MPI and to remove a finished job's shared memory."""

# The launcher's entry point is launch.main (hvdliterun); run() starts a
# Python function the same way (function.py).
from typing import TYPE_CHECKING

__all__ = ["run", "RankFailedError"]

if TYPE_CHECKING:  # for type checkers and the API reference (griffe): loaded lazily below
    from hvdlite.runner.function import RankFailedError, run


def __getattr__(name):
    # Loaded on first use: `python -m hvdlite.runner.agent` and the ranks'
    # task runner import this package, and need none of it.
    if name in __all__:
        from hvdlite.runner import function
        return getattr(function, name)
    raise AttributeError(f"module 'hvdlite.runner' has no attribute {name!r}")
