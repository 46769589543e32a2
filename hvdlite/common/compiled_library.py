"""Native libraries that hvdlite compiles on first use against a framework
installed here (the TensorFlow op library, the JAX FFI handler), cached by a
key over everything that shapes the binary, so that a framework upgrade
rebuilds instead of failing with undefined symbols. Ranks that start together
take a file lock: one compiles, the others wait and load its result."""
import fcntl
import glob
import hashlib
import os
import shutil
import subprocess
import tempfile


def package_dir():
    """The folder of the loaded hvdlite._core (and libhvdlite.so, include/).
    Loads the core first, so that a library linked to libhvdlite shares it."""
    from hvdlite.common import basics
    return os.path.dirname(os.path.abspath(basics.core().__file__))


def cache_dir(kind):
    root = os.environ.get("HVDLITE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "hvdlite")
    return os.path.join(root, kind)


def compiler(purpose):
    """The C++ compiler's path; RuntimeError saying what to install when none.
    purpose: who needs it, e.g. "hvdlite.tensorflow compiles its TensorFlow ops"."""
    for candidate in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    raise RuntimeError(
        f"{purpose} on first use, but no C++ compiler was found (tried $CXX, c++, g++, "
        "clang++). Install one (Debian/Ubuntu: `apt-get install g++`; conda: `conda install "
        "gxx_linux-64`) or point CXX at it.")


def key(parts, files):
    """A hex digest over strings and the contents of files."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() + b"\0")
    for path in files:
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()


def run_all(commands):
    """Runs the commands in parallel (one per core at most); the first failure's
    (command, exit code, output), or None."""
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


def build_failed(what, failure):
    command, returncode, text = failure
    return RuntimeError(f"{what} failed (exit code {returncode}).\nCommand: {' '.join(command)}\n"
                        f"Compiler output (last lines):\n{text[-4000:]}")


def cached(path, logger, announce, compile_to):
    """Returns `path`, first calling compile_to(temporary path) under a file
    lock when it does not exist yet; announce is logged at warning before a
    compile, so the wait it causes is explained by default."""
    if os.path.exists(path):
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one compiler per machine; the others wait
        if os.path.exists(path):
            return path
        logger.warning(announce)
        # A compile that was killed leaves its temporary file behind; under the
        # lock no one else is writing this library, so those are stale.
        for stale in glob.glob(path + ".*.tmp"):
            os.remove(stale)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=os.path.basename(path) + ".",
                                   suffix=".tmp")
        os.close(fd)
        try:
            compile_to(tmp)
            os.replace(tmp, path)  # atomic: readers never see half a library
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    return path
