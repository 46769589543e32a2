"""The op library cache: built once per TensorFlow version + flags + sources,
reused by later processes, rebuilt when TensorFlow changes."""
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("tensorflow")

# A stand-in compiler that records its calls and writes an empty "library",
# so the cache logic is tested without paying for a real compile.
FAKE_COMPILER = textwrap.dedent("""\
    #!/bin/sh
    echo "$@" >> "$HVDLITE_TEST_COMPILER_LOG"
    while [ $# -gt 1 ]; do
      if [ "$1" = "-o" ]; then : > "$2"; fi
      shift
    done
""")

PROBE = textwrap.dedent("""\
    import sys
    from hvdlite.tensorflow import op_library
    overrides = {"tf_version": sys.argv[1]} if len(sys.argv) > 1 else {}
    print(op_library.library_path(**overrides))
""")


def _run(tmp_path, *args):
    env = dict(os.environ, HVDLITE_CACHE_DIR=str(tmp_path / "cache"), CXX=str(tmp_path / "cxx"),
               HVDLITE_TEST_COMPILER_LOG=str(tmp_path / "calls.log"), TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", PROBE, *args], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip(), out.stderr


def _compiles(tmp_path):
    """Completed builds: each ends with one link (-shared) after one compile per source."""
    log = tmp_path / "calls.log"
    return sum("-shared" in line for line in log.read_text().splitlines()) if log.exists() else 0


def test_cache_reused_and_rebuilt_for_new_tensorflow(tmp_path):
    compiler = tmp_path / "cxx"
    compiler.write_text(FAKE_COMPILER)
    compiler.chmod(0o755)
    cache = tmp_path / "cache" / "tensorflow"
    cache.mkdir(parents=True)
    plan, _ = _run(tmp_path)  # the path only: remove it, keep a killed compile's leftover
    os.remove(plan)
    (tmp_path / "calls.log").unlink()
    leftover = cache / (os.path.basename(plan) + ".abc123.tmp")
    leftover.write_text("half a library")
    first, stderr = _run(tmp_path)
    assert first == plan and not leftover.exists(), "a killed compile's temporary file was kept"
    assert _compiles(tmp_path) == 1 and os.path.exists(first)
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert len([c for c in calls if " -c " in f" {c} "]) >= 2, "sources were not compiled one by one"
    assert "compiling the TensorFlow op library" in stderr
    second, stderr = _run(tmp_path)
    assert second == first and _compiles(tmp_path) == 1, "a second start recompiled"
    assert "compiling" not in stderr
    upgraded, _ = _run(tmp_path, "99.0.0")
    assert upgraded != first and "tf99.0.0" in upgraded
    assert _compiles(tmp_path) == 2, "a new TensorFlow version did not trigger a rebuild"
    assert not [p for p in os.listdir(tmp_path / "cache" / "tensorflow") if p.endswith(".tmp")]


def test_missing_compiler_says_what_to_install(tmp_path):
    env = dict(os.environ, HVDLITE_CACHE_DIR=str(tmp_path), CXX="", PATH=str(tmp_path),
               TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode != 0
    assert "no C++ compiler was found" in out.stderr and "apt-get install g++" in out.stderr


def test_compiler_error_names_the_failing_command(tmp_path):
    compiler = tmp_path / "cxx"
    compiler.write_text('#!/bin/sh\ncase "$*" in *collective_kernels*) echo "boom: no such header" >&2; exit 3;; esac\n'
                        + FAKE_COMPILER.split("\n", 1)[1])
    compiler.chmod(0o755)
    env = dict(os.environ, HVDLITE_CACHE_DIR=str(tmp_path / "cache"), CXX=str(compiler),
               HVDLITE_TEST_COMPILER_LOG=str(tmp_path / "calls.log"), TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode != 0
    assert "compiling hvdlite's TensorFlow ops" in out.stderr and "exit code 3" in out.stderr
    assert "collective_kernels" in out.stderr and "boom: no such header" in out.stderr
    assert not [p for p in os.listdir(tmp_path / "cache" / "tensorflow") if not p.endswith(".lock")]


@pytest.mark.tensorflow_ops
def test_op_library_reduces_every_dtype_it_registers(world):
    worker = os.path.join(os.path.dirname(__file__), "workers", "every_dtype.py")
    result = world(2, worker, timeout=300, env={"TF_CPP_MIN_LOG_LEVEL": "2"}).expect_ok()
    for rank in range(2):
        assert "every dtype OK" in result.lines(rank), result
