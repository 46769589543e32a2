"""DistributedOptimizer(..., sharding_stage=1|2) for optax: each rank keeps the
wrapped GradientTransformation's state for its rows of every parameter only
(ZeRO stages 1 and 2; Note [Sharding by rows] in hvdlite/common/sharding.py).

Note [Sharded optax state]
~~~~~~~~~~~~~~~~~~~~~~~~~~
`init(params)` runs the wrapped `init` on this rank's rows of every leaf (a
0-d leaf as one row), so the state is 1/N of the unsharded one. `update`
reduce-scatters every gradient leaf in one crossing (the core fuses them as
it fuses allreduces), runs the wrapped `update` on the rows (and on the rows
of `params`, for weight decay), and allgathers the rows of the updates back
into full-shaped updates in a second crossing, so `optax.apply_updates`
stays the user's call. Rows depend only on the shapes and on the set's size
and rank, all known when a step is traced, so a jitted step has static
shapes.

optax states have no parameter names: which state leaves hold rows of which
parameter is found by shapes. The wrapped `init` is traced (jax.eval_shape,
nothing allocated) on a probe whose parameter i has PROBE_ROWS + i rows; a
state leaf with that first dimension and the parameter's other dimensions
holds rows of parameter i, every other leaf (a step count) is the same on
every rank and kept whole. That assumes what every optax transformation does:
the state's tree structure does not depend on the parameters' shapes.

Stages 1 and 2 run the same code here: `update` receives the gradients and
never keeps the full ones past their reducescatter, and inside jax.jit XLA
frees each full gradient once its reducescatter has read it, whichever the
stage. What the caller's own code holds (the gradients pytree of an eager
step, optax.MultiSteps' full-sized accumulator with backward_passes_per_step
> 1) is the same at both stages.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax

from hvdlite.common import late_joiners
from hvdlite.common.ops import ReduceOp
from hvdlite.common.sharding import ELEMENTWISE_REFUSED, ShardLayout, rows_of
from hvdlite.jax import collectives
from hvdlite.jax.functions import _leaves_and_names
from hvdlite.numpy import sharding

PROBE_ROWS = 1_000_000_007  # first dimension of the probe's parameter 0: no real one has it

# optax builders whose update of an element depends on more than that
# element (their update functions' qualified names start with these), with why.
REFUSED = {
    "scale_by_trust_ratio": ELEMENTWISE_REFUSED["LAMB"] + " (optax.lamb, optax.lars)",
    "scale_by_factored_rms": ELEMENTWISE_REFUSED["Adafactor"] + " (optax.adafactor)",
    "scale_by_param_block_rms": "it scales by the RMS of the whole parameter (optax.adafactor)",
    "scale_by_param_block_norm": "it scales by the norm of the whole parameter",
    "clip_by_block_rms": "it clips by the RMS of the whole update of each parameter",
    "scale_by_novograd": "it normalizes by the norm of each whole gradient (optax.novograd)",
    "scale_by_lbfgs": ELEMENTWISE_REFUSED["LBFGS"] + " (optax.lbfgs)",
    "scale_by_muon": ELEMENTWISE_REFUSED["Muon"] + " (optax.contrib.muon)",
    "adaptive_grad_clip": "it clips by the norms of whole parameters and gradients",
    "normalize_by_update_norm": "it divides by the norm of the whole update",
    "scale_by_sm3": "it keeps one second moment per row and per column of the whole parameter",
    "clip_by_global_norm": "it would see the norm of this rank's rows only: put "
                           "hvdlite.jax.sharded_clip_by_global_norm(max_norm) in the chain instead, "
                           "which gives the unsharded result",
}

# (process set, name) of the sharded update being traced or run now: the
# wrapped transformation sees rows only, and sharded_clip_by_global_norm
# sums its squares over this set.
_active = []


def _builders(function, seen):
    """The optax builders whose update functions `function` reaches, read off
    the closures of optax.chain, with_extra_args_support, masked, ..."""
    if id(function) in seen:
        return
    seen.add(id(function))
    if isinstance(function, (tuple, list)):
        for item in function:
            yield from _builders(item, seen)
    elif isinstance(function, dict):
        for item in function.values():
            yield from _builders(item, seen)
    elif callable(function) and hasattr(function, "__qualname__"):
        yield function.__qualname__.split(".<locals>")[0]
        for cell in getattr(function, "__closure__", None) or ():
            try:
                contents = cell.cell_contents
            except ValueError:  # a cell not yet filled
                continue
            yield from _builders(contents, seen)


def refuse_unshardable(optimizer):
    """ValueError, naming the transformation and why, for a chain that holds a
    transformation that is not elementwise (Note [Sharding by rows])."""
    for builder in _builders(optimizer.update, set()):
        reason = REFUSED.get(builder)
        if reason:
            raise ValueError(
                f"hvdlite.jax.DistributedOptimizer(sharding_stage>0): optax.{builder} cannot be "
                f"sharded: {reason}; each rank holds only its rows of each parameter (Note "
                f"[Sharding by rows] in hvdlite/common/sharding.py). Use sharding_stage=0 for "
                f"it, or elementwise transformations (sgd, adam, adamw, rmsprop, adagrad)")


def sharded_clip_by_global_norm(max_norm):
    """optax.clip_by_global_norm for a sharded DistributedOptimizer's chain.

    Inside `DistributedOptimizer(..., sharding_stage=1|2)` the wrapped chain sees
    this rank's rows of the reduced gradients; this transformation sums the squares
    of every rank's rows (one allreduce of a scalar over the optimizer's process set)
    and clips by that global norm, so the result is that of `optax.clip_by_global_norm`
    on the unsharded reduced gradients. Elsewhere it is `optax.clip_by_global_norm`.

    Args:
        max_norm (float): the largest global norm of an update.

    Returns:
        optax.GradientTransformation: stateless.

    Example:
        ```python
        tx = hvd.DistributedOptimizer(
            optax.chain(hvd.sharded_clip_by_global_norm(1.0), optax.adamw(1e-3)),
            sharding_stage=1)
        ```
    """
    def update(updates, state, params=None):
        del params
        leaves = jax.tree_util.tree_leaves(updates)
        squares = jnp.asarray(sum((jnp.sum(jnp.real(jnp.conj(u) * u)) for u in leaves), 0.0))
        if _active:
            process_set, name = _active[-1]
            squares = collectives.allreduce(squares.reshape(1), name=f"{name}.global_norm",
                                            op=ReduceOp.Sum, process_set=process_set)[0]
        norm = jnp.sqrt(squares)
        trigger = norm < max_norm  # optax.clip_by_global_norm's arithmetic, to the bit
        return jax.tree_util.tree_map(
            lambda u: jax.lax.select(trigger, u, (u / norm.astype(u.dtype)) * max_norm),
            updates), state

    return optax.GradientTransformation(optax.init_empty_state, update)


class ShardedGradientTransformation(optax.GradientTransformationExtraArgs):
    """What `DistributedOptimizer(..., sharding_stage=1|2)` returns: an optax
    GradientTransformation (`init`, `update`) whose state holds this rank's rows only,
    plus the checkpoint helpers below. Every helper takes `params` (or anything of their
    shapes and dtypes, e.g. `jax.ShapeDtypeStruct`s), since the rows follow from them.

    Memory per rank: the wrapped state of 1/N of the rows; the gradients only until their
    reducescatter has read them (stages 1 and 2 alike, Note [Sharded optax state]).
    """

    def consolidated_state(self, state, params):
        """The whole state, as the unsharded `DistributedOptimizer` of the same optimizer
        and `backward_passes_per_step` would hold it (so `optimizer.init(params)`'s shapes),
        on every rank of the set: one allgather per sharded leaf. A collective: every rank
        of the set calls it (as it does shard_state and load_shards, which check that
        every rank passes the same parameters).

        Args:
            state: this rank's state (from `init` / `update`).
            params: the parameters (or their shapes).

        Returns:
            pytree: the consolidated state (JAX arrays); save it on one rank as a
                checkpoint, load it into any world size with `shard_state`.
        """
        return self._sharding.consolidated(state, params)

    def shard_state(self, whole, params):
        """This rank's state from a whole one (`consolidated_state` of any world size, or
        the state of the unsharded `DistributedOptimizer` of the same optimizer and
        `backward_passes_per_step`; with one pass, the wrapped optax optimizer's own).

        Args:
            whole: the whole state.
            params: the parameters (or their shapes).

        Returns:
            pytree: a state for `update` on this rank.

        Raises:
            ValueError: when `whole` is not a state of this optimizer for these parameters.
        """
        return self._sharding.shard(whole, params)

    def save_shard(self, path, state, params):
        """Writes this rank's rows (and the state kept whole) to `path`, one file per
        rank (no collective): every rank's file of one save together load into any
        world size with `load_shards`.

        Args:
            path (str): this rank's file.
            state: this rank's state.
            params: the parameters (or their shapes).
        """
        self._sharding.save(path, state, params)

    def load_shards(self, paths, params):
        """This rank's state from every rank's `save_shard` file of one save (of any
        world size).

        Args:
            paths (list[str]): every rank's file, in any order.
            params: the parameters (or their shapes).

        Returns:
            pytree: a state for `update` on this rank.

        Raises:
            ValueError: when the files are not every rank's of one save of this optimizer.
        """
        return self._sharding.load(paths, params)


class Sharding:
    """The sharded optimizer's settings and its steps (Note [Sharded optax
    state]); ShardedGradientTransformation's helpers call it."""

    def __init__(self, optimizer, stage, op, compression, prescale, postscale, passes,
                 name, process_set):
        self.optimizer = optax.with_extra_args_support(optimizer)
        self.stage, self.op, self.compression = stage, op, compression
        self.prescale, self.postscale = prescale, postscale
        self.passes, self.name, self.process_set = passes, name, process_set

    # -- the layout of a params (or gradients) pytree --------------------
    def layout(self, tree):
        """(leaves, paths, treedef, ShardLayout) of a pytree of parameters; a
        leaf's path in the tree (jax.tree_util.keystr) names it in the state
        helpers, whatever the optimizer's name."""
        leaves, names, treedef = _leaves_and_names(tree, "")
        layout = ShardLayout([np.shape(leaf) for leaf in leaves], self.process_set.size(),
                             self.process_set.rank())
        return leaves, names, treedef, layout

    @staticmethod
    def rows(leaves, layout):
        """This rank's rows of each leaf (a 0-d leaf as one row), sliced with
        static bounds: the same code eagerly and traced."""
        out = []
        for leaf, shape, (start, count) in zip(leaves, layout.shapes, layout.ranges):
            flat = jnp.reshape(leaf, (rows_of(shape),) + shape[1:])
            out.append(jax.lax.slice_in_dim(flat, start, start + count, axis=0))
        return out

    def check_parameters(self, leaves, names):
        # Host collective, at trace time inside jit: shapes and dtypes are static.
        sharding.check_same_parameters(
            [(n, np.shape(leaf), jnp.result_type(leaf)) for n, leaf in zip(names, leaves)],
            "hvdlite.jax.DistributedOptimizer", self.process_set)

    # -- init and update -------------------------------------------------
    def init(self, params):
        leaves, names, treedef, layout = self.layout(params)
        if not late_joiners.alone():
            # A worker joining a running elastic job may not submit collectives
            # before run() (Note [Late joiners]); JaxState.sync() checks there
            # (shard_state) and replaces this state (Note [Sharded optax state
            # in JaxState] in hvdlite/jax/elastic.py).
            self.check_parameters(leaves, names)
        rows = self.rows(leaves, layout)
        return self.optimizer.init(jax.tree_util.tree_unflatten(treedef, rows))

    def update(self, grads, state, params=None, **extra_args):
        leaves, paths, treedef, layout = self.layout(grads)
        rows = collectives.reducescatter_many(
            leaves, [self.name + p for p in paths], self.op, self.prescale, self.postscale,
            self.process_set, self.compression)
        param_rows = None
        if params is not None:
            param_rows = jax.tree_util.tree_unflatten(
                treedef, self.rows(jax.tree_util.tree_leaves(params), layout))
        _active.append((self.process_set, self.name))
        try:
            updates, state = self.optimizer.update(jax.tree_util.tree_unflatten(treedef, rows),
                                                   state, param_rows, **extra_args)
        finally:
            _active.pop()
        gathered = collectives.allgather_many(jax.tree_util.tree_leaves(updates),
                                              [f"{self.name}.update{p}" for p in paths],
                                              [rows_of(s) for s in layout.shapes], self.process_set)
        full = [jnp.reshape(g, s) for g, s in zip(gathered, layout.shapes)]
        return jax.tree_util.tree_unflatten(treedef, full), state

    # -- state: rows <-> whole (Note [Sharded optax state]) --------------
    def inner(self, state):
        """(the wrapped optimizer's state, a function putting one back):
        with backward_passes_per_step > 1 it sits in optax.MultiSteps' state,
        next to the accumulated gradients, which each rank keeps whole."""
        if self.passes == 1:
            return state, lambda inner: inner
        return state.inner_opt_state, lambda inner: state._replace(inner_opt_state=inner)

    def roles(self, leaves, treedef, layout):
        """For each leaf of the wrapped state, the index of the parameter whose
        rows it holds, or None (found on a probe: Note [Sharded optax state]);
        and the state's tree structure."""
        probe = [jax.ShapeDtypeStruct((PROBE_ROWS + i,) + shape[1:], jnp.result_type(leaf))
                 for i, (leaf, shape) in enumerate(zip(leaves, layout.shapes))]
        shapes, state_treedef = jax.tree_util.tree_flatten(
            jax.eval_shape(self.optimizer.init, jax.tree_util.tree_unflatten(treedef, probe)))
        roles = []
        for value in shapes:
            shape = tuple(value.shape)
            index = shape[0] - PROBE_ROWS if shape else -1
            owned = 0 <= index < len(leaves) and shape[1:] == layout.shapes[index][1:]
            roles.append(index if owned else None)
        return roles, state_treedef

    def describe(self, params):
        """(names, layout, roles, the state's tree structure) for `params`."""
        leaves, names, treedef, layout = self.layout(params)
        roles, state_treedef = self.roles(leaves, treedef, layout)
        return names, layout, roles, state_treedef

    @staticmethod
    def by_parameter(leaves, roles, names):
        """{parameter name: {state leaf index: value}} of the leaves that hold
        rows (hvdlite.numpy.sharding's form), and {index: value} of the others."""
        rows, kept = {}, {}
        for index, (value, role) in enumerate(zip(leaves, roles)):
            target = rows.setdefault(names[role], {}) if role is not None else kept
            target[str(index)] = value
        return rows, kept

    @staticmethod
    def from_parameters(rows, kept, roles, names, state_treedef):
        """The state whose leaves are `rows`' and `kept`'s (by_parameter's inverse)."""
        leaves = [rows[names[role]][str(index)] if role is not None else kept[str(index)]
                  for index, role in enumerate(roles)]
        return jax.tree_util.tree_unflatten(state_treedef, [jnp.asarray(v) for v in leaves])

    def consolidated(self, state, params):
        names, layout, roles, state_treedef = self.describe(params)
        inner, put_back = self.inner(state)
        rows, kept = self.by_parameter(self.state_leaves(inner, state_treedef, "consolidated_state"),
                                       roles, names)
        rows = {name: {k: np.asarray(v) for k, v in values.items()} for name, values in rows.items()}
        whole = sharding.full_state(rows, names, layout, self.process_set)
        return put_back(self.from_parameters(whole, kept, roles, names, state_treedef))

    def shard(self, whole_state, params):
        leaves, names, _, _ = self.layout(params)
        self.check_parameters(leaves, names)
        names, layout, roles, state_treedef = self.describe(params)
        inner, put_back = self.inner(whole_state)
        leaves = self.state_leaves(inner, state_treedef, "shard_state")
        for index, (value, role) in enumerate(zip(leaves, roles)):
            if role is not None and tuple(np.shape(value)) != layout.shapes[role]:
                raise ValueError(
                    f"shard_state: state leaf {index} (rows of parameter {names[role]!r}) has shape "
                    f"{tuple(np.shape(value))}, but that parameter is {layout.shapes[role]}: pass "
                    f"the whole state of this optimizer for these parameters (consolidated_state's, "
                    f"or the unsharded optimizer's)")
        whole, kept = self.by_parameter(leaves, roles, names)
        mine = sharding.rows_of_state(whole, names, layout)
        return put_back(self.from_parameters(mine, kept, roles, names, state_treedef))

    def save(self, path, state, params):
        names, layout, roles, state_treedef = self.describe(params)
        inner, put_back = self.inner(state)
        leaves = [np.asarray(v) for v in self.state_leaves(inner, state_treedef, "save_shard")]
        rows, kept = self.by_parameter(leaves, roles, names)
        outer = jax.tree_util.tree_map(np.asarray, put_back(None)) if self.passes > 1 else None
        sharding.save_shard(path, rows, names, layout, self.stage,
                            extra={"kept": kept, "outer": outer})

    def load(self, paths, params):
        names, layout, roles, state_treedef = self.describe(params)
        whole, extra = sharding.load_shards(paths)
        for index, role in enumerate(roles):
            if str(index) not in (extra["kept"] if role is None else whole.get(names[role], {})):
                raise ValueError(f"load_shards: {list(paths)} hold no state leaf {index}"
                                 + (f" of parameter {names[role]!r}" if role is not None else "")
                                 + ": were they saved by this optimizer for these parameters?")
        inner = self.from_parameters(whole, extra["kept"], roles, names, state_treedef)
        whole_state = inner if self.passes == 1 else extra["outer"]._replace(inner_opt_state=inner)
        return self.shard(whole_state, params)

    @staticmethod
    def state_leaves(inner, state_treedef, what):
        leaves, treedef = jax.tree_util.tree_flatten(inner)
        if treedef != state_treedef:
            raise ValueError(f"{what}: the state's structure {treedef} is not the wrapped "
                             f"optimizer's {state_treedef}: pass the state of this optimizer")
        return leaves


