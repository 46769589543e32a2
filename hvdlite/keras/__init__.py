"""hvdlite for Keras, on every Keras 3 backend: Horovod's `horovod.tensorflow.keras`.

    import hvdlite.keras as hvd
    hvd.init()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size())), ...)
    model.fit(..., callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])

Keras 3 on KERAS_BACKEND=tensorflow, torch or jax, with the same API: the
collectives take the backend's own tensors (backends.py), and on JAX they run
inside the jitted train step. Keras 2 (the tf_keras package) when
TF_USE_LEGACY_KERAS=1, as TensorFlow chooses what tf.keras is (see flavour.py).
"""
import keras as _keras  # noqa: F401  (Keras picks its backend once, here)

from hvdlite.common import *  # noqa: F401,F403  (init, rank, size, process sets, ops, errors)
from hvdlite.common import __all__ as _common_all
from hvdlite.common.gradient_reducer import layer_variables
from hvdlite.common.process_sets import global_process_set
from hvdlite.keras import flavour
from hvdlite.keras import backends as _backends
from hvdlite.keras import callbacks, elastic, jit_guard
from hvdlite.keras import optimizer as _optimizer
from hvdlite.keras.sharded_state import load_unsharded_state_dict, unsharded_state_dict
from hvdlite.numpy.objects import allgather_object, broadcast_object

_backend = _backends.current()
Compression = _backend.compression
if _backend.name == "tensorflow":
    from hvdlite.keras.sync_batch_norm import SyncBatchNormalization
else:
    def SyncBatchNormalization(*args, **kwargs):
        """BatchNormalization with the statistics of every rank's batch, on the TensorFlow backend.

        With KERAS_BACKEND=tensorflow this name is the layer of hvdlite.keras.sync_batch_norm
        (takes BatchNormalization's arguments); on another backend it is this function.

        Raises:
            ValueError: on a backend other than TensorFlow, saying to use
                keras.layers.BatchNormalization or the TensorFlow backend.
        """
        raise ValueError(f"hvdlite.keras.SyncBatchNormalization needs KERAS_BACKEND=tensorflow "
                         f"(its statistics are reduced by TensorFlow ops); this process runs "
                         f"Keras on {_backend.name!r}: use keras.layers.BatchNormalization, "
                         f"or the TensorFlow backend")

