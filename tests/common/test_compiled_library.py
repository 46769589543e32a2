"""The cache of compiled code (hvdlite/common/compiled_library.py) is the
user's own: a library planted by someone else is refused before anything
loads it (Note [Private caches])."""
import logging
import os
import subprocess
import sys
import textwrap

import pytest

from hvdlite.common import compiled_library
from hvdlite.common.compiled_library import UnsafeCacheError

LOGGER = logging.getLogger("hvdlite.test")
OTHER_UID = 54321  # no one's: stands for another user of the machine


def _compile_marker(output):
    with open(output, "w") as f:
        f.write("compiled by us")


def _cached(folder, name="lib.so", compiles=None):
    """compiled_library.cached for folder/name, counting compiles in the list `compiles`."""
    def compile_to(output):
        (compiles if compiles is not None else []).append(output)
        _compile_marker(output)
    return compiled_library.cached(str(folder / name), LOGGER, "compiling", compile_to)


def _refused(folder, path, problem, compiles=None):
    """Asserts that the cache in `folder` is refused, naming `path` and `problem`."""
    with pytest.raises(UnsafeCacheError) as excinfo:
        _cached(folder, compiles=compiles)
    text = str(excinfo.value)
    assert str(path) in text and problem in text, text
    assert "HVDLITE_CACHE_DIR" in text and "folder of your own" in text, text


def test_fresh_cache_is_private_and_reused(tmp_path):
    compiles = []
    folder = tmp_path / "root" / "kind"
    path = _cached(folder, compiles=compiles)
    assert os.stat(folder).st_mode & 0o777 == 0o700
    assert open(path).read() == "compiled by us" and len(compiles) == 1
    assert _cached(folder, compiles=compiles) == path and len(compiles) == 1


def test_own_readable_cache_is_tightened_not_refused(tmp_path):
    # A cache made before hvdlite created them 0700: ours, only we could write.
    folder = tmp_path / "kind"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    _cached(folder)
    assert os.stat(folder).st_mode & 0o777 == 0o700


def test_planted_library_in_world_writable_cache_is_refused(tmp_path):
    root = tmp_path / "shared-tmp"
    root.mkdir()
    os.chmod(root, 0o1777)  # like /tmp: everyone may create files here
    folder = root / "kind"
    folder.mkdir()
    os.chmod(folder, 0o777)
    planted = folder / "lib.so"
    planted.write_text("a stranger's library")
    compiles = []
    _refused(folder, root, "writable by group or others (mode 1777)", compiles=compiles)
    assert not compiles and planted.read_text() == "a stranger's library"
    os.chmod(root, 0o755)  # the root is fine now; the cache folder itself is not
    _refused(folder, folder, "writable by group or others (mode 0777)", compiles=compiles)


def test_cache_or_library_of_another_user_is_refused(tmp_path):
    if os.getuid() != 0:
        pytest.skip("needs root to give a file to another uid")
    folder = tmp_path / "kind"
    folder.mkdir(mode=0o700)
    library = folder / "lib.so"
    library.write_text("theirs")
    os.chmod(library, 0o644)
    for theirs in (folder, library):
        os.chown(theirs, OTHER_UID, -1)
        _refused(folder, theirs, f"belongs to uid {OTHER_UID}, not to you")
        os.chown(theirs, 0, -1)


def test_library_not_ours_or_writable_by_others_is_refused(tmp_path):
    folder = tmp_path / "kind"
    folder.mkdir(mode=0o700)
    library = folder / "lib.so"
    library.write_text("ours, but anyone may rewrite it")
    os.chmod(library, 0o666)
    _refused(folder, library, "writable by group or others (mode 0666)")
    os.chmod(library, 0o600)
    os.remove(library)
    os.symlink(tmp_path / "elsewhere.so", library)
    _refused(folder, library, "not a regular file (a symbolic link)")


def test_symlinked_cache_folder_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "kind"
    os.symlink(real, link)
    _refused(link, link, "symbolic link")


def test_symlinked_lock_file_is_not_followed(tmp_path):
    folder = tmp_path / "kind"
    folder.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("must stay")
    os.symlink(victim, folder / "lib.so.lock")
    compiles = []
    _refused(folder, folder / "lib.so.lock", "lock file is a symbolic link", compiles=compiles)
    assert victim.read_text() == "must stay" and not compiles


# End to end: hvdlite.jax finds a real library planted under its cache name in
# a world-writable HVDLITE_CACHE_DIR. Loading it would run its constructor
# (which writes a marker); instead the FFI path is refused with the message and
# jit falls back to the io_callback, which still computes the right answer.
PLANTED_SOURCE = textwrap.dedent("""\
    #include <stdio.h>
    #include <stdlib.h>
    __attribute__((constructor)) static void planted(void) {
      FILE* f = fopen(getenv("HVDLITE_TEST_MARKER"), "w");
      if (f) { fputs("planted library ran", f); fclose(f); }
    }
""")

PLAN_PROBE = "from hvdlite.jax import ffi; print(ffi.build_plan()['path'])"

JIT_PROBE = textwrap.dedent("""\
    import jax, jax.numpy as jnp
    import hvdlite.jax as hvd
    hvd.init()
    print(jax.jit(lambda a: hvd.allreduce(a, op=hvd.Sum))(jnp.ones(2)).tolist())
    print(hvd.jit_path())
    hvd.shutdown()
""")


def test_planted_jax_handler_is_not_loaded(tmp_path):
    pytest.importorskip("jax")
    compiler = compiled_library.compiler("this test builds a planted library")
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    marker = tmp_path / "marker"
    env = dict(os.environ, HVDLITE_CACHE_DIR=str(shared), JAX_PLATFORMS="cpu",
               HVDLITE_TEST_MARKER=str(marker))
    plan = subprocess.run([sys.executable, "-c", PLAN_PROBE], env=env, capture_output=True,
                          text=True, timeout=120)
    assert plan.returncode == 0, plan.stderr
    target = plan.stdout.strip().splitlines()[-1]
    assert target.startswith(str(shared))
    os.makedirs(os.path.dirname(target))
    os.chmod(os.path.dirname(target), 0o777)
    source = tmp_path / "planted.c"
    source.write_text(PLANTED_SOURCE)
    subprocess.run([compiler, "-x", "c", "-shared", "-fPIC", str(source), "-o", target],
                   check=True, timeout=120)
    out = subprocess.run([sys.executable, "-c", JIT_PROBE], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert not marker.exists(), "the planted library was loaded"
    assert "will not load compiled code from" in out.stderr, out.stderr
    assert "HVDLITE_CACHE_DIR" in out.stderr, out.stderr
    assert out.stdout.split() == ["[1.0,", "1.0]", "io_callback"], out.stdout
