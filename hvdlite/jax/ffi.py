"""The fast way from a jax.jit-compiled step to the core: an XLA FFI custom
call of a small C++ handler (csrc/jax/collective_handler.cc) that queues the
requests through api.h and waits for them, about 10 us per crossing against
0.5-3 ms for an ordered io_callback (docs/jax.md, bench/jax_crossing.py).
There are two handlers under one target name: one for XLA's CPU platform (host
buffers) and one for its CUDA platform (device buffers on XLA's stream, NCCL
or the host path as for torch's CUDA tensors: Note [XLA's stream] in the
handler), so one lowering serves a step compiled for either.

A wheel carries the handler built in advance against the oldest jaxlib it
serves (hvdlite/common/prebuilt.py; XLA accepts handlers built against older
FFI headers). Otherwise (a jaxlib older than that, an install built from
source) it is compiled on first use against the installed jaxlib's FFI
headers and cached like the TensorFlow op library (hvdlite/common/
compiled_library.py), and a log line at warning says so and why. When it
cannot be used, hvdlite.jax falls back to the ordered io_callback (Note [Host
callback] in collectives.py) and says why, once, in a log line at warning:
HVDLITE_JAX_FFI=0, a default backend hvdlite has no handler for (ROCm, TPU),
no compiler, a failed build, or a JAX without the internals this module
lowers through.

Note [Ordered custom calls]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
A handler blocks until every rank of the process set has queued the same
tensor, so every rank must run its collectives in one order: two collectives
with no data dependency between them, run in different orders (or at once)
on two ranks, would wait for each other forever. XLA is free to schedule
independent instructions, side effects or not (has_side_effect only keeps a
call from being pruned or merged), so the order is made a data dependency:
the collective primitive carries JAX's *ordered IO effect*, the very one of
`io_callback(ordered=True)`, and its lowering threads that effect's token
through the custom call (operand 0 in, result 0 out). JAX threads the token
in program order through lax.cond branches, while/scan/fori_loop bodies and
nested jit calls, and from one compiled step to the next; anything JAX does
not allow an ordered effect in (vmap, pmap) is refused at trace time, as it
is for the ordered io_callback. Sharing io_callback's effect also puts
collectives that fell back to io_callback on the same chain.

Note [Unordered on the CPU]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
The CPU handler does not block: it queues its requests and returns a future
that the core completes (Note [Asynchronous calls on the CPU] in
csrc/jax/collective_handler.cc), so that a step's separate collectives are all
queued at once and fuse. A call that waits for nobody needs no common order,
and the token would undo the gain (each call would wait for the previous
one's result), so on the CPU its custom call takes no token. Nor does the
primitive of a step traced for the CPU carry the ordered effect: JAX runs a
compiled step that has any effect through its Python dispatch path, about
8 us per argument (0.8 ms for a step of 100 gradients, more than their fused
allreduce costs), where an effect-free one takes its C++ fast path. And as
XLA:CPU spends on every custom call what it spends on any instruction, the
CPU lowering merges a step's separate collectives into one custom call
where nothing can tell (Note [One custom call for a step's collectives] in
merged_calls.py). That
primitive is instead never pruned (its DCE rule keeps it, as the effect did;
XLA keeps it for has_side_effect), and vmap refuses it for want of a batching
rule. Allreduce and broadcast write into their input's buffer (an
operand-result alias), so XLA cannot hand a pending call's input to a later
instruction, which would then wait for it; except where the input is one of
the step's own arguments (Note [Arguments read where they are]). The CUDA
handler blocks (it returns once the batch is queued on XLA's stream), so a
step traced where CUDA is JAX's default backend uses the ordered primitive,
whose calls stay on the token chain (on the CPU, its lowering lets the token
pass by).

Note [Arguments read where they are]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
An aliased operand that is an argument of the step the caller keeps (not
donated) costs a copy: XLA may not write into the caller's buffer, so it
copies the argument into a new one before the call, one copy instruction per
collective (a step that reduces its 100 arguments ran 100 copies, each one
more instruction for XLA's executor to hand out before its call). Yet XLA
never reuses such a buffer while the step runs, which was the reason to
alias, so a call reads it where it is and the core writes the result into
XLA's own result buffer: the lowering aliases every other operand (computed
values, donated arguments, and arguments of nested functions, which may be
computed values once XLA inlines them) and leaves these out. 100 x 4 KiB
allreduces of a step's arguments, 2 ranks, same run: 7 % less CPU time a
step (0.73 against 0.79 ms, median of 15 rounds at load 7).
"""
import ctypes
import dataclasses
import glob
import inspect
import os
import re

