"""Sharded optimizer state on NumPy, shared by every binding's sharded
optimizer (Note [Sharding by rows] in hvdlite/common/sharding.py): the check
that every rank shards the same parameters, and the optimizer state moved
between a rank's rows and the whole (checkpoints, elastic commits, loading
into another world size or into an unsharded optimizer).

State is framework-neutral here: {parameter name: {state key: np.ndarray}}.
A value shaped like the rank's rows of its parameter is joined and split by
rows; any other value (a step count) is the same on every rank and kept once.
"""
import os
import pickle

import numpy as np

from hvdlite.common.process_sets import global_process_set
from hvdlite.common.sharding import CHECKPOINT_FORMAT, ShardLayout, describe_difference
from hvdlite.numpy import collectives
from hvdlite.numpy.objects import allgather_object


def check_same_parameters(descriptions, binding, process_set=global_process_set):
    """ValueError on every rank, naming the first difference, unless every rank
    passed the same parameters: descriptions = [(name, shape, dtype), ...]."""
    mine = [(str(n), tuple(int(d) for d in s), str(t)) for n, s, t in descriptions]
    everyone = allgather_object(mine, name="sharding.parameters", process_set=process_set)
    difference = describe_difference(everyone)
    if difference:
        raise ValueError(f"{binding} with sharding_stage > 0: {difference}")


def full_state(shard_state, names, layout, process_set=global_process_set):
    """Every rank's rows joined into the whole state, on every rank:
    {name: {key: full array}} from this rank's {name: {key: its rows}}. One
    allgather per row-shaped value (rank order is row order)."""
    whole = {}
    for index, name in enumerate(names):
        values = shard_state.get(name, {})
        keys = sorted(values)
        everyone = allgather_object(keys, name=f"sharding.keys.{index}", process_set=process_set)
        if any(k != keys for k in everyone):
            raise ValueError(f"sharded optimizer state of {name!r}: the ranks hold different state "
                             f"keys {everyone}: was the optimizer stepped on some ranks only?")
        joined = {}
        for key in keys:
            value = np.asarray(values[key])
            if layout.is_row_state(index, value.shape):
                full = collectives.allgather(np.ascontiguousarray(value),
                                             name=f"sharding.state.{index}.{key}", process_set=process_set)
                shape = layout.shapes[index]
                joined[key] = full.reshape(shape) if shape else full.reshape(())
            else:
                joined[key] = value.copy()
        whole[name] = joined
    return whole


# State keys that are one value for a whole parameter in the frameworks'
# optimizers (torch's step and ASGD's eta, mu, NAdam's mu_product, optax's
# count, Keras' iterations): for a 0-d parameter its state values are 0-d too,
# and only the key tells them apart.
SCALAR_KEYS = frozenset({"step", "eta", "mu", "mu_product", "count", "iterations", "mini_step",
                         "gradient_step"})


def _is_whole_row_state(key, value, shape, row_keys):
    if tuple(value.shape) != shape:
        return False
    if shape:
        return True
    # A 0-d parameter's whole state: Note [Sharding by rows] counts it as one row.
    return key in row_keys if row_keys is not None else key not in SCALAR_KEYS


def rows_of_state(whole, names, layout, row_keys=None):
    """This rank's rows of a whole state (from full_state or a checkpoint, of
    any world size): {name: {key: rows}}; names absent from `whole` are left out.
    `row_keys` ({name: keys}), where known, says which values of a 0-d
    parameter are per element (else SCALAR_KEYS are taken as not)."""
    mine = {}
    for index, name in enumerate(names):
        if name not in whole:
            continue
        start, count = layout.ranges[index]
        shape = layout.shapes[index]
        keys = None if row_keys is None else set(row_keys.get(name, ()))
        values = {}
        for key, value in whole[name].items():
            value = np.asarray(value)
            if _is_whole_row_state(key, value, shape, keys):
                rows = value.reshape((-1,) + shape[1:]) if shape else value.reshape(1)
                values[key] = np.ascontiguousarray(rows[start:start + count])
            else:
                values[key] = value.copy()
        mine[name] = values
    return mine


def checkpoint(whole, stage, extra=None):
    """A consolidated checkpoint (picklable) of a whole state."""
    return {"format": CHECKPOINT_FORMAT, "stage": stage, "state": whole, "extra": extra or {}}


def whole_from_checkpoint(saved):
    """The whole state of a consolidated checkpoint; ValueError for anything else."""
    if not isinstance(saved, dict) or saved.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"not a sharded optimizer checkpoint ({CHECKPOINT_FORMAT}): got "
                         f"{type(saved).__name__} with format {getattr(saved, 'get', lambda k: None)('format')!r}")
    return saved["state"]


def save_shard(path, shard_state, names, layout, stage, extra=None):
    """Writes this rank's rows to `path` (one file per rank; the files of every
    rank together load into any world size with load_shards)."""
    payload = {"format": CHECKPOINT_FORMAT + "+shard", "stage": stage, "rank": layout.rank,
               "size": layout.size, "names": list(names), "shapes": layout.shapes,
               "state": shard_state, "extra": extra or {}}
    temporary = f"{path}.tmp{os.getpid()}"
    with open(temporary, "wb") as f:
        pickle.dump(payload, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(temporary, path)


def load_shards(paths):
    """The whole state (and the saved `extra`) from every rank's shard file of
    one save, in any order; ValueError naming what is missing or mixed."""
    shards = []
    for path in paths:
        with open(path, "rb") as f:
            shards.append(pickle.load(f))
    if not shards or any(s.get("format") != CHECKPOINT_FORMAT + "+shard" for s in shards):
        raise ValueError(f"{list(paths)} are not sharded optimizer shard files")
    shards.sort(key=lambda s: s["rank"])
    size = shards[0]["size"]
    if [s["rank"] for s in shards] != list(range(size)) or any(s["size"] != size for s in shards):
        raise ValueError(f"shard files of ranks {[s['rank'] for s in shards]} given, but the save was "
                         f"made by {size} ranks: pass every rank's file")
    names, shapes = shards[0]["names"], shards[0]["shapes"]
    layouts = [ShardLayout(shapes, size, r) for r in range(size)]
    whole = {}
    for index, name in enumerate(names):
        joined = {}
        for key, value in shards[0]["state"].get(name, {}).items():
            parts = [np.asarray(s["state"][name][key]) for s in shards]
            if all(layouts[r].is_row_state(index, parts[r].shape) for r in range(size)):
                full = np.concatenate(parts, axis=0)
                joined[key] = full.reshape(shapes[index]) if shapes[index] else full.reshape(())
            else:
                joined[key] = parts[0].copy()
        whole[name] = joined
    return whole, shards[0]["extra"]
