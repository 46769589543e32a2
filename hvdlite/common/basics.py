"""The compiled core, starting and stopping it, and the job layout (rank,
size, ...), shared by every binding."""
import atexit
import importlib
import itertools
import os
import threading

_state_lock = threading.Lock()
_topology = None
_atexit_registered = False
_name_counters = {}
_core_module = None


def core():
    """The compiled core, imported on first use so that the launcher and the
    pure-Python parts work without it. Cached: every collective calls this."""
    global _core_module
    if _core_module is None:
        from hvdlite.common import call_sites
        module = compiled_module("_core")
        call_sites.register(module)
        _core_module = module
    return _core_module


def compiled_module(name):
    """hvdlite.<name>, one of the compiled modules, with a message that says
    how to install it when it is missing."""
    try:
        return importlib.import_module(f"hvdlite.{name}")
    except ImportError as error:
        raise ImportError(f"hvdlite's compiled core (hvdlite.{name}) could not be loaded: "
                          f"{error}. {_install_advice(error)}") from error


def _install_advice(error):
    """What to do about an ImportError of a compiled module (which links no
    MPI: a missing MPI is reported when a job asks for it, Note [MPI at run
    time])."""
    return ("Install hvdlite with `pip install .` (or `make install`) from the source tree, "
            "and do not run Python from inside the source folder without having installed it.")


def _job_environment():
    """HVDLITE_*/HOROVOD_* variables for the core, with the layouts of other
    launchers (mpirun, srun, torchrun) translated, the MPI transport selected
    under mpirun when this build has it, and a rendezvous store found for
    them where one is needed and hvdliterun did not set it."""
    from hvdlite.common import (environment, gpu_library_search, membership, mpi_library_search,
                                mpi_selection, rendezvous)
    env = environment.core_environment(os.environ)
    env[gpu_library_search.PATH_VARIABLE] = gpu_library_search.library_path(os.environ)
    env[mpi_library_search.PATH_VARIABLE] = mpi_library_search.library_path(os.environ)
    if membership.enabled():
        # An elastic job: the driver says where this process is in this round.
        env.update(membership.join_round(core()))
        return env
    env.update(mpi_selection.defaults(os.environ, mpi_built()))
    if mpi_selection.uses_mpi(env):
        # Opens the libmpi before anything imports mpi4py (the rendezvous
        # may): mpi4py takes an MPI already in the process's global scope, so
        # both share it instead of mpi4py finding another. A failure is left
        # for init() to report in full.
        core().mpi_libraries(env)
    over_mpi = mpi_selection.all_over_mpi(env)
    env.update(rendezvous.foreign_job_environment(os.environ, mpi_transport=over_mpi))
    return env


def _init_job(process_sets):
    """Starts the core in the job the environment describes. An elastic
    worker whose round cannot form (a peer died during the rendezvous, and
    the driver aborted it: Note [Rendezvous abort] in
    csrc/transport/tcp/mesh.h) joins the next round the driver publishes."""
    from hvdlite.common import membership
    from hvdlite.common.exceptions import HvdliteInternalError
    while True:
        try:
            core().init(_job_environment(), process_sets, -1)
            return
        except HvdliteInternalError as error:
            if not membership.enabled():
                raise
            membership.report_failed_round(error)


def start(process_set_ranks, comm=None):
    """Starts the core in this process's job, with process sets of these
    ranks (ids 1, 2, ... in this order), unless it runs already. Returns True
    when this call started it. hvdlite.init() (startup.py) is the public face.

    comm: an mpi4py communicator, or a list of MPI_COMM_WORLD ranks, to run
    the job on (see init())."""
    global _topology, _atexit_registered
    from hvdlite.common import mpi_selection
    with _state_lock:
        if _topology is not None:
            return False
        if comm is None:
            _init_job(process_set_ranks)
        else:
            env, mpi_comm = mpi_selection.communicator_environment(
                comm, os.environ, mpi_built())
            core().init(env, process_set_ranks, mpi_comm)
        _topology = dict(core().topology())
        _name_counters.clear()
        from hvdlite.common import threads
        threads.apply_at_init(_topology["rank"], _topology["local_size"])
        if not _atexit_registered:
            atexit.register(shutdown)
            _atexit_registered = True
        return True


def shutdown():
    """Stops hvdlite: every rank is told, pending operations fail, the thread exits."""
    global _topology
    with _state_lock:
        if _topology is None:
            return
        core().shutdown()
        _topology = None


def is_initialized():
    """Whether `init()` has run in this process and `shutdown()` has not.

    Returns:
        bool: True between `init()` and `shutdown()`.
    """
    return _topology is not None


def _get(key):
    topology = _topology
    if topology is None:
        raise ValueError("hvdlite has not been initialized; call hvdlite.init() first")
    return topology[key]


def rank():
    """This process's rank in the job, from 0 to `size() - 1`.

    Returns:
        int: as negotiated at `init()` (after an elastic reset: the new job's).

    Raises:
        ValueError: before `init()`.
    """
    return _get("rank")


def size():
    """The number of ranks in the job.

    Returns:
        int: as negotiated at `init()` (after an elastic reset: the new job's).

    Raises:
        ValueError: before `init()`.
    """
    return _get("size")


def local_rank():
    """This process's rank among the ranks on its host (pin a GPU with it).

    Returns:
        int: as negotiated at `init()` (after an elastic reset: the new job's).

    Raises:
        ValueError: before `init()`.
    """
    return _get("local_rank")