import numpy as np

from hvdlite.common import basics, compiled_library, config, logs, prebuilt, requests
from hvdlite.common.carried_failures import carried_failure
from hvdlite.common.ops import OpType
from hvdlite.jax import merged_calls

TARGET = "hvdlite_collective"
IO_CALLBACK, FFI = "io_callback", "ffi"
# The handler's symbol for each XLA platform (as register_ffi_target names
# it) and the lowering platform it serves; the CPU's is asynchronous and
# takes no ordering token (Note [Unordered on the CPU]).
HANDLERS = {"cpu": ("HvdliteCollective", "cpu"), "CUDA": ("HvdliteCollectiveCuda", "cuda")}

_default = None      # FFI or IO_CALLBACK, once decided
_forced = None       # set_jit_path's choice, if any
_primitive = None    # the ordered collective primitive, once the handler is registered
_cpu_primitive = None  # the effect-free one of steps traced for the CPU (Note [Unordered on the CPU])
_unavailable = None  # why the FFI path cannot be used here, once found out


def build_plan():
    """What to compile and where the result is cached (the cache key covers
    jax/jaxlib versions, the FFI headers' folder, compiler, flags, hvdlite's
    headers and the handler's sources)."""
    import jax
    import jaxlib
    package = compiled_library.package_dir()
    include = os.path.join(package, "include")
    sources = sorted(glob.glob(os.path.join(include, "jax", "*.cc")))
    if not sources:
        raise RuntimeError(f"hvdlite's JAX FFI sources are missing from {include}/jax; "
                           "reinstall hvdlite")
    compiler = compiled_library.compiler("hvdlite.jax compiles its XLA FFI handler")
    flags = ["-shared", "-fPIC", "-O2", "-std=c++17", "-w", "-I" + include,
             "-I" + jax.ffi.include_dir()]
    key = compiled_library.key(
        [jax.__version__, jaxlib.__version__, compiler, package] + flags,
        sorted(glob.glob(os.path.join(include, "**", "*.h"), recursive=True)) + sources)
    name = f"hvdlite_jax_ffi-jaxlib{jaxlib.__version__}-{key[:16]}.so"
    return {"compiler": compiler, "sources": sources, "flags": flags, "package": package,
            "jaxlib_version": jaxlib.__version__,
            "path": os.path.join(compiled_library.cache_dir("jax"), name)}


def _compile(plan, output):
    core_library = os.path.join(plan["package"], "libhvdlite.so")
    failure = compiled_library.run_all([
        [plan["compiler"]] + plan["flags"] + plan["sources"] +
        ["-o", output, core_library, "-Wl,-rpath," + plan["package"]]])
    if failure is not None:
        raise compiled_library.build_failed(
            f"compiling hvdlite's JAX FFI handler for jaxlib {plan['jaxlib_version']}", failure)


def compiled_path(reason):
    """The handler compiled on first use for this jaxlib (cached); `reason`:
    why no prebuilt one serves, logged with the compile."""
    with compiled_library.needed_because(reason):
        plan = build_plan()
        return compiled_library.cached(
            plan["path"], logs.get("jax"),
            f"compiling the JAX FFI handler for jaxlib {plan['jaxlib_version']}, because {reason} "
            f"(first use; cached in {os.path.dirname(plan['path'])})...",
            lambda output: _compile(plan, output))


