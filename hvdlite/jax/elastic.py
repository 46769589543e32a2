"""Elastic training for JAX: `hvdlite.jax.elastic` (see
hvdlite/common/elastic.py for how it works).

    tx = hvd.DistributedOptimizer(optax.adamw(1e-3), sharding_stage=1)
    state = hvd.elastic.JaxState(params=params, opt_state=tx.init(params), optimizer=tx,
                                 epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        while state.batch < batches:
            state.params, state.opt_state = step(state.params, state.opt_state, ...)
            state.batch += 1
            state.commit()

JAX arrays are immutable: the training function assigns the new pytrees to
state.params and state.opt_state, and the state commits whatever they hold.

Note [Sharded optax state in JaxState]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A sharded optimizer's opt_state holds this rank's rows only (Note [Sharded
optax state] in sharded_optimizer.py); after a re-form at another size the
rows are split differently and a lost rank's rows are gone. So a commit
keeps, in host memory, the WHOLE state (consolidated_state: as much as an
unsharded commit) and this rank's rows; restore() puts the rows back (no
collective: it runs while a peer may be lost, at the size of the commit),
and sync() (which run() calls after every re-form, removals included:
sync_after_removal) gives every rank rank 0's whole and re-shards it for
the set as it is then (shard_state). The first save, at construction,
gathers the whole (a collective: every worker of the first round builds its
state at the same place), except in a worker that joins a running job,
which may not submit collectives before run() (Note [Late joiners]) and
gets the whole from the sync. Rank 0 of every later round survived an
earlier one, so it holds a whole.
"""

import jax
import jax.numpy as jnp
import numpy as np

from hvdlite.common import basics, late_joiners
from hvdlite.common.elastic import State, reset, run_fn_translating
from hvdlite.common.elastic import ObjectState as _ObjectState
from hvdlite.common.exceptions import HvdliteInternalError
from hvdlite.jax.ffi import hvdlite_error
from hvdlite.numpy import collectives as host
from hvdlite.numpy.elastic import ObjectState, bcast_object

__all__ = ["run", "State", "ObjectState", "JaxState"]


