"""Which transport carries negotiation (HVDLITE_CONTROLLER) and data
(HVDLITE_CPU_OPERATIONS) when MPI is in play, and the environment for
init(comm=...).

A job that mpirun started (directly, or through `hvdliterun --mpi`)
negotiates over MPI when this build has it, as Horovod does. Its data goes
over MPI too when the job spans several hosts (the ranks then need no
rendezvous store); on one host it goes through the built-in shared-memory
transport, which moved a 64 MiB allreduce between 2 ranks about 2.5x faster
than Open MPI did in one run (docs/launching.md, "MPI"). An explicit choice (also under
Horovod's HOROVOD_ names) always wins.
"""
from hvdlite.common import config, environment, mpi_library_search

_CHOICES = ("CPU_OPERATIONS", "CONTROLLER")
# The layout and rendezvous of the whole MPI job, which init(comm=...) replaces.
_JOB_VARIABLES = environment.LAYOUT_NAMES + ("STORE_ADDR", "STORE_PORT", "HOSTNAME")


def setting(env, name):
    """HVDLITE_<name>, else HOROVOD_<name>, lower-cased; "" when unset."""
    return config.get(f"HVDLITE_{name}", env) or ""


def launched_by_mpirun(environ):
    """True in a process that Open MPI's or MPICH's mpirun started."""
    return "OMPI_COMM_WORLD_RANK" in environ or "PMI_RANK" in environ or \
        "PMIX_RANK" in environ


def mpirun_choices(env, single_host):
    """What an mpirun job of an MPI build runs over, where `env` does not say
    (under either name): negotiation over MPI; data over MPI, or through the
    built-in transport when every rank is on one host."""
    chosen = {"CONTROLLER": "mpi", "CPU_OPERATIONS": "auto" if single_host else "mpi"}
    return {f"HVDLITE_{name}": value for name, value in chosen.items() if not setting(env, name)}


def single_host_job(environ):
    """True when mpirun's variables say every rank runs on this host."""
    for local, size in (("OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_SIZE"),
                        ("MPI_LOCALNRANKS", "PMI_SIZE")):
        if environ.get(local) and environ.get(size):
            return environ[local] == environ[size]
    return False


def defaults(environ, mpi_built):
    """mpirun_choices() in a process mpirun started, in an MPI build; else {}."""
    if not mpi_built or not launched_by_mpirun(environ):
        return {}
    return mpirun_choices(environ, single_host_job(environ))


def uses_mpi(env):
    """True when MPI carries data or negotiation."""
    return "mpi" in (setting(env, "CPU_OPERATIONS"), setting(env, "CONTROLLER"))


def all_over_mpi(env):
    """True when MPI carries data and negotiation, so no store is needed
    (transport::needsStore in the core says the same)."""
    return setting(env, "CPU_OPERATIONS") == "mpi" and \
        setting(env, "CONTROLLER") in ("", "auto", "mpi")


def communicator_environment(comm, environ, mpi_built):
    """(core environment, Fortran handle) for init(comm=...): the layout is
    the communicator's, and MPI carries everything."""
    if not mpi_built:
        raise ValueError(
            "init(comm=...) runs hvdlite over an MPI communicator, but this hvdlite build has no "
            "MPI transport (no MPI plugin: no MPI headers were found when it was built); rebuild "
            "it with an MPI's headers at hand (docs/getting-started.md, \"Building with MPI\"), or call init() "
            "without comm")
    env = {key: value for key, value in environment.core_environment(environ).items()
           if key.split("_", 1)[1] not in _JOB_VARIABLES}
    # mpi4py's libmpi is in the process already, and the core shares it.
    env[mpi_library_search.PATH_VARIABLE] = mpi_library_search.library_path(environ)
    for name in _CHOICES:
        chosen = setting(environ, name)
        if chosen not in ("", "auto", "mpi"):
            raise ValueError(
                f"init(comm=...) runs hvdlite over MPI, but HVDLITE_{name} (or HOROVOD_{name}) "
                f"selects {chosen!r}; unset it, or call init() without comm")
        env[f"HVDLITE_{name}"] = "mpi"
    comm = _as_communicator(comm)
    env["HVDLITE_RANK"] = str(comm.Get_rank())
    env["HVDLITE_SIZE"] = str(comm.Get_size())
    return env, comm.py2f()


def _as_communicator(comm):
    """An mpi4py communicator for `comm`: itself, or for a list of
    MPI_COMM_WORLD ranks, a new one over them (collective over those ranks)."""
    try:
        from mpi4py import MPI
    except ImportError as error:
        raise ValueError(f"init(comm=...) needs mpi4py to read the communicator ({error}); "
                         f"pip install mpi4py") from error
    if isinstance(comm, MPI.Comm):
        if comm == MPI.COMM_NULL:
            raise ValueError("init(comm=...) got MPI.COMM_NULL: this process is not part of "
                             "that communicator, so it cannot join the job")
        return comm
    try:
        ranks = [int(r) for r in comm]
    except TypeError as error:
        raise ValueError(f"init(comm=...) takes an mpi4py communicator or a list of "
                         f"MPI_COMM_WORLD ranks, not {type(comm).__name__}") from error
    world = MPI.COMM_WORLD
    bad = [r for r in ranks if not 0 <= r < world.Get_size()]
    if bad or len(set(ranks)) != len(ranks) or not ranks:
        raise ValueError(f"init(comm={ranks}): ranks must be distinct MPI_COMM_WORLD ranks "
                         f"(0..{world.Get_size() - 1})")
    if world.Get_rank() not in ranks:
        raise ValueError(f"init(comm={ranks}): this process is MPI_COMM_WORLD rank "
                         f"{world.Get_rank()}, which is not in the list; only the listed "
                         f"ranks may call init() with it")
    group = world.Get_group().Incl(ranks)
    try:
        return world.Create_group(group)
    finally:
        group.Free()