def library_path():
    """The handler library for this jaxlib: the wheel's prebuilt one, else
    one compiled first if needed."""
    import jaxlib
    path, reason = prebuilt.jax_handler(jaxlib.__version__)
    return path or compiled_path(reason)


def _load_library():
    """The loaded handler library: the prebuilt one, or one compiled on first
    use when none fits or the prebuilt one does not load; the log says which."""
    import jaxlib
    return compiled_library.load_prebuilt_or_compiled(
        prebuilt.jax_handler(jaxlib.__version__), ctypes.CDLL, compiled_path,
        "XLA FFI handler", f"jaxlib {jaxlib.__version__}", logs.get("jax"))


def ordered_primitive(target, platforms=("cpu",), unordered_platforms=(), in_place=None):
    """A JAX primitive lowering, on each of `platforms`, to the FFI target
    `target` with the ordered IO effect's token as operand and result 0 (Note
    [Ordered custom calls]), and on each of `unordered_platforms` to one that
    takes no token, its results aliasing its operands where
    in_place(attributes) says so (Note [Unordered on the CPU]);
    bind(*arrays, result_avals=(ShapedArray, ...), **attributes)."""
    import jax
    if not hasattr(jax.ffi, "build_ffi_lowering_function"):
        # jax 0.6 has jax.ffi but not this; its steps take the io_callback path.
        raise RuntimeError(f"jax {jax.__version__} has no jax.ffi.build_ffi_lowering_function "
                           "(jax 0.7 and later have it)")
    from jax._src.callback import _OrderedIOEffect as effect  # io_callback(ordered=True)'s
    from jax._src.core import abstract_token
    from jax.extend.core import Primitive
    from jax.interpreters import mlir

    primitive = Primitive(target)
    primitive.multiple_results = True

    @primitive.def_effectful_abstract_eval
    def _abstract_eval(*avals, result_avals, **attributes):
        return result_avals, {effect}

    def _lower(ctx, *operands, result_avals, **attributes):
        token = ctx.tokens_in.get(effect)
        with_token = dataclasses.replace(ctx, avals_in=[abstract_token, *ctx.avals_in],
                                         avals_out=[abstract_token, *ctx.avals_out])
        call = jax.ffi.build_ffi_lowering_function(target, has_side_effect=True)
        token, *results = call(with_token, token, *operands, **attributes).results
        ctx.set_tokens_out(ctx.tokens_in.update_tokens(mlir.TokenSet({effect: token})))
        return results

    def _lower_unordered(ctx, *operands, result_avals, **attributes):
        results = _unordered_call(jax, target, in_place, ctx, operands, attributes)
        ctx.set_tokens_out(ctx.tokens_in)  # the token passes the call by
        return results

    options = _lowering_options(mlir)
    for platform in platforms:
        mlir.register_lowering(primitive, _lower, platform=platform, **options)
    for platform in unordered_platforms:
        mlir.register_lowering(primitive, _lower_unordered, platform=platform, **options)
    return primitive


def _lowering_options(mlir):
    # cacheable= is a newer keyword of register_lowering: passed only where
    # this jax has it.
    return ({"cacheable": False}
            if "cacheable" in inspect.signature(mlir.register_lowering).parameters else {})


def _unordered_call(jax, target, in_place, ctx, operands, attributes):
    """The results of a custom call of `target` without a token, aliasing
    its operands where in_place(attributes) says so and shapes allow, but for
    the step's kept arguments (Note [Arguments read where they are]), merged
    into the custom call of the collectives lowered just before it where
    nothing can tell (Note [One custom call for a step's collectives] in
    merged_calls.py)."""
    same = [(a.shape, a.dtype) for a in ctx.avals_in] == [(a.shape, a.dtype) for a in ctx.avals_out]
    writes_in_place = in_place is not None and in_place(attributes) and same
    aliased = [writes_in_place and not _step_argument(operand) for operand in operands]
    return merged_calls.merged_call(jax, target, ctx, operands, attributes, aliased)


