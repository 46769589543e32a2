"""Builds, caches and loads the TensorFlow op library (csrc/tensorflow).

The ops are compiled on first use against the TensorFlow installed here, so
installing hvdlite never needs TensorFlow, and a TensorFlow upgrade rebuilds
instead of failing with undefined symbols. The cache key covers the TF version,
its compile and link flags, the compiler, the core library's location and the
op sources. Ranks that start together take a file lock: one compiles, the
others wait and load its result.
"""
import glob
import os
import tempfile

from hvdlite.common import compiled_library

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


def library_path(**overrides):
    """The cached op library for this TensorFlow, compiled first if needed."""
    from hvdlite.common import logs
    plan = build_plan(**overrides)
    return compiled_library.cached(
        plan["path"], logs.get("tensorflow"),
        f"compiling the TensorFlow op library for TensorFlow {plan['tf_version']} "
        f"(first use; cached in {os.path.dirname(plan['path'])})...",
        lambda output: _compile(plan, output))


def load():
    """The loaded op module (tf.load_op_library), built on first use."""
    global _library
    if _library is None:
        import tensorflow as tf
        _package_dir()  # loads hvdlite._core first, so both share one libhvdlite
        _library = tf.load_op_library(library_path())
    return _library
