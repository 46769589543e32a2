"""Fetches what building hvdlite's prebuilt framework libraries needs, and
nothing more: the headers and libtensorflow_framework.so.2 of each TensorFlow
minor version the wheel serves, and the FFI headers of the jaxlib its XLA
handler is built against (Note [One wheel, every framework version] in
cmake/prebuilt.cmake). Downloads the framework's wheel with pip (no
dependencies), unpacks only those members into build/wheel/frameworks/, and
keeps them there, so a second `make wheel` downloads nothing.

Prints the CMake definitions that cmake/prebuilt.cmake reads, one a line:
    HVDLITE_PREBUILT_TENSORFLOW=2.16=/abs/root;2.21=/abs/root
    HVDLITE_PREBUILT_JAX_FFI=0.6.0=/abs/include

Usage: framework_headers.py --tensorflow 2.16,2.21|installed|none
                            --jaxlib 0.6.0|installed|none [--python PYTHON]
"installed" takes the framework installed beside PYTHON (no download).
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FRAMEWORKS = os.path.join(ROOT, "build", "wheel", "frameworks")
# Every TensorFlow minor version hvdlite supports (pyproject.toml: >=2.16).
SUPPORTED_TENSORFLOW = ["2.16", "2.17", "2.18", "2.19", "2.20", "2.21"]
# The oldest jaxlib whose FFI headers have all the handler uses
# (xla::ffi::DeviceOrdinal came in 0.6.0; jax.ffi itself in 0.5.0): the
# handler built against it serves every newer jaxlib.
OLDEST_JAXLIB = "0.6.0"

# Headers and libtensorflow_framework do not depend on the Python version, so
# they come from the wheels for one that every supported release has.
HEADERS_FROM_PYTHON = "3.11"
# TensorFlow's CPU-only package: tensorflow-cpu on x86_64; on aarch64 the
# tensorflow package itself is built for the CPU only.
TENSORFLOW_PACKAGE = "tensorflow-cpu" if os.uname().machine == "x86_64" else "tensorflow"


def _installed(python, expression):
    return subprocess.check_output([python, "-c", expression], text=True,
                                   env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")).strip()


def _download(requirement, python_version, into):
    """The wheel file pip downloads for `requirement` (no dependencies) into
    the empty folder `into`."""
    subprocess.check_call([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                           "--only-binary=:all:", "--python-version", python_version, "-d", into,
                           requirement])
    wheels = glob.glob(os.path.join(into, "*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"pip download {requirement} left {wheels} in {into}, not one wheel")
    return wheels[0]


def _unpack(wheel, wanted, into):
    """Extracts the members for which wanted(name) holds; returns the version
    in the wheel's file name."""
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if wanted(member):
                archive.extract(member, into)
    return os.path.basename(wheel).split("-")[1]


def tensorflow_root(minor, python_version=HEADERS_FROM_PYTHON):
    """A folder with include/ and libtensorflow_framework.so.2 of TensorFlow
    `minor`'s newest patch release (only the first run downloads)."""
    root = os.path.join(FRAMEWORKS, f"tensorflow-{minor}")
    stamp = os.path.join(root, "version.json")
    if not os.path.exists(stamp):
        os.makedirs(FRAMEWORKS, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=os.path.dirname(FRAMEWORKS)) as scratch:
            wheel = _download(f"{TENSORFLOW_PACKAGE}=={minor}.*", python_version, scratch)
            version = _unpack(wheel, lambda m: m.startswith("tensorflow/include/") or
                              m == "tensorflow/libtensorflow_framework.so.2", scratch)
            if os.path.exists(root):
                subprocess.check_call(["rm", "-rf", root])
            os.rename(os.path.join(scratch, "tensorflow"), root)
        with open(stamp, "w") as f:
            json.dump({"version": version}, f)
    return root


def jaxlib_include(version, python_version=HEADERS_FROM_PYTHON):
    root = os.path.join(FRAMEWORKS, f"jaxlib-{version}")
    if not os.path.isdir(os.path.join(root, "include")):
        os.makedirs(FRAMEWORKS, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=os.path.dirname(FRAMEWORKS)) as scratch:
            wheel = _download(f"jaxlib=={version}", python_version, scratch)
            _unpack(wheel, lambda m: m.startswith("jaxlib/include/"), scratch)
            os.rename(os.path.join(scratch, "jaxlib"), root)
    return os.path.join(root, "include")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tensorflow", default=",".join(SUPPORTED_TENSORFLOW))
    parser.add_argument("--jaxlib", default=OLDEST_JAXLIB)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    tensorflow = []
    if args.tensorflow == "installed":
        found = _installed(args.python, "import tensorflow as tf, os; print(tf.__version__, "
                           "os.path.dirname(tf.sysconfig.get_include()))").split()
        tensorflow.append((".".join(found[0].split(".")[:2]), found[1]))
    elif args.tensorflow not in ("", "none"):
        for minor in args.tensorflow.split(","):
            tensorflow.append((minor, tensorflow_root(minor.strip())))

    jax = None
    if args.jaxlib == "installed":
        jax = tuple(_installed(args.python, "import jaxlib, jax.ffi; print(jaxlib.__version__, "
                               "jax.ffi.include_dir())").split())
    elif args.jaxlib not in ("", "none"):
        jax = (args.jaxlib, jaxlib_include(args.jaxlib))

    print("HVDLITE_PREBUILT_TENSORFLOW=" + ";".join(f"{m}={r}" for m, r in tensorflow))
    print("HVDLITE_PREBUILT_JAX_FFI=" + (f"{jax[0]}={jax[1]}" if jax else ""))


if __name__ == "__main__":
    main()