def _step_argument(value):
    """Whether `value` is an argument of the compiled step itself (its
    entry function, "main") that the caller keeps (not donated): Note
    [Arguments read where they are]."""
    from jax._src.lib.mlir import ir
    try:
        if not isinstance(value, ir.BlockArgument):
            return False
        function = value.owner.owner.operation
        if function.name != "func.func" or "sym_name" not in function.attributes or \
                ir.StringAttr(function.attributes["sym_name"]).value != "main":
            return False
        if "arg_attrs" not in function.attributes:
            return True
        attributes = ir.DictAttr(ir.ArrayAttr(function.attributes["arg_attrs"])[value.arg_number])
        return not any(donated in attributes for donated in ("tf.aliasing_output", "jax.buffer_donor"))
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return False  # an MLIR binding this JAX lacks: aliased, as before, which is always right


def unordered_primitive(target, platform, in_place=None, refused=()):
    """An effect-free JAX primitive that is never pruned, lowering on
    `platform` to a custom call of `target` without a token (Note [Unordered
    on the CPU]); lowering it for a platform of `refused` raises why.
    bind(*arrays, result_avals=(ShapedArray, ...), **attributes)."""
    import jax
    from jax.extend.core import Primitive
    from jax.interpreters import mlir
    from jax._src.interpreters import partial_eval

    primitive = Primitive(target)  # named like the ordered one: jaxprs show one kind of call
    primitive.multiple_results = True
    primitive.def_abstract_eval(lambda *avals, result_avals, **attributes: result_avals)
    # Kept even when nothing uses its results: every rank must run it.
    partial_eval.dce_rules[primitive] = lambda used_outputs, eqn: ([True] * len(eqn.invars), eqn)

    def _lower(ctx, *operands, result_avals, **attributes):
        return _unordered_call(jax, target, in_place, ctx, operands, attributes)

    def _refuse(ctx, *operands, **attributes):
        raise RuntimeError(
            f"an hvdlite.jax collective traced for {platform} cannot be lowered for "
            f"{ctx.module_context.platforms}: its step was traced where {platform} was JAX's "
            "default backend; trace it again where the step will run")

    mlir.register_lowering(primitive, _lower, platform=platform, **_lowering_options(mlir))
    for other in refused:
        mlir.register_lowering(primitive, _refuse, platform=other, **_lowering_options(mlir))
    return primitive


def _in_place(attributes):
    """Whether the collective writes its result into its input's buffer on
    the CPU (Note [Unordered on the CPU]): allreduce and broadcast."""
    return int(attributes["op"]) in (OpType.ALLREDUCE, OpType.BROADCAST)


def _define_primitive():
    """Loads the handlers, registers them with XLA (a platform JAX has no
    client for here is only remembered) and defines the primitive that lowers
    to them."""
    import jax
    compiled_library.package_dir()  # the core first: the handler links the loaded libhvdlite
    library = _load_library()
    for platform, (symbol, _) in HANDLERS.items():
        jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(getattr(library, symbol)),
                                    platform=platform)
    cpu, cuda = HANDLERS["cpu"][1], HANDLERS["CUDA"][1]
    return (ordered_primitive(TARGET, platforms=[cuda], unordered_platforms=[cpu], in_place=_in_place),
            unordered_primitive(TARGET, cpu, in_place=_in_place, refused=[cuda]))


def _unsupported_backend():
    """Why the default backend has no handler (ROCm, TPU, ...), or None."""
    from jax.extend.backend import get_backend
    backend = get_backend()
    if backend.platform == "cpu":
        return None
    version = getattr(backend, "platform_version", "").lower()
    if backend.platform in ("gpu", "cuda") and "rocm" not in version:  # CUDA's PJRT plugin
        return None
    return (f"JAX's default backend is {backend.platform!r} ({version or 'no version'}) and "
            "hvdlite has XLA FFI handlers for the CPU and CUDA only")


