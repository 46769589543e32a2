"""One custom call for a step's separate collectives on the CPU: the CPU
lowering (hvdlite/jax/ffi.py) folds each collective it lowers into the
custom call of the one lowered before it where nothing can tell the
difference (Note [One custom call for a step's collectives]).

Note [One custom call for a step's collectives]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Training code reduces each gradient with its own hvd.allreduce, and each
used to be its own XLA custom call. The CPU handler does not block, so the
core already fused their requests (Note [Asynchronous calls on the CPU] in
csrc/jax/collective_handler.cc), but XLA:CPU's thunk executor still spent
what it spends on any instruction on each call: 100 custom calls that only
return a completed future cost a step 1.48x hvdlite.torch's whole
asynchronous step of the same 100 tensors (bench/jax_crossing.py --step),
against 1.44-1.66x for the same tensors in one grouped_allreduce. So the
lowering merges: when it lowers a collective, and the group of calls it
lowered last in the same block of the same module
  - has the same kind and attributes (op, reduce_op, prescale, postscale,
    root_rank, process set; names and call sites are the members' own),
  - has no result used yet (so no operand of the new call can depend on
    it, and nothing lowered since waits for it), and
  - stays within the fusion threshold (HOROVOD_FUSION_THRESHOLD, the core's
    setting when the step is lowered: the bytes of its members' inputs and
    outputs), so that a big model's first gradients are still reduced while
    its last ones are computed, as the core would fuse them,
it replaces that group's custom call by one with every member's operands,
placed where the new collective is lowered (after every operand's
definition). JAX keeps each lowered result as an MLIR value, so a member's
results are never the call's own: each is a reshape to its own shape of the
call's result, retargeted to the new call and moved after it, which XLA's
simplifier removes (no copy or extra instruction survives compilation:
tests/jax/test_jax_merged_calls.py). Anything else starts a new group: a
use of a member's result (a chain of collectives stays a chain), another
block (the bodies of scan, fori_loop, while and cond, a nested jit that
JAX lowers as its own function), other attributes, the threshold.

A merged call is still one request per array, each under its own name and
with its own call site (the handler takes one site per array: Note [A call
site per array] in csrc/jax/collective_call.h), each aliased as it would be
alone (Note [Arguments read where they are] in ffi.py), so the core
negotiates, fuses and reports them as it did the separate calls; it is not
a Horovod group, and a failure names the member that failed and its line.
The step only starts the merged call once all its inputs are ready, which
the size cap bounds.

Every rank lowers the same program the same way, so all merge alike. A
rank whose program differs (other shapes, a different trace), or that read
another threshold (HOROVOD_AUTOTUNE changes it while the job runs), may
merge differently, and that cannot hang it: on the CPU no call waits for a peer
before it returns (the handler queues and returns a future), and the core
negotiates each request by its name alone, so what ranks disagree on is what
it would be without merging, a mismatch or a stall the core reports.
"""
import dataclasses

import numpy as np

from hvdlite.common import basics

# Where a module's open group lives while it is lowered: the module
# context's own dictionary of lowerings, which lives and dies with it.
_GROUP_KEY = ("hvdlite.jax.merged_calls", "open group")
# The attributes that must match for two calls to merge.
_KEY_ATTRIBUTES = ("op", "reduce_op", "prescale", "postscale", "root_rank", "process_set_id")
_UNKNOWN_SITE = "0:1:00:"  # [file "", line "0", function ""], as ffi._packed writes a site


@dataclasses.dataclass
class _Group:
    """The custom call of the collectives merged so far in one block, and
    per array what a rebuilt call needs."""
    block: object          # the ir.Block of the call
    key: tuple             # the attributes of _KEY_ATTRIBUTES
    attributes: dict       # the first member's attributes (names, call site: its own)
    operands: list
    avals_in: list
    avals_out: list
    aliased: list          # per array: whether its result aliases its operand
    names: list            # per array: its packed name
    sites: list            # per array: its packed call site
    forwards: list         # per array: the reshape that JAX holds as its result
    call: object = None    # the current custom call (an ir.Operation)
    size: int = 0          # bytes of inputs and outputs


