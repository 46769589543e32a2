"""Keras 3's sharded optimizer (ZeRO stages 1 and 2):
`hvdlite.keras.DistributedOptimizer(opt, sharding_stage=1|2)`, on the
TensorFlow, torch and JAX backends, eagerly and in Keras' compiled train step.

Note [Keras shard variables]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Keras variables cannot alias a slice of another, so each rank keeps one
shard variable per parameter, shaped like its rows (Note [Sharding by rows]
in hvdlite/common/sharding.py), and the wrapped optimizer runs on those:
the optimizer is built on the model's variables (so Keras' own bookkeeping,
its gradient accumulators and, on JAX, the stateless step's mapping of
trainable variables stay the unsharded ones), but every per-parameter state
variable it asks for (momentum, velocity, ...) is created with the rows'
shape, and the shard variable of a parameter answers to that parameter's
key (_var_key), so the optimizer's update of a shard finds its state. A step:

  1. Keras accumulates the local gradients as the unsharded optimizer does
     (backward_passes_per_step is Keras' gradient_accumulation_steps);
  2. on an update step, _clip_gradients reduce-scatters each gradient (its
     rows come back) and clips by norm across shards;
  3. _backend_update_step copies each parameter's rows into its shard
     variable, applies weight decay and the optimizer's update to the shard,
     allgathers the updated rows and assigns them to the parameter.

The shard variables are scratch: their value is copied from the parameter
at every step, so whatever changes the parameters between steps
(broadcasts, set_weights, a restore) is seen. They are no optimizer
variables: the JAX step maps what it reads and writes through the
stateless scope within the step, and nothing of them outlives it.

Only this rank's rows of each state variable exist, so collectives over
optimizer.variables (broadcasts) would mix ranks' rows: the optimizer's
variables that every rank holds alike (iterations, learning rate) are
listed by replicated_variables(), which the broadcast callback and
KerasState use instead (hvdlite/keras/flavour.py).
"""
from hvdlite.common import late_joiners
from hvdlite.common.gradient_reducer import normalize_name
from hvdlite.common.ops import ReduceOp, resolve_op
from hvdlite.common.powersgd import PowerSGDBase
from hvdlite.common.sharding import ShardLayout, refuse_unshardable
from hvdlite.keras import backends, sharded_collectives, sharded_state

_LOCAL_STATE = ("gradient_accumulator",)  # full-shaped, this rank's own partial sums
_WHERE = "hvdlite.keras.DistributedOptimizer(sharding_stage=...)"


class _Shards:
    """What one build of a sharded optimizer owns: the layout, the shard
    variables, and which optimizer variable is whose rows."""

    def __init__(self, variables, process_set):
        import keras
        self.variables = list(variables)
        self.process_set = process_set
        self.layout = ShardLayout([tuple(v.shape) for v in self.variables], process_set.size(),
                                  process_set.rank())
        self.index = {id(v): i for i, v in enumerate(self.variables)}
        self.shards = [keras.Variable(initializer="zeros", shape=self.layout.shard_shape(i),
                                      dtype=v.dtype, trainable=False, name=v.name)
                       for i, v in enumerate(self.variables)]
        self.rows = []    # (optimizer variable, parameter index, state key)
        self.local = []   # optimizer variables each rank keeps to itself

    def full_rows(self, index):
        shape = self.layout.shapes[index]
        return shape[0] if shape else 1

    def sizes(self):
        return self.layout.size, self.layout.rank


