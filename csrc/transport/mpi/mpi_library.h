// The process's use of the MPI library: initialised once (unless the
// application or mpi4py already did), finalised at process exit if hvdlite
// initialised it, and MPI return codes turned into TransportError.
#pragma once

#include <mpi.h>

#include <string>

namespace hvdlite::transport::mpi {

// Note [MPI lifetime]
// MPI can be initialised only once per process and never again after
// MPI_Finalize, but hvdlite's Runtime is created and destroyed on every
// init()/shutdown() (elastic training). So the library stays initialised
// from the first MpiTransport until the process exits; a runtime only dups
// and frees its own communicators. If mpi4py or the application initialised
// MPI, they also finalise it; otherwise hvdlite does, at exit (mpirun reports
// a rank that exits without MPI_Finalize as failed).
class MpiLibrary {
 public:
  // Initialises MPI on first use (asking for MPI_THREAD_MULTIPLE: the
  // background thread calls MPI while the application's threads may, too).
  // Throws TransportError if MPI cannot be initialised or was finalised.
  static MpiLibrary& instance();

  // The thread level MPI provides (MPI_THREAD_SINGLE ... MPI_THREAD_MULTIPLE).
  int threadLevel() const { return thread_level_; }
  bool initialisedByUs() const { return initialised_by_us_; }

  ~MpiLibrary();
  MpiLibrary(const MpiLibrary&) = delete;
  MpiLibrary& operator=(const MpiLibrary&) = delete;

 private:
  MpiLibrary();
  int thread_level_ = MPI_THREAD_SINGLE;
  bool initialised_by_us_ = false;
};

// True once MPI_Finalize ran: handles must not be freed after it.
bool mpiFinalized();

// True when MPI is initialised (by anyone) with MPI_THREAD_MULTIPLE; never
// initialises it.
bool threadMultipleProvided();

// Throws TransportError "<what> failed: <MPI's message>" unless rc is MPI_SUCCESS.
void check(int rc, const std::string& what);

}  // namespace hvdlite::transport::mpi
