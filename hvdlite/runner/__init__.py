"""hvdliterun and its parts: the launcher, the job's rendezvous store and its
Python client. Pure Python; never loads the compiled core."""
from hvdlite.runner.store import StoreClient, StoreError, StoreServer

__all__ = ["StoreClient", "StoreError", "StoreServer"]
