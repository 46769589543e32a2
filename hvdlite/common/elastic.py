"""Elastic training, shared by every binding: the state a job commits, and
the `run` loop that restores it after a failure and re-forms the job.

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...one step...
            state.commit()

    state = hvd.elastic.TorchState(model, optimizer, epoch=0)
    train(state)

On HvdliteInternalError (a rank was lost mid-collective) every surviving
rank restores its last commit, re-initialises hvdlite in the next round the
driver publishes, receives rank 0's committed state (sync) and calls the
function again. On HostsUpdatedInterrupt (raised by commit() on every rank
at once when the driver published a new round) the ranks re-form the same
way from the commit they just made. Each binding's `elastic` module supplies
how to broadcast its objects and what its State subclasses save.

A worker that joins a running job is alone until it enters run(), where
the others are: its collectives there complete without them, or fail it
alone (Note [Late joiners] in late_joiners.py).
"""
import abc
import copy
import functools

from hvdlite.common import basics, membership, startup
from hvdlite.common.exceptions import HostsUpdatedInterrupt, HvdliteInternalError


class State(abc.ABC):
    """What an elastic job commits and restores; each binding's states derive from it.

    Subclasses define `save()`, `restore()` and `sync()`; `commit()` saves and then checks
    for host changes.

    Args:
        bcast_object (Callable): `bcast_object(obj, name)` broadcasts a Python object from
            rank 0 in the binding's way.
        get_rank (Callable): returns this process's rank.
    """

    # When only workers left, the survivors all hold the commit they just made
    # and need no sync, unless part of the state is spread over the ranks
    # (an ElasticSampler's processed samples).
    sync_after_removal = False

    # Horovod's State keeps the driver's host notifications in a queue of
    # this name, and Horovod's own elastic test scripts wait on
    # `state._host_messages.empty()` for a host change they scheduled (after
    # resetting `state._last_updated_timestamp`). Here the notification is a
    # round newer than this worker's in the store.
    _last_updated_timestamp = 0

    @property
    def _host_messages(self):
        return _NewerRound()

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._get_rank = get_rank
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Adds functions called (without arguments) after every reset, e.g. to
        scale the learning rate to the new number of ranks.

        Args:
            callbacks (Iterable[Callable[[], None]]): called in order, after those added before.
        """
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        """Called by `run` after the job re-formed at a new size: `reset()`, then each
        callback given to `register_reset_callbacks()`, in order.
        """
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state as the one to return to after a failure, then
        raises HostsUpdatedInterrupt on every rank if the job is to re-form."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank together when the
        driver published a new round. Rank 0 asks the driver, and the answer
        is broadcast, so that no rank goes on alone into a collective the
        others left. Does nothing outside an elastic job.

        Raises:
            HostsUpdatedInterrupt: when hosts were added or removed (`skip_sync`
                True when they were only removed).
        """
        if not membership.enabled():
            return
        answer = membership.newer_round() if self._get_rank() == 0 else None
        updated, only_removed = self._bcast_object(answer, "elastic.host_updates")
        if updated:
            raise HostsUpdatedInterrupt(skip_sync=only_removed)

    @abc.abstractmethod
    def save(self):
        """Keeps a copy of the state to restore()."""

    @abc.abstractmethod
    def restore(self):
        """Returns to the last save()."""

    @abc.abstractmethod
    def sync(self):
        """Makes every rank's saved and current state rank 0's."""

    def reset(self):
        """Called after a reset, before the callbacks; subclasses may override."""


class _NewerRound:
    """State._host_messages: as much of Horovod's queue as its scripts use."""

    def empty(self):
        return not membership.newer_round()[0]


class ObjectState(State):
    """Keyword arguments as attributes (state.epoch, state.batch, ...), saved
    by deep copy and synced from rank 0 by pickling."""

    def __init__(self, bcast_object, get_rank, **kwargs):
        self._saved_state = copy.deepcopy(kwargs)
        super().__init__(bcast_object, get_rank)
        self._set_attrs()

    def save(self):
        self._saved_state = {name: copy.deepcopy(getattr(self, name))
                             for name in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state, "elastic.object_state")
            self._set_attrs()

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            setattr(self, name, copy.deepcopy(value))



