"""hvdlite._core's one-call entry points for torch tensors, bound once.

Note [Torch's core calls bound once]
tensor_call (Note [Torch collectives in one call]) and
allreduce_tensor_async (Note [Asynchronous allreduce of a tensor in one
call], both in csrc/python/torch_one_call.cc) are the core's own functions,
called with no Python frame in between: every synchronous collective and
every gradient's allreduce_async_ offers itself to one of them first (Note
[One call, else the general path] in hvdlite/torch/collectives.py). They need
torch's types first (set_torch_types), and importing hvdlite.torch loads no
core, so they are not attributes of this module until first asked for: the
module's __getattr__ (PEP 562) then loads the core, tells it torch's types
and the handle table (Note [The handle table's common cases in C] in
csrc/python/handle_table.cc), binds them all here, once, and removes itself,
as hvdlite/common/requests.py does (Note [Core entry points bound once]):
CPython 3.11+ does not specialize attribute reads of a module that defines a
__getattr__, and `core_calls.tensor_call` is read on every call.
Callers write `core_calls.tensor_call(...)`, a module attribute read, so no
alias can keep a slower path.
    tensor_call(op, in_place, grouped, tensors, name, process_set,
        *arguments) -> result or None
    allreduce_tensor_async(in_place, tensor, name, op, prescale, postscale,
        process_set, average) -> handle or None
    synchronize_handle(handle, binding) -> result (the handle table's
        synchronize)
"""
import torch

from hvdlite.common import basics
from hvdlite.common.handles import table
from hvdlite.common.requests import TORCH
from hvdlite.torch.tensors import DTYPE_CODES, from_core_output

_CORE_ENTRY_POINTS = ("tensor_call", "allreduce_tensor_async", "synchronize_handle")


def __getattr__(name):
    """Binds the core's torch entry points on first use (Note [Torch's core
    calls bound once])."""
    if name not in _CORE_ENTRY_POINTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    core = basics.core()
    core.set_torch_types((torch.Tensor, torch.nn.Parameter), dict(DTYPE_CODES), torch.empty_like,
                         from_core_output, TORCH)
    table.register_with(core)
    module = globals()
    module.update({entry: getattr(core, entry) for entry in _CORE_ENTRY_POINTS})
    module.pop("__getattr__", None)  # nothing is left to bind
    return module[name]
