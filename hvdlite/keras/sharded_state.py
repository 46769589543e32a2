"""The state of Keras' sharded optimizer (sharded_optimizer.py) as NumPy:
this rank's shard, the whole state joined over the ranks (consolidated
checkpoints, elastic commits), per-rank shard files, and the same whole
state read from and written to an unsharded Keras optimizer, so training
moves between sharded and unsharded and between world sizes.

A state is hvdlite.numpy.sharding's: {parameter: {state key: array}}, the
parameter named by its position in the optimizer's variable list ("0",
"1", ...: Keras' automatic layer names change between models of one
process, positions do not) and the key by Keras' name for the state
("momentum", "velocity", ...). The variables every rank holds alike
(iteration, learning_rate, ...) travel by their Keras names in the
checkpoint's extra["replicated"]. Keras names an unsharded optimizer's state
variable "<parameter path with _ for />_<key>" (add_variable_from_reference),
and the sharded one names its rows' variable the same, which is how the
two are matched.
"""
import numpy as np

from hvdlite.common.sharding import CHECKPOINT_FORMAT
from hvdlite.keras import backends
from hvdlite.numpy import sharding
from hvdlite.numpy.objects import broadcast_object

_SHARD_FORMAT = CHECKPOINT_FORMAT + "+rank"
_NOT_STATE = ("gradient_accumulator", "average")  # this rank's sums; EMA (refused when sharded)


def _built(optimizer, what):
    shards = optimizer.__dict__.get("_hvdlite_shards")
    if shards is None:
        raise ValueError(f"{what}: the sharded optimizer is not built yet: call "
                         "optimizer.build(model.trainable_variables) first (model.fit builds it)")
    return shards


def _names(shards):
    return [str(i) for i in range(len(shards.variables))]


def _replicated(optimizer):
    return {v.name: backends.to_numpy(v) for v in optimizer.replicated_variables()}


def _extra(optimizer, shards):
    return {"replicated": _replicated(optimizer), "paths": [v.path for v in shards.variables],
            "optimizer": type(optimizer).__name__}


def _shard_state(shards):
    state = {name: {} for name in _names(shards)}
    for variable, index, key in shards.rows:
        state[str(index)][key] = backends.to_numpy(variable)
    return state


def shard_state_dict(optimizer):
    shards = _built(optimizer, "state_dict()")
    size, rank = shards.sizes()
    return {"format": _SHARD_FORMAT, "stage": optimizer._hvdlite_stage, "size": size,
            "rank": rank, "state": _shard_state(shards), "extra": _extra(optimizer, shards)}


def consolidated_state_dict(optimizer, root_rank=None):
    shards = _built(optimizer, "consolidated_state_dict()")
    whole = sharding.full_state(_shard_state(shards), _names(shards), shards.layout,
                                shards.process_set)
    if root_rank is not None and shards.process_set.rank() != root_rank:
        return None
    return sharding.checkpoint(whole, optimizer._hvdlite_stage, _extra(optimizer, shards))


def _check_whole(whole, shapes, what):
    if len(whole) != len(shapes):
        raise ValueError(f"{what}: the saved state has {len(whole)} parameters, this optimizer "
                         f"{len(shapes)}: load it into the model it was saved from")
    for index, shape in enumerate(shapes):
        for key, value in whole.get(str(index), {}).items():
            value = np.asarray(value)
            if value.ndim and tuple(value.shape) != tuple(shape):
                raise ValueError(f"{what}: state {key!r} of parameter {index} is "
                                 f"{tuple(value.shape)}, the parameter {tuple(shape)}")


def _assign_rows(targets, state, what, paths, optimizer):
    """Assigns state[parameter][key] to each (variable, parameter index, key)."""
    for variable, index, key in targets:
        value = state.get(str(index), {}).get(key)
        if value is None:
            raise ValueError(f"{what}: the saved state has no {key!r} for parameter {index} "
                             f"({paths[index]}): saved from another optimizer? (this one is "
                             f"{type(optimizer).__name__})")
        variable.assign(np.asarray(value).astype(variable.dtype).reshape(variable.shape))


def _assign_replicated(variables, extra):
    saved = (extra or {}).get("replicated", {})
    for variable in variables:
        if variable.name in saved:
            variable.assign(np.asarray(saved[variable.name]).astype(variable.dtype))


def load_state_dict(optimizer, saved):
    shards = _built(optimizer, "load_state_dict()")
    form = saved.get("format") if isinstance(saved, dict) else None
    if form == _SHARD_FORMAT:
        size, rank = shards.sizes()
        if (saved["size"], saved["rank"]) != (size, rank):
            raise ValueError(f"load_state_dict(): this is rank {saved['rank']} of {saved['size']}'s "
                             f"shard, and this optimizer is rank {rank} of {size}: load a "
                             "consolidated_state_dict() (or every rank's shard files) instead")
        mine = saved["state"]
    else:
        whole = sharding.whole_from_checkpoint(saved)
        _check_whole(whole, shards.layout.shapes, "load_state_dict()")
        row_keys = {}
        for _, index, key in shards.rows:
            row_keys.setdefault(str(index), set()).add(key)
        mine = sharding.rows_of_state(whole, _names(shards), shards.layout, row_keys)
    _assign_rows(shards.rows, mine, "load_state_dict()", [v.path for v in shards.variables],
                 optimizer)
    _assign_replicated(optimizer.replicated_variables(), saved.get("extra"))


