"""How many threads each rank's OpenMP, BLAS and TensorFlow pools get when
several ranks share a host.

Note [Threads per rank]
Each framework sizes its CPU thread pool to the whole machine: torch's
intra-op pool (OpenMP), the BLAS under NumPy (OpenBLAS, MKL) and
TensorFlow's intra-op pool. With several ranks on one host every rank starts
that many threads, and they fight over the cores (Keras 3 on torch, 2 ranks
on 2 cores: 4.9x slower than with one thread each). So when a rank shares
its host with others (local size > 1) and OMP_NUM_THREADS is not set, the
rank gets

    OMP_NUM_THREADS = TF_NUM_INTRAOP_THREADS = max(1, cores // local size)

where cores are those this process may run on (its affinity mask, so a
cpuset or taskset is honoured). OpenBLAS and MKL fall back to
OMP_NUM_THREADS when OPENBLAS_NUM_THREADS / MKL_NUM_THREADS are unset, so a
user's own setting for those libraries still wins; TensorFlow ignores
OMP_NUM_THREADS for its own pool, hence TF_NUM_INTRAOP_THREADS (kept when
set). A set OMP_NUM_THREADS means someone chose already (the user, or a
scheduler: Ray sets it to an actor's CPUs, Spark to spark.task.cpus,
torchrun to 1): then nothing is set. torchrun's rule is 1 thread per
process; the share of the cores is the same on a machine full of ranks and
leaves cores idle less often when there are fewer ranks than cores.

Launchers put the variables into the rank's environment on the rank's own
host (the count of cores is that host's), so that every library sees them
when it loads, together with HVDLITE_THREADS_CHOSEN ("cores,local size")
for init()'s log line. Under a launcher hvdlite does not control (mpirun,
srun) init() sets them itself (apply_at_init): in os.environ for what loads
later, and through threadpoolctl (and torch.set_num_threads) for the pools
already loaded.
"""
import os
import sys

from hvdlite.common import config, logs

THREAD_VARIABLES = ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS")
CHOSEN_VARIABLE = "HVDLITE_THREADS_CHOSEN"


def host_cores():
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def thread_defaults(local_size, environ, cores=None):
    """The variables to add to the environment `environ` of a rank that
    shares its host with `local_size` - 1 others (Note [Threads per rank]);
    {} when it is alone or OMP_NUM_THREADS is set."""
    local_size = int(local_size or 1)
    if local_size <= 1 or environ.get("OMP_NUM_THREADS"):
        return {}
    cores = cores or host_cores()
    share = str(max(1, cores // local_size))
    chosen = {name: share for name in THREAD_VARIABLES if not environ.get(name)}
    chosen[CHOSEN_VARIABLE] = f"{cores},{local_size}"
    return chosen


def apply_at_init(rank, local_size, environ=None):
    """At init(): under a launcher that set no thread defaults, sets them in
    this process (Note [Threads per rank]); rank 0 says once what was chosen."""
    environ = os.environ if environ is None else environ
    if not config.raw(CHOSEN_VARIABLE, environ):
        chosen = thread_defaults(local_size, environ)
        if not chosen:
            return
        environ.update(chosen)
        _limit_loaded_pools(int(chosen.get("OMP_NUM_THREADS", "0")))
    if rank == 0:
        logs.get("threads").info("%s", describe(environ))


def describe(environ):
    """One line saying what hvdlite chose for the ranks of this host."""
    cores, local_size = config.raw(CHOSEN_VARIABLE, environ).split(",")
    values = ", ".join(f"{name}={environ[name]}" for name in THREAD_VARIABLES if name in environ)
    return (f"{local_size} ranks share the {cores} cores of this host: {values} for each "
            f"(cores // local ranks, as no OMP_NUM_THREADS was set; set it to choose)")


def _limit_loaded_pools(threads):
    """Narrows the OpenMP and BLAS pools already loaded (torch's among them)
    to `threads`; those that load later read the environment."""
    if threads <= 0:
        return
    from threadpoolctl import ThreadpoolController
    ThreadpoolController().limit(limits=threads)
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "set_num_threads"):
        torch.set_num_threads(threads)
