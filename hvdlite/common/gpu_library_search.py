"""Where the core looks for NCCL and the CUDA runtime, which it loads at run
time (Note [GPU library search] in csrc/transport/cuda/cuda_runtime.h), so one
build works with and without GPUs, on CUDA 12 and 13.

The core searches, in order: HVDLITE_NCCL_LIBRARY / HVDLITE_CUDART_LIBRARY
(that file only), a copy already loaded in the process, the directories of
HVDLITE_GPU_LIBRARY_PATH, then the system's search path. This module fills
HVDLITE_GPU_LIBRARY_PATH: the user's directories first, then, for every
Python path entry, the NVIDIA wheels' lib folders (nvidia/cu13/lib: CUDA 13's
runtime; nvidia/cuda_runtime/lib: CUDA 12's; nvidia/nccl/lib: either
generation's NCCL), then torch/lib and the nvidia/*/lib folders next to torch
(a CUDA build of PyTorch ships or depends on both libraries).
"""
import glob
import importlib.util
import os
import sys

from hvdlite.common import config

PATH_VARIABLE = "HVDLITE_GPU_LIBRARY_PATH"
_WHEEL_DIRS = (os.path.join("nvidia", "nccl", "lib"), os.path.join("nvidia", "cu13", "lib"),
               os.path.join("nvidia", "cuda_runtime", "lib"))


def _torch_dir():
    """torch's package folder, found without importing torch (slow, and it may be broken)."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def search_dirs(python_path=None, torch_dir=None):
    """Existing directories that may hold libnccl.so.2 / libcudart.so.13 or .12, in search order."""
    python_path = sys.path if python_path is None else python_path
    torch_dir = _torch_dir() if torch_dir is None else torch_dir
    found = []
    for entry in python_path:
        for sub in _WHEEL_DIRS:
            found.append(os.path.join(entry or os.getcwd(), sub))
    if torch_dir:
        found.append(os.path.join(torch_dir, "lib"))
        found.extend(sorted(glob.glob(os.path.join(os.path.dirname(torch_dir), "nvidia", "*", "lib"))))
    unique = []
    for path in found:
        path = os.path.abspath(path)
        if os.path.isdir(path) and path not in unique:
            unique.append(path)
    return unique


def library_path(environ=None, python_path=None, torch_dir=None):
    """The value of HVDLITE_GPU_LIBRARY_PATH the core gets: the user's
    (HVDLITE_ or HOROVOD_ name) directories, then those search_dirs() finds."""
    environ = os.environ if environ is None else environ
    user = config.get(PATH_VARIABLE, environ) or ""
    dirs = [d for d in user.split(os.pathsep) if d]
    dirs += [d for d in search_dirs(python_path, torch_dir) if d not in dirs]
    return os.pathsep.join(dirs)


def core_environment(environ=None):
    """The GPU library variables of the environment, with the search path filled in."""
    environ = os.environ if environ is None else environ
    env = config.hvdlite_variables(environ)
    env[PATH_VARIABLE] = library_path(environ)
    return env
