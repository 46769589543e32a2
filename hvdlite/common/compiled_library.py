"""Native libraries that hvdlite compiles on first use against a framework
installed here (the TensorFlow op library, the JAX FFI handler), cached by a
key over everything that shapes the binary, so that a framework upgrade
rebuilds instead of failing with undefined symbols. Ranks that start together
take a file lock: one compiles, the others wait and load its result.

Note [Private caches]
A library in the cache is dlopen'ed: it runs as the user. So the cache must be
the user's own: anyone else who can write into the folder (a world-writable
HVDLITE_CACHE_DIR under /tmp, a folder of another user, a symlink to one) could
plant a library with the predictable name, or a lock-file symlink that makes us
truncate a file of theirs choosing. Before anything in the cache is used, the
folder and its parent (the root the user chose) are checked with lstat (never
following a link): directories, owned by this uid, not writable by group or
others; a cache folder of ours that is merely readable by others (made before
hvdlite created them 0700) is tightened to 0700. Each
library is checked the same way before it is returned for loading (a regular
file, ours, not group/world-writable), and the lock file is opened with
O_NOFOLLOW. Anything else is refused with a message naming the path, what is
wrong and what to do, before anything is loaded.
"""
import contextlib
import errno
import fcntl
import glob
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile

from hvdlite.common import config, logs


def package_dir():
    """The folder of the loaded hvdlite._core (and libhvdlite.so, include/).
    Loads the core first, so that a library linked to libhvdlite shares it."""
    from hvdlite.common import basics
    return os.path.dirname(os.path.abspath(basics.core().__file__))


def cache_dir(kind):
    root = config.get("HVDLITE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "hvdlite")
    return os.path.join(root, kind)


class UnsafeCacheError(RuntimeError):
    """The cache of compiled code is not the user's own (Note [Private caches])."""


def _refuse(path, problem):
    return UnsafeCacheError(
        f"hvdlite will not load compiled code from {path}: {problem}, so another user could "
        "have planted a library there that would run as you. Set HVDLITE_CACHE_DIR to a folder "
        "of your own (created 0700, e.g. under $HOME), or remove the path if it is yours.")


def _owner_problem(info):
    """What makes lstat result `info` unsafe to trust, or None: not ours, or
    writable by group or others."""
    if info.st_uid != os.getuid():
        return f"it belongs to uid {info.st_uid}, not to you (uid {os.getuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"it is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def private_dir(path):
    """Creates `path` (and missing parents) 0700, then checks it is a private
    folder of ours (Note [Private caches]); UnsafeCacheError otherwise."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    for folder in (os.path.dirname(path), path):  # the root the user chose, and the kind's
        info = os.lstat(folder)
        if stat.S_ISLNK(info.st_mode):
            raise _refuse(folder, "it is a symbolic link")
        if not stat.S_ISDIR(info.st_mode):
            raise _refuse(folder, "it is not a directory")
        problem = _owner_problem(info)
        if problem:
            raise _refuse(folder, problem)
        if folder == path and stat.S_IMODE(info.st_mode) != 0o700:
            # Ours and writable only by us, so nothing in it came from anyone
            # else: tighten it rather than refuse a cache made before 0700.
            # (The root may be a folder the user shares on purpose, $HOME say:
            # only checked, never changed.)
            logs.get("cache").info("making %s private (mode %04o -> 0700)", folder,
                                   stat.S_IMODE(info.st_mode))
            os.chmod(folder, 0o700, follow_symlinks=False)
    return path


def check_library(path):
    """Raises UnsafeCacheError unless `path` is a regular file of ours that
    only we can write (checked with lstat, Note [Private caches])."""
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        raise _refuse(path, "it is not a regular file" +
                      (" (a symbolic link)" if stat.S_ISLNK(info.st_mode) else ""))
    problem = _owner_problem(info)
    if problem:
        raise _refuse(path, problem)
    return path


def _open_lock(path):
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise _refuse(path, "the lock file is a symbolic link") from None
        raise


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


@contextlib.contextmanager
def needed_because(reason):
    """Adds why a compile was needed at all (`reason`: why no prebuilt library
    serves, hvdlite/common/prebuilt.py) to a RuntimeError raised inside: no
    compiler, a failed build. UnsafeCacheError passes unchanged."""
    try:
        yield
    except UnsafeCacheError:
        raise
    except RuntimeError as error:
        raise RuntimeError(f"{error}\n(hvdlite compiles it because {reason}.)") from error


def build_failed(what, failure):
    command, returncode, text = failure
    return RuntimeError(f"{what} failed (exit code {returncode}).\nCommand: {' '.join(command)}\n"
                        f"Compiler output (last lines):\n{text[-4000:]}")


def cached(path, logger, announce, compile_to):
    """Returns `path`, first calling compile_to(temporary path) under a file
    lock when it does not exist yet; announce is logged at warning before a
    compile, so the wait it causes is explained by default. The folder and the
    library are checked first (Note [Private caches]): UnsafeCacheError names
    what is wrong, and nothing is loaded or compiled then."""
    private_dir(os.path.dirname(path))
    if os.path.lexists(path):
        return check_library(path)
    lock = _open_lock(path + ".lock")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one compiler per machine; the others wait
        if os.path.lexists(path):
            return check_library(path)
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
    finally:
        os.close(lock)
    return check_library(path)


def load_prebuilt_or_compiled(found, load, compiled_path, what, framework, logger,
                              load_errors=(OSError,)):
    """load(path) of the wheel's prebuilt `what` ("op library", "XLA FFI
    handler"); when there is none or it raises one of `load_errors` (a build
    of the framework's release with another ABI), load(compiled_path(reason))
    of the one compiled on first use. found: (path, reason) from
    hvdlite/common/prebuilt.py, reason saying why path is None; framework:
    what it is loaded into ("TensorFlow 2.20.0"), for the log and the reason."""
    path, reason = found
    if path is not None:
        try:
            loaded = load(path)
            logger.info("loaded the prebuilt %s %s into %s", what, path, framework)
            return loaded
        except load_errors as error:
            reason = (f"the wheel's {what} {path} does not load into {framework} "
                      f"({type(error).__name__}: {error})")
    return load(compiled_path(reason))
