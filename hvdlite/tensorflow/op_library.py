"""Builds, caches and loads the TensorFlow op library (csrc/tensorflow).

The ops are compiled on first use against the TensorFlow installed here, so
installing hvdlite never needs TensorFlow, and a TensorFlow upgrade rebuilds
instead of failing with undefined symbols. The cache key covers the TF version,
its compile and link flags, the compiler, the core library's location and the
op sources. Ranks that start together take a file lock: one compiles, the
others wait and load its result.
"""
import fcntl
import glob
import hashlib
import os
import shutil
import subprocess
import tempfile

_library = None


def _package_dir():
    from hvdlite.common import basics
    return os.path.dirname(os.path.abspath(basics.core().__file__))


def _cache_dir():
    root = os.environ.get("HVDLITE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "hvdlite")
    return os.path.join(root, "tensorflow")


def _compiler():
    for candidate in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    raise RuntimeError(
        "hvdlite.tensorflow compiles its TensorFlow ops on first use, but no C++ compiler was "
        "found (tried $CXX, c++, g++, clang++). Install one (Debian/Ubuntu: `apt-get install "
        "g++`; conda: `conda install gxx_linux-64`) or point CXX at it.")


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
    compiler = _compiler()
    key = hashlib.sha256()
    for part in [tf_version, compiler, package] + compile_flags + link_flags:
        key.update(part.encode() + b"\0")
    for path in sorted(glob.glob(os.path.join(include, "**", "*.h"), recursive=True)) + sources:
        with open(path, "rb") as f:
            key.update(f.read())
    name = f"hvdlite_tf_ops-tf{tf_version}-{key.hexdigest()[:16]}.so"
    return {"compiler": compiler, "sources": sources, "include": include, "package": package,
            "compile_flags": compile_flags, "link_flags": link_flags, "tf_version": tf_version,
            "path": os.path.join(_cache_dir(), name)}


def _run_all(commands):
    """Runs the commands in parallel (one per core at most); the first failure's
    command and output, or None."""
    limit = max(1, os.cpu_count() or 1)
    pending, running, failure = list(commands), [], None
    while (pending or running) and failure is None:
        while pending and len(running) < limit:
            command = pending.pop(0)
            running.append((command, subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
        command, process = running.pop(0)
        output, _ = process.communicate()
        if process.returncode != 0:
            failure = (command, process.returncode, output)
    for _, process in running:  # after a failure: do not leave compilers behind
        process.kill()
        process.communicate()
    return failure


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
        failure = _run_all(compiles) or _run_all([link])
    if failure is not None:
        command, returncode, text = failure
        raise RuntimeError(
            f"compiling hvdlite's TensorFlow ops for TensorFlow {plan['tf_version']} failed "
            f"(exit code {returncode}).\nCommand: {' '.join(command)}\n"
            f"Compiler output (last lines):\n{text[-4000:]}")


def library_path(**overrides):
    """The cached op library for this TensorFlow, compiled first if needed."""
    plan = build_plan(**overrides)
    path = plan["path"]
    if os.path.exists(path):
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one compiler per machine; the others wait
        if os.path.exists(path):
            return path
        # At warning, so that the minute it takes is explained by default.
        from hvdlite.common import logs
        logs.get("tensorflow").warning(
            f"compiling the TensorFlow op library for TensorFlow {plan['tf_version']} "
            f"(first use; cached in {os.path.dirname(path)})...")
        # A compile that was killed leaves its temporary file behind; under the
        # lock no one else is writing this library, so those are stale.
        for stale in glob.glob(path + ".*.tmp"):
            os.remove(stale)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=os.path.basename(path) + ".",
                                   suffix=".tmp")
        os.close(fd)
        try:
            _compile(plan, tmp)
            os.replace(tmp, path)  # atomic: readers never see half a library
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    return path


def load():
    """The loaded op module (tf.load_op_library), built on first use."""
    global _library
    if _library is None:
        import tensorflow as tf
        _package_dir()  # loads hvdlite._core first, so both share one libhvdlite
        _library = tf.load_op_library(library_path())
    return _library
