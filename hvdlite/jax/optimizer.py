"""DistributedOptimizer for optax: gradients averaged over the ranks before
the wrapped GradientTransformation sees them. optax is imported on use, so
the collectives work without it."""
import jax

from hvdlite.common.ops import Average, ReduceOp, resolve_op
from hvdlite.common.powersgd import refuse_unconfigured
from hvdlite.common.process_sets import global_process_set
from hvdlite.common.sharding import check_stage
from hvdlite.jax.functions import _leaves_and_names, allreduce_gradients
from hvdlite.jax.powersgd import PowerSGD


def DistributedOptimizer(optimizer, op=Average, compression=None, gradient_predivide_factor=1.0,
                         backward_passes_per_step=1, average_aggregated_gradients=False,
                         name="DistributedOptimizer", process_set=global_process_set,
                         sharding_stage=0):
    """Wraps an optax GradientTransformation so that `update()` first allreduces the gradients.

    Horovod's DistributedOptimizer for JAX; works eagerly and inside `jax.jit`.

    Args:
        optimizer (optax.GradientTransformation): applied to the reduced gradients.
        op (ReduceOp): `Average` (default) or `Sum`, ...
        compression: `Compression.none`, `.fp16` or `.bf16`: the type on the wire; or
            `Compression.powersgd(rank=..., start_iter=...)`: low-rank approximations with
            error feedback, one instance per optimizer (hvdlite/jax/powersgd.py).
        gradient_predivide_factor (float): divide by f before the sum and by size/f after
            (`op=Average` only).
        backward_passes_per_step (int): N local gradients accumulate (optax.MultiSteps) and
            are communicated once per N calls; the update sees their sum.
        average_aggregated_gradients (bool): with N > 1, their mean instead of their sum.
        name (str): names the gradients' collectives.
        process_set (ProcessSet): the ranks that take part (default: all).
        sharding_stage (int): 0 (default) keeps the whole optimizer state on every rank;
            1 or 2 keeps this rank's rows of it only (ZeRO; hvdlite/jax/sharded_optimizer.py):
            gradients are reduce-scattered, the wrapped update runs on the rows, and the
            updates are allgathered back to full shape. Clip with
            `sharded_clip_by_global_norm`, not `optax.clip_by_global_norm`.

    Returns:
        optax.GradientTransformation: `init` as the wrapped one's; `update` reduces first.
            With sharding_stage > 0 a `ShardedGradientTransformation`, whose helpers
            move the state to and from whole checkpoints and shard files.

    Raises:
        ValueError: `gradient_predivide_factor` with an op other than Average,
            `backward_passes_per_step` < 1, the PowerSGD class instead of an instance, or
            PowerSGD with an op other than Average and Sum; with sharding_stage > 0, an op
            other than Average and Sum, PowerSGD, or a transformation that is not elementwise
            (`optax.lamb`, `optax.adafactor`, `optax.clip_by_global_norm`, ...).

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
    refuse_unconfigured(compression)
    stage = check_stage(sharding_stage)
    # Average divides by the ranks; predividing by f before the sum and
    # multiplying by f after keeps the result and avoids overflow in fp16.
    prescale, postscale = 1.0 / gradient_predivide_factor, float(gradient_predivide_factor)

    if stage:
        if isinstance(compression, PowerSGD):
            raise ValueError(
                f"hvdlite.jax.DistributedOptimizer: PowerSGD does not compose with "
                f"sharding_stage={stage}: PowerSGD allreduces low-rank factors of whole gradient "
                f"matrices, and a sharded optimizer reduce-scatters rows of them; use one or the "
                f"other")
        from hvdlite.jax.sharded_optimizer import sharded_optimizer
        return sharded_optimizer(optimizer, stage, op, compression, prescale, postscale,
                                 int(backward_passes_per_step), bool(average_aggregated_gradients),
                                 name, process_set)
    if isinstance(compression, PowerSGD):
        compression.check_op(op)
        return _powersgd_optimizer(optimizer, compression, int(backward_passes_per_step),
                                   bool(average_aggregated_gradients), name, op, prescale,
                                   postscale, process_set)

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


def _powersgd_optimizer(optimizer, compression, passes, average_passes, name, op, prescale,
                        postscale, process_set):
    """DistributedOptimizer with PowerSGD. Its N backward passes per step
    accumulate on the host, inside PowerSGD (Note [PowerSGD on the host] in
    hvdlite/numpy/powersgd.py), not in optax.MultiSteps: MultiSteps runs the
    inner update on every pass and keeps its result only on the last, which
    would reduce (and feed into the error memory) every partial sum. Here
    only the last pass reduces; the wrapped optimizer's update and state are
    kept only then, as MultiSteps keeps them."""
    import optax

    def update(updates, state, params=None):
        leaves, names, treedef = _leaves_and_names(updates, name)
        reduced, emit = compression.reduce_pass(leaves, names, name, op, prescale, postscale,
                                                process_set, passes, average_passes)
        new_updates, new_state = optimizer.update(jax.tree_util.tree_unflatten(treedef, reduced),
                                                  state, params)
        if passes == 1:
            return new_updates, new_state
        keep = lambda new, old: jax.numpy.where(emit, new, old)  # noqa: E731
        return (jax.tree_util.tree_map(lambda u: jax.numpy.where(emit, u, 0).astype(u.dtype),
                                       new_updates),
                jax.tree_util.tree_map(keep, new_state, state))

    # An optax optimizer is a tuple, which cannot be referenced weakly; its
    # update function stands for it.
    compression.bind(update)
    return optax.GradientTransformation(optimizer.init, update)


def sharded_clip_by_global_norm(max_norm):
    """optax.clip_by_global_norm across the shards of a sharded DistributedOptimizer:
    hvdlite/jax/sharded_optimizer.py's (its docstring says more).

    Args:
        max_norm (float): the largest global norm of an update.

    Returns:
        optax.GradientTransformation: put it in the chain `DistributedOptimizer(...,
            sharding_stage=1|2)` wraps; the result is unsharded clipping's.
    """
    from hvdlite.jax.sharded_optimizer import sharded_clip_by_global_norm as clip
    return clip(max_norm)
