"""init/shutdown and the job layout (rank, size, ...), shared by every binding."""
import atexit
import itertools
import os
import threading

_state_lock = threading.Lock()
_topology = None
_atexit_registered = False
_name_counters = {}


def core():
    """The compiled core, imported on first use so that the launcher and the
    pure-Python parts work without it."""
    try:
        from hvdlite import _core
    except ImportError as error:
        raise ImportError(
            "hvdlite's compiled core (hvdlite._core) could not be loaded: "
            f"{error}. Install hvdlite with `pip install .` (or `make install`) from the "
            "source tree, and do not run Python from inside the source folder without "
            "having installed it.") from error
    return _core


def _job_environment():
    """HVDLITE_*/HOROVOD_* variables for the core, with the layouts of other
    launchers (mpirun, srun, torchrun) translated, and a rendezvous store
    found for them, where hvdliterun did not set them."""
    from hvdlite.common import environment, gpu_libraries, rendezvous
    env = environment.core_environment(os.environ)
    env[gpu_libraries.PATH_VARIABLE] = gpu_libraries.library_path(os.environ)
    env.update(rendezvous.foreign_job_environment(os.environ, mpi_transport=mpi_built()))
    return env


def init(comm=None, process_sets=None):
    """Starts hvdlite in this process: rendezvous with the other ranks and start
    the background thread. Idempotent; works again after shutdown().

    comm: an mpi4py communicator or list of ranks (Horovod's MPI option). This
    build has the built-in TCP transport only, so it must be None.
    process_sets: ProcessSet objects (or rank lists) to create now, or
    "dynamic" (accepted for Horovod compatibility; sets can always be added).
    """
    global _topology, _atexit_registered
    from hvdlite.common import process_sets as ps_module
    if comm is not None:
        raise ValueError("init(comm=...) selects an MPI communicator, but this hvdlite build has "
                         "no MPI support; call init() without comm (the built-in TCP transport "
                         "finds the other ranks through hvdliterun's rendezvous)")
    if process_sets == "dynamic":
        process_sets = None
    with _state_lock:
        if _topology is not None:
            return
        registered = ps_module._registered(process_sets)
        core().init(_job_environment(), [ps.ranks for ps in registered])
        _topology = dict(core().topology())
        _name_counters.clear()
        if not _atexit_registered:
            atexit.register(shutdown)
            _atexit_registered = True


def shutdown():
    """Stops hvdlite: every rank is told, pending operations fail, the thread exits."""
    global _topology
    with _state_lock:
        if _topology is None:
            return
        core().shutdown()
        _topology = None


def is_initialized():
    return _topology is not None


def _get(key):
    topology = _topology
    if topology is None:
        raise ValueError("hvdlite has not been initialized; call hvdlite.init() first")
    return topology[key]


def rank():
    return _get("rank")


def size():
    return _get("size")


def local_rank():
    return _get("local_rank")


def local_size():
    return _get("local_size")


def cross_rank():
    return _get("cross_rank")


def cross_size():
    return _get("cross_size")


def is_homogeneous():
    return _get("is_homogeneous")


def start_timeline(file_path, mark_cycles=False):
    """Starts writing a Chrome-trace timeline (rank 0 writes it; "{rank}" in the
    path gives every rank its own file)."""
    _get("rank")
    core().start_timeline(str(file_path), bool(mark_cycles))


def stop_timeline():
    _get("rank")
    core().stop_timeline()


def auto_name(kind):
    """Horovod-style default names ("allreduce.noname.3"): every rank must issue
    unnamed collectives of one kind in the same order."""
    counter = _name_counters.setdefault(kind, itertools.count())
    return f"{kind}.noname.{next(counter)}"


# Build information, as Horovod reports it. The built-in TCP transport answers
# for Horovod's gloo questions, since it plays gloo's role.
def mpi_built():
    return False


def mpi_enabled():
    return False


def mpi_threads_supported():
    return False


def gloo_built():
    return True


def gloo_enabled():
    return True


def tcp_built():
    return True


def nccl_built():
    """NCCL's version (e.g. 21903 for 2.19.3) when libnccl.so.2 loads where the
    core looks for it (hvdlite/common/gpu_libraries.py), else 0. The core loads
    NCCL at run time, so this answers for this machine, not for the build."""
    from hvdlite.common import gpu_libraries
    return int(core().nccl_version(gpu_libraries.core_environment()))


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    """True when CUDA tensors can be reduced here (NCCL loads)."""
    return nccl_built() > 0


def rocm_built():
    return False
