"""DistributedOptimizer for optax: gradients averaged over the ranks before
the wrapped GradientTransformation sees them. optax is imported on use, so
the collectives work without it."""
from hvdlite.common.ops import Average, ReduceOp, resolve_op
from hvdlite.common.process_sets import global_process_set
from hvdlite.jax.functions import allreduce_gradients


def DistributedOptimizer(optimizer, op=Average, compression=None, gradient_predivide_factor=1.0,
                         backward_passes_per_step=1, average_aggregated_gradients=False,
                         name="DistributedOptimizer", process_set=global_process_set):
    """Wraps an optax GradientTransformation so that `update()` first allreduces the gradients.

    Horovod's DistributedOptimizer for JAX; works eagerly and inside `jax.jit`.

    Args:
        optimizer (optax.GradientTransformation): applied to the reduced gradients.
        op (ReduceOp): `Average` (default) or `Sum`, ...
        compression: `Compression.none`, `.fp16` or `.bf16`: the type on the wire.
        gradient_predivide_factor (float): divide by f before the sum and by size/f after
            (`op=Average` only).
        backward_passes_per_step (int): N local gradients accumulate (optax.MultiSteps) and
            are communicated once per N calls; the update sees their sum.
        average_aggregated_gradients (bool): with N > 1, their mean instead of their sum.
        name (str): names the gradients' collectives.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        optax.GradientTransformation: `init` as the wrapped one's; `update` reduces first.

    Raises:
        ValueError: `gradient_predivide_factor` with an op other than Average, or
            `backward_passes_per_step` < 1.

    Example:
        ```python
        tx = hvd.DistributedOptimizer(optax.adam(1e-3 * hvd.size()))
        opt_state = tx.init(params)
        ```
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
