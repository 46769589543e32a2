"""hvdliterun and its parts: the launcher (local ranks, remote hosts over
ssh through agent.py, mpirun) and the elastic driver. The rendezvous store
it serves for each job is in hvdlite.store, which the workers share. Pure
Python; the compiled core is loaded only to answer --check-build, to ask
whether it has MPI and to remove a finished job's shared memory."""

__all__ = []  # the launcher's entry point is launch.main (hvdliterun)
