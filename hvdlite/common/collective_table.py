"""The binding layer as a table: what each collective needs, declared once.

Note [The binding layer as a table]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Every binding asks the core for the same five collectives (and the grouped
forms of three). What differs between bindings is only how a tensor becomes
(address, dtype code, shape, device) and back, and the framework's glue
(autograd Functions, tf.RegisterGradient, jax.custom_vjp, in-place copies).
What an operation *is* does not differ, so it is written here once, as one
`Collective` row per operation:
  - the request fields it sets beyond every request's own (op, name,
    process_set_id, input, output, dtype, shape, device, stream, group,
    group_size): `fields`, names of csrc/api/api.h's hvdlite_request;
  - how its output is sized (`output`): like the input (the binding allocates
    it before the call), or by the ranks' first dimensions (the core
    allocates it once they are negotiated, or the caller passes one with
    output_bytes: Note [Outputs into the caller's buffer] in
    csrc/api/caller_output.cc); `output_shape` computes it where a binding
    must know it beforehand (JAX traces shapes; sharded optimizers);
  - whether a 0-d input counts as one row (`scalar_as_row`);
  - whether it can be grouped, and its groups' name kind (`grouped_kind`);
  - how it finishes (`finish`): what synchronize() returns, built by the
    binding's `Finishing` from the core's (output bytes, shape, received
    splits, value) results;
  - its name kind for automatic names (`kind`: "allgather.noname.3");
  - its gradient rule (`gradient`, a `Gradient`): which collective its
    gradient is and what is done with that collective's result (Note
    [Horovod's gradients]). hvdlite.torch's autograd Functions and
    hvdlite.tensorflow's registered gradients both read it and supply only
    the steps in their framework's terms (autograd_ops.py, gradients.py).
A binding supplies `Finishing(from_core, splits_of)`: turning the core's
output bytes into its tensor, and a received-splits list into its splits.
Adding a collective starts with one row here (docs/development.md, "Adding a
collective").
"""
from dataclasses import dataclass

from hvdlite.common.ops import OpType, ReduceOp
from hvdlite.common.sharding import row_range

# How an operation's output is sized.
LIKE_INPUT = "like the input"
ROWS_GATHERED = "the ranks' first dimensions, summed"
ROWS_RECEIVED = "the rows the other ranks send this one (their splits)"
ROWS_SCATTERED = "this rank's share of the first dimension"

# What synchronize() returns.
WRITTEN = "the output allocated before the call (or the input, in place)"
RECEIVED = "the output the core allocated, as a tensor"
RECEIVED_AND_SPLITS = "the output the core allocated and how many rows came from each rank"


# Note [Horovod's gradients]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~
# A script ported from Horovod must train to the same numbers, so every
# gradient is Horovod's definition, not the derivative of one global loss
# where the two differ:
# - allreduce (grouped too): the same allreduce of the output gradient (op,
#   scale factors, process set);
# - allgather (grouped too): the output gradient AVERAGED over the set, then
#   this rank's rows of it (first dimensions may differ between ranks);
# - broadcast: that average on the root (a global rank), zeros elsewhere;
# - alltoall: an alltoall of the gradient back, with the received splits;
# - reducescatter (grouped too): the allgather of the output gradient, times
#   the set size for Sum (Average: the plain allgather) and times the
#   pre/post scale factors. The derivative of the summed loss would carry no
#   size factor for Sum and 1/size for Average: Horovod's is size times that.
# A grouped operation's gradient is the same rule per member, its collective
# run as one group. Allreduce's and reducescatter's gradients are defined for
# Sum and Average only (`sum_or_average`), in every binding with the same
# message (check_differentiable).

# How the gradient's collective is called.
SAME_REDUCTION = "with the forward's op and scale factors"
AVERAGED = "with op=Average, unscaled"
RECEIVED_SPLITS = "back, with the forward's received splits as its splits"

# What is done with the gradient collective's result.
AS_IS = "nothing: it is the input's gradient"
OWN_ROWS = "this rank's rows of it (its input's first dimension, after the ranks before it)"
ON_ROOT = "kept on the root rank; zeros elsewhere"
SCALED = "times the forward's scale factors, and the set's size for Sum"


@dataclass(frozen=True)
class Gradient:
    """An operation's gradient rule (Note [Horovod's gradients]): the
    collective (`via`, a kind) applied to the output gradient, how it is
    called, and what is done with its result (`then`); `sum_or_average`: the
    gradient is defined for those reduce ops only."""
    via: str
    how: str = ""
    then: str = AS_IS
    sum_or_average: bool = False

    def __str__(self):
        return " ".join(filter(None, (self.via, "of the output gradient", self.how))) + \
            f", then {self.then}"


def check_differentiable(collective, op, kind=None):
    """Raises ValueError where `collective`'s gradient is not defined for the
    reduce op `op` (an int or ReduceOp) of its forward call; `kind` names it
    in the message (the grouped form's name, say)."""
    if collective.gradient.sum_or_average and op not in (ReduceOp.Sum, ReduceOp.Average):
        raise ValueError(f"the gradient of {kind or collective.kind} is defined for op=Sum and "
                         f"op=Average, not {ReduceOp(op).name}")


