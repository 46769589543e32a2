"""The one way a binding asks the core for a collective: resolve the name,
process set and reduce op, queue the request by keyword (the fields of
csrc/api/api.h's hvdlite_request), and register the handle that
synchronize() takes. hvdlite.torch and hvdlite.numpy differ only in how they
turn a tensor into (address, dtype code, shape, device); everything else goes
through here. hvdlite.tensorflow and hvdlite.jax (inside jit) queue through
the C API instead, but check their arguments here too, so that every binding
refuses a bad one in the same words (Note [One way in] in
csrc/api/session.h).
"""
from hvdlite.common import basics
from hvdlite.common.exceptions import UnsupportedOperationError
from hvdlite.common.collective_table import member_name
from hvdlite.common.handles import table
from hvdlite.common.ops import DataType, OpType, ReduceOp, resolve_op

ALLREDUCE = int(OpType.ALLREDUCE)
ALLGATHER = int(OpType.ALLGATHER)
BROADCAST = int(OpType.BROADCAST)
ALLTOALL = int(OpType.ALLTOALL)
REDUCESCATTER = int(OpType.REDUCESCATTER)

# The bindings that own handles (Note in hvdlite/common/handles.py).
NUMPY = "hvdlite.numpy"
TORCH = "hvdlite.torch"

__all__ = ["enqueue", "run", "tensor_name", "process_set_id", "reduce_op", "scale", "root_rank",
           "reduction", "unsupported_dtype", "add_handle", "add_group", "synchronize", "poll", "barrier", "join",
           "add_process_set", "remove_process_set"]


# Note [Core entry points bound once]
# enqueue, run, allreduce_array and allreduce_array_async are hvdlite._core's
# own functions, with no Python frame in between (every gradient and every
# small allreduce calls one: Note [Keyword requests] in
# csrc/python/bind_collectives.cc). Importing
# hvdlite loads no core, so they are not attributes of this module until
# first asked for: the module's __getattr__ (PEP 562) then loads the core and
# binds them all here, once, and removes itself. Every caller,
# `requests.enqueue(...)` and a name imported earlier alike, gets the core's
# function; no path stays slow.
#   enqueue(**request) -> core handle: queues one request. Keywords:
#     hvdlite_request's fields (op, name, process_set_id, input, output, dtype,
#     shape, reduce_op, output_bytes, prescale, postscale, root_rank, splits,
#     device, ready_event, stream, group, group_size, process_set_ranks,
#     removed_process_set_id) and wake. A bad code raises ValueError, naming
#     the tensor, before anything is queued.
#   run(**request) -> value: queues one request and waits for it on this
#     thread, in one call (Note [One call for a synchronous collective]); for
#     requests whose result lands in the buffers passed (not alltoall, nor
#     allgather or reducescatter without output and output_bytes: Note
#     [Outputs into the caller's buffer] in csrc/api/caller_output.cc).
#   allreduce_array(array, name, op, prescale, postscale, process_set,
#     average) -> array or None: hvdlite.numpy's allreduce_ in one call for
#     its common arguments (Note [In-place allreduce of an array in one
#     call]); None, having done nothing, where the general path must decide.
#   allreduce_array_async(the same arguments) -> (core handle, dtype code) or
#     None: allreduce_async_ likewise, without the wait (Note [Asynchronous
#     allreduce of an array in one call]); the caller adds the entry to the
#     handle table.
_CORE_ENTRY_POINTS = ("enqueue", "run", "allreduce_array", "allreduce_array_async")


def __getattr__(name):
    """Binds the core's entry points on first use (Note [Core entry points
    bound once])."""
    if name not in _CORE_ENTRY_POINTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    core = basics.core()
    module = globals()
    module.update({entry: getattr(core, entry) for entry in _CORE_ENTRY_POINTS})
    # Nothing is left to bind: without a __getattr__, CPython can specialize
    # every `requests.<entry point>(...)` read (3.11+ does not specialize
    # attribute reads of a module that defines one: 12 ns more a call).
    module.pop("__getattr__", None)
    return module[name]


def tensor_name(name, kind):
    """The user's name, or Horovod's automatic one ("allreduce.noname.3"):
    every rank must then issue unnamed collectives of a kind in one order."""
    return name or basics.auto_name(kind)


def process_set_id(process_set):
    """The core's id of a ProcessSet (None: the global set); ValueError for one
    that was never registered."""
    if process_set is None:
        return 0
    set_id = process_set.process_set_id
    return set_id if set_id is not None else process_set._require_id()


reduce_op = resolve_op


def scale(value, what):
    """A scale factor as a float; ValueError naming the argument otherwise."""
    if value.__class__ is float:
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {value!r}") from None


