"""hvdlite.init(): starts the core and creates the process sets asked for.
It sits above basics (the core and the job layout) and process_sets (which
asks basics for the layout), so that neither of those imports the other."""
from hvdlite.common import basics
from hvdlite.common import process_sets as ps_module


def init(comm=None, process_sets=None):
    """Starts hvdlite in this process: rendezvous with the other ranks and start the background thread.

    Idempotent; works again after `shutdown()` (elastic jobs re-initialise this way). Under
    hvdliterun, mpirun, srun or torchrun the job's layout comes from their environment.

    Args:
        comm: an mpi4py communicator, or a list of MPI_COMM_WORLD ranks, to run the job on
            (Horovod's MPI option): negotiation and collectives then run over MPI among its
            ranks. None: the launcher's job.
        process_sets (list | str | None): ProcessSet objects (or rank lists) to create now, or
            "dynamic" (accepted for Horovod compatibility: sets can always be added).

    Raises:
        ValueError: `comm` in a build without MPI, or a malformed process set or setting.
        HvdliteInternalError: the rendezvous failed (a rank did not come within
            HVDLITE_START_TIMEOUT, a peer is unreachable), saying which.

    Example:
        ```python
        import hvdlite.torch as hvd
        hvd.init()
        print(hvd.rank(), hvd.size())
        ```
    """
    if process_sets == "dynamic":
        process_sets = None
    sets = ps_module._initial_sets(process_sets)
    if basics.start([ps.ranks for ps in sets], comm):
        ps_module._number_initial_sets(sets)
