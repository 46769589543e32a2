"""Python objects through the collectives: pickled to bytes, sent as uint8
arrays. Framework-independent, so every binding can offer Horovod's
broadcast_object / allgather_object on top of these.

Note [Signed objects]
Unpickling runs code, so a pickle must come from a rank of this job. The
data links prove the job's secret when they connect, but their frames carry
no integrity of their own (that would cost every gradient a hash), so
whoever can alter a TCP stream on the way could hand a rank a pickle of
their own. Each pickle therefore travels with an HMAC-SHA256 under a key
derived from the job's secret, over the collective's name, the sending
rank's place and the bytes; a receiver checks it before it unpickles, and
refuses (HvdliteInternalError naming the object, the rank and the cause)
otherwise. A job without a secret (one rank, or every byte over MPI, whose
connections mpirun set up) sends its pickles unsigned.
"""
import hashlib
import hmac
import pickle

import numpy as np

from hvdlite.common import basics, late_joiners, rendezvous
from hvdlite.common.exceptions import HvdliteInternalError
from hvdlite.common.process_sets import global_process_set
from hvdlite.numpy import collectives

_TAG = hashlib.sha256().digest_size

try:  # like Horovod: cloudpickle also handles lambdas and locally defined classes
    import cloudpickle as _pickler
except ImportError:  # pragma: no cover - optional
    _pickler = pickle


def _key():
    secret = rendezvous.job_secret()
    if secret is None:
        return None
    return hmac.new(secret.encode(), b"hvdlite-signed-objects", hashlib.sha256).digest()


def _tag(key, name, sender, data):
    message = hmac.new(key, name.encode() + b"\0" + sender.to_bytes(8, "little"), hashlib.sha256)
    message.update(data)
    return message.digest()


def _to_bytes(obj, key, name, sender):
    """obj pickled, followed by its tag under `key` (Note [Signed objects])."""
    data = _pickler.dumps(obj)
    if key is not None:
        data += _tag(key, name, sender, data)
    return np.frombuffer(data, dtype=np.uint8)


def _from_bytes(payload, key, name, sender, what):
    """Unpickles what _to_bytes(obj, key, name, sender) made, once its tag
    is right (Note [Signed objects])."""
    data = payload.tobytes()
    if key is not None:
        data, tag = data[:-_TAG], data[-_TAG:]
        if len(tag) != _TAG or not hmac.compare_digest(tag, _tag(key, name, sender, data)):
            raise HvdliteInternalError(
                f"{what} of '{name}': the object from rank {sender} failed its integrity check "
                f"(HMAC under the job's secret), so it was not unpickled: it was altered on its "
                f"way, or its sender does not share this job's secret. Check who can reach the "
                f"ranks' network, and that every rank runs with the same HVDLITE_SECRET")
    return pickle.loads(data)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Gives every rank of process_set root_rank's `obj` (pickled; any size).

    Args:
        obj: the object on root_rank; other ranks' `obj` is ignored.
        root_rank (int): the sending rank.
        name (str | None): starts the names of the collectives; None numbers it.
        process_set (ProcessSet): the ranks that receive it (default: all).

    Returns:
        object: root_rank's `obj`, unpickled (on the root too).

    Raises:
        HvdliteInternalError: when the pickle fails its integrity check, or the
            collective fails.

    Example:
        ```python
        config = hvd.broadcast_object(config if hvd.rank() == 0 else None)
        ```
    """
    if late_joiners.alone():  # Note [Late joiners]
        return late_joiners.broadcast_object_alone(obj, name)
    name = name or basics.auto_name("broadcast_object")
    is_root = basics.rank() == root_rank
    key = _key()
    payload = _to_bytes(obj, key, name, root_rank) if is_root else None
    length = np.array([payload.size if is_root else 0], dtype=np.int64)
    length = collectives.broadcast(length, root_rank, name=f"{name}.length",
                                   process_set=process_set)
    if not is_root:
        payload = np.zeros(int(length[0]), dtype=np.uint8)
    data = collectives.broadcast(payload, root_rank, name=f"{name}.data", process_set=process_set)
    return _from_bytes(data, key, name, root_rank, "broadcast_object")


def allgather_object(obj, name=None, process_set=global_process_set):
    """Gathers every rank's `obj` (pickled; any size).

    Args:
        obj: this rank's object.
        name (str | None): starts the names of the collectives; unnamed calls are numbered.
        process_set (ProcessSet): the ranks whose objects are gathered (default: all).

    Returns:
        list: every rank's `obj`, in rank order.

    Raises:
        HvdliteInternalError: when a pickle fails its integrity check, or the
            collective fails.
    """
    name = name or basics.auto_name("allgather_object")
    key = _key()
    payload = _to_bytes(obj, key, name, process_set.rank())
    sizes = collectives.allgather(np.array([payload.size], dtype=np.int64),
                                  name=f"{name}.sizes", process_set=process_set)
    data = collectives.allgather(payload, name=f"{name}.data", process_set=process_set)
    objects, offset = [], 0
    for sender, size in enumerate(sizes):
        objects.append(_from_bytes(data[offset:offset + int(size)], key, name, sender,
                                   "allgather_object"))
        offset += int(size)
    return objects
