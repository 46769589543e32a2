"""Python objects through the collectives: pickled to bytes, sent as uint8
arrays. Framework-independent, so every binding can offer Horovod's
broadcast_object / allgather_object on top of these."""
import pickle

import numpy as np

from hvdlite.common import basics
from hvdlite.common.process_sets import global_process_set
from hvdlite.numpy import collectives

try:  # like Horovod: cloudpickle also handles lambdas and locally defined classes
    import cloudpickle as _pickler
except ImportError:  # pragma: no cover - optional
    _pickler = pickle


def _to_bytes(obj):
    return np.frombuffer(_pickler.dumps(obj), dtype=np.uint8)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns root_rank's `obj` on every rank of process_set (pickled; any
    size). Other ranks' `obj` is ignored."""
    name = name or basics.auto_name("broadcast_object")
    is_root = basics.rank() == root_rank
    payload = _to_bytes(obj) if is_root else None
    length = np.array([payload.size if is_root else 0], dtype=np.int64)
    length = collectives.broadcast(length, root_rank, name=f"{name}.length",
                                   process_set=process_set)
    if not is_root:
        payload = np.zeros(int(length[0]), dtype=np.uint8)
    data = collectives.broadcast(payload, root_rank, name=f"{name}.data", process_set=process_set)
    return pickle.loads(data.tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's `obj` (pickled), in rank order."""
    name = name or basics.auto_name("allgather_object")
    payload = _to_bytes(obj)
    sizes = collectives.allgather(np.array([payload.size], dtype=np.int64),
                                  name=f"{name}.sizes", process_set=process_set)
    data = collectives.allgather(payload, name=f"{name}.data", process_set=process_set)
    objects, offset = [], 0
    for size in sizes:
        objects.append(pickle.loads(data[offset:offset + int(size)].tobytes()))
        offset += int(size)
    return objects
