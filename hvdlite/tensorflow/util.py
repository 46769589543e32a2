"""Horovod's horovod.tensorflow.util helpers, which scripts and libraries
built on Horovod import directly."""
import functools

import tensorflow as tf


def _executing_eagerly():
    """True when TensorFlow runs ops eagerly (not while tracing a graph)."""
    return tf.executing_eagerly()


def _make_subgraph(f):
    """`f` as a tf.function."""
    return tf.function(f)


def _cache(f):
    """Memoizes `f` on its (hashable) arguments and on whether TF runs eagerly,
    since a function built for one mode is not valid in the other."""
    cache = {}

    @functools.wraps(f)
    def wrapper(*args):
        key = (args, _executing_eagerly())
        if key not in cache:
            cache[key] = f(*args)
        return cache[key]

    return wrapper


def vars_to_refs(variables):
    """Variables (nested lists of them) -> hashable references (nested tuples),
    e.g. to key a _cache'd function on them.

    Args:
        variables (tf.Variable | list | tuple): a variable, or nested lists or tuples of them.

    Returns:
        tuple | object: the variable's `ref()`, or nested tuples of them.
    """
    if isinstance(variables, (list, tuple)):
        return tuple(vars_to_refs(v) for v in variables)
    return variables.ref()


def refs_to_vars(refs):
    """The inverse of vars_to_refs: tuples of references -> lists of variables.

    Args:
        refs (tuple | object): what `vars_to_refs` returned.

    Returns:
        list | tf.Variable: the variable, or nested lists of them.
    """
    if isinstance(refs, tuple):
        return [refs_to_vars(r) for r in refs]
    return refs.deref()