def sharded_optimizer(optimizer, stage, op, compression, prescale, postscale, passes,
                      average_passes, name, process_set):
    """DistributedOptimizer(..., sharding_stage=stage) (hvdlite/jax/optimizer.py
    checks the arguments first): a ShardedGradientTransformation."""
    if op not in (ReduceOp.Average, ReduceOp.Sum):
        raise ValueError(f"hvdlite.jax.DistributedOptimizer(sharding_stage={stage}) reduce-scatters "
                         f"gradients with op=Average or op=Sum, got op={op.name}")
    refuse_unshardable(optimizer)
    sharded = Sharding(optimizer, stage, op, compression, prescale, postscale, passes, name,
                       process_set)
    if passes == 1:
        tx = ShardedGradientTransformation(sharded.init, sharded.update)
    else:
        # Accumulate the full local gradients as the unsharded optimizer does,
        # reduce-scatter on the last pass only (optax.MultiSteps runs the
        # sharded update inside the lax.cond of that pass).
        steps = optax.MultiSteps(ShardedGradientTransformation(sharded.init, sharded.update),
                                 every_k_schedule=passes, use_grad_mean=average_passes)
        inner = steps.gradient_transformation()
        tx = ShardedGradientTransformation(inner.init, inner.update)
    tx._sharding = sharded
    return tx
