"""Elastic training for TensorFlow: `hvdlite.tensorflow.elastic` (see
hvdlite/common/elastic.py for how it works).

    state = hvd.elastic.TensorFlowKerasState(model, optimizer, epoch=0)

    @hvd.elastic.run
    def train(state): ...
"""
import functools
import re

import numpy as np
import tensorflow as tf

from hvdlite.common import basics
from hvdlite.common.elastic import ObjectState as _ObjectState
from hvdlite.common.elastic import State, VariablesState, reset, run_fn
from hvdlite.common.exceptions import HvdliteInternalError
from hvdlite.tensorflow.functions import broadcast_object, broadcast_variables

__all__ = ["run", "State", "ObjectState", "TensorFlowState", "TensorFlowKerasState"]

# How the core's run-time failures read once TensorFlow wrapped them in an
# InternalError (inside tf.function or model.fit): "allreduce of 'x' failed: ...".
_CORE_FAILURE = re.compile(r"\b(of '[^']*' failed: |cannot start \w+ of ')")


def bcast_object(obj, name):
    return broadcast_object(obj, root_rank=0, name=name)


def run(func):
    """The elastic loop (hvdlite.common.elastic.run_fn) for TensorFlow: a
    collective that failed inside a graph reaches Python as TensorFlow's
    InternalError (UnknownError from a host crossing), which counts as the
    HvdliteInternalError it carries.

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

    @functools.wraps(func)
    def translated(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        # The core's ops fail with InternalError; a collective inside a host
        # crossing (PowerSGD's tf.numpy_function) with UnknownError.
        except (tf.errors.InternalError, tf.errors.UnknownError) as error:
            if _CORE_FAILURE.search(error.message):
                raise HvdliteInternalError(error.message) from error
            raise

    return run_fn(translated, reset)


class ObjectState(_ObjectState):
    """Picklable values as attributes: `ObjectState(epoch=0, batch=0)`."""

    def __init__(self, **kwargs):
        super().__init__(bcast_object, basics.rank, **kwargs)


class _VariablesState(VariablesState):
    """TF variables saved as NumPy copies, synced from rank 0 by TF broadcasts."""

    def __init__(self, variables, **kwargs):
        super().__init__(variables, lambda v: np.array(v.numpy(), copy=True),
                         lambda vs: broadcast_variables(vs, root_rank=0), bcast_object,
                         basics.rank, **kwargs)


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


class TensorFlowKerasState(_VariablesState):
    """A Keras model and its optimizer (built on first use, so that a new
    rank and the survivors sync the same variables), plus keyword attributes.

    Args:
        model (keras.Model): its variables are saved and synced.
        optimizer (keras.optimizers.Optimizer | None): default: the model's.
        backend: accepted for Horovod compatibility.
        **kwargs: picklable values kept as attributes (state.epoch, ...).
    """

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        super().__init__(self._model_and_optimizer_variables, **kwargs)

    def reset(self):
        """Drops the traced train step, so that Keras traces it again for the job's new size."""
        # Keras traced its train step at the old size (e.g. scale factors of
        # sparse gradients): trace it again for the new one.
        if hasattr(self.model, "train_function"):
            self.model.train_function = None

    def _model_and_optimizer_variables(self):
        variables = list(self.model.variables)
        optimizer = self.optimizer
        if optimizer is None:
            return variables
        if hasattr(optimizer, "built") and not optimizer.built and self.model.built:
            optimizer.build(self.model.trainable_variables)
        optimizer_variables = optimizer.variables
        if callable(optimizer_variables):  # tf.keras 2 optimizers: a method
            optimizer_variables = optimizer_variables()
        return variables + list(optimizer_variables)