def save_shard(optimizer, path):
    shards = _built(optimizer, "save_shard()")
    sharding.save_shard(path, _shard_state(shards), _names(shards), shards.layout,
                        optimizer._hvdlite_stage, _extra(optimizer, shards))


def load_shards(optimizer, paths):
    whole, extra = sharding.load_shards(paths)
    load_state_dict(optimizer, sharding.checkpoint(whole, optimizer._hvdlite_stage, extra))


def reshard(optimizer, variables=None):
    """Rebuilds the rows' state variables for the process set's size and rank
    now (elastic); True when they changed."""
    shards = optimizer.__dict__.get("_hvdlite_shards")
    if shards is None:
        return False
    process_set = shards.process_set
    if (process_set.size(), process_set.rank()) == shards.sizes():
        return False
    for variable in [v for v, _, _ in shards.rows] + shards.local:
        optimizer._untrack_variable(variable)
    optimizer.built = False
    optimizer._trainable_variables_indices = {}
    optimizer.__dict__.pop("_hvdlite_shards")
    optimizer.build(list(variables) if variables is not None else shards.variables)
    return True


def sync_whole(optimizer, whole, root_rank=0):
    """Every rank gets root_rank's consolidated state and loads its rows
    (elastic sync after a re-form); returns that state."""
    shards = _built(optimizer, "sync")
    whole = broadcast_object(whole, root_rank, name="KerasState.sharded_optimizer",
                             process_set=shards.process_set)
    if whole is not None:
        load_state_dict(optimizer, whole)
    return whole


# --- unsharded Keras optimizers: the same consolidated state

def _prefixes(variables):
    return [v.path.replace("/", "_") + "_" for v in variables]


def _row_variables(optimizer, variables):
    """{(parameter index, key): optimizer variable} and the other variables,
    by Keras' naming of state variables (add_variable_from_reference)."""
    prefixes = _prefixes(variables)
    rows, others = {}, []
    for variable in optimizer.variables:
        matches = [(len(p), i) for i, p in enumerate(prefixes)
                   if variable.name.startswith(p) and tuple(variable.shape) == tuple(variables[i].shape)]
        if not matches:
            others.append(variable)
            continue
        index = max(matches)[1]
        key = variable.name[len(prefixes[index]):]
        if key not in _NOT_STATE:
            rows[(index, key)] = variable
    return rows, others


def unsharded_state_dict(optimizer, variables):
    """An unsharded Keras optimizer's state as a consolidated one, which a
    sharded optimizer loads at any world size (its load_state_dict).

    Args:
        optimizer (keras.optimizers.Optimizer): unsharded; built on `variables` first if needed.
        variables (list): the model's trainable variables, in the optimizer's order.

    Returns:
        dict: the state, as a sharded optimizer's consolidated_state_dict() gives it.
    """
    variables = list(variables)
    if not optimizer.built:
        optimizer.build(variables)
    rows, others = _row_variables(optimizer, variables)
    whole = {str(i): {} for i in range(len(variables))}
    for (index, key), variable in rows.items():
        whole[str(index)][key] = backends.to_numpy(variable)
    extra = {"replicated": {v.name: backends.to_numpy(v) for v in others if len(v.shape) == 0},
             "paths": [v.path for v in variables], "optimizer": type(optimizer).__name__}
    return sharding.checkpoint(whole, 0, extra)


def load_unsharded_state_dict(optimizer, variables, saved):
    """Loads a consolidated state (from sharded training at any world size,
    or unsharded_state_dict) into an unsharded Keras optimizer.

    Args:
        optimizer (keras.optimizers.Optimizer): unsharded; built on `variables` first if needed.
        variables (list): the model's trainable variables, in the optimizer's order.
        saved (dict): a consolidated_state_dict() or unsharded_state_dict().

    Raises:
        ValueError: for a state of other parameters or of another kind of optimizer.
    """
    variables = list(variables)
    whole = sharding.whole_from_checkpoint(saved)
    _check_whole(whole, [tuple(v.shape) for v in variables], "load_unsharded_state_dict()")
    if not optimizer.built:
        optimizer.build(variables)
    rows, others = _row_variables(optimizer, variables)
    _assign_rows([(v, index, key) for (index, key), v in rows.items()], whole,
                 "load_unsharded_state_dict()", [v.path for v in variables], optimizer)
    _assign_replicated(others, saved.get("extra"))

