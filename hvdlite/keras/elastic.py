"""Elastic training for Keras 3: `hvdlite.keras.elastic` (see
hvdlite/common/elastic.py for how it works).

    state = hvd.elastic.KerasState(model, epoch=0, batch=0)
    callbacks = [hvd.elastic.CommitStateCallback(state),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state)]

    @hvd.elastic.run
    def train(state):
        model.fit(x, y, epochs=epochs, initial_epoch=state.epoch, callbacks=callbacks)

Keras 3 runs every epoch it starts to its end (a callback cannot shorten
it), so after a reset fit() begins the interrupted epoch again at its first
batch, from the last committed weights; state.batch tells how many of its
batches were committed, for scripts that skip that data themselves.
"""
import copy

from hvdlite.common.elastic import KerasModelState, reset, run_fn_translating
from hvdlite.common.carried_failures import carried_failure
from hvdlite.common.process_sets import global_process_set
from hvdlite.keras import backends, flavour

__all__ = ["run", "State", "ObjectState", "KerasState", "CommitStateCallback",
           "UpdateBatchStateCallback", "UpdateEpochStateCallback"]

keras = flavour.keras_module()
_backend = backends.current()


class _CompressionState:
    """PowerSGD's state (step count, Q's, each rank's error memory) lives in
    the optimizer's compression, not in Keras variables: it is committed and
    restored with them, and synced after the job re-forms with the
    compression's own sync (root's Q's, the ranks' mean error memory), as
    hvdlite.torch's TorchState does through the optimizer's state_dict()."""

    _saved_compression = None

    def _step_compression(self):
        optimizer = getattr(self, "optimizer", None)
        reducer = getattr(optimizer, "__dict__", {}).get("_hvdlite_reducer")
        return reducer, getattr(reducer, "step_compression", None)

    def save(self):
        super().save()
        _, compression = self._step_compression()
        if compression is not None:
            self._saved_compression = copy.deepcopy(compression.state_dict())

    def restore(self):
        super().restore()
        _, compression = self._step_compression()
        if compression is not None and self._saved_compression is not None:
            # load_state_dict copies the arrays: the commit stays intact.
            compression.load_state_dict(self._saved_compression)

    def sync(self):
        super().sync()
        reducer, compression = self._step_compression()
        if compression is not None:
            compression.sync(0, "elastic.powersgd", reducer.process_set)
            self._saved_compression = copy.deepcopy(compression.state_dict())


class _ShardedOptimizerState:
    """A sharded optimizer's state (hvdlite/keras/sharded_optimizer.py):
    each rank holds only its rows, so the commit keeps the WHOLE state
    (consolidated_state_dict: every rank's rows joined, as much host memory
    as an unsharded commit), the variables synced from rank 0 leave the rows
    out, and restore/sync load this rank's rows of it, first re-sharding the
    optimizer when the job re-formed at another size."""

    _saved_sharded = None

    def _sharded_optimizer(self):
        optimizer = getattr(self, "optimizer", None)
        return optimizer if hasattr(optimizer, "consolidated_state_dict") else None

    @property
    def sync_after_removal(self):
        # Rows move between ranks whenever the size changes.
        return self._sharded_optimizer() is not None

    def _without_rows(self, variables):
        """`variables` less this rank's rows of the optimizer's state."""
        optimizer = self._sharded_optimizer()
        if optimizer is None or not optimizer.built:
            return variables
        replicated = {id(v) for v in optimizer.replicated_variables()}
        mine = {id(v) for v in optimizer.variables if id(v) not in replicated}
        return [v for v in variables if id(v) not in mine]

    def save(self):
        super().save()
        optimizer = self._sharded_optimizer()
        if optimizer is not None and optimizer.built:
            self._saved_sharded = optimizer.consolidated_state_dict()

    def restore(self):
        super().restore()
        optimizer = self._sharded_optimizer()
        if optimizer is not None and self._saved_sharded is not None:
            optimizer.load_state_dict(self._saved_sharded)

    def sync(self):
        optimizer = self._sharded_optimizer()
        if optimizer is not None and optimizer.reshard():
            # Keras traced its step for the old rows' shapes.
            self.reset()
        super().sync()
        if optimizer is not None and optimizer.built:
            from hvdlite.keras.sharded_state import sync_whole
            self._saved_sharded = sync_whole(optimizer, self._saved_sharded)