class _Slot:
    """The shape and dtype of a leaf a rank is about to receive."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype


class _Saved:
    """A pytree committed to host memory: NumPy copies of its leaves, and
    where each leaf was (its jax sharding; None for a leaf that was no jax
    array), to put it back there."""

    def __init__(self, tree, places=None):
        leaves, self.treedef = jax.tree_util.tree_flatten(tree)
        self.values = [np.array(leaf) for leaf in leaves]
        if places is None or len(places) != len(leaves):
            places = [leaf.sharding if isinstance(leaf, jax.Array) else None for leaf in leaves]
        self.places = places

    def host_tree(self):
        return jax.tree_util.tree_unflatten(self.treedef, self.values)

    def tree(self):
        """The committed pytree, its leaves copied back where they were."""
        return jax.tree_util.tree_unflatten(
            self.treedef, [jax.device_put(v, p) if p is not None else v.copy()
                           for v, p in zip(self.values, self.places)])


def _broadcast_host_tree(tree, name):
    """Rank 0's pytree of NumPy arrays, on every rank (the others pass None):
    its structure pickled (small: shapes and dtypes), then its arrays
    broadcast, so that a rank that joined needs no tree of its own."""
    is_root = basics.rank() == 0
    structure = (jax.tree_util.tree_map(lambda v: _Slot(v.shape, v.dtype), tree)
                 if is_root else None)
    structure = bcast_object(structure, f"{name}.structure")
    slots, treedef = jax.tree_util.tree_flatten(structure)
    values = (jax.tree_util.tree_leaves(tree) if is_root
              else [np.empty(slot.shape, slot.dtype) for slot in slots])
    handles = [host.broadcast_async(value, 0, f"{name}.{i}") for i, value in enumerate(values)]
    return jax.tree_util.tree_unflatten(treedef, [host.synchronize(h) for h in handles])


class JaxState(_ObjectState):
    """The elastic state of a JAX training loop: parameters, optimizer state and attributes.

    `commit()` (and `save()`) copies `state.params`, `state.opt_state` and the keyword
    attributes to host memory; `restore()` puts the last commit back, the arrays as JAX
    arrays on the devices they were on; `sync()` gives every rank rank 0's committed state.
    With a sharded `optimizer` (`hvd.DistributedOptimizer(tx, sharding_stage=1|2)`) the
    commit keeps the whole optimizer state (as much host memory as an unsharded commit, plus
    this rank's rows), and `sync()` re-shards it for the job's size and rank after a
    re-form (Note [Sharded optax state in JaxState]).

    Args:
        params: a pytree of arrays, e.g. the model's parameters.
        opt_state: a pytree of arrays, e.g. the optax optimizer's state.
        optimizer (optax.GradientTransformation | None): needed only when it is sharded
            (made by `DistributedOptimizer(..., sharding_stage=1|2)`); otherwise unused.
        **kwargs: picklable values kept as attributes (state.epoch, state.batch, ...).

    Example:
        ```python
        state = hvd.elastic.JaxState(params=params, opt_state=tx.init(params),
                                     optimizer=tx, epoch=0)
        ```
    """

    def __init__(self, params=None, opt_state=None, optimizer=None, **kwargs):
        self.params, self.opt_state, self.optimizer = params, opt_state, optimizer
        self._sharded = optimizer if hasattr(optimizer, "consolidated_state") else None
        # Rows move between ranks whenever the size changes.
        self.sync_after_removal = self._sharded is not None
        self._whole = None
        super().__init__(bcast_object, basics.rank, **kwargs)
        self._save_trees(whole=not late_joiners.alone())

    def save(self):
        """Copies params, opt_state (the whole state, when sharded: a collective) and the
        attributes to host memory: the state `restore()` returns to.
        """
        self._save_trees(whole=True)
        super().save()

    def restore(self):
        """Puts the last `save()` (or commit) back: params and opt_state as JAX arrays on
        the devices they were on, and the attributes. No collective: a sharded opt_state
        gets this rank's rows of the commit back, and `sync()` re-shards them when the
        job re-formed at another size.
        """
        self.params = self._saved_params.tree()
        self.opt_state = self._saved_opt_state.tree()
        super().restore()

    def sync(self):
        """Gives every rank rank 0's committed params, opt_state and attributes (a
        collective; a sharded opt_state is re-sharded for the job's size and rank), then
        keeps them as the commit.
        """
        is_root = basics.rank() == 0
        params = _broadcast_host_tree(self._saved_params.host_tree() if is_root else None,
                                      "elastic.params")
        self._saved_params = _Saved(params, self._saved_params.places)
        self.params = self._saved_params.tree()
        if self._sharded is None:
            opt_state = _broadcast_host_tree(
                self._saved_opt_state.host_tree() if is_root else None, "elastic.opt_state")
            self._saved_opt_state = _Saved(opt_state, self._saved_opt_state.places)
            self.opt_state = self._saved_opt_state.tree()
        else:
            self._whole = _broadcast_host_tree(self._whole if is_root else None,
                                               "elastic.whole_opt_state")
            # shard_state also checks that every rank has the same parameters.
            self.opt_state = jax.tree_util.tree_map(
                jnp.asarray, self._sharded.shard_state(self._whole, self.params))
            self._saved_opt_state = _Saved(self.opt_state)
        super().sync()

    def reset(self):
        """Clears JAX's caches of traced and compiled functions (`jax.clear_caches()`), so
        that a jitted step traces again for the job's new size and rank."""
        # What a step read from hvd.size() or hvd.rank() while it was traced
        # (a sharded optimizer's rows among it) belongs to the old job.
        jax.clear_caches()

    def _save_trees(self, whole):
        self._saved_params = _Saved(self.params)
        self._saved_opt_state = _Saved(self.opt_state)  # this rank's rows when sharded
        if self._sharded is not None and whole:
            consolidated = self._sharded.consolidated_state(self.opt_state, self.params)
            self._whole = jax.tree_util.tree_map(np.asarray, consolidated)


def run(func):
    """Decorates a training function `func(state, ...)` to run elastically: `hvd.elastic.run`.

    hvdlite.common.elastic.run's loop (sync, call, restore and re-form after a lost peer
    or a change of hosts); a collective that failed inside a jitted step, which JAX
    raises as its own runtime error, counts as the `HvdliteInternalError` it carries.

    Args:
        func (Callable): `func(state, *args, **kwargs)`; commits with `state.commit()`.

    Returns:
        Callable: called as `wrapped(state, *args, **kwargs)`: syncs `state`, calls `func`,
            restores and retries after a failure or a change of hosts, and returns what
            `func` returns once it completes.
    """

    return run_fn_translating(func, reset, _core_failure)


def _core_failure(error):
    """The HvdliteInternalError behind `error`: looked up by its message (the
    custom call's failure), or found among its causes (the io_callback's)."""
    failure = hvdlite_error(error)
    while failure is None and error is not None:
        if isinstance(error, HvdliteInternalError):
            return error
        error = error.__cause__ or error.__context__
    return failure