def merged_call(jax, target, ctx, operands, attributes, aliased):
    """The results of collective `attributes` on `operands` (aliased[i]: its
    result i aliases operand i), lowered into the open group's custom call
    when it can merge, else as a new group (Note [One custom call for a
    step's collectives]); a plain custom call where shapes are dynamic."""
    from jax._src.lib.mlir import ir
    if not _static(ctx.avals_in) or not _static(ctx.avals_out):
        return _emit(jax, target, ctx, ctx.avals_in, ctx.avals_out, operands, aliased, attributes)
    store = ctx.module_context.cached_primitive_lowerings
    block = ir.InsertionPoint.current.block
    key = tuple(attributes[name] for name in _KEY_ATTRIBUTES)
    size = sum(_bytes(a) for a in ctx.avals_in) + sum(_bytes(a) for a in ctx.avals_out)
    names = _split(attributes["names"])
    site = attributes["call_site"] or _UNKNOWN_SITE
    group = store.get(_GROUP_KEY)
    if group is None or not _can_join(group, block, key, size, operands):
        group = _Group(block=block, key=key, attributes=dict(attributes), operands=[], avals_in=[],
                       avals_out=[], aliased=[], names=[], sites=[], forwards=[])
        store[_GROUP_KEY] = group
    group.operands += operands
    group.avals_in += ctx.avals_in
    group.avals_out += ctx.avals_out
    group.aliased += aliased
    group.names += names
    group.sites += [site] * len(names)
    group.size += size
    _rebuild(jax, target, ctx, group)
    return [forward.result for forward in group.forwards[-len(names):]]


def _can_join(group, block, key, size, operands):
    """Whether a collective of attributes `key` on `operands` lowered in
    `block` merges into `group`: nothing uses the group's results yet, the
    new call's operands among them (a chain), and the rest match."""
    if group.block != block or group.key != key or group.size + size > _threshold():
        return False
    results = [forward.result for forward in group.forwards]
    return not any(_used(forward) for forward in group.forwards) and \
        not any(operand == result for operand in operands for result in results)


def _used(operation):
    for _ in operation.result.uses:
        return True
    return False


def _threshold():
    """The core's fusion threshold (HOROVOD_FUSION_THRESHOLD) now, in bytes."""
    return int(basics.core().tuned_parameters()["fusion_threshold"])


def _rebuild(jax, target, ctx, group):
    """Emits the group's custom call with every member at the insertion
    point, points each member's reshape at its result (a new reshape for
    the new members) and erases the call it replaces."""
    from jax._src.lib.mlir.dialects import hlo
    from jax._src.lib.mlir import ir
    attributes = dict(group.attributes, names="".join(group.names), call_site=_sites(group.sites))
    call = _emit(jax, target, ctx, group.avals_in, group.avals_out, group.operands, group.aliased,
                 attributes)
    operation = call[0].owner.operation
    previous = operation
    for i, result in enumerate(call):
        if i < len(group.forwards):
            forward = group.forwards[i]
            forward.operands[0] = result
            forward.move_after(previous)
        else:
            with ir.InsertionPoint.after(previous):
                forward = hlo.ReshapeOp(result.type, result).operation
            group.forwards.append(forward)
        previous = forward
    if group.call is not None:
        group.call.erase()
    group.call = operation


def _emit(jax, target, ctx, avals_in, avals_out, operands, aliased, attributes):
    aliases = {i: i for i, alias in enumerate(aliased) if alias}
    call = jax.ffi.build_ffi_lowering_function(
        target, has_side_effect=True, **({"operand_output_aliases": aliases} if aliases else {}))
    with_all = dataclasses.replace(ctx, avals_in=list(avals_in), avals_out=list(avals_out))
    return list(call(with_all, *operands, **attributes).results)


def _sites(sites):
    """One site for the whole call where every array has the same, else
    one per array (Note [A call site per array] in csrc/jax/collective_call.h)."""
    if all(site == sites[0] for site in sites):
        return "" if sites[0] == _UNKNOWN_SITE else sites[0]
    return "".join(sites)


def _split(packed):
    """The packed names of one call, each still packed ("<length>:<name>",
    the length in UTF-8 bytes as ffi._packed counts it)."""
    pieces, data = [], packed.encode()
    while data:
        colon = data.index(b":")
        end = colon + 1 + int(data[:colon])
        pieces.append(data[:end].decode())
        data = data[end:]
    return pieces


def _static(avals):
    return all(isinstance(d, (int, np.integer)) for a in avals for d in a.shape)


def _bytes(aval):
    return int(np.prod(aval.shape, dtype=np.int64)) * np.dtype(aval.dtype).itemsize