__all__ = [*_common_all,
    "callbacks", "DistributedOptimizer", "PartialDistributedOptimizer", "Compression",
    "allreduce", "allgather", "broadcast", "broadcast_global_variables", "broadcast_variables",
    "broadcast_object", "allgather_object", "load_model", "elastic", "SyncBatchNormalization",
    "unsharded_state_dict", "load_unsharded_state_dict",
]


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                         compression=None, sparse_as_dense=False, gradient_predivide_factor=1.0,
                         op=None, backward_passes_per_step=1, average_aggregated_gradients=False,
                         num_groups=0, groups=None, process_set=global_process_set,
                         scale_local_gradients=True, local_variables=None, sharding_stage=0):
    """A copy of a Keras optimizer that averages gradients over the ranks before each update.

    Keras 3 (any backend), or Keras 2 (tf_keras, with TF_USE_LEGACY_KERAS=1).

    Args:
        optimizer: a `keras.optimizers.Optimizer` (or a tf_keras one).
        name (str | None): the copy's name.
        device_dense (str): accepted for Horovod compatibility.
        device_sparse (str): accepted for Horovod compatibility.
        compression: the backend's `Compression.none`, `.fp16`, `.bf16`, or
            `.powersgd(rank=..., ...)` (low-rank with error feedback, one instance per optimizer).
        sparse_as_dense (bool): allreduce sparse gradients densely.
        gradient_predivide_factor (float): divide by f before the sum and by size/f after.
        op (ReduceOp | None): `Average` (default) or `Sum`, ...
        backward_passes_per_step (int): N local batches are summed before one allreduce and
            one update.
        average_aggregated_gradients (bool): with N > 1, their mean instead of their sum.
        num_groups (int): fuse the gradients into this many grouped allreduces.
        groups (int | list | None): the groups (lists of variables), or their number.
        process_set (ProcessSet): average over these ranks only.
        scale_local_gradients (bool): divide local variables' gradients by the number of ranks.
        local_variables (list | None): variables whose gradients stay on their rank (more with
            `register_local_var()`).
        sharding_stage (int): 0 (default) unsharded; 1 or 2 keep only this rank's rows of the
            optimizer state (ZeRO; Keras 3 only, see docs/keras.md "Sharded optimizer state").

    Returns:
        An optimizer of the same class, for `model.compile(optimizer=...)`.

    Raises:
        ValueError: for options that do not go together, or sharding_stage > 0 on Keras 2.

    Example:
        ```python
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size()))
        model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
        ```
    """
    extra = {}
    if flavour.is_keras2_optimizer(optimizer):
        from hvdlite.keras import legacy_optimizer
        if sharding_stage:
            raise ValueError("hvdlite.keras.DistributedOptimizer: sharding_stage > 0 needs a Keras 3 "
                             f"optimizer, got Keras 2's (tf_keras) {type(optimizer).__name__}: "
                             "unset TF_USE_LEGACY_KERAS to train with Keras 3, or pass "
                             "sharding_stage=0")
        wrap = legacy_optimizer.DistributedOptimizer
    else:
        wrap = _optimizer.DistributedOptimizer
        extra["sharding_stage"] = sharding_stage
    return wrap(optimizer, name=name, compression=compression, sparse_as_dense=sparse_as_dense,
                gradient_predivide_factor=gradient_predivide_factor, op=op,
                backward_passes_per_step=backward_passes_per_step,
                average_aggregated_gradients=average_aggregated_gradients, num_groups=num_groups,
                groups=groups, process_set=process_set,
                scale_local_gradients=scale_local_gradients, local_variables=local_variables,
                **extra)


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                                compression=None, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=None,
                                backward_passes_per_step=1, average_aggregated_gradients=False,
                                groups=None, process_set=global_process_set, local_layers=None,
                                scale_local_gradients=True):
    """DistributedOptimizer whose `local_layers` keep their gradients on each
    rank (model parallelism), as in Horovod. The other arguments mean what
    they mean for `DistributedOptimizer`.

    Args:
        optimizer: the Keras optimizer to copy.
        name (str | None): names the copy.
        device_dense (str): unused; Horovod's.
        device_sparse (str): unused; Horovod's.
        compression: how gradients travel (default: `Compression.none`; or
            `Compression.powersgd(...)`, one instance per optimizer).
        sparse_as_dense (bool): reduce sparse gradients as dense ones.
        gradient_predivide_factor (float): splits the averaging before and after the sum.
        op (ReduceOp | None): the reduction of the shared gradients (Average when None).
        backward_passes_per_step (int): batches accumulated per allreduce and update.
        average_aggregated_gradients (bool): average the accumulated batches, not sum them.
        groups (int | list | None): how the gradients are grouped into fused allreduces.
        process_set (ProcessSet): the ranks the gradients are averaged over.
        local_layers (keras.layers.Layer | list | None): a layer or a list of layers whose
            variables' gradients stay on their rank.
        scale_local_gradients (bool): divide the local gradients by the number of ranks.

    Returns:
        An optimizer of the same class, for `model.compile(optimizer=...)`.
    """
    return DistributedOptimizer(
        optimizer, name=name, compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, groups=groups,
        process_set=process_set, scale_local_gradients=scale_local_gradients,
        local_variables=layer_variables(local_layers, "PartialDistributedOptimizer"))


def _to_numpy(tensor):
    return _keras.ops.convert_to_numpy(tensor)


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=None, process_set=global_process_set):
    """Reduces a NumPy/Keras value over the ranks (default: average).

    Args:
        value: an array, tensor or number, the same shape on every rank.
        name (str | None): the collective's name; unnamed ones are numbered.
        average (bool | None): Horovod's old switch: True is `op=Average`, False `op=Sum`.
        prescale_factor (float): scales the input before the reduction.
        postscale_factor (float): scales the result.
        op (ReduceOp | None): `Average` when None; `Sum`, `Min`, `Max`, `Product`, ...
        compression: the backend's `Compression.none` (None) or `.fp16`.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        np.ndarray: the reduced value.
    """
    return _to_numpy(_backend.allreduce(
        _keras.ops.convert_to_tensor(value), average=average, op=op, name=name,
        compression=compression or Compression.none, prescale_factor=prescale_factor,
        postscale_factor=postscale_factor, process_set=process_set))


