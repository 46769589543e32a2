"""hvdlite/common/call_sites.py and the core's capture (csrc/python/call_sites.cc):
the call site of a collective is the innermost frame outside the library
directories, on the calling thread."""
import os
import subprocess
import sys
import textwrap
import threading

from hvdlite.common import basics, call_sites


def here():
    """The core's call site for a call made on this line: here() itself is
    the user's frame (this file is no library)."""
    return basics.core().call_site()


def test_the_site_is_the_innermost_frame_of_the_program():
    assert here() == (__file__, here.__code__.co_firstlineno + 3, "here")
    site = basics.core().call_site(); line = sys._getframe().f_lineno  # noqa: E702 - one line
    assert site == (__file__, line, "test_the_site_is_the_innermost_frame_of_the_program")


def test_frames_of_libraries_are_skipped_and_the_cache_follows_the_directories(tmp_path):
    library = tmp_path / "somelib"
    library.mkdir()
    (library / "__init__.py").write_text("def wrapped(fn):\n    return fn()\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import somelib
        inner = lambda: basics.core().call_site()  # noqa: E731
        # Not a library yet: the lambda's line... then the wrapper's frame.
        assert somelib.wrapped(inner)[1] == sys._getframe().f_lineno - 2
        core = basics.core()
        core.set_call_site_libraries(call_sites.library_directories() + [str(library)])
        try:
            site = somelib.wrapped(lambda: core.call_site()); line = sys._getframe().f_lineno  # noqa: E702
            assert site[:2] == (__file__, line), site
        finally:
            core.set_call_site_libraries(call_sites.library_directories())
    finally:
        sys.path.remove(str(tmp_path))


def test_another_thread_has_its_own_frames():
    found = []
    worker = threading.Thread(target=lambda: found.append(basics.core().call_site()))
    worker.start()
    worker.join()
    assert found[0] == (__file__, test_another_thread_has_its_own_frames.__code__.co_firstlineno + 2,
                        "test_another_thread_has_its_own_frames.<locals>.<lambda>")


def test_the_library_directories_are_hvdlites_and_the_frameworks():
    dirs = call_sites.library_directories()
    package = os.path.dirname(os.path.abspath(basics.__file__)).rsplit(os.sep, 1)[0]
    assert package in dirs
    assert call_sites.is_library(os.path.join(package, "numpy", "collectives.py"))
    assert call_sites.is_library("<frozen runpy>")
    assert not call_sites.is_library(__file__)
    try:
        import torch
        assert call_sites.is_library(torch.__file__)
    except ImportError:
        pass


def test_call_sites_off_captures_nothing():
    # HVDLITE_CALL_SITES is the core's Config: read at init, in a process of its own.
    code = textwrap.dedent("""
        import hvdlite.numpy as hvd
        from hvdlite.common import basics
        hvd.init()
        print(basics.core().call_sites_enabled(), basics.core().call_site())
        hvd.shutdown()
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HVDLITE_", "HOROVOD_"))}
    out = subprocess.run([sys.executable, "-c", code], env=dict(env, HVDLITE_CALL_SITES="0"),
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "None"], out
