"""Sharded optimizer state (ZeRO stages 1 and 2): which rows of each
parameter a rank owns. Framework-neutral and free of collectives: the
bindings' sharded optimizers (hvdlite/torch/sharded_optimizer.py,
hvdlite/keras/sharded_optimizer.py, hvdlite/jax/sharded_optimizer.py) and the
collectives on NumPy state (hvdlite/numpy/sharding.py) all use this one layout.

Note [Sharding by rows]
~~~~~~~~~~~~~~~~~~~~~~~
Every parameter is split along its first dimension over the ranks of the
process set, exactly as the core's reducescatter splits a tensor: rank r of
N owns rows // N rows, and the first rows % N ranks one more (a 0-d parameter
counts as one row). So the reduced gradient of a rank's rows is what one
reducescatter per gradient returns (the core fuses them as it fuses
allreduces), the updated rows go back to every rank with one allgather per
parameter, and the two move the bytes of one allreduce. Each rank's share of
the bytes is within one row per parameter of 1/N, however uneven the
parameters, and no parameter needs to divide by N.

A rank runs the framework's own optimizer on its rows only, so the optimizer
state it keeps is 1/N of the unsharded state, and its update of those rows is
the unsharded update exactly, provided the optimizer treats each element on
its own (SGD with momentum, Adam, AdamW, RMSprop, Adagrad, ...). An optimizer
that looks at a whole parameter (LAMB's and LARS's trust ratio, Adafactor's
factored moments, Shampoo, clipping by norm inside the optimizer) would see a
part of it and compute something else: those are refused by name
(ELEMENTWISE_REFUSED), with the reason. Clipping by the global norm is done by
the wrapper instead, across shards (clip_coefficient below), with the result
of unsharded clipping.

Stage 1 keeps the full local gradients until the step; stage 2 frees each
gradient once its reducescatter is queued and keeps only the reduced rows.
"""

STAGES = (0, 1, 2)
CHECKPOINT_FORMAT = "hvdlite-sharded-optimizer/1"

# Optimizers whose update of an element depends on the whole parameter,
# by the class names the frameworks use, with why.
ELEMENTWISE_REFUSED = {
    "LAMB": "its trust ratio divides by the norm of the whole parameter and of its update",
    "Lamb": "its trust ratio divides by the norm of the whole parameter and of its update",
    "LARS": "its trust ratio divides by the norm of the whole parameter",
    "Lars": "its trust ratio divides by the norm of the whole parameter",
    "Adafactor": "it factors its second moment over the rows and columns of the whole parameter",
    "LBFGS": "it keeps one flat history of every parameter and runs a line search over all of them",
    "Muon": "it orthogonalizes the update of the whole matrix",
}


def check_stage(stage):
    """The sharding stage as an int, or ValueError naming the allowed ones."""
    if stage not in STAGES or isinstance(stage, bool):
        raise ValueError(f"sharding_stage must be 0 (unsharded), 1 (optimizer state) or 2 "
                         f"(optimizer state and gradients), got {stage!r}")
    return int(stage)


def refuse_unshardable(optimizer, binding):
    """ValueError, naming the optimizer and why, for one that is not elementwise
    (Note [Sharding by rows]); `optimizer` is the framework's optimizer object."""
    for cls in type(optimizer).__mro__:
        reason = ELEMENTWISE_REFUSED.get(cls.__name__)
        if reason:
            raise ValueError(
                f"{binding}: {type(optimizer).__name__} cannot be sharded: {reason}, and each rank "
                f"holds only its rows of each parameter (Note [Sharding by rows] in "
                f"hvdlite/common/sharding.py). Use sharding_stage=0 for it, or an elementwise "
                f"optimizer (SGD, Adam, AdamW, RMSprop, Adagrad)")


def rows_of(shape):
    """Rows a parameter of `shape` is split by (a 0-d parameter: one)."""
    return int(shape[0]) if len(shape) else 1


def row_range(rows, size, rank):
    """(start, count) of the rows `rank` of `size` owns, as the core's
    reducescatter splits them."""
    base, extra = divmod(rows, size)
    start = rank * base + min(rank, extra)
    return start, base + (1 if rank < extra else 0)


class ShardLayout:
    """Which rows of each parameter one rank owns.

    Args:
        shapes (list[tuple[int, ...]]): the parameters' shapes, in one order on every rank.
        size (int): ranks of the process set.
        rank (int): this rank's position in the set.
    """

    def __init__(self, shapes, size, rank):
        self.shapes = [tuple(int(d) for d in s) for s in shapes]
        self.size = size
        self.rank = rank
        self.ranges = [row_range(rows_of(s), size, rank) for s in self.shapes]

    def shard_shape(self, index):
        """The shape of this rank's rows of parameter `index` (a 0-d one as 1-d)."""
        shape = self.shapes[index] or (1,)
        return (self.ranges[index][1],) + shape[1:]

    def shard_shape_of(self, index, rank):
        """The shape of `rank`'s rows of parameter `index`."""
        shape = self.shapes[index] or (1,)
        return (row_range(shape[0], self.size, rank)[1],) + shape[1:]

    def is_row_state(self, index, value_shape):
        """Whether an optimizer state value of `value_shape` holds one value per
        element of the shard (to be split and joined by rows) rather than one
        for the whole shard (a step count: the same on every rank)."""
        return tuple(value_shape) == self.shard_shape(index) and len(value_shape) > 0

    def owned_elements(self):
        """Elements of all parameters this rank owns."""
        total = 0
        for index in range(len(self.shapes)):
            count = 1
            for d in self.shard_shape(index):
                count *= d
            total += count
        return total


def describe_difference(descriptions):
    """None when every rank listed the same parameters, else a message naming
    the first difference: descriptions[rank] = [(name, shape, dtype), ...]."""
    first = descriptions[0]
    for rank, mine in enumerate(descriptions[1:], start=1):
        if mine == first:
            continue
        if len(mine) != len(first):
            return (f"rank 0 has {len(first)} parameters and rank {rank} has {len(mine)}: every "
                    f"rank must pass the same parameters, in the same order")
        for index, (a, b) in enumerate(zip(first, mine)):
            if a != b:
                return (f"parameter {index} is {a[0]!r} {tuple(a[1])} {a[2]} on rank 0 but "
                        f"{b[0]!r} {tuple(b[1])} {b[2]} on rank {rank}: every rank must pass the same "
                        f"parameters, in the same order")
    return None


def clip_coefficient(global_square_sum, max_norm, eps=1e-6):
    """The factor unsharded clipping by global norm multiplies every gradient
    by (torch.nn.utils.clip_grad_norm_'s), from the sum over the ranks of the
    squares of each rank's reduced rows. Returns (norm, coefficient <= 1)."""
    norm = float(global_square_sum) ** 0.5
    return norm, min(1.0, float(max_norm) / (norm + eps))