def gradient_scale(op, prescale, postscale, size):
    """The factor on a SCALED gradient: the forward's scale factors, times the
    set's `size` for Sum (Note [Horovod's gradients])."""
    scale = float(prescale) * float(postscale)
    return scale * size if op == ReduceOp.Sum else scale


@dataclass(frozen=True)
class Collective:
    """One operation as every binding sees it (Note [The binding layer as a table])."""
    kind: str
    op: int
    fields: tuple
    output: str
    finish: str
    groupable: bool
    gradient: Gradient
    scalar_as_row: bool = False

    @property
    def grouped_kind(self):
        """The name kind of its groups ("grouped_allreduce"); None if it has none."""
        return f"grouped_{self.kind}" if self.groupable else None

    @property
    def allocated_before(self):
        """Whether the binding allocates the output before the call (its size
        is the input's), rather than the core after negotiation."""
        return self.output == LIKE_INPUT

    def output_shape(self, shape, size, rank, rows=None):
        """The output's shape on `rank` of a set of `size` ranks, for an input
        of `shape`; `rows` is the result's first dimension where only the
        other ranks know it (allgather: the sum of theirs; alltoall: what
        they send), or None to assume every rank's input is alike."""
        shape = tuple(shape)
        if self.output == LIKE_INPUT:
            return shape
        if not shape:  # Note [Sharding by rows]: a 0-d tensor counts as one row
            shape = (1,)
        if self.output == ROWS_SCATTERED:
            return (row_range(shape[0], size, rank)[1],) + shape[1:]
        if rows is None:
            rows = shape[0] * size if self.output == ROWS_GATHERED else shape[0]
        return (rows,) + shape[1:]


_REDUCTION = ("reduce_op", "prescale", "postscale")

ALLREDUCE = Collective(
    "allreduce", int(OpType.ALLREDUCE), _REDUCTION, LIKE_INPUT, WRITTEN, groupable=True,
    gradient=Gradient("allreduce", SAME_REDUCTION, sum_or_average=True))
ALLGATHER = Collective(
    "allgather", int(OpType.ALLGATHER), (), ROWS_GATHERED, RECEIVED, groupable=True,
    gradient=Gradient("allreduce", AVERAGED, OWN_ROWS),
    scalar_as_row=True)
BROADCAST = Collective(
    "broadcast", int(OpType.BROADCAST), ("root_rank",), LIKE_INPUT, WRITTEN, groupable=False,
    gradient=Gradient("allreduce", AVERAGED, ON_ROOT))
ALLTOALL = Collective(
    "alltoall", int(OpType.ALLTOALL), ("splits",), ROWS_RECEIVED, RECEIVED_AND_SPLITS,
    groupable=False,
    gradient=Gradient("alltoall", RECEIVED_SPLITS))
REDUCESCATTER = Collective(
    "reducescatter", int(OpType.REDUCESCATTER), _REDUCTION, ROWS_SCATTERED, RECEIVED,
    groupable=True,
    gradient=Gradient("allgather", then=SCALED, sum_or_average=True),
    scalar_as_row=True)

COLLECTIVES = (ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER)
BY_KIND = {c.kind: c for c in COLLECTIVES}
BY_KIND.update({c.grouped_kind: c for c in COLLECTIVES if c.groupable})


def member_name(group, index):
    """The name of a group's member: "<group>.<index>", the same on every
    binding (Horovod's), so a torch and a NumPy group of one name agree."""
    return f"{group}.{index}"


class Finishing:
    """What synchronize() returns for one binding's handles, per `finish`
    kind of the table. from_core(raw, shape, like) makes the binding's tensor
    of the core's output bytes, of `like`'s dtype (and device);
    splits_of(received, like) its tensor of received splits, of `like`'s
    kind. Each finisher is finish(payload, results), as
    hvdlite/common/handles.py calls it; a payload is always (input, output
    or what finishing needs besides), keeping both alive until then."""

    def __init__(self, from_core, splits_of):
        self._from_core = from_core
        self._splits_of = splits_of
        self._by_finish = {WRITTEN: written, RECEIVED: self.received,
                           RECEIVED_AND_SPLITS: self.received_and_splits}

    def of(self, collective):
        """The finisher of `collective`'s results."""
        return self._by_finish[collective.finish]

    def received(self, payload, results):
        """The core's output as a tensor of the input's dtype; payload: (input,
        None)."""
        raw, shape, _, _ = results[0]
        return self._from_core(raw, shape, payload[0])

    def received_and_splits(self, payload, results):
        """(received rows, received splits); payload: (input, what the splits
        are made like)."""
        like, splits_like = payload
        raw, shape, received, _ = results[0]
        return self._from_core(raw, shape, like), self._splits_of(received, splits_like)


def written(payload, results):
    """The output allocated before the call; payload: (input, output)."""
    return payload[1]


def each(parts, results):
    """A group's results, in input order: each member finished as it would be
    alone; parts: one (finish, payload) per member."""
    return [finish(payload, (result,)) for (finish, payload), result in zip(parts, results)]
