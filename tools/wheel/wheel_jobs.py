"""The 2-rank jobs that check an installed hvdlite wheel, shared by the CI
test (tests/wheel/test_wheel.py) and `make test-versions`
(tools/wheel/test_versions.py): a fresh venv with the wheel, a PATH with no
compiler or build tool, an empty HVDLITE_CACHE_DIR, and one job per group of
bindings (tests/wheel/workers/binding_job.py) whose output says what each
binding loaded."""
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "wheel" / "workers" / "binding_job.py"
# Executables a first-use compile could reach for (compiled_library.compiler,
# a CMake build): none may be on the jobs' PATH.
BUILD_TOOL = re.compile(r"^(cc|c\+\+|cpp|c89|c99|gcc|g\+\+|clang|clang\+\+|cmake|ccache|ninja|ld|"
                        r"(.*-)?(gcc|g\+\+|cpp|clang|clang\+\+|c\+\+)(-[0-9.]+)?)$")
# name -> (bindings, extra environment): every binding runs in a 2-rank job,
# Keras 3 once per backend.
JOBS = {"torch": (["torch", "numpy"], {}),
        "tensorflow": (["tensorflow", "keras"], {"KERAS_BACKEND": "tensorflow"}),
        "jax": (["jax", "keras"], {"KERAS_BACKEND": "jax"})}
# Variables that could point a job at another hvdlite, a compiler or a cache.
UNSET = ("VIRTUAL_ENV", "PYTHONPATH", "CC", "CXX", "CPATH", "HVDLITE_CACHE_DIR")


def run(command, timeout, **kwargs):
    """subprocess.run that raises with the command's output when it fails."""
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True,
                            timeout=timeout, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, command))} failed ({result.returncode}):\n"
                           f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result


def path_without_build_tools(folder):
    """`folder`, filled with links to every program on PATH but compilers and
    build tools (jobs need sh, ps and the like); PATH's venv folders skipped."""
    folder = Path(folder)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(directory) or os.path.exists(os.path.join(directory, "activate")):
            continue
        for name in os.listdir(directory):
            target = os.path.join(directory, name)
            if (BUILD_TOOL.match(name) or (folder / name).exists() or
                    not (os.path.isfile(target) and os.access(target, os.X_OK))):
                continue
            (folder / name).symlink_to(target)
    return folder


def fresh_venv(venv, wheel, pip_python=sys.executable, install_args=("--no-deps", "--no-index")):
    """Creates `venv` anew (without pip: `pip_python`'s pip installs into it)
    and installs `wheel`; returns the seconds it took."""
    shutil.rmtree(venv, ignore_errors=True)
    started = time.monotonic()
    run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", venv], 120)
    run([pip_python, "-m", "pip", "--python", Path(venv) / "bin" / "python", "install", "--quiet",
         *install_args, wheel], 1800)
    return time.monotonic() - started


def site_packages(venv):
    return Path(run([Path(venv) / "bin" / "python", "-c",
                     "import sysconfig; print(sysconfig.get_path('purelib'))"], 60).stdout.strip())


def job_environment(venv, cache, tools_folder):
    """The environment of a job in `venv`: no build tool on PATH, CC/CXX
    unset, an empty private HVDLITE_CACHE_DIR `cache`."""
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    Path(cache).mkdir(mode=0o700, parents=True, exist_ok=True)
    env.update(PATH=f"{Path(venv) / 'bin'}:{path_without_build_tools(tools_folder)}",
               HVDLITE_CACHE_DIR=str(cache), HVDLITE_TEST_WHEEL_VENV=str(venv),
               TF_CPP_MIN_LOG_LEVEL="3")
    probe = ("import shutil, sys; found = [t for t in ('cc', 'c++', 'gcc', 'g++', 'clang++', "
             "'cmake') if shutil.which(t)]; sys.exit(f'build tools on PATH: {found}' if found else 0)")
    run([Path(venv) / "bin" / "python", "-c", probe], 60, env=env)
    return env


def run_job(venv, env, name, cwd, timeout=300):
    """Runs job `name` at 2 ranks; returns (subprocess result, seconds). The
    result is returned even when the job failed: callers judge its output."""
    bindings, extra = JOBS[name]
    started = time.monotonic()
    result = subprocess.run([str(Path(venv) / "bin" / "hvdliterun"), "-np", "2",
                             str(Path(venv) / "bin" / "python"), str(WORKER), *bindings],
                            capture_output=True, text=True, timeout=timeout,
                            env=dict(env, **extra), cwd=cwd)
    return result, time.monotonic() - started


def compiled_files(cache):
    """Files in the cache of compiled code: what was compiled at first use."""
    return sorted(str(p) for p in Path(cache).rglob("*") if p.is_file())


def facts(output):
    """What the job's ranks said they loaded ("loaded: ..." lines), once each."""
    return sorted({line.split("loaded: ", 1)[1].strip() for line in output.splitlines()
                   if "loaded: " in line})
