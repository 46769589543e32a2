"""MkDocs hook: each binding's API reference (and hvdlite's own) in the order
a training script needs it. A page's line `<!-- reference: hvdlite.torch -->` becomes the
module's docstring, then one section per entry of SECTIONS (start and
topology, collectives, the optimizer wrapper, broadcasting state, elastic,
...), each rendering the binding's names of that section in the table's
order, with the internals (autograd Function classes, helpers) last.

mkdocstrings alone orders a module's members by kind (classes before
functions) and then by source or name: hvdlite.torch began with
HorovodAllgather.forward/backward and the exception classes, and allreduce
came after them. tests/docs/test_reference_pages.py checks that every name of
a binding's __all__ sits in a section here, so a new name cannot go missing.
"""
import os
import re

# (title, names): the names each binding may have in that section, in the
# order they are shown. A name a binding lacks is skipped.
SECTIONS = (
    ("Start and topology", (
        "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
        "cross_rank", "cross_size", "is_homogeneous", "rank_op", "size_op", "local_rank_op",
        "local_size_op")),
    ("Collectives", (
        "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
        "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
        "grouped_allreduce_async_", "allgather", "allgather_async", "grouped_allgather",
        "grouped_allgather_async", "broadcast", "broadcast_", "broadcast_async",
        "broadcast_async_", "alltoall", "alltoall_async", "reducescatter",
        "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async",
        "sparse_allreduce_async", "synchronize", "poll", "barrier", "join", "ReduceOp",
        "Compression")),
    ("The optimizer wrapper", (
        "DistributedOptimizer", "PartialDistributedOptimizer", "DistributedGradientTape",
        "PartialDistributedGradientTape", "allreduce_gradients", "sharded_clip_by_global_norm",
        "load_model", "unsharded_state_dict", "load_unsharded_state_dict")),
    ("Broadcasting state", (
        "broadcast_parameters", "broadcast_optimizer_state", "broadcast_variables",
        "broadcast_global_variables", "BroadcastGlobalVariablesHook", "broadcast_object",
        "broadcast_object_fn", "allgather_object")),
    ("Elastic training", ("elastic",)),
    ("Running a job from Python", ("run",)),
    ("Layers and callbacks", ("SyncBatchNorm", "SyncBatchNormalization", "callbacks")),
    ("Process sets", ("ProcessSet", "global_process_set", "add_process_set",
                      "remove_process_set")),
    ("Errors", (
        "HvdliteInternalError", "HorovodInternalError", "CollectiveMismatchError",
        "DivergenceError", "PeerLostError", "StallTimeoutError", "ShutdownError",
        "HostsUpdatedInterrupt", "CallSite", "RankCall", "hvdlite_error")),
    ("Timeline, build and version", (
        "start_timeline", "stop_timeline", "__version__", "mpi_built", "mpi_enabled", "mpi_threads_supported",
        "gloo_built", "gloo_enabled", "tcp_built", "nccl_built", "ddl_built", "ccl_built",
        "cuda_built", "rocm_built", "gpu_libraries")),
    ("Internals", (
        "HorovodAllreduce", "HorovodGroupedAllreduce", "HorovodAllgather",
        "HorovodGroupedAllgather", "HorovodBroadcast", "HorovodAlltoall", "HorovodReducescatter",
        "HorovodGroupedReducescatter", "jit_path", "vars_to_refs", "refs_to_vars", "util",
        "keras")),
)

# Names shown as a sentence instead of a rendered entry: aliases, constants
# without docstrings, and submodules with pages (or sections) of their own.
# "{module}" is the binding's name.
SENTENCES = {
    "HorovodInternalError": "`HorovodInternalError` is `HvdliteInternalError` (Horovod's name).",
    "global_process_set": "`global_process_set`: the `ProcessSet` of every rank, the default "
                          "of every collective's `process_set`.",
    "elastic": "[`{module}.elastic`](elastic.md#{module}.elastic): the `run` decorator and the "
               "states a training function commits and restores.",
    "callbacks": "[`{module}.callbacks`](#{module}.callbacks): below.",
    "keras": "`{module}.keras` is [hvdlite.keras](keras.md).",
    "util": "[`{module}.util`](#{module}.util): below.",
    "__version__": "`{module}.__version__`: hvdlite's version, a string.",
}
# ReduceOp's members, also exported under the module's name: one sentence
# after ReduceOp.
REDUCE_OPS = ("Sum", "Average", "Min", "Max", "Product", "Adasum")
_REDUCE_OPS_SENTENCE = ("`Sum`, `Average`, `Min`, `Max`, `Product`, `Adasum`: the members of "
                        "`ReduceOp`, also under the module's name (`hvd.Sum`), as in Horovod.")

MARKER = re.compile(r"^<!-- reference: (hvdlite(?:\.\w+)?) -->$", re.MULTILINE)


def section_of(name):
    """The title of the section that shows `name`, or None."""
    name = "ReduceOp" if name in REDUCE_OPS else name
    return next((title for title, names in SECTIONS if name in names), None)


def reference(module, exported):
    """The Markdown of `module`'s reference: its docstring, then SECTIONS,
    each with the names of `exported` (its __all__) that belong there."""
    lines = [f"::: {module}", "    options:", "      members: false",
             "      show_root_heading: false", "      show_root_toc_entry: false", ""]
    exported = set(exported)
    for title, names in SECTIONS:
        present = [name for name in names if name in exported]
        if not present:
            continue
        lines += [f"## {title}", ""]
        for name in present:
            if name in SENTENCES:
                lines += [SENTENCES[name].format(module=module), ""]
                continue
            lines += [f"::: {module}.{name}", "    options:", "      heading_level: 3", ""]
            if name == "ReduceOp" and exported.intersection(REDUCE_OPS):
                lines += [_REDUCE_OPS_SENTENCE, ""]
    return "\n".join(lines)


def exported_names(module, repository):
    """`module`'s __all__, read from the sources under `repository` by
    griffe (mkdocstrings' own loader), importing nothing."""
    import griffe
    loaded = griffe.load(module, search_paths=[str(repository)], resolve_aliases=True,
                         resolve_external=False)
    return [str(name) for name in loaded.exports or ()]


def on_page_markdown(markdown, page, config, files):
    repository = os.path.dirname(os.path.abspath(config["docs_dir"]))

    def expand(match):
        return reference(match.group(1), exported_names(match.group(1), repository))
    return MARKER.sub(expand, markdown)
