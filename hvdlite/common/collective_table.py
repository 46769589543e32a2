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
  - its gradient rule (`gradient`): which collective its gradient is, which
    every binding's autograd glue implements alike.
A binding supplies `Finishing(from_core, splits_of)`: turning the core's
output bytes into its tensor, and a received-splits list into its splits.
Adding a collective starts with one row here (docs/development.md, "Adding a
collective").
"""
from dataclasses import dataclass

from hvdlite.common.ops import OpType
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


@dataclass(frozen=True)
class Collective:
    """One operation as every binding sees it (Note [The binding layer as a table])."""
    kind: str
    op: int
    fields: tuple
    output: str
    finish: str
    groupable: bool
    gradient: str
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
    gradient="allreduce of the output gradient, with the same op and scale factors")
ALLGATHER = Collective(
    "allgather", int(OpType.ALLGATHER), (), ROWS_GATHERED, RECEIVED, groupable=True,
    gradient="allreduce (Average) of the output gradient, then this rank's rows of it",
    scalar_as_row=True)
BROADCAST = Collective(
    "broadcast", int(OpType.BROADCAST), ("root_rank",), LIKE_INPUT, WRITTEN, groupable=False,
    gradient="allreduce (Average) of the output gradient on the root; zeros elsewhere")
ALLTOALL = Collective(
    "alltoall", int(OpType.ALLTOALL), ("splits",), ROWS_RECEIVED, RECEIVED_AND_SPLITS,
    groupable=False,
    gradient="alltoall of the output gradient back, with the received splits as splits")
REDUCESCATTER = Collective(
    "reducescatter", int(OpType.REDUCESCATTER), _REDUCTION, ROWS_SCATTERED, RECEIVED,
    groupable=True,
    gradient="allgather of the output gradient, scaled as the op and factors scaled it",
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