class ShardedOptimizerMixin:
    """Keras 3 optimizer whose state holds only this rank's rows (Note
    [Keras shard variables]). Put in front of the user's optimizer class."""
    _hvdlite_distributed = True

    # --- building: the rows' state

    def build(self, variables):
        if self.built:
            return
        variables = list(variables)
        self._hvdlite_check_parameters(variables)
        self.__dict__["_hvdlite_shards"] = _Shards(variables, self._hvdlite_process_set)
        super().build(variables)
        shards = self._hvdlite_shards
        keys = self.__dict__.setdefault("_hvdlite_keys", {})
        keys.clear()
        for shard, variable in zip(shards.shards, variables):
            keys[super()._var_key(shard)] = super()._var_key(variable)

    def _hvdlite_check_parameters(self, variables):
        if self.__dict__.get("_hvdlite_checked") or late_joiners.alone():
            # A worker joining a running elastic job cannot compare its
            # parameters with the others' before run() (Note [Late joiners]);
            # KerasState.sync() gives it rank 0's and re-shards them there.
            return
        from hvdlite.numpy.sharding import check_same_parameters
        check_same_parameters([(v.path, tuple(v.shape), v.dtype) for v in variables], _WHERE,
                              self._hvdlite_process_set)
        self.__dict__["_hvdlite_checked"] = True

    def add_variable_from_reference(self, reference_variable, name=None, initializer="zeros"):
        shards = self.__dict__.get("_hvdlite_shards")
        index = shards.index.get(id(reference_variable)) if shards is not None else None
        if index is None or name in _LOCAL_STATE:
            variable = super().add_variable_from_reference(reference_variable, name=name,
                                                           initializer=initializer)
            if index is not None:
                shards.local.append(variable)
            return variable
        # Keras' name for the unsharded state variable (so the two line up),
        # with the rows' shape.
        key = name or "var"
        variable = self.add_variable(shape=shards.layout.shard_shape(index),
                                     initializer=initializer, dtype=reference_variable.dtype,
                                     name=f"{reference_variable.path.replace('/', '_')}_{key}")
        shards.rows.append((variable, index, key))
        return variable

    def _var_key(self, variable):
        key = super()._var_key(variable)
        return self.__dict__.get("_hvdlite_keys", {}).get(key, key)

    def replicated_variables(self, variables=None):
        """The optimizer variables every rank holds alike (iterations, learning
        rate, ...), built first on `variables` when needed: what a broadcast
        or an elastic commit of the optimizer takes (the rows' state is
        each rank's own; consolidated_state_dict() joins it)."""
        if not self.built and variables is not None:
            self.build(list(variables))
        shards = self.__dict__.get("_hvdlite_shards")
        own = {id(v) for v, _, _ in shards.rows} | {id(v) for v in shards.local} if shards else set()
        return [v for v in self.variables if id(v) not in own]

    def register_local_var(self, var):
        """Refused: a sharded optimizer keeps no gradient local (ValueError)."""
        raise ValueError(f"{_WHERE}: local variables (register_local_var, local_variables) do not "
                         "shard: each rank would hold different rows of a variable whose values "
                         "differ between ranks; use sharding_stage=0 for model parallelism")

    # --- a step (Note [Keras shard variables])

    def _backend_apply_gradients(self, grads, trainable_variables):
        # Through __dict__: Keras would otherwise track (and save) the list as state.
        self.__dict__["_hvdlite_variables"] = list(trainable_variables)
        return super()._backend_apply_gradients(grads, trainable_variables)

    def _clip_gradients(self, grads):
        steps = self.gradient_accumulation_steps
        if steps and backends.current().name == "jax":
            # The JAX backend computes every pass's update and keeps it only
            # on update steps: communicate then, as the other backends do.
            import jax
            import jax.numpy as jnp
            is_update_step = (self._iterations + 1) % steps == 0
            variables = self._hvdlite_variables
            idle = [jnp.zeros(self._hvdlite_shard_of(v).shape, g.dtype)
                    for g, v in zip(grads, variables)]
            return jax.lax.cond(is_update_step, self._hvdlite_reduce_and_clip,
                                lambda _: idle, list(grads))
        return self._hvdlite_reduce_and_clip(list(grads))

    def _apply_weight_decay(self, variables):
        # Decays the rows instead, in _backend_update_step.
        return None

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        import keras
        shards = self.__dict__["_hvdlite_shards"]
        variables = list(trainable_variables)
        rows = []
        for variable in variables:
            index = shards.index[id(variable)]
            start, count = shards.layout.ranges[index]
            value = variable.value
            value = keras.ops.reshape(value, (1,)) if not shards.layout.shapes[index] else value
            shard = shards.shards[index]
            shard.assign(value[start:start + count])
            rows.append(shard)
        super()._apply_weight_decay(rows)
        super()._backend_update_step(grads, rows, learning_rate)
        updated = [shard.value for shard in rows]
        steps = self.gradient_accumulation_steps
        if steps and backends.current().name == "jax":
            import jax
            is_update_step = (self._iterations + 1) % steps == 0
            full = jax.lax.cond(is_update_step, lambda u: self._hvdlite_gather(u, variables),
                                lambda _: [v.value for v in variables], updated)
        else:
            full = self._hvdlite_gather(updated, variables)
        for variable, value in zip(variables, full):
            variable.assign(value)

    def _hvdlite_shard_of(self, variable):
        shards = self.__dict__["_hvdlite_shards"]
        return shards.shards[shards.index[id(variable)]]

    def _hvdlite_name(self, what, variable):
        shards = self.__dict__["_hvdlite_shards"]
        return f"{self._hvdlite_prefix}.{what}.{shards.index[id(variable)]}.{normalize_name(variable.path)}"

    def _hvdlite_reduce_and_clip(self, grads):
        import keras
        variables = self._hvdlite_variables
        sent = []
        for grad, variable in zip(grads, variables):
            grad = keras.ops.convert_to_tensor(grad)  # TensorFlow's IndexedSlices: dense
            sent.append(keras.ops.reshape(grad, (1,)) if len(variable.shape) == 0 else grad)
        reducer = self._hvdlite_reducer
        prescale, postscale = reducer._scales()
        rows = sharded_collectives.reducescatter_each(
            sent, [self._hvdlite_name("reducescatter", v) for v in variables], reducer.op,
            prescale, postscale, self._hvdlite_process_set, reducer.compression)
        if self._hvdlite_stage == 2 and backends.current().name == "torch":
            # Every reducescatter is queued (and keeps its input alive): drop
            # the parameter's hold on its full gradient (stage 2, docs/keras.md).
            for variable in variables:
                variable.value.grad = None
        rows = [keras.ops.reshape(r, self._hvdlite_shard_of(v).shape)
                for r, v in zip(rows, variables)]
        return self._hvdlite_clip(rows, variables)

    def _hvdlite_gather(self, updated, variables):
        """The whole parameters, every rank's updated rows joined."""
        import keras
        shards = self.__dict__["_hvdlite_shards"]
        full = sharded_collectives.allgather_each(
            updated, [shards.full_rows(shards.index[id(v)]) for v in variables],
            [self._hvdlite_name("allgather", v) for v in variables], self._hvdlite_process_set)
        return [keras.ops.reshape(f, v.shape) for f, v in zip(full, variables)]

    # --- clipping by norm, across shards

    def _hvdlite_square_sums(self, rows, variables, what):
        import keras
        sums = [keras.ops.reshape(keras.ops.sum(keras.ops.square(r)), (1,)) for r in rows]
        return sharded_collectives.sum_each(sums, [self._hvdlite_name(what, v) for v in variables],
                                            self._hvdlite_process_set)

    def _hvdlite_clip(self, rows, variables):
        """Keras' clipping (_clip_gradients) of the whole gradients, applied
        to their rows: the norms are summed over the ranks first."""
        import keras
        ops = keras.ops
        if self.clipnorm and self.clipnorm > 0:
            # Keras' _clip_by_norm, with each parameter's sum of squares.
            clipped = []
            for row, l2sum in zip(rows, self._hvdlite_square_sums(rows, variables, "clipnorm")):
                l2sum = ops.cast(ops.reshape(l2sum, ()), row.dtype)
                pred = l2sum > 0
                l2norm = ops.where(pred, ops.sqrt(ops.where(pred, l2sum, ops.ones_like(l2sum))),
                                   l2sum)
                clipped.append(ops.multiply(row, self.clipnorm) / ops.maximum(l2norm,
                                                                              self.clipnorm))
            return clipped
        if self.global_clipnorm and self.global_clipnorm > 0:
            # keras.src.optimizers.base_optimizer.clip_by_global_norm, with the
            # sum of squares of every rank's rows.
            dtype = rows[0].dtype
            local = ops.sum(ops.stack([ops.cast(ops.sum(ops.square(r)), dtype) for r in rows]))
            total = sharded_collectives.sum_each([ops.reshape(local, (1,))],
                                                 [f"{self._hvdlite_prefix}.global_clipnorm"],
                                                 self._hvdlite_process_set)[0]
            use_norm = ops.sqrt(ops.reshape(total, ()))
            clip_norm = self.global_clipnorm
            scale = clip_norm * ops.minimum(1.0 / use_norm, 1.0 / clip_norm)
            scale = scale + (use_norm - use_norm)  # NaN for an inf/NaN norm, as Keras
            return [r * ops.cast(scale, r.dtype) for r in rows]
        return super()._clip_gradients(rows)

    # --- checkpoints and elastic re-sharding (sharded_state.py)

    def state_dict(self):
        """This rank's shard of the optimizer state (rows of each state
        variable, plus the replicated ones), as NumPy; load_state_dict()
        takes it back on the same rank of the same world size."""
        return sharded_state.shard_state_dict(self)

    def consolidated_state_dict(self, root_rank=None):
        """The whole optimizer state, every rank's rows joined (a collective:
        call it on every rank of the process set). Loads into a sharded
        optimizer of any world size (load_state_dict) and, through
        hvdlite.keras.load_unsharded_state_dict, into an unsharded Keras
        optimizer. Returns it on every rank, or on root_rank only (None
        elsewhere) when given."""
        return sharded_state.consolidated_state_dict(self, root_rank)

    def load_state_dict(self, saved):
        """Takes a consolidated state (from any world size, sharded or
        unsharded training) or this rank's own state_dict()."""
        sharded_state.load_state_dict(self, saved)

    def save_shard(self, path):
        """Writes this rank's rows to `path` (one file per rank); load_shards()
        of every rank's file restores them at any world size."""
        sharded_state.save_shard(self, path)

    def load_shards(self, paths):
        """Loads the state from every rank's shard file of one save (any world size)."""
        sharded_state.load_shards(self, paths)

    def reshard(self, variables=None):
        """Rebuilds the rows' state for the process set's current size and
        rank (after an elastic job re-formed); returns True when it did. The
        state restarts at zero: load a consolidated state afterwards."""
        return sharded_state.reshard(self, variables)


