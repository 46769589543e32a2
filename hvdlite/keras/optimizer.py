"""DistributedOptimizer for Keras 3 optimizers, on every Keras backend."""
from hvdlite.common.ops import ReduceOp, resolve_op
from hvdlite.common.process_sets import global_process_set
from hvdlite.common.sharding import check_stage
from hvdlite.keras import backends, jit_guard, sharded_optimizer


class _DistributedOptimizerMixin:
    """Reduces the gradients over the ranks just before the update step.

    Keras calls _clip_gradients() right before every variable update, after
    its own gradient accumulation (gradient_accumulation_steps, which carries
    backward_passes_per_step), so reducing there communicates once per update
    and clipping sees the global gradient, as in Horovod.
    """
    _hvdlite_distributed = True

    def _backend_apply_gradients(self, grads, trainable_variables):
        # Through __dict__: Keras would otherwise track (and save) the list as state.
        self.__dict__["_hvdlite_variables"] = list(trainable_variables)
        return super()._backend_apply_gradients(grads, trainable_variables)

    def register_local_var(self, var):
        """Keeps `var`'s gradient on this rank (model parallelism): not averaged."""
        self._hvdlite_reducer.register_local(var)

    def _clip_gradients(self, grads):
        def reduce(local):
            return self._hvdlite_reducer.reduce(local, self._hvdlite_variables)

        steps = self.gradient_accumulation_steps
        if steps and backends.current().name == "jax":
            # The JAX backend computes every step's update and keeps it only on
            # update steps: communicate then, as the other backends do.
            import jax
            is_update_step = (self._iterations + 1) % steps == 0
            grads = jax.lax.cond(is_update_step, reduce, list, list(grads))
        else:
            grads = reduce(grads)
        return super()._clip_gradients(grads)


def _distributed_class(base, mixin=_DistributedOptimizerMixin):
    """`base` with `mixin` in front (Keras 3's here, Keras 2's in legacy_optimizer.py)."""
    if issubclass(base, mixin):
        return base
    cls = type(base.__name__, (mixin, base), {})
    # Saved models record the plain optimizer; load_model() wraps it again.
    cls.__module__ = base.__module__
    cls.__qualname__ = base.__qualname__
    return cls


def _reducer(compression, sparse_as_dense, op, gradient_predivide_factor, num_groups, groups,
             process_set, backward_passes_per_step, average_aggregated_gradients,
             scale_local_gradients=True, local_variables=None):
    # Keras averages accumulated gradients; Horovod sums them unless asked to average.
    postscale = 1.0 if average_aggregated_gradients else float(backward_passes_per_step)
    reducer = backends.current().reducer(
        compression=compression, sparse_as_dense=sparse_as_dense, op=op,
        gradient_predivide_factor=gradient_predivide_factor, num_groups=num_groups,
        groups=groups, process_set=process_set, prefix="DistributedOptimizer",
        postscale=postscale, scale_local_gradients=scale_local_gradients)
    for variable in local_variables or ():
        reducer.register_local(variable)
    return reducer


def wrap_in_place(optimizer, compression=None, sparse_as_dense=False, op=None):
    """Turns `optimizer` itself into a distributed one, keeping its loaded state (load_model)."""
    jit_guard.install()
    optimizer.__class__ = _distributed_class(type(optimizer))
    optimizer.__dict__["_hvdlite_reducer"] = _reducer(compression, sparse_as_dense, op, 1.0, 0,
                                                      None, global_process_set, 1, True)
    return optimizer


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                         compression=None, sparse_as_dense=False, gradient_predivide_factor=1.0,
                         op=None, backward_passes_per_step=1, average_aggregated_gradients=False,
                         num_groups=0, groups=None, process_set=global_process_set,
                         scale_local_gradients=True, local_variables=None, sharding_stage=0):
    """Returns a copy of the Keras 3 `optimizer` that averages gradients over the
    ranks before each update (Horovod's hvd.DistributedOptimizer).

    Gradients of local_variables (or of variables passed to the result's
    register_local_var) stay on their rank, divided by the number of ranks
    unless scale_local_gradients=False, as in Horovod.

    backward_passes_per_step=N accumulates N local batches before communicating
    and updating (Keras' gradient_accumulation_steps); the aggregated gradient is
    their sum, or their mean with average_aggregated_gradients=True.

    sharding_stage=1 or 2 keeps only this rank's rows of the optimizer state
    (gradients reduce-scattered, updated rows allgathered: sharded_optimizer.py).
    """
    import keras
    backends.current()  # a clear error on a backend hvdlite does not serve
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise ValueError(f"DistributedOptimizer wraps a keras.optimizers.Optimizer, got "
                         f"{type(optimizer).__name__}")
    if resolve_op(op) == ReduceOp.Adasum and average_aggregated_gradients:
        raise ValueError("op=Adasum does not support average_aggregated_gradients=True (as in "
                         "Horovod): Adasum combines the summed gradients of the passes")
    if int(backward_passes_per_step) < 1:
        raise ValueError(f"backward_passes_per_step must be >= 1, got {backward_passes_per_step}")
    if optimizer.gradient_accumulation_steps and backward_passes_per_step > 1:
        raise ValueError("pass backward_passes_per_step or the optimizer's "
                         "gradient_accumulation_steps, not both")
    config = optimizer.get_config()
    if name:
        config["name"] = name
    if backward_passes_per_step > 1:
        config["gradient_accumulation_steps"] = int(backward_passes_per_step)
    jit_guard.install()
    stage = check_stage(sharding_stage)
    if stage:
        sharded_optimizer.refuse(optimizer, compression, op, num_groups, groups,
                                 local_variables, process_set)
    mixin = sharded_optimizer.ShardedOptimizerMixin if stage else _DistributedOptimizerMixin
    distributed = _distributed_class(type(optimizer), mixin).from_config(config)
    steps = config.get("gradient_accumulation_steps") or 1
    distributed.__dict__["_hvdlite_reducer"] = _reducer(
        compression, sparse_as_dense, op, gradient_predivide_factor, num_groups, groups,
        process_set, steps if backward_passes_per_step > 1 else 1, average_aggregated_gradients,
        scale_local_gradients, local_variables)
    if stage:
        sharded_optimizer.configure(distributed, stage, process_set)
    return distributed
