"""hvdlite for Keras 3 (TensorFlow backend): Horovod's `horovod.tensorflow.keras`.

    import hvdlite.keras as hvd
    hvd.init()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size())), ...)
    model.fit(..., callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
"""
import numpy as np
import tensorflow as tf

from hvdlite.common import *  # noqa: F401,F403  (init, rank, size, process sets, ops, errors)
from hvdlite.common import __all__ as _common_all
from hvdlite.common.process_sets import global_process_set
from hvdlite.keras import callbacks, elastic, jit_guard
from hvdlite.keras.optimizer import DistributedOptimizer, wrap_in_place
from hvdlite.tensorflow import ops as _ops
from hvdlite.tensorflow.compression import Compression
from hvdlite.tensorflow.functions import allgather_object, broadcast_object
from hvdlite.tensorflow.functions import broadcast_variables as _broadcast_variables

__all__ = list(_common_all) + [
    "callbacks", "DistributedOptimizer", "Compression", "allreduce", "allgather", "broadcast",
    "broadcast_global_variables", "broadcast_variables", "broadcast_object", "allgather_object",
    "load_model", "elastic",
]


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=None, process_set=global_process_set):
    """Reduces a NumPy/Keras value over the ranks (default: average); returns NumPy."""
    return _ops.allreduce(tf.convert_to_tensor(value), average=average, op=op, name=name,
                          compression=compression, prescale_factor=prescale_factor,
                          postscale_factor=postscale_factor, process_set=process_set).numpy()


def allgather(value, name=None, process_set=global_process_set):
    """Concatenates every rank's value along the first dimension; returns NumPy."""
    return _ops.allgather(tf.convert_to_tensor(value), name=name, process_set=process_set).numpy()


def broadcast(value, root_rank, name=None, process_set=global_process_set):
    """Returns root_rank's value on every rank, as NumPy."""
    return _ops.broadcast(tf.convert_to_tensor(value), root_rank, name=name,
                          process_set=process_set).numpy()


def broadcast_variables(variables, root_rank, process_set=global_process_set):
    """Assigns root_rank's values to Keras (or TF) variables on every rank."""
    _broadcast_variables(variables, root_rank, process_set=process_set)


def broadcast_global_variables(root_rank, model=None):
    """Copies root_rank's model and optimizer state to every rank.

    Keras 3 has no global variable collection, so pass the model (or use
    callbacks.BroadcastGlobalVariablesCallback, which knows it)."""
    if model is None:
        raise ValueError("Keras 3 has no global variables: call broadcast_global_variables("
                         "root_rank, model=model), or pass callbacks.BroadcastGlobalVariablesCallback"
                         "(root_rank) to model.fit")
    variables = list(model.variables)
    if getattr(model, "optimizer", None) is not None and model.optimizer.built:
        variables += list(model.optimizer.variables)
    _broadcast_variables(variables, root_rank)


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=None,
               compile=True):
    """keras.models.load_model, with the saved optimizer (and its state) made
    distributed, so training resumes with gradients averaged over the ranks."""
    import keras
    objects = dict(custom_objects or {})
    for optimizer_class in custom_optimizers or []:
        objects[optimizer_class.__name__] = optimizer_class
    model = keras.models.load_model(filepath, custom_objects=objects, compile=compile)
    if compile and getattr(model, "optimizer", None) is not None:
        wrap_in_place(model.optimizer, compression=compression)
        jit_guard.recheck(model)
        model.train_function = None
    return model