if _backend.name == "tensorflow":
    from hvdlite.tensorflow.elastic import ObjectState, State, bcast_object, to_numpy
else:
    from hvdlite.numpy.elastic import ObjectState, State, bcast_object
    from hvdlite.keras.backends import to_numpy


def run(func):
    """The elastic loop (hvdlite.common.elastic.run_fn) for every backend; a
    collective that failed inside a compiled step (TensorFlow's graph, XLA's
    jitted step) counts as the HvdliteInternalError it carries, with its kind
    and fields (hvdlite.common.carried_failures.carried_failure).

    Args:
        func (Callable): `func(state, *args, **kwargs)`, the training function.

    Returns:
        Callable: called as `wrapped(state, *args, **kwargs)`: syncs `state`, calls
            `func`, restores and retries after a failure or a change of hosts, and returns
            what `func` returns once it completes.
    """
    return run_fn_translating(func, reset, carried_failure)


def _broadcast_from_root(variables):
    _backend.broadcast_variables(variables, 0, global_process_set, None)


class KerasState(_ShardedOptimizerState, _CompressionState, KerasModelState):
    """A Keras model, its optimizer (default: the model's, built on first
    use so that a new rank and the survivors sync the same variables) and
    keyword attributes, on every Keras backend.

    Args:
        model (keras.Model): its variables are saved and synced.
        optimizer (keras.optimizers.Optimizer | None): default: the model's.
        backend: accepted for Horovod compatibility.
        **kwargs: picklable values kept as attributes (state.epoch, ...).
    """

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        super().__init__(model, optimizer, to_numpy, _broadcast_from_root, bcast_object,
                         **kwargs)

    def _model_and_optimizer_variables(self):
        return self._without_rows(super()._model_and_optimizer_variables())


class CommitStateCallback(keras.callbacks.Callback):
    """Commits `state` every `batches_per_commit` batches.

    The commit runs when the next batch begins, after every callback has
    seen the batch end, so that the UpdateBatch/UpdateEpoch callbacks have
    updated the state whatever their place in the list.

    Args:
        state (State): the elastic state to commit.
        batches_per_commit (int): batches between commits, at least 1.

    Raises:
        ValueError: for batches_per_commit below 1.
    """

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        if batches_per_commit < 1:
            raise ValueError(f"batches_per_commit must be at least 1, got {batches_per_commit}")
        self.state = state
        self.batches_per_commit = batches_per_commit
        self._batches = 0
        self._due = False

    def on_train_begin(self, logs=None):
        """Starts counting batches anew."""
        self._batches, self._due = 0, False

    def on_train_batch_end(self, batch, logs=None):
        """Counts the batch; every `batches_per_commit`-th makes a commit due."""
        self._batches += 1
        if self._batches >= self.batches_per_commit:
            self._batches, self._due = 0, True

    def on_train_batch_begin(self, batch, logs=None):
        """Commits the state when a commit is due.

        Raises:
            HostsUpdatedInterrupt: on every rank together, when the job is to re-form.
        """
        if self._due:
            self._due = False
            self.state.commit()


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keeps state.batch = the batches completed in the current epoch.

    Args:
        state (State): its `batch` attribute is updated.
    """

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_train_batch_end(self, batch, logs=None):
        """Sets state.batch to the batches completed in this epoch."""
        self.state.batch = batch + 1

    def on_epoch_end(self, epoch, logs=None):
        """Sets state.batch back to 0 for the next epoch."""
        self.state.batch = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Keeps state.epoch = the epochs completed, whether fit() was called with
    initial_epoch=state.epoch or with epochs=total - state.epoch.

    Args:
        state (State): its `epoch` attribute is updated.
    """

    def __init__(self, state):
        super().__init__()
        self.state = state
        self._offset = None

    def on_train_begin(self, logs=None):
        """Forgets the epoch offset of an earlier fit()."""
        self._offset = None

    def on_epoch_begin(self, epoch, logs=None):
        """Notes how Keras' epoch numbers relate to state.epoch, at fit()'s first epoch."""
        if self._offset is None:
            self._offset = self.state.epoch - epoch

    def on_epoch_end(self, epoch, logs=None):
        """Sets state.epoch to the epochs completed."""
        self.state.epoch = epoch + self._offset + 1
