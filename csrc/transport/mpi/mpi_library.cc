#include "transport/mpi/mpi_library.h"

#include <cstdlib>

#include "common/errors.h"

namespace hvdlite::transport::mpi {

MpiLibrary& MpiLibrary::instance() {
  // Destroyed at process exit, after Python's atexit shut the runtime down.
  static MpiLibrary library;
  return library;
}

MpiLibrary::MpiLibrary() {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (mpiFinalized()) {
    throw TransportError(
        "MPI was already finalised in this process (by mpi4py or the application), so hvdlite "
        "cannot use it; keep MPI initialised until hvdlite.shutdown(), or select the built-in "
        "transport with HVDLITE_CPU_OPERATIONS=auto and HVDLITE_CONTROLLER=tcp");
  }
  if (initialised) {
    MPI_Query_thread(&thread_level_);
    return;
  }
  // Open MPI spins in blocking calls; with more threads than cores (ranks
  // sharing a host with their frameworks' threads) a spinning rank holds the
  // core its peer needs to answer. Yielding between polls costs nothing on
  // an idle core. An explicit setting by the user wins (no overwrite).
  setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
  int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &thread_level_);
  check(rc, "MPI_Init_thread");
  initialised_by_us_ = true;
}

MpiLibrary::~MpiLibrary() {
  if (initialised_by_us_ && !mpiFinalized()) MPI_Finalize();
}

bool mpiFinalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

bool threadMultipleProvided() {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised || mpiFinalized()) return false;
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  return level == MPI_THREAD_MULTIPLE;
}

void check(int rc, const std::string& what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) length = 0;
  throw TransportError(what + " failed: " +
                       (length > 0 ? std::string(text, length) : "MPI error " + std::to_string(rc)) +
                       ". A rank probably exited or lost its connection; see the other ranks' logs "
                       "and mpirun's report");
}

}  // namespace hvdlite::transport::mpi