def local_size():
    """The number of ranks on this process's host.

    Returns:
        int: as negotiated at `init()` (after an elastic reset: the new job's).

    Raises:
        ValueError: before `init()`.
    """
    return _get("local_size")


def cross_rank():
    """The index of this process's host among the job's hosts (its rank among
    the ranks with the same local rank).

    Returns:
        int: as negotiated at `init()` (after an elastic reset: the new job's).

    Raises:
        ValueError: before `init()`.
    """
    return _get("cross_rank")


def cross_size():
    """The number of hosts that hold a rank with this process's local rank.

    Returns:
        int: as negotiated at `init()` (after an elastic reset: the new job's).

    Raises:
        ValueError: before `init()`.
    """
    return _get("cross_size")


def is_homogeneous():
    """Whether every host runs the same number of ranks.

    Returns:
        bool: as negotiated at `init()` (after an elastic reset: the new job's).

    Raises:
        ValueError: before `init()`.
    """
    return _get("is_homogeneous")


def start_timeline(file_path, mark_cycles=False):
    """Starts writing a Chrome-trace timeline (rank 0 writes it; "{rank}" in the
    path gives every rank its own file).

    Args:
        file_path (str | os.PathLike): the trace file to write.
        mark_cycles (bool): also mark each background cycle in the trace.

    Raises:
        ValueError: before `init()`.
    """
    _get("rank")
    core().start_timeline(str(file_path), bool(mark_cycles))


def stop_timeline():
    """Stops the timeline `start_timeline()` (or HVDLITE_TIMELINE) started, and closes its file.

    Raises:
        ValueError: before `init()`.
    """
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
    """Whether this build has the MPI transport.

    Returns:
        bool: True when an MPI was found at build time.
    """
    return bool(core().mpi_built())


def mpi_enabled():
    """Whether the running job uses MPI.

    Returns:
        bool: True when the running job negotiates or moves data over MPI; False before `init()`.
    """
    if _topology is None:
        return False
    return "mpi" in core().selected_transports()


def mpi_threads_supported():
    """Whether MPI runs here with MPI_THREAD_MULTIPLE.

    Returns:
        bool: True when MPI is initialised in this process with MPI_THREAD_MULTIPLE
            (so other threads, e.g. mpi4py calls, may use MPI next to hvdlite's).
    """
    return bool(mpi_built() and core().mpi_threads_supported())


def gloo_built():
    """Horovod's question, answered for hvdlite's built-in transport, which plays gloo's role.

    Returns:
        bool: always True.
    """
    return True


def gloo_enabled():
    """Horovod's question about gloo, answered for hvdlite's built-in transport.

    Returns:
        bool: True unless the running job negotiates and moves data over MPI only
            (True before `init()`).
    """
    if _topology is None:
        return True
    data, controller = core().selected_transports()
    return not (data == "mpi" and controller in ("auto", "mpi"))


def tcp_built():
    """Whether this build has the built-in TCP transport.

    Returns:
        bool: always True (it is always built).
    """
    return True


def nccl_built():
    """The NCCL this machine would use. The core loads NCCL at run time, so
    this answers for this machine, not for the build.

    Returns:
        int: NCCL's version (e.g. 21903 for 2.19.3) when libnccl.so.2 loads where the
            core looks for it (hvdlite/common/gpu_library_search.py), else 0.
    """
    from hvdlite.common import gpu_library_search
    return int(core().nccl_version(gpu_library_search.core_environment()))


def gpu_libraries():
    """The CUDA libraries the core uses (those of the running job, else those
    it would load here). Loads them.

    Returns:
        dict: gpu_operations ("nccl" or "host", HVDLITE_GPU_OPERATIONS), cuda_runtime
            (the libcudart file) and cuda_runtime_version (e.g. 13000), cuda_driver_version
            (the newest CUDA the driver supports), batched_copies (cudaMemcpyBatchAsync,
            CUDA >= 12.8), nccl (the libnccl file; None with host operations) and
            nccl_version, and error: why a needed library did not load, else None (on a
            machine without a GPU, `error` says so).
    """
    from hvdlite.common import gpu_library_search as search
    return dict(core().gpu_libraries(search.core_environment()))


def mpi_libraries():
    """What MPI the core finds here (Note [MPI at run time]); loads libmpi
    without initialising it.

    Returns:
        dict: plugins (the MPI families this build has a plugin for), library
            (the libmpi file, "" when none loads), version (its
            MPI_Get_library_version), family, plugin (hvdlite's plugin for it),
            error (why MPI cannot be used here, else ""), searched
            ([(folder, why)] in the order the core tries them).
    """
    from hvdlite.common import config, mpi_library_search as search
    env = config.hvdlite_variables(os.environ)
    env[search.PATH_VARIABLE] = search.library_path(os.environ)
    found = dict(core().mpi_libraries(env))
    found["searched"] = search.search_dirs(os.environ)
    return found


def ddl_built():
    """Horovod's question about IBM DDL, which hvdlite does not support.

    Returns:
        bool: always False.
    """
    return False


def ccl_built():
    """Horovod's question about Intel oneCCL, which hvdlite does not support.

    Returns:
        bool: always False.
    """
    return False


def cuda_built():
    """Whether CUDA tensors can be reduced here.

    Returns:
        bool: True when NCCL loads, or the CUDA runtime does with
            HVDLITE_GPU_OPERATIONS=host.
    """
    if nccl_built() > 0:
        return True
    found = gpu_libraries()
    return found["gpu_operations"] == "host" and found["error"] is None


def rocm_built():
    """Horovod's question about ROCm, which hvdlite does not support.

    Returns:
        bool: always False.
    """
    return False