def allgather(value, name=None, process_set=global_process_set):
    """Concatenates every rank's value along the first dimension.

    Args:
        value: an array or tensor; first dimensions may differ between ranks.
        name (str | None): names the collective (None: numbered).
        process_set (ProcessSet): the ranks whose values are gathered (default: all).

    Returns:
        np.ndarray: every rank's rows, in rank order.
    """
    return _to_numpy(_backend.allgather(_keras.ops.convert_to_tensor(value), name=name,
                                        process_set=process_set))


def broadcast(value, root_rank, name=None, process_set=global_process_set):
    """Gives every rank root_rank's value.

    Args:
        value: an array or tensor; root_rank's is sent, the others give the shape.
        root_rank (int): the sending rank.
        name (str | None): the collective's name.
        process_set (ProcessSet): the ranks that receive it (default: all).

    Returns:
        np.ndarray: root_rank's value.
    """
    return _to_numpy(_backend.broadcast(_keras.ops.convert_to_tensor(value), root_rank,
                                        name=name, process_set=process_set))


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False,
                        local_variables=None):
    """Assigns root_rank's values to Keras (or TF) variables on every rank,
    except local_variables (which each rank keeps to itself).

    Args:
        variables (Iterable): Keras or TF variables, assigned in place.
        root_rank (int): the rank whose values every rank gets.
        process_set (ProcessSet): the ranks that take part (default: all).
        inplace (bool): accepted for Horovod; the variables are always assigned in place.
        local_variables (Iterable | None): left as they are on every rank.
    """
    _backend.broadcast_variables(variables, root_rank, process_set, local_variables)


def broadcast_global_variables(root_rank, model=None, local_variables=None):
    """Copies root_rank's model and optimizer state to every rank.

    Keras has no global variable collection in TensorFlow 2, so pass the model
    (or use callbacks.BroadcastGlobalVariablesCallback, which knows it).

    Args:
        root_rank (int): the rank whose state every rank gets.
        model (keras.Model | None): its variables and its optimizer's; required.
        local_variables (Iterable | None): variables left as they are on every rank.

    Raises:
        ValueError: when `model` is None.
    """
    if model is None:
        raise ValueError("Keras in TensorFlow 2 has no global variables: call "
                         "broadcast_global_variables(root_rank, model=model), or pass "
                         "callbacks.BroadcastGlobalVariablesCallback(root_rank) to model.fit")
    variables = list(model.variables)
    if getattr(model, "optimizer", None) is not None:
        variables += flavour.optimizer_variables(model.optimizer, model.trainable_variables)
    _backend.broadcast_variables(variables, root_rank, global_process_set, local_variables)


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=None,
               compile=True):
    """keras.models.load_model, with the saved optimizer (and its state) made
    distributed, so training resumes with gradients averaged over the ranks.

    Args:
        filepath (str | os.PathLike): the saved model.
        custom_optimizers (Iterable[type] | None): optimizer classes the file names,
            registered by their class name.
        custom_objects (dict | None): as for keras.models.load_model.
        compression: the backend's `Compression.none` (None) or `.fp16`, for the optimizer.
        compile (bool): compile the model (and so restore and wrap its optimizer).

    Returns:
        keras.Model: the loaded model; its optimizer, if any, averages gradients.

    Example:
        ```python
        model = hvd.load_model("checkpoint.keras")
        ```
    """
    keras = flavour.keras_module()
    objects = dict(custom_objects or {})
    for optimizer_class in custom_optimizers or []:
        objects[optimizer_class.__name__] = optimizer_class
    model = keras.models.load_model(filepath, custom_objects=objects, compile=compile)
    optimizer = getattr(model, "optimizer", None) if compile else None
    if optimizer is None:
        return model
    if flavour.is_keras2_optimizer(optimizer):
        from hvdlite.keras import legacy_optimizer
        legacy_optimizer.wrap_in_place(optimizer, compression=compression)
    else:
        _optimizer.wrap_in_place(optimizer, compression=compression)
        jit_guard.recheck(model)
    model.train_function = None
    return model
