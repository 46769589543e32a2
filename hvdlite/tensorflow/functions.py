"""Helpers built on the collectives: broadcasting variables and Python objects."""
import pickle

import numpy as np
import tensorflow as tf

from hvdlite.common import basics
from hvdlite.common.process_sets import global_process_set
from hvdlite.tensorflow import ops


def _without(variables, local_variables):
    """`variables` less those in local_variables (which each rank keeps to itself)."""
    local = {id(v) for v in local_variables or ()}
    return [v for v in variables if id(v) not in local]


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Assigns root_rank's value to every tf.Variable in `variables`, in place,
    on every rank; returns their new values. Eagerly and inside tf.function."""
    variables = list(variables)
    for variable in variables:
        if not isinstance(variable, tf.Variable) and not hasattr(variable, "assign"):
            raise ValueError(f"broadcast_ assigns in place, so it needs variables; got "
                             f"{type(variable).__name__} (use broadcast() for tensors)")
    if name is None and tf.executing_eagerly():
        name = basics.auto_name("broadcast_")
    values = []
    for index, variable in enumerate(variables):
        member = (f"{name}.{index}" if name else
                  f"broadcast_.{index}.{ops._normalize(variable.name)}")
        variable.assign(ops.broadcast(variable, root_rank, name=member, process_set=process_set))
        values.append(variable.read_value() if hasattr(variable, "read_value") else
                      tf.convert_to_tensor(variable))
    return values


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False,
                        local_variables=None):
    """Assigns root_rank's value to every variable on every rank, except those in
    local_variables. `inplace` is accepted for Horovod; hvdlite always assigns
    in place."""
    variables = _without(variables, local_variables)
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