class VariablesState(ObjectState):
    """Framework variables saved as NumPy copies and synced from rank 0, plus
    keyword attributes. `variables()` lists them, asked each time: some are
    created late (optimizer slots). `to_numpy(variable)` copies one out;
    `broadcast_variables(variables)` assigns rank 0's values on every rank."""

    def __init__(self, variables, to_numpy, broadcast_variables, bcast_object, get_rank,
                 **kwargs):
        self._variables = variables
        self._to_numpy = to_numpy
        self._broadcast_variables = broadcast_variables
        self._saved_values = None
        super().__init__(bcast_object, get_rank, **kwargs)
        self._save_values()

    def save(self):
        self._save_values()
        super().save()

    def restore(self):
        for variable, value in zip(self._variables(), self._saved_values):
            variable.assign(value)
        super().restore()

    def sync(self):
        self._broadcast_variables(self._variables())
        self._save_values()
        super().sync()

    def _save_values(self):
        self._saved_values = [self._to_numpy(variable) for variable in self._variables()]


class KerasModelState(VariablesState):
    """A Keras model and its optimizer (default: the model's), plus keyword
    attributes, for Keras 3 on any backend and tf.keras 2; the binding says
    how a variable becomes NumPy and how variables are broadcast
    (hvdlite.tensorflow's TensorFlowKerasState, hvdlite.keras' KerasState).
    The optimizer is built on first use, so that a new rank, whose optimizer
    has not stepped yet, and the survivors sync the same variables."""

    def __init__(self, model, optimizer, to_numpy, broadcast_variables, bcast_object, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        super().__init__(self._model_and_optimizer_variables, to_numpy, broadcast_variables,
                         bcast_object, basics.rank, **kwargs)

    def reset(self):
        """Drops the compiled train step, so that Keras compiles it for the job's new size."""
        # Keras compiled (traced) its train step at the old size, e.g. the
        # scale factors of sparse gradients: compile it again.
        if hasattr(self.model, "train_function"):
            self.model.train_function = None

    def _model_and_optimizer_variables(self):
        # Inside fit, Keras' JAX backend keeps the state outside the
        # variables (it empties them); bring it back before reading or
        # assigning, so that the next step also starts from what is assigned.
        sync = getattr(self.model, "jax_state_sync", None)
        if sync is not None:
            sync()
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


def run_fn(func, reset):
    """Wraps `func(state, ...)` in the elastic loop; `reset()` re-initialises
    hvdlite (shutdown, then init in the next round)."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        membership.entered_run()
        try:
            while True:
                try:
                    if not skip_sync:
                        state.sync()
                    return func(state, *args, **kwargs)
                except HvdliteInternalError as error:
                    membership.note_failure(error)
                    state.restore()
                    skip_sync = False
                except HostsUpdatedInterrupt as interrupt:
                    skip_sync = interrupt.skip_sync and not state.sync_after_removal
                # A rank lost during the re-rendezvous itself fails that init
                # too; init() then joins the round after (basics._init_job).
                reset()
                state.on_reset()
        finally:
            membership.left_run()

    return wrapper


def run_fn_translating(func, reset, core_failure):
    """run_fn for a binding whose compiled steps raise the framework's own
    error for a failed collective (XLA's runtime error, whose type varies by
    version): `core_failure(error)` gives the HvdliteInternalError it carries,
    or None for an error of the user's, which propagates as it is."""

    @functools.wraps(func)
    def translated(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except HvdliteInternalError:
            raise
        except Exception as error:  # noqa: BLE001 - re-raised unless it carries a core failure
            failure = core_failure(error)
            if failure is None:
                raise
            raise failure from error

    return run_fn(translated, reset)


def reset():
    """The reset of run_fn for bindings without their own: shutdown() and
    init() (which joins the next round in an elastic job)."""
    basics.shutdown()
    startup.init()


def run(func):
    """Decorates a training function `func(state, ...)` to run elastically: `hvd.elastic.run`.

    Each call first syncs `state` from rank 0, then runs `func`. When a peer is lost
    (`HvdliteInternalError`), every rank restores the last commit, hvdlite re-forms at the
    new size and `func` runs again from there; when hosts were added or removed
    (`HostsUpdatedInterrupt` from `state.commit()`), it re-forms keeping the current state.

    Args:
        func (Callable): `func(state, *args, **kwargs)`; commits with `state.commit()`.

    Returns:
        Callable: the wrapped function; it returns what `func` returns once it finishes.

    Example:
        ```python
        @hvd.elastic.run
        def train(state):
            for state.epoch in range(state.epoch, epochs):
                train_one_epoch()
                state.commit()

        train(hvd.elastic.TorchState(model, optimizer, epoch=0))
        ```
    """
    return run_fn(func, reset)
