"""A 2-rank job over MPI (data and negotiation), started by an mpirun or
mpiexec: an allreduce, then which libmpi the core loaded. With --mpi4py,
mpi4py is imported (and initialises MPI) before hvdlite, which must then
share mpi4py's libmpi. Prints "LOADED <family> <libmpi file>" and
"mpi runtime OK"."""
import sys

mpi4py_first = "--mpi4py" in sys.argv
if mpi4py_first:
    from mpi4py import MPI

import numpy as np  # noqa: E402

import hvdlite.numpy as hvd  # noqa: E402
from hvdlite.common import basics  # noqa: E402

hvd.init()
assert hvd.size() == 2 and hvd.mpi_enabled(), (hvd.size(), hvd.mpi_enabled())
got = hvd.allreduce(np.full(4, hvd.rank() + 1.0), op=hvd.Sum, name="sum")
assert np.array_equal(got, np.full(4, 3.0)), got
found = basics.mpi_libraries()
assert not found["error"], found["error"]
if mpi4py_first:
    # One MPI in the process: the one mpi4py initialised.
    assert found["version"] == MPI.Get_library_version().splitlines()[0].rstrip(), \
        (found["version"], MPI.Get_library_version())
    assert hvd.mpi_threads_supported()
else:
    assert "mpi4py" not in sys.modules, "a job all over MPI needs no mpi4py"
print(f"LOADED {found['family']} {found['library']}", flush=True)
hvd.shutdown()
print("mpi runtime OK", flush=True)
