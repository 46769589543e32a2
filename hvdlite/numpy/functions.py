"""Helpers built on the NumPy collectives: broadcasting Python objects."""
import pickle

import numpy as np

from hvdlite.common import basics
from hvdlite.common.process_sets import global_process_set
from hvdlite.numpy.collectives import broadcast


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Pickles `obj` on root_rank and returns it on every rank."""
    name = name or basics.auto_name("broadcast_object")
    payload = None
    length = np.zeros(1, np.int64)
    if basics.rank() == root_rank:
        payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
        length[0] = payload.size
    length = int(broadcast(length, root_rank, name=f"{name}.length", process_set=process_set)[0])
    if payload is None:
        payload = np.zeros(length, np.uint8)
    data = broadcast(payload, root_rank, name=f"{name}.data", process_set=process_set)
    return pickle.loads(data.tobytes())
