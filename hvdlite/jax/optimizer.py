"""DistributedOptimizer for optax: gradients averaged over the ranks before
the wrapped GradientTransformation sees them. optax is imported on use, so
the collectives work without it."""
from hvdlite.common.ops import Average, ReduceOp, resolve_op
from hvdlite.common.process_sets import global_process_set
from hvdlite.jax.functions import allreduce_gradients


def DistributedOptimizer(optimizer, op=Average, compression=None, gradient_predivide_factor=1.0,
                         backward_passes_per_step=1, average_aggregated_gradients=False,
                         name="DistributedOptimizer", process_set=global_process_set):
    """Wraps the optax GradientTransformation `optimizer` (Horovod's
    DistributedOptimizer for JAX): update() allreduces the gradients, then
    applies `optimizer`. Works eagerly and inside jax.jit.

    backward_passes_per_step=N accumulates N local gradients (optax.MultiSteps)
    and communicates once per N calls; the update then sees their sum, or
    their mean with average_aggregated_gradients=True, as in Horovod.
    """
    import optax
    op = resolve_op(op)
    if gradient_predivide_factor != 1.0 and op != ReduceOp.Average:
        raise ValueError("gradient_predivide_factor needs op=Average")
    if int(backward_passes_per_step) < 1:
        raise ValueError(f"backward_passes_per_step must be >= 1, got {backward_passes_per_step}")
    # Average divides by the ranks; predividing by f before the sum and
    # multiplying by f after keeps the result and avoids overflow in fp16.
    prescale, postscale = 1.0 / gradient_predivide_factor, float(gradient_predivide_factor)

    def update(updates, state, params=None):
        updates = allreduce_gradients(updates, op=op, compression=compression,
                                      prescale_factor=prescale, postscale_factor=postscale,
                                      name=name, process_set=process_set)
        return optimizer.update(updates, state, params)

    distributed = optax.GradientTransformation(optimizer.init, update)
    if backward_passes_per_step == 1:
        return distributed
    return optax.MultiSteps(distributed, every_k_schedule=int(backward_passes_per_step),
                            use_grad_mean=average_aggregated_gradients).gradient_transformation()
