"""SLOW (marked `install`, run by `make test`): the binary wheel of `make
wheel` installs and runs with no compiler. Builds the wheel once (for the
TensorFlow and jaxlib of the test venv only; tools/wheel/build_wheel.py, in a
fixed build folder under build/test-wheel/ so that a second run recompiles
only what changed, through ccache where there is one: built as `make
install` builds, Release, the wheel's compile commands are the editable
install's, and ccache hands it every object but the prebuilt framework
libraries (Note [One compile per object] in the Makefile); -O0 compiled
everything anew, 86 s of CPU against 30), installs it into a fresh venv
that sees the test venv's frameworks through a .pth file but not its hvdlite
(as `make test-gpu` does), and runs 2-rank jobs there for every binding on a
PATH with no C, C++ or CMake tool and CC/CXX unset (tools/wheel/wheel_jobs.py):
the answers are checked, every framework library must be the wheel's
prebuilt one, and HVDLITE_CACHE_DIR must stay empty (nothing compiled).

Also times the issue's target "from the wheel file to a 2-rank torch
allreduce in a fresh venv with no compiler" (printed, and written to
build/test-wheel/timing.txt)."""
import re
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "wheel"))
import build_wheel  # noqa: E402 - tools/wheel/build_wheel.py
import wheel_jobs  # noqa: E402 - tools/wheel/wheel_jobs.py

pytestmark = [pytest.mark.install, pytest.mark.timeout(900)]

WORK = REPO / "build" / "test-wheel"
# What each job must say it loaded: the wheel's libraries, the FFI path.
LOADED = {"torch": [],
          "tensorflow": [r"tensorflow \S+ ops prebuilt/tensorflow/hvdlite_tf_ops-tf\S+\.so"],
          "jax": [r"jaxlib \S+ jit ffi prebuilt/jax/hvdlite_jax_ffi-jaxlib\S+\.so",
                  r"keras \S+ jax step ffi"]}


@pytest.fixture(scope="module")
def wheel():
    return build_wheel.build("installed", "installed", str(WORK / "dist"), str(WORK / "build"))


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory):
    """(venv, its jobs' environment, seconds from the wheel file to an
    installed hvdlite). The test venv's packages become visible through a .pth
    file written after the install, so pip neither sees nor touches the test
    venv's editable hvdlite, and its .pth files (that editable install's
    finder) are not run."""
    venv = WORK / "venv"
    seconds = wheel_jobs.fresh_venv(venv, wheel)
    pth = wheel_jobs.site_packages(venv) / "test-venv-packages.pth"
    pth.write_text(sysconfig.get_path("purelib") + "\n")
    env = wheel_jobs.job_environment(venv, tmp_path_factory.mktemp("cache") / "hvdlite",
                                     WORK / "bin")
    return venv, env, seconds


def test_the_wheel_carries_the_prebuilt_libraries_and_no_path_of_this_machine(installed):
    venv, _, _ = installed
    libraries = sorted((wheel_jobs.site_packages(venv) / "hvdlite").rglob("*.so"))
    names = [library.name for library in libraries]
    assert any(n.startswith("hvdlite_tf_ops-tf") for n in names), names
    assert any(n.startswith("hvdlite_jax_ffi-jaxlib") for n in names), names
    for library in libraries:
        dynamic = wheel_jobs.run(["readelf", "-d", library], 30).stdout
        assert "libmpi" not in dynamic, f"{library} NEEDS an MPI library:\n{dynamic}"
        for paths in re.findall(r"\((?:RPATH|RUNPATH)\)\s+Library (?:rpath|runpath): \[(.*)\]",
                                dynamic):
            for path in paths.split(":"):
                assert path.startswith("$ORIGIN"), f"{library} searches {path}:\n{dynamic}"


@pytest.mark.parametrize("job", list(wheel_jobs.JOBS))
def test_a_two_rank_job_runs_without_compiling(installed, job, tmp_path):
    venv, env, installed_seconds = installed
    result, seconds = wheel_jobs.run_job(venv, env, job, tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    for binding in wheel_jobs.JOBS[job][0]:
        assert result.stdout.count(f"{binding} OK") == 2, output
    assert result.stdout.count("wheel job OK") == 2, output
    said = wheel_jobs.facts(result.stdout)
    for pattern in LOADED[job]:
        assert any(re.fullmatch(pattern, fact) for fact in said), (pattern, said, output)
    compiled = wheel_jobs.compiled_files(env["HVDLITE_CACHE_DIR"])
    assert not compiled, f"the {job} job compiled at first use: {compiled}\n{output}"
    if job == "torch":
        figure = (f"wheel file to a 2-rank torch allreduce in a fresh venv with no compiler: "
                  f"{installed_seconds + seconds:.1f} s (venv and install {installed_seconds:.1f} s, "
                  f"job {seconds:.1f} s)")
        (WORK / "timing.txt").write_text(figure + "\n")
        print(figure)
