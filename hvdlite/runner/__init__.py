"""hvdliterun and its parts: the launcher (local ranks, remote hosts over
ssh through agent.py, mpirun), the job's rendezvous store and its Python
client. Pure Python; the compiled core is loaded only to answer
--check-build and to ask whether it has MPI."""
from hvdlite.runner.store import StoreClient, StoreError, StoreServer

__all__ = ["StoreClient", "StoreError", "StoreServer"]
