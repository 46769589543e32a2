"""DistributedOptimizer for Keras 2 (the tf_keras package, TF_USE_LEGACY_KERAS=1):
both tf_keras.optimizers.legacy.* and the new-style tf_keras optimizers.

As in Horovod, gradients are reduced where Keras 2 computes them
(_compute_gradients / compute_gradients, which minimize() and model.fit call,
and get_gradients in v1 graph mode), so apply_gradients() receives averaged
gradients. backward_passes_per_step > 1 sums that many local passes first
(gradient_aggregation.py)."""
import tensorflow as tf

from hvdlite.common.process_sets import global_process_set
from hvdlite.keras import optimizer as keras3_optimizer
from hvdlite.tensorflow.gradient_aggregation import LocalGradientAggregator
from hvdlite.tensorflow.gradient_reducer import GradientReducer


def _tape_gradients(loss, var_list, grad_loss, tape):
    """(gradient, variable) pairs of `loss` computed on this rank, by the steps
    of tf_keras's legacy _compute_gradients: new-style tf_keras optimizers
    have no _compute_gradients, and their compute_gradients takes no grad_loss
    and no nested var_list, which Horovod's Keras 2 surface accepts."""
    if not callable(loss) and tape is None:
        raise ValueError("_compute_gradients: a Tensor loss needs the tf.GradientTape that "
                         "computed it; pass tape=..., or pass the loss as a callable")
    tape = tape if tape is not None else tf.GradientTape()
    if callable(loss):
        with tape:
            if not callable(var_list):
                tape.watch(var_list)
            loss = loss()
            if callable(var_list):
                var_list = var_list()
    var_list = tf.nest.flatten(var_list)
    return list(zip(tape.gradient(loss, var_list, grad_loss), var_list))


class _DistributedOptimizerMixin:
    _hvdlite_distributed = True
    _HAS_AGGREGATE_GRAD = True

    def register_local_var(self, var):
        """Keeps `var`'s gradient on this rank (model parallelism): not averaged."""
        self._hvdlite_reducer.register_local(var)

    def _allreduce(self, grads, variables):
        """Horovod's hook: the gradients reduced over the ranks, or on a pass
        that only aggregates (backward_passes_per_step > 1) the local sums."""
        if self._agg_helper is not None:
            return self._agg_helper.compute_gradients(list(grads), variables)
        return self._hvdlite_reducer.reduce(grads, variables)

    def _hvdlite_reduce(self, grads_and_vars):
        grads_and_vars = list(grads_and_vars)
        if not grads_and_vars:
            return grads_and_vars
        grads, variables = zip(*grads_and_vars)
        return list(zip(self._allreduce(grads, variables), variables))

    # Both kinds: Horovod's Keras 2 entry point (legacy minimize() and model.fit call it).
    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        base = super()
        if hasattr(base, "_compute_gradients"):  # tf_keras.optimizers.legacy (OptimizerV2)
            local = base._compute_gradients(loss, var_list, grad_loss, tape)
        else:
            local = _tape_gradients(loss, var_list, grad_loss, tape)
        return self._hvdlite_reduce(local)

    def _aggregate_gradients(self, grads_and_vars):
        """Keras's sum over tf.distribute replicas (none without a strategy),
        which Horovod scripts call: the ranks' reduction already happened
        in _compute_gradients, so only Keras's own is left, under the name
        each kind of tf_keras optimizer gives it."""
        base = super()
        if hasattr(base, "_aggregate_gradients"):  # legacy
            return base._aggregate_gradients(grads_and_vars)
        return base.aggregate_gradients(grads_and_vars)

    def get_gradients(self, loss, params):
        params = list(params)
        grads = super().get_gradients(loss, params)
        return [g for g, _ in self._hvdlite_reduce(zip(grads, params))]

    # new-style tf_keras optimizers (their minimize() and model.fit call it)
    def compute_gradients(self, loss, var_list, tape=None):
        return self._hvdlite_reduce(super().compute_gradients(loss, var_list, tape))

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        if self._agg_helper is None:
            return super().apply_gradients(grads_and_vars, *args, **kwargs)
        grads_and_vars = list(grads_and_vars)  # a zip would be spent by the first branch
        grads = [g for g, _ in grads_and_vars]
        variables = [v for _, v in grads_and_vars]
        # Slots must exist before the tf.cond: variables cannot be created in a branch.
        with tf.init_scope():
            if hasattr(self, "_create_all_weights"):
                self._create_all_weights(variables)
            else:
                self.build(variables)
        return self._agg_helper.apply_gradients(
            lambda: super(_DistributedOptimizerMixin, self).apply_gradients(
                grads_and_vars, *args, **kwargs), self, grads)


def _distributed_class(base):
    return keras3_optimizer._distributed_class(base, _DistributedOptimizerMixin)


def _attach(optimizer, reducer, backward_passes_per_step, average_aggregated_gradients):
    # Through __dict__: Keras would otherwise track these as the optimizer's state.
    optimizer.__dict__["_hvdlite_reducer"] = reducer
    optimizer.__dict__["_agg_helper"] = (
        LocalGradientAggregator(backward_passes_per_step, reducer, average_aggregated_gradients)
        if backward_passes_per_step > 1 else None)
    return optimizer


def wrap_in_place(optimizer, compression=None):
    """Turns a loaded Keras 2 optimizer itself into a distributed one (load_model)."""
    optimizer.__class__ = _distributed_class(type(optimizer))
    return _attach(optimizer, GradientReducer(compression=compression,
                                              prefix="DistributedOptimizer"), 1, False)


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                         compression=None, sparse_as_dense=False, gradient_predivide_factor=1.0,
                         op=None, backward_passes_per_step=1, average_aggregated_gradients=False,
                         num_groups=0, groups=None, process_set=global_process_set,
                         scale_local_gradients=True, local_variables=None):
    """Horovod's Keras 2 DistributedOptimizer: a copy of `optimizer` (same class
    name and config) whose gradients are averaged over the ranks."""
    if int(backward_passes_per_step) < 1:
        raise ValueError(f"backward_passes_per_step must be >= 1, got {backward_passes_per_step}")
    config = optimizer.get_config()
    if name:
        config["name"] = name
    distributed = _distributed_class(type(optimizer)).from_config(config)
    reducer = GradientReducer(compression=compression, sparse_as_dense=sparse_as_dense, op=op,
                              gradient_predivide_factor=gradient_predivide_factor,
                              num_groups=num_groups, groups=groups, process_set=process_set,
                              prefix="DistributedOptimizer",
                              scale_local_gradients=scale_local_gradients)
    for variable in local_variables or ():
        reducer.register_local(variable)
    return _attach(distributed, reducer, int(backward_passes_per_step),
                   average_aggregated_gradients)
