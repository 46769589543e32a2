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
    outputs; 0 with HOROVOD_FUSION_THRESHOLD=0, or before hvdlite.init(),
    and then nothing merges), so that a big model's first gradients are still reduced while
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
# Note [Arrays per merged call]
# Merging a collective into a call of k arrays costs O(k) work (the call is
# made again, its members' results retargeted and their uses checked), so a
# call of k separate collectives costs O(k^2) to lower. Lowering a step of
# 1,000 separate allreduces (jax 0.10.2, this machine) took 2.1 s merged
# into one call made by JAX's lowering each time and 0.6 s made from the
# previous call's attributes (_rebuild), against 0.11 s unmerged. So a call
# takes at most this many arrays: 0.25-0.32 s for 1,000 and 0.86-0.90 s for
# 3,000 (0.10-0.11 and 0.37-0.46 s unmerged); and XLA's cost per call is a
# few microseconds (bench/jax_crossing.py --step), so a step of 1,000
# gradients in 4 calls costs what it would in one.
_MOST_ARRAYS = 256
_UNKNOWN_SITE = "0:1:00:"  # [file "", line "0", function ""], as ffi._packed writes a site


@dataclasses.dataclass
class _Group:
    """The custom call of the collectives merged so far in one block, and
    per array what the merged call is made of."""
    block: object          # the ir.Block of the call
    key: tuple             # the attributes of _KEY_ATTRIBUTES
    call: object           # the current custom call (an ir.Operation)
    size: int = 0          # bytes of inputs and outputs
    operands: list = dataclasses.field(default_factory=list)
    result_types: list = dataclasses.field(default_factory=list)
    operand_layouts: list = dataclasses.field(default_factory=list)
    result_layouts: list = dataclasses.field(default_factory=list)
    aliases: list = dataclasses.field(default_factory=list)  # the aliased arrays' alias attributes
    names: list = dataclasses.field(default_factory=list)    # per array: its packed name
    sites: list = dataclasses.field(default_factory=list)    # per array: its packed call site
    forwards: list = dataclasses.field(default_factory=list)  # per array: the reshape JAX holds
    forwarded: set = dataclasses.field(default_factory=set)  # the forwards' results


def merged_call(jax, target, ctx, operands, attributes, aliased):
    """The results of collective `attributes` on `operands` (aliased[i]: its
    result i aliases operand i), lowered into the open group's custom call
    when it can merge, else as a new group (Note [One custom call for a
    step's collectives]); a plain custom call where shapes are dynamic."""
    from jax._src.lib.mlir import ir
    results = _emit(jax, target, ctx, operands, aliased, attributes)
    if not results or not _static(ctx.avals_in) or not _static(ctx.avals_out):
        return results
    call = results[0].owner.operation
    store = ctx.module_context.cached_primitive_lowerings
    block = ir.InsertionPoint.current.block
    key = tuple(attributes[name] for name in _KEY_ATTRIBUTES)
    size = sum(_bytes(a) for a in ctx.avals_in) + sum(_bytes(a) for a in ctx.avals_out)
    group = store.get(_GROUP_KEY)
    if group is None or not _can_join(group, block, key, size, operands):
        group = _Group(block=block, key=key, call=None)
        store[_GROUP_KEY] = group
    names = _split(attributes["names"])
    _add(group, call, operands, aliased, names, attributes["call_site"] or _UNKNOWN_SITE, size)
    _rebuild(group, call)
    return [forward.result for forward in group.forwards[-len(names):]]


def _can_join(group, block, key, size, operands):
    """Whether a collective of attributes `key` on `operands` lowered in
    `block` merges into `group`: nothing uses the group's results yet, the
    new call's operands among them (a chain), and the rest match."""
    if group.block != block or group.key != key or group.size + size > _threshold() or \
            len(group.operands) + len(operands) > _MOST_ARRAYS:
        return False
    return not any(operand in group.forwarded for operand in operands) and \
        not any(_used(forward) for forward in group.forwards)


def _used(operation):
    for _ in operation.result.uses:
        return True
    return False


def _threshold():
    """The core's fusion threshold (HOROVOD_FUSION_THRESHOLD) now, in bytes;
    0, so that nothing merges, when hvdlite is not initialized (a step
    lowered before init() to be inspected or exported: its calls stay
    separate, as the core's setting is not known yet)."""
    if not basics.is_initialized():
        return 0
    return int(basics.core().tuned_parameters()["fusion_threshold"])


def _add(group, call, operands, aliased, names, site, size):
    """Appends the arrays of `call`, a custom call just lowered alone, to the
    group's members."""
    from jax._src.lib.mlir import ir
    first = len(group.operands)
    group.operands += operands
    group.result_types += [result.type for result in call.results]
    group.operand_layouts += list(ir.ArrayAttr(call.attributes["operand_layouts"]))
    group.result_layouts += list(ir.ArrayAttr(call.attributes["result_layouts"]))
    group.aliases += [ir.Attribute.parse(
        f"#stablehlo.output_operand_alias<output_tuple_indices = [{first + i}], "
        f"operand_index = {first + i}, operand_tuple_indices = []>")
        for i, alias in enumerate(aliased) if alias]
    group.names += names
    group.sites += [site] * len(names)
    group.size += size


def _rebuild(group, call):
    """Replaces the group's custom call and `call` (its newest member's,
    lowered alone) by one custom call of every member, placed where `call`
    is; points each member's reshape at its result (a new reshape for the
    new members) and erases the calls it replaces. The call is made from
    `call`'s attributes with the lists of every member, not lowered again,
    so that merging k collectives costs O(k) MLIR work each, little Python."""
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import hlo
    merged = call if group.call is None else _merged(group, call)  # a new group's is `call` itself
    previous = merged
    for i, result in enumerate(merged.results):
        if i < len(group.forwards):
            forward = group.forwards[i]
            forward.operands[0] = result
            forward.move_after(previous)
        else:
            with ir.InsertionPoint.after(previous):
                forward = hlo.ReshapeOp(result.type, result).operation
            group.forwards.append(forward)
            group.forwarded.add(forward.result)
        previous = forward
    if merged is not call:
        call.erase()
        group.call.erase()
    group.call = merged


def _merged(group, call):
    """A new custom call of every member of the group, before `call`."""
    from jax._src.lib.mlir import ir
    attributes = {name: call.attributes[name] for name in call.attributes}
    attributes["operand_layouts"] = ir.ArrayAttr.get(group.operand_layouts)
    attributes["result_layouts"] = ir.ArrayAttr.get(group.result_layouts)
    attributes.pop("output_operand_aliases", None)
    if group.aliases:
        attributes["output_operand_aliases"] = ir.ArrayAttr.get(group.aliases)
    config = {named.name: named.attr for named in ir.DictAttr(attributes["mhlo.backend_config"])}
    config["names"] = ir.StringAttr.get("".join(group.names))
    config["call_site"] = ir.StringAttr.get(_sites(group.sites))
    attributes["mhlo.backend_config"] = ir.DictAttr.get(config)
    return ir.Operation.create("stablehlo.custom_call", results=group.result_types,
                               operands=group.operands, attributes=attributes, loc=call.location,
                               ip=ir.InsertionPoint(call))


def _emit(jax, target, ctx, operands, aliased, attributes):
    """The results of one custom call of `operands`, lowered alone."""
    aliases = {i: i for i, alias in enumerate(aliased) if alias}
    call = jax.ffi.build_ffi_lowering_function(
        target, has_side_effect=True, **({"operand_output_aliases": aliases} if aliases else {}))
    return list(call(ctx, *operands, **attributes).results)


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
