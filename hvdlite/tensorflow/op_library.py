"""Finds, or builds and caches, and loads the TensorFlow op library
(csrc/tensorflow).

A wheel carries the library built in advance for each TensorFlow minor
version it supports (hvdlite/common/prebuilt.py), and the one for the
TensorFlow installed here is loaded. Otherwise (a TensorFlow newer than the
wheel, an install built from source) the ops are compiled on first use
against this TensorFlow, and a log line at warning says so and why. The cache
key covers the TF version, its compile and link flags, the compiler, the core
library's location and the op sources, so a TensorFlow upgrade rebuilds
instead of failing with undefined symbols. Ranks that start together take a
file lock: one compiles, the others wait and load its result.
"""
import glob
import os
import tempfile

from hvdlite.common import compiled_library, logs, prebuilt

_library = None


def _package_dir():
    return compiled_library.package_dir()


def build_plan(tf_version=None, compile_flags=None, link_flags=None):
    """What to compile and where the result is cached: a dict with the command's
    parts and the cached library's path. Arguments override TensorFlow's own
    values (tests use this to simulate an upgrade)."""
    import tensorflow as tf
    package = _package_dir()
    include = os.path.join(package, "include")
    sources = sorted(glob.glob(os.path.join(include, "tensorflow", "*.cc")))
    if not sources:
        raise RuntimeError(f"hvdlite's TensorFlow op sources are missing from {include}/tensorflow; "
                           "reinstall hvdlite")
    tf_version = tf_version or tf.__version__
    compile_flags = list(compile_flags if compile_flags is not None else tf.sysconfig.get_compile_flags())
    link_flags = list(link_flags if link_flags is not None else tf.sysconfig.get_link_flags())
    compiler = compiled_library.compiler("hvdlite.tensorflow compiles its TensorFlow ops")
    key = compiled_library.key(
        [tf_version, compiler, package] + compile_flags + link_flags,
        sorted(glob.glob(os.path.join(include, "**", "*.h"), recursive=True)) + sources)
    name = f"hvdlite_tf_ops-tf{tf_version}-{key[:16]}.so"
    return {"compiler": compiler, "sources": sources, "include": include, "package": package,
            "compile_flags": compile_flags, "link_flags": link_flags, "tf_version": tf_version,
            "path": os.path.join(compiled_library.cache_dir("tensorflow"), name)}


def _compile(plan, output):
    # One compiler per source, in parallel, then one link: the TF headers make
    # each source slow to compile, so this divides the first-use wait by the
    # number of cores.
    core_library = os.path.join(plan["package"], "libhvdlite.so")
    with tempfile.TemporaryDirectory(dir=os.path.dirname(output)) as objects:
        compiles, object_files = [], []
        for source in plan["sources"]:
            object_file = os.path.join(objects, os.path.basename(source) + ".o")
            object_files.append(object_file)
            compiles.append([plan["compiler"], "-c", "-fPIC", "-O2", "-w", source,
                             "-I" + plan["include"]] + plan["compile_flags"] + ["-o", object_file])
        link = ([plan["compiler"], "-shared"] + object_files + ["-o", output] + plan["link_flags"] +
                [core_library, "-Wl,-rpath," + plan["package"]])
        failure = compiled_library.run_all(compiles) or compiled_library.run_all([link])
    if failure is not None:
        raise compiled_library.build_failed(
            f"compiling hvdlite's TensorFlow ops for TensorFlow {plan['tf_version']}", failure)


def compiled_path(reason, **overrides):
    """The op library compiled on first use for this TensorFlow (cached);
    `reason`: why no prebuilt one serves, logged with the compile."""
    with compiled_library.needed_because(reason):
        plan = build_plan(**overrides)
        return compiled_library.cached(
            plan["path"], logs.get("tensorflow"),
            f"compiling the TensorFlow op library for TensorFlow {plan['tf_version']}, because "
            f"{reason} (first use; cached in {os.path.dirname(plan['path'])})...",
            lambda output: _compile(plan, output))


def library_path(**overrides):
    """The op library for this TensorFlow: the wheel's prebuilt one for its
    minor version, else one compiled first if needed. Overrides (build_plan's)
    always compile: tests use them to simulate an upgrade."""
    import tensorflow as tf
    if overrides:
        return compiled_path("a test asked for these build settings", **overrides)
    path, reason = prebuilt.tensorflow_ops(tf.__version__)
    return path or compiled_path(reason)


def load():
    """The loaded op module (tf.load_op_library): the prebuilt library, or
    one compiled on first use when none fits or the prebuilt one does not
    load into this TensorFlow (a build of the same minor version with another
    ABI); the log says which and why."""
    global _library
    if _library is None:
        import tensorflow as tf
        _package_dir()  # loads hvdlite._core first, so both share one libhvdlite
        _library = compiled_library.load_prebuilt_or_compiled(
            prebuilt.tensorflow_ops(tf.__version__), tf.load_op_library, compiled_path,
            "op library", f"TensorFlow {tf.__version__}", logs.get("tensorflow"),
            load_errors=(Exception,))  # TensorFlow raises several kinds: any means compile
    return _library
