"""Crossing from JAX to the host: a function of NumPy arrays called on JAX
arrays, through an ordered io_callback inside a trace (Note [Host callback]
in collectives.py) or directly outside one. Its own module because both the
collectives and PowerSGD (which collectives' Compression names) cross."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback


def is_traced(*arrays):
    """True when any of the arrays is a tracer (inside jax.jit, grad, ...)."""
    return any(isinstance(a, jax.core.Tracer) for a in arrays)


def call_host(function, result_shapes, *arrays):
    """function(*NumPy arrays) -> NumPy results, as JAX arrays: through an
    ordered io_callback when traced (Note [Host callback]), else directly."""
    if is_traced(*arrays):
        return io_callback(function, result_shapes, *arrays, ordered=True)
    results = function(*[np.asarray(a) for a in arrays])
    return jax.tree_util.tree_map(jnp.asarray, results)


def like(array, rows=None):
    """The shape and dtype of `array` (with `rows` rows) for an io_callback's results."""
    shape = array.shape if rows is None else (rows, *array.shape[1:])
    return jax.ShapeDtypeStruct(shape, array.dtype)
