"""Elastic training for TensorFlow: `hvdlite.tensorflow.elastic` (see
hvdlite/common/elastic.py for how it works).

    state = hvd.elastic.TensorFlowKerasState(model, optimizer, epoch=0)

    @hvd.elastic.run
    def train(state): ...
"""
import numpy as np

from hvdlite.common import basics
from hvdlite.common.elastic import ObjectState as _ObjectState
from hvdlite.common.elastic import (KerasModelState, State, VariablesState, reset,
                                    run_fn_translating)
from hvdlite.common.carried_failures import carried_failure
from hvdlite.tensorflow.functions import broadcast_object, broadcast_variables

__all__ = ["run", "State", "ObjectState", "TensorFlowState", "TensorFlowKerasState"]


def bcast_object(obj, name):
    return broadcast_object(obj, root_rank=0, name=name)


def run(func):
    """The elastic loop (hvdlite.common.elastic.run_fn) for TensorFlow: a
    collective that failed inside a graph reaches Python as TensorFlow's
    InternalError (UnknownError from a host crossing), which counts as the
    HvdliteInternalError it carries, with its kind and fields.

    The wrapped function syncs `state` from rank 0, then calls `func`; when a
    collective fails it restores the last commit, re-forms the job and calls it
    again; when hosts were added or removed (HostsUpdatedInterrupt at a commit)
    it re-forms the job and calls it again.

    Args:
        func (Callable): `func(state, *args, **kwargs)`, the training function.

    Returns:
        Callable: called as `wrapped(state, *args, **kwargs)`, it returns what `func`
            returns once it completes.

    Example:
        ```python
        @hvd.elastic.run
        def train(state):
            ...

        train(hvd.elastic.TensorFlowKerasState(model, optimizer, epoch=0))
        ```
    """

    # Inside a graph (tf.function, model.fit) the core's ops fail with
    # InternalError, a collective inside a host crossing (PowerSGD's
    # tf.numpy_function) with UnknownError: the failure they carry is looked
    # up by the core (Note [Failures by message] in csrc/api/session.h).
    return run_fn_translating(func, reset, carried_failure)


class ObjectState(_ObjectState):
    """Picklable values as attributes: `ObjectState(epoch=0, batch=0)`."""

    def __init__(self, **kwargs):
        super().__init__(bcast_object, basics.rank, **kwargs)


def to_numpy(variable):
    return np.array(variable.numpy(), copy=True)


def _broadcast_from_root(variables):
    broadcast_variables(variables, root_rank=0)


class _VariablesState(VariablesState):
    """TF variables saved as NumPy copies, synced from rank 0 by TF broadcasts."""

    def __init__(self, variables, **kwargs):
        super().__init__(variables, to_numpy, _broadcast_from_root, bcast_object, basics.rank,
                         **kwargs)


class TensorFlowState(_VariablesState):
    """A list of tf.Variable (a custom training loop's model and optimizer
    variables) plus keyword attributes.

    Args:
        variables (Iterable[tf.Variable] | None): saved as NumPy copies, synced from rank 0.
        session: Horovod's TF1 session; only None is accepted.
        **kwargs: picklable values kept as attributes (state.epoch, ...).

    Raises:
        ValueError: for a session (TF1 sessions have no elastic mode here).
    """

    def __init__(self, variables=None, session=None, **kwargs):
        if session is not None:
            raise ValueError("TensorFlowState(session=...) is for TF1 sessions, which hvdlite's "
                             "elastic mode does not support; use eager TF2 or tf.function")
        self.variables = list(variables or [])
        super().__init__(lambda: self.variables, **kwargs)


class TensorFlowKerasState(KerasModelState):
    """A Keras model and its optimizer (built on first use, so that a new
    rank and the survivors sync the same variables), plus keyword attributes.

    Args:
        model (keras.Model): its variables are saved and synced.
        optimizer (keras.optimizers.Optimizer | None): default: the model's.
        backend: accepted for Horovod compatibility.
        **kwargs: picklable values kept as attributes (state.epoch, ...).
    """

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        super().__init__(model, optimizer, to_numpy, _broadcast_from_root, bcast_object, **kwargs)
