"""Helpers built on the collectives: broadcasting variables and Python objects."""
import pickle

import numpy as np
import tensorflow as tf

from hvdlite.common import basics
from hvdlite.common.process_sets import global_process_set
from hvdlite.tensorflow import ops


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=True):
    """Assigns root_rank's value to every variable on every rank."""
    variables = list(variables)
    for index, variable in enumerate(variables):
        name = f"broadcast_variables.{index}.{ops._normalize(variable.name)}"
        variable.assign(ops.broadcast(variable, root_rank, name=name, process_set=process_set))


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """Pickles `obj` on root_rank and returns it on every rank."""
    name = name or basics.auto_name("broadcast_object")
    if basics.rank() == root_rank:
        payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
        length = tf.constant([payload.size], tf.int64)
    else:
        payload = None
        length = tf.constant([0], tf.int64)
    length = int(ops.broadcast(length, root_rank, name=f"{name}.length", process_set=process_set)[0])
    if payload is None:
        payload = np.zeros(length, np.uint8)
    data = ops.broadcast(tf.constant(payload), root_rank, name=f"{name}.data", process_set=process_set)
    return pickle.loads(data.numpy().tobytes())


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Pickles `obj` on every rank; returns the list of every rank's object, in rank order."""
    name = name or basics.auto_name("allgather_object")
    payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    sizes = ops.allgather(tf.constant([payload.size], tf.int64), name=f"{name}.sizes",
                          process_set=process_set).numpy()
    data = ops.allgather(tf.constant(payload), name=f"{name}.data", process_set=process_set).numpy()
    objects, offset = [], 0
    for size in sizes:
        objects.append(pickle.loads(data[offset:offset + size].tobytes()))
        offset += size
    return objects
