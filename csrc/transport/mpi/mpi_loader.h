// Finds libmpi at run time, tells which MPI it is, and opens the hvdlite
// plugin built for that family. Part of libhvdlite, which includes no mpi.h
// and links no MPI.
//
// Note [MPI at run time]
// libhvdlite never links libmpi: a library built against one machine's MPI
// would demand that MPI (its soname, and a RUNPATH to its folder) on every
// machine it is copied to, and a wheel could not be installed without it.
// MPI is loaded only when a job asks for it (mpirun's ranks, hvdliterun
// --mpi, HVDLITE_CPU_OPERATIONS=mpi or HVDLITE_CONTROLLER=mpi), as NCCL and
// the CUDA runtime are (Note [GPU library search]).
//
// The two MPI families do not share an ABI: in Open MPI (libmpi.so.40) an
// MPI_Comm or MPI_Datatype is a pointer to a struct the library exports
// (MPI_COMM_WORLD is &ompi_mpi_comm_world), in MPICH and its derivatives
// (libmpi.so.12: Intel MPI, MVAPICH, Cray MPICH) an int whose value is fixed
// in mpi.h. So the transport (mpi_transport.cc, mpi_communicator.cc,
// mpi_datatypes.cc, mpi_library.cc) is compiled once per family, against
// that family's mpi.h, into a small plugin beside libhvdlite:
// libhvdlite_mpi_openmpi.so and libhvdlite_mpi_mpich.so. A plugin links
// libhvdlite (its base classes, errors, kernels) but no MPI: its MPI symbols
// stay undefined until it is opened, after libmpi was opened RTLD_GLOBAL,
// which Open MPI needs anyway (its components, dlopened by libmpi, resolve
// libmpi's symbols from the global scope). Each plugin calls MPI directly,
// as before, so a collective costs what it cost when libhvdlite linked MPI.
// The other way, one plugin that looks every function and constant up by
// family, would wrap ~40 functions and every handle, and still need each
// family's constants from its headers. The MPI 5 standard ABI (libmpi_abi.so,
// MPICH 4.2+ ships one) would allow one plugin; Open MPI has none yet.
//
// Which libmpi: the first that opens among
//   1. HVDLITE_MPI_LIBRARY, and only that;
//   2. a libmpi already in the process (mpi4py imported first, or the
//      application linked one): a second MPI in one process breaks both;
//   3. libmpi.so.40, libmpi.so.12, libmpich.so.12, libmpi.so in each folder
//      of HVDLITE_MPI_LIBRARY_PATH, in order: hvdlite's Python layer puts
//      there the folders of the MPI whose mpirun started this process, then
//      LD_LIBRARY_PATH's, then the Python environment's MPI wheels'
//      (hvdlite/common/mpi_library_search.py says why each one);
//   4. the same names in the system's search path.
// Its family comes from MPI_Get_library_version (callable before MPI_Init),
// else from its soname. A libmpi that opens but whose family has no plugin
// in this build is an error naming it, never a reason to load another MPI.
#pragma once

#include <string>
#include <vector>

#include "transport/mpi/mpi_plugin_api.h"

namespace hvdlite::transport::mpi {

struct MpiSearch {
  std::string library;                   // HVDLITE_MPI_LIBRARY; "" = search
  std::vector<std::string> directories;  // HVDLITE_MPI_LIBRARY_PATH
};

// The search of HVDLITE_MPI_LIBRARY and HVDLITE_MPI_LIBRARY_PATH.
MpiSearch mpiSearch(const std::string& library, const std::string& library_path);

// "openmpi", "mpich" or "" from what MPI_Get_library_version says, else
// from the library's file name (libmpi.so.40, libmpi.so.12, libmpich.so.12).
std::string mpiFamily(const std::string& library_version, const std::string& file_name);

// The families whose plugin this build made, e.g. {"openmpi", "mpich"}.
std::vector<std::string> builtMpiPlugins();

// The MPI this process uses: opened once, the first time a transport asks,
// and kept until the process exits (MPI cannot be initialised twice: Note
// [MPI lifetime] in mpi_library.h). Thread-safe.
struct LoadedMpi {
  std::string library;  // the libmpi file
  std::string version;  // MPI_Get_library_version's first line
  std::string family;
  std::string plugin;   // the plugin file
  const MpiPluginApi* api = nullptr;
};

// Loads libmpi and its family's plugin (a later call with another search
// returns the first one's). Throws TransportError that names every place
// tried and why it was refused, and what to do.
const LoadedMpi& loadMpi(const MpiSearch& search);

// The MPI already loaded by loadMpi(), or null; never loads.
const LoadedMpi* loadedMpi();

// What `hvdliterun --check-build` shows: loads as loadMpi() does (so the
// answer is this machine's); never throws.
struct MpiLibraryReport {
  std::vector<std::string> plugins;  // builtMpiPlugins()
  std::string library, version, family, plugin;
  std::string error;  // why MPI cannot be used here, "" when it can
};
MpiLibraryReport mpiLibraryReport(const MpiSearch& search);

}  // namespace hvdlite::transport::mpi