def _ffi_unavailable():
    """None when the FFI path can be used in this process, else why not
    (found out once: the first call builds and registers the handler)."""
    global _primitive, _cpu_primitive, _unavailable
    if _primitive is None and _unavailable is None:
        unsupported = _unsupported_backend()
        if unsupported:
            _unavailable = unsupported
        else:
            try:
                _primitive, _cpu_primitive = _define_primitive()
            except Exception as error:  # noqa: BLE001 - any failure means: fall back, say why
                _unavailable = (f"the XLA FFI handler is unavailable: "
                                f"{type(error).__name__}: {error}")
    return _unavailable


def _ffi_wanted():
    """HVDLITE_JAX_FFI: 1 (default) or 0. (Horovod has no JAX binding, so
    there is no HOROVOD_ name to honour.)"""
    return config.get("HVDLITE_JAX_FFI")


def _decide():
    log = logs.get("jax")
    if not _ffi_wanted():
        log.info("collectives inside jax.jit use an ordered io_callback (HVDLITE_JAX_FFI=0)")
        return IO_CALLBACK
    reason = _ffi_unavailable()
    if reason is None:
        return FFI
    log.warning("collectives inside jax.jit fall back to an ordered io_callback (0.5-3 ms per "
                f"crossing instead of ~10 us) because {reason}")
    return IO_CALLBACK


def jit_path():
    """How collectives inside jax.jit reach the core in this process.

    Returns:
        str: "ffi" (an XLA FFI custom call) or "io_callback" (the fallback:
            HVDLITE_JAX_FFI=0, or the FFI path is unavailable here, which is logged
            once at warning); what `set_jit_path()` forced, if it did.
    """
    global _default
    if _forced is not None:
        return _forced
    if _default is None:
        _default = _decide()
    return _default


def set_jit_path(path):
    """Forces "ffi" or "io_callback" for steps traced from now on (None: the
    default choice again); returns the previous setting. For benchmarks and
    tests: every rank must trace a step with the same path."""
    global _forced
    if path not in (FFI, IO_CALLBACK, None):
        raise ValueError(f"set_jit_path: path must be 'ffi', 'io_callback' or None, got {path!r}")
    if path == FFI and _ffi_unavailable() is not None:
        raise RuntimeError(f"hvdlite.jax: the XLA FFI path is unavailable: {_unavailable}")
    previous, _forced = _forced, path
    return previous


def hvdlite_error(error):
    """The hvdlite exception behind an error a jitted step raised: XLA raises
    its own runtime error type with the core's message after the status code
    ("INTERNAL: ...", "FAILED_PRECONDITION: ..."); this gives back hvdlite's
    type (DivergenceError, CollectiveMismatchError, ...) with its fields, as
    the core remembered the failure (hvdlite.common.carried_failures.carried_failure).

    Args:
        error (BaseException): what the jitted step raised.

    Returns:
        HvdliteInternalError | None: the hvdlite exception; None when the error did not
            come from an hvdlite collective, or its details are gone (the core keeps the
            last few hundred).

    Example:
        ```python
        try:
            params = step(params, batch)
        except Exception as error:
            raise hvd.hvdlite_error(error) or error
        ```
    """
    return carried_failure(error)


def _packed(names):
    # "<length>:<name>" each: any character may appear in a name.
    return "".join(f"{len(n.encode())}:{n}" for n in names)


def _traced_for_cpu():
    """Whether a step traced now is for the CPU (JAX's default backend):
    its collectives then use the effect-free primitive (Note [Unordered on
    the CPU])."""
    import jax
    return jax.default_backend() == "cpu"