def refuse(optimizer, compression, op, num_groups, groups, local_variables, process_set):
    """ValueError, at construction, for what does not shard (saying why)."""
    import keras
    refuse_unshardable(optimizer, _WHERE)
    if isinstance(compression, PowerSGDBase):
        raise ValueError(f"{_WHERE}: PowerSGD compression does not compose with sharding: it "
                         "allreduces low-rank factors of whole gradient matrices, and a "
                         "reducescatter gives each rank rows of the full gradient instead; use "
                         "sharding_stage=0 with PowerSGD, or fp16/bf16 compression")
    if resolve_op(op) not in (ReduceOp.Average, ReduceOp.Sum):
        raise ValueError(f"{_WHERE}: op must be Average or Sum (a reducescatter of the "
                         f"gradients), got {op!r}")
    if num_groups or groups is not None:
        raise ValueError(f"{_WHERE}: num_groups/groups group allreduces; each gradient is its "
                         "own reducescatter here (the core fuses them): leave them unset")
    if local_variables:
        raise ValueError(f"{_WHERE}: local_variables do not shard (their values differ between "
                         "ranks); use sharding_stage=0 for model parallelism")
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        raise ValueError(f"{_WHERE}: LossScaleOptimizer wraps another optimizer and skips steps "
                         "on every rank's non-finite gradients; shard the inner optimizer, or use "
                         "sharding_stage=0")
    if optimizer.use_ema:
        raise ValueError(f"{_WHERE}: use_ema keeps a full moving average of every parameter "
                         "on each rank, which sharding does not reduce: use sharding_stage=0")
    if process_set.rank() < 0:
        raise ValueError(f"{_WHERE}: this rank is not in the process set it shards over")


def configure(distributed, stage, process_set):
    """Makes `distributed` (optimizer.py's copy, of a class with
    ShardedOptimizerMixin in front) the sharded optimizer of `stage`."""
    distributed.__dict__.update(_hvdlite_stage=stage, _hvdlite_process_set=process_set,
                                _hvdlite_prefix="DistributedOptimizer.sharded")
