"""The per-job secret that authenticates every connection to the rendezvous
store (and, in the core, every data connection between ranks)."""
import hashlib
import hmac
import secrets

# Mixed into the digest so that a digest made for the store can never be
# replayed as the proof for some other kind of connection.
STORE_CLIENT_LABEL = b"hvdlite-store-client"


def make_secret():
    """Returns a new random secret: 32 hex characters (128 bits)."""
    return secrets.token_hex(16)


def make_job_id():
    """Returns a short random id for one job, safe in file and shm names."""
    return secrets.token_hex(6)


def store_client_digest(secret, nonce):
    """The 32 bytes a store client sends to prove it knows `secret`."""
    return hmac.new(secret.encode("utf-8"), STORE_CLIENT_LABEL + nonce,
                    hashlib.sha256).digest()


def digests_match(expected, received):
    """Compares two digests in constant time."""
    return hmac.compare_digest(expected, received)