def collective(op, arrays, result_shapes, names, reduce_op=0, prescale=1.0, postscale=1.0,
               root_rank=0, process_set=None, site=None):
    """One custom call that queues a collective of kind `op` (api.h's code) per
    array, under names fixed now (at trace time), and waits for all of them;
    returns the results, shaped as result_shapes (jax.ShapeDtypeStruct).
    `site`: the caller's (file, line, function), else read off the stack now."""
    import jax
    from hvdlite.numpy.collectives import dtype_code
    kind = OpType(op).name.lower()
    for array, name in zip(arrays, names):
        dtype_code(np.empty(0, array.dtype), kind, name)  # ValueError now, not inside the step
    result_avals = tuple(jax.core.ShapedArray(s.shape, s.dtype) for s in result_shapes)
    set_id = requests.process_set_id(process_set)
    # Where the step's code calls it, fixed now as its names are (Note
    # [Call sites] in csrc/core/call_site.h): the reports name this line.
    site = site or basics.core().call_site()
    primitive = _cpu_primitive if _traced_for_cpu() else _primitive
    return primitive.bind(
        *arrays, result_avals=result_avals, op=np.int32(op), reduce_op=np.int32(int(reduce_op)),
        prescale=np.float64(prescale), postscale=np.float64(postscale),
        root_rank=np.int32(root_rank), process_set_id=np.int32(set_id), names=_packed(names),
        call_site=_packed([site[0], str(site[1]), site[2]]) if site else "")


# Note [Eager arrays on a GPU]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# An eager jax.Array on a GPU stays there: JAX runs an eager operation as a
# small compiled computation of its own, and so does hvdlite, with the very
# custom call a jitted step uses (the CUDA handler, on XLA's stream: no host
# copy, no DLPack round trip to manage, the same ordering). The compiled call
# is cached per signature: kind, names, attributes, call site, shapes and
# dtypes. Horovod numbers unnamed collectives ("allreduce.noname.7"), which
# would compile a new computation per call; but an eager collective returns
# only once its results are ready (as hvdlite's eager calls do on every
# binding), so no two unnamed eager GPU collectives of one kind are in flight
# on a rank at once, and they share one stable name per kind
# ("allreduce.noname.gpu"): every rank still issues them in one order.

_eager_calls = {}  # signature -> the jitted custom call


def on_gpu(arrays):
    """Whether these concrete arrays are on a CUDA device (one device each) and
    the CUDA handler can take them (Note [Eager arrays on a GPU]). Arrays on
    the CPU never build the handler here."""
    platforms = set()
    for array in arrays:
        devices = getattr(array, "devices", None)
        if devices is None:
            return False
        found = devices()
        if len(found) != 1:
            raise ValueError(f"hvdlite.jax collectives take arrays on one device each; this one "
                             f"is sharded over {len(found)} devices (one rank per GPU: gather it "
                             "first, or use jax's own collectives inside shard_map)")
        platforms.add(next(iter(found)).platform)
    return (platforms == {"gpu"} or platforms == {"cuda"}) and jit_path() == FFI


_AUTO_NAME = re.compile(r"^(.*)\.noname\.\d+((\.\d+)?)$")  # basics.auto_name's, with a group member's index


def _stable_name(name):
    """Horovod's numbered name of an unnamed collective, without its number."""
    return _AUTO_NAME.sub(r"\1.noname.gpu\2", name)


def eager_collective(op, arrays, result_shapes, names, **attributes):
    """The custom call of `collective` on eager GPU arrays, compiled once per
    signature and run now (Note [Eager arrays on a GPU]); returns the results
    once they are ready, raising hvdlite's exception for a failure."""
    import jax
    site = basics.core().call_site()
    names = [_stable_name(n) for n in names]
    key = (int(op), tuple(names), site, tuple(sorted(attributes.items(), key=lambda kv: kv[0])),
           tuple((a.shape, str(a.dtype)) for a in arrays),
           tuple((r.shape, str(r.dtype)) for r in result_shapes))
    call = _eager_calls.get(key)
    if call is None:
        call = jax.jit(lambda *xs: collective(op, xs, result_shapes, names, site=site, **attributes))
        _eager_calls[key] = call
    try:
        return jax.block_until_ready(call(*arrays))
    except Exception as error:  # noqa: BLE001 - re-raised as hvdlite's kind where it is one
        mapped = hvdlite_error(error)
        if mapped is None:
            raise
        raise mapped from error
