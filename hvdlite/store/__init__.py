"""The rendezvous store, shared by the launcher and the workers: ranks (and
the launcher's agents and elastic driver) meet through it before any data
connection exists.

    protocol.py   the wire protocol and its handshake (the core's C++ client speaks it too)
    server.py     the server: hvdliterun runs one per job; so does rank 0 of a job that
                  mpirun, srun or torchrun started (hvdlite/common/rendezvous.py)
    client.py     the Python client
    rounds.py     an elastic job's rounds as the driver publishes them and workers read them
    network.py    this host's addresses: where the store can be reached from other hosts

hvdlite.runner (the launcher) and hvdlite.common (the workers) both build on
this package; it imports neither.
"""
from hvdlite.store.client import StoreClient, StoreError
from hvdlite.store.server import StoreServer

__all__ = ["StoreClient", "StoreError", "StoreServer"]
