"""The per-job secret that authenticates every connection to the rendezvous
store (hvdlite/store/protocol.py) and, in the core, every data connection
between ranks."""
import secrets


def make_secret():
    """Returns a new random secret: 32 hex characters (128 bits)."""
    return secrets.token_hex(16)


def make_job_id():
    """Returns a short random id for one job, safe in file and shm names."""
    return secrets.token_hex(6)