def root_rank(root, name):
    """A broadcast's root as an int; ValueError naming the tensor otherwise."""
    try:
        return int(root)
    except (TypeError, ValueError):
        raise ValueError(f"broadcast of '{name}': root_rank must be a rank number, "
                         f"got {root!r}") from None


# The ops a call may name without further checks (Adasum has its own), by
# themselves and by code, and None for the default: reduction()'s fast path.
_PLAIN_OPS = {**{op: op for op in ReduceOp if op is not ReduceOp.Adasum}, None: ReduceOp.Average}


def reduction(op, average, prescale_factor, postscale_factor, process_set, kind="allreduce"):
    """(reduce op, prescale, postscale, process set id) from the arguments of a
    reducing collective (kind: "allreduce" or "reducescatter"), checked."""
    # The common call first, as cheaply as Python allows (every small
    # allreduce pays for this): no average=, a plain op, float scales and a
    # registered set. Anything else takes the checks below.
    if average is None and prescale_factor.__class__ is float and \
            postscale_factor.__class__ is float and process_set is not None:
        try:
            plain = _PLAIN_OPS.get(op)
        except TypeError:  # unhashable: resolve_op says what is wrong
            plain = None
        set_id = process_set.process_set_id
        if plain is not None and set_id is not None:
            return plain, prescale_factor, postscale_factor, set_id
    op = resolve_op(op, average)
    set_id = process_set_id(process_set)
    if op is ReduceOp.Adasum and kind != "allreduce":
        # Before the core (its InvalidArgument would be a plain ValueError):
        # Horovod raises a RuntimeError here.
        raise UnsupportedOperationError(f"op=Adasum is supported by allreduce only, not {kind}; "
                                        f"use op=Sum or op=Average")
    if op is ReduceOp.Adasum and set_id != 0:
        raise NotImplementedError(ADASUM_ON_A_SET)  # Horovod's type and words, before the core
    return (op, scale(prescale_factor, "prescale_factor"), scale(postscale_factor, "postscale_factor"),
            set_id)


SUPPORTED_DTYPES = ", ".join(sorted(m.name.lower() for m in DataType))


def unsupported_dtype(kind, name, dtype):
    """The ValueError for a tensor of a dtype the core cannot carry, in every
    binding's words: kind is the collective ("allreduce"), dtype the
    framework's (torch.complex64, complex64)."""
    return ValueError(f"{kind} of '{name}': dtype {dtype} is not supported by hvdlite; use one of "
                      f"{SUPPORTED_DTYPES}")


ADASUM_ON_A_SET = ("Adasum does not support non-global process sets yet; use op=Average or Sum "
                   "on a process set")


add_handle = table.add


def add_group(binding, tensors, name, kind, start, finish):
    """Starts one member per tensor as one group, negotiated and fused
    together, named "<group>.<index>". start(tensor, member_name, group,
    group_size) queues a member and returns (core entry, part); the handle's
    finish(parts, results) gets every member's part and result."""
    group = tensor_name(name, kind)
    tensors = list(tensors)
    entries, parts = [], []
    for index, tensor in enumerate(tensors):
        entry, part = start(tensor, member_name(group, index), group, len(tensors))
        entries.append(entry)
        parts.append(part)
    return table.add(binding, entries, finish, parts)


# synchronize(handle, binding) and poll(handle, binding): the table's own,
# with no frame in between (synchronize runs once per gradient).
synchronize = table.synchronize
poll = table.poll


def _run(**request):
    """Queues a control request and waits for it (this thread runs the
    cycle); returns its value."""
    return basics.core().run(**request)


def barrier(process_set=None):
    """Returns once every rank of process_set has called barrier().

    Args:
        process_set (ProcessSet | None): the ranks that wait for each other; None: all.
    """
    _run(op=int(OpType.BARRIER), name=basics.auto_name("barrier"),
         process_set_id=process_set_id(process_set))


def join(process_set=None):
    """Marks this rank as out of data: it takes part in the other ranks'
    allreduces of process_set with zeros (an Average still divides by the
    set's size) until every rank of the set has joined; their allgather,
    broadcast, alltoall and reducescatter fail meanwhile.

    Args:
        process_set (ProcessSet | None): the set to join; None: all ranks.

    Returns:
        int: the last rank to join, the same on every rank.
    """
    return _run(op=int(OpType.JOIN), name="__join", process_set_id=process_set_id(process_set))


def add_process_set(ranks):
    """Adds a process set of these global ranks on every rank; returns its id."""
    return _run(op=int(OpType.ADD_PROCESS_SET), name=basics.auto_name("__add_process_set"),
                process_set_ranks=list(ranks))


def remove_process_set(set_id):
    """Removes the process set `set_id` on every rank."""
    _run(op=int(OpType.REMOVE_PROCESS_SET), name=basics.auto_name("__remove_process_set"),
         removed_process_set_id=set_id)
