"""Pytrees through the collectives: a model's parameters from one rank to
all, gradients averaged, Python objects. Each pytree crosses in one host
call (Note [Host callback] in collectives.py); its leaves are named by their
path in the tree, the same on every rank."""
import jax

from hvdlite.common.ops import Average
from hvdlite.common.process_sets import global_process_set
from hvdlite.jax import collectives
from hvdlite.numpy.objects import allgather_object, broadcast_object  # noqa: F401 (re-exported)


def _leaves_and_names(tree, prefix):
    paths_and_leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    names = [f"{prefix}{jax.tree_util.keystr(path)}" for path, _ in paths_and_leaves]
    return [leaf for _, leaf in paths_and_leaves], names, treedef


def broadcast_parameters(params, root_rank=0, name="broadcast_parameters",
                         process_set=global_process_set):
    """Gives every rank root_rank's values of the pytree `params`.

    Args:
        params: a pytree of arrays (e.g. a model's parameters).
        root_rank (int): the rank whose values every rank gets.
        name (str): starts the names of the leaves' broadcasts.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        pytree: `params`' structure with root_rank's values (JAX arrays are immutable:
            use the result).

    Example:
        ```python
        params = hvd.broadcast_parameters(params, root_rank=0)
        ```
    """
    leaves, names, treedef = _leaves_and_names(params, name)
    return jax.tree_util.tree_unflatten(
        treedef, collectives.broadcast_many(leaves, names, root_rank, process_set))


def allreduce_gradients(grads, op=Average, compression=None, prescale_factor=1.0,
                        postscale_factor=1.0, name="allreduce_gradients",
                        process_set=global_process_set):
    """Reduces the pytree `grads` over the ranks, in one host call inside jit;
    the core fuses the leaves.

    Args:
        grads: a pytree of arrays.
        op (ReduceOp): `Average` (default) or another reduction.
        compression: `Compression.none` (None), `.fp16` or `.bf16`.
        prescale_factor (float): scales each leaf before the reduction.
        postscale_factor (float): scales each reduced leaf.
        name (str): starts the names of the leaves' allreduces.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        pytree: `grads`' structure with the reduced leaves.
    """
    leaves, names, treedef = _leaves_and_names(grads, name)
    reduced = collectives.allreduce_many(leaves, names, op=op, prescale_factor=prescale_factor,
                                         postscale_factor=postscale_factor,
                                         process_set=process_set, compression=compression)
    return jax.tree_util.tree_unflatten(treedef, reduced)
