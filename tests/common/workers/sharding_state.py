"""hvdlite/numpy/sharding.py on real ranks: a whole optimizer state split into
each rank's rows and joined back, per-rank shard files of one world size
loaded as the whole state, and parameter lists that differ across ranks
refused on every rank with the first difference named. Prints "sharding OK"."""
import os
import sys

import numpy as np

import hvdlite.numpy as hvd
from hvdlite.common.sharding import ShardLayout
from hvdlite.numpy import sharding

hvd.init()
rank, size = hvd.rank(), hvd.size()
folder = sys.argv[1]
names = ["w", "b", "scalar", "narrow"]
shapes = [(10, 3), (7,), (), (size - 1, 2)]  # uneven, 0-d, fewer rows than ranks
whole = {name: {"exp_avg": np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) * (i + 1),
                "step": np.array(5.0)}
         for i, (name, shape) in enumerate(zip(names, shapes))}
layout = ShardLayout(shapes, size, rank)
mine = sharding.rows_of_state(whole, names, layout)
for index, name in enumerate(names):
    assert mine[name]["exp_avg"].shape == layout.shard_shape(index), (name, mine[name]["exp_avg"].shape)
    assert mine[name]["step"] == 5.0
joined = sharding.full_state(mine, names, layout)
for name in names:
    for key, value in whole[name].items():
        assert np.array_equal(joined[name][key], value) and joined[name][key].shape == value.shape, (name, key)

sharding.save_shard(os.path.join(folder, f"shard.{rank}"), mine, names, layout, stage=2)
hvd.barrier()
loaded, _ = sharding.load_shards([os.path.join(folder, f"shard.{r}") for r in reversed(range(size))])
for name in names:
    for key, value in whole[name].items():
        assert np.array_equal(loaded[name][key], value), (name, key)
if size > 2:  # a save of `size` ranks read back at size - 1: rows of the new layout
    smaller = ShardLayout(shapes, size - 1, min(rank, size - 2))
    again = sharding.rows_of_state(loaded, names, smaller)
    assert again["w"]["exp_avg"].shape == smaller.shard_shape(0)
try:
    sharding.load_shards([os.path.join(folder, "shard.0")])
    raise AssertionError("one rank's file of several loaded as a whole")
except ValueError as error:
    assert "pass every rank's file" in str(error), error

sharding.check_same_parameters([(n, s, "float64") for n, s in zip(names, shapes)], "test")
try:
    sharding.check_same_parameters([("bias" if rank == size - 1 else "w", (10, 3), "float32")], "test")
    raise AssertionError("different parameter lists were accepted")
except ValueError as error:
    assert f"parameter 0 is 'w' (10, 3) float32 on rank 0 but 'bias' (10, 3) float32 on rank {size - 1}" \
        in str(error), error
hvd.shutdown()
print("sharding OK", flush=True)
