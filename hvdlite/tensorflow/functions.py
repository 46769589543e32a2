"""Helpers built on the collectives: broadcasting variables and Python objects."""
import tensorflow as tf

from hvdlite.common import basics
from hvdlite.common.process_sets import global_process_set
from hvdlite.numpy import objects
from hvdlite.tensorflow import collectives
from hvdlite.tensorflow.collectives import do_not_convert


def _without(variables, local_variables):
    """`variables` less those in local_variables (which each rank keeps to itself)."""
    local = {id(v) for v in local_variables or ()}
    return [v for v in variables if id(v) not in local]


@do_not_convert
def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Assigns root_rank's value to every tf.Variable in `variables`, in place,
    on every rank. Eagerly and inside tf.function.

    Args:
        variables (Iterable[tf.Variable]): assigned in place.
        root_rank (int): the rank whose values every rank gets.
        name (str | None): the members are named `name.0`, `name.1`, ...; None: numbered
            eagerly, named after the variables in a graph.
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        list[tf.Tensor]: the variables' new values.

    Raises:
        ValueError: for an element that is not a variable (use broadcast() for tensors).
    """
    variables = list(variables)
    for variable in variables:
        if not isinstance(variable, tf.Variable) and not hasattr(variable, "assign"):
            raise ValueError(f"broadcast_ assigns in place, so it needs variables; got "
                             f"{type(variable).__name__} (use broadcast() for tensors)")
    if name is None and tf.executing_eagerly():
        name = basics.auto_name("broadcast_")
    values = []
    for index, variable in enumerate(variables):
        member = (f"{name}.{index}" if name else
                  f"broadcast_.{index}.{collectives._normalize(variable.name)}")
        assigned = variable.assign(collectives.broadcast(variable, root_rank, name=member,
                                                 process_set=process_set))
        # In a tf.compat.v1 graph nothing orders a read of the variable after
        # the assign (tf.function's automatic control dependencies do): the
        # value returned, which is what a session runs, must depend on it.
        with tf.control_dependencies([assigned]):
            values.append(variable.read_value() if hasattr(variable, "read_value") else
                          tf.identity(variable))
    return values


@do_not_convert
def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False,
                        local_variables=None):
    """Assigns root_rank's value to every variable on every rank, except those in
    local_variables.

    Args:
        variables (Iterable[tf.Variable]): the variables to assign.
        root_rank (int): the rank whose values every rank gets.
        process_set (ProcessSet): the ranks that take part (default: all).
        inplace (bool): accepted for Horovod; hvdlite always assigns in place.
        local_variables (Iterable[tf.Variable] | None): left as they are on every rank.

    Returns:
        tf.Operation | None: the op that assigns them (for a tf.compat.v1 session to
            run, as Horovod's); None when executing eagerly.

    Example:
        ```python
        hvd.broadcast_variables(model.variables, root_rank=0)
        ```
    """
    variables = _without(variables, local_variables)
    assigns = []
    for index, variable in enumerate(variables):
        name = f"broadcast_variables.{index}.{collectives._normalize(variable.name)}"
        assigns.append(variable.assign(collectives.broadcast(variable, root_rank, name=name,
                                                     process_set=process_set)))
    return tf.group(*assigns)


# Note [Objects inside tf.function]
# Python objects are pickled and exchanged through the core at once, in every
# mode: eagerly, and in tf.compat.v1 graph mode, where Horovod ran the same
# collectives in `session` at once (`session` is accepted and not needed).
# Inside tf.function the values are known only when the function runs, so the
# exchange runs then, in a tf.py_function: `obj` is a tensor or a nested
# structure (lists, tuples, dicts) of tensors and values convertible to
# tensors, and the result has the same structure, of tensors (Horovod's
# helpers fail inside tf.function). Every rank passes the same structure and
# dtypes: a traced function must know its outputs.
def _at_run_time(exchange, obj, copies, what):
    """Runs exchange(obj) -> list of `copies` objects structured like `obj`
    when the traced function runs; returns them as tensors."""
    leaves = []
    for leaf in tf.nest.flatten(obj):
        try:
            leaves.append(tf.convert_to_tensor(leaf))
        except (TypeError, ValueError):
            raise TypeError(f"inside tf.function, {what} exchanges tensors or nested lists, "
                            f"tuples and dicts of them; a {type(leaf).__name__} is not a tensor. "
                            f"Call {what} outside tf.function for other Python objects") from None

    def run(*values):
        local = tf.nest.pack_sequence_as(obj, [v.numpy() for v in values])
        return [value for result in exchange(local) for value in tf.nest.flatten(result)]

    flat = tf.py_function(run, leaves, Tout=[t.dtype for t in leaves] * copies)
    n = len(leaves)
    return [tf.nest.pack_sequence_as(obj, flat[i * n:(i + 1) * n]) for i in range(copies)]


@do_not_convert
def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """Pickles `obj` on root_rank and gives it to every rank. Inside tf.function
    the exchange runs when the function runs: `obj` is then a (nested structure
    of) tensors, the same structure and dtypes on every rank.

    Args:
        obj: the object on root_rank; ignored elsewhere.
        root_rank (int): the sending rank.
        session: accepted for Horovod's graph mode; not needed.
        name (str | None): starts the names of the collectives.
        process_set (ProcessSet): the ranks that receive it (default: all).

    Returns:
        object: root_rank's `obj` (inside tf.function, tensors in its structure).

    Raises:
        HvdliteInternalError: when the collective fails or a pickle fails its integrity check.
    """
    def exchange(value):
        return [objects.broadcast_object(value, root_rank, name=name, process_set=process_set)]
    if tf.inside_function():
        return _at_run_time(exchange, obj, 1, "broadcast_object")[0]
    return exchange(obj)[0]


@do_not_convert
def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """A function that broadcasts its argument from root_rank: Horovod's helper
    for graph mode, where it reuses its ops across calls; here each call is
    broadcast_object(obj, root_rank, name=name).

    Args:
        root_rank (int): the sending rank of every call.
        session: accepted for Horovod's graph mode; not needed.
        name (str | None): the name of every call's collectives (default "broadcast_object_fn").
        process_set (ProcessSet): the ranks that take part (default: all).

    Returns:
        Callable[[object], object]: obj -> root_rank's obj.
    """
    name = name or "broadcast_object_fn"

    def broadcast(obj):
        return broadcast_object(obj, root_rank, session, name, process_set)
    return broadcast


@do_not_convert
def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Pickles `obj` on every rank and gathers them. Inside tf.function the
    exchange runs when the function runs: `obj` is then a (nested structure
    of) tensors, the same structure and dtypes on every rank.

    Args:
        obj: this rank's object.
        session: accepted for Horovod's graph mode; not needed.
        name (str | None): starts the names of the collectives; None numbers them.
        process_set (ProcessSet): the ranks whose objects are gathered (default: all).

    Returns:
        list: every rank's object, in rank order.

    Raises:
        HvdliteInternalError: when the collective fails or a pickle fails its integrity check.
    """
    def exchange(value):
        return objects.allgather_object(value, name=name, process_set=process_set)
    if tf.inside_function():
        return _at_run_time(exchange, obj, collectives._set_size(process_set), "allgather_object")
    return exchange(obj)
