"""Which Python code is the user's program, for the call sites that reports of
ranks that stopped agreeing name (Note [Call sites] in csrc/core/call_site.h).

A collective's call site is the innermost frame of the calling thread whose
file is not in a library directory: hvdlite's own, and those of the
frameworks and the wrappers that call collectives on the program's behalf
(optimizer hooks, Keras' fit, JAX's tracing). The core reads the frames itself
at submission (csrc/python/call_sites.cc); the bindings that build ops into
a graph (TensorFlow, JAX) ask it for the site when they trace an op.
HVDLITE_CALL_SITES=0 (read by the core's Config) turns capture off.
"""
import importlib.util
import os

# Top-level packages whose frames are never the user's program.
LIBRARIES = ("hvdlite", "torch", "tensorflow", "keras", "tf_keras", "jax", "jaxlib", "optax", "flax",
             "numpy", "ml_dtypes")


def _package_directories(name):
    """The directories of an installed top-level package, without importing
    it (an editable install has two: the source tree's and site-packages')."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return list(spec.submodule_search_locations)


def library_directories():
    """Every installed library's directory, as imported and resolved."""
    dirs = {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}  # hvdlite's own
    for name in LIBRARIES:
        dirs.update(_package_directories(name))
    return sorted({os.path.abspath(d) for d in dirs} | {os.path.realpath(d) for d in dirs})


_directories = None


def is_library(filename):
    """Whether frames of `filename` are a library's (for stacks read in
    Python: TensorFlow's graph-building, which maps AutoGraph's generated
    code back to the user's lines)."""
    global _directories
    if _directories is None:
        _directories = tuple(d.rstrip("/") + "/" for d in library_directories())
    return filename.startswith("<frozen ") or filename.startswith(_directories)


def register(core):
    """Tells the core which directories are libraries (once per process)."""
    core.set_call_site_libraries(library_directories())


__all__ = ["LIBRARIES", "library_directories", "is_library", "register"]
