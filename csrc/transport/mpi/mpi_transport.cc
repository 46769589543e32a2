#include "transport/mpi/mpi_transport.h"

#include <unistd.h>

#include <cstdio>

#include "common/errors.h"
#include "transport/mpi/mpi_communicator.h"
#include "transport/mpi/mpi_library.h"

namespace hvdlite::transport::mpi {
namespace {

constexpr int kHostnameBytes = 256;

// Note [Group tags]
// MPI_Comm_create_group is collective over the new group's members only, and
// its tag keeps apart creations that overlap in time (a rank may still be
// making set {0,1} when rank 2 already asks it for set {1,2}). Only members
// take part, so a job-wide counter would drift between ranks; the member list
// and how many communicators it had before are what every member agrees on.
int groupTag(const std::vector<int>& members, int made_before) {
  uint64_t hash = 1469598103934665603ULL;  // FNV-1a
  for (int r : members) hash = (hash ^ static_cast<uint64_t>(r)) * 1099511628211ULL;
  hash = (hash ^ static_cast<uint64_t>(made_before)) * 1099511628211ULL;
  return static_cast<int>(hash % 32767);  // MPI guarantees tags up to 32767
}

// The same host identity the TCP mesh publishes, so that local ranks agree
// whichever transport computed them.
std::vector<std::string> allHostnames(MPI_Comm comm, int size, const std::string& identity) {
  char mine[kHostnameBytes] = {};
  if (!identity.empty()) {
    std::snprintf(mine, kHostnameBytes, "%s", identity.c_str());
  } else if (gethostname(mine, kHostnameBytes - 1) != 0) {
    std::snprintf(mine, kHostnameBytes, "localhost");
  }
  std::vector<char> all(static_cast<size_t>(size) * kHostnameBytes);
  check(MPI_Allgather(mine, kHostnameBytes, MPI_CHAR, all.data(), kHostnameBytes, MPI_CHAR, comm),
        "MPI_Allgather (hostnames)");
  std::vector<std::string> names;
  for (int r = 0; r < size; ++r) names.emplace_back(all.data() + r * kHostnameBytes);
  return names;
}

}  // namespace

MpiTransport::MpiTransport(const TransportOptions& options) {
  // hvdlite calls MPI from its background thread, and from the application's
  // thread while no collective runs (init, shutdown): at least SERIALIZED.
  if (MpiLibrary::instance().threadLevel() < MPI_THREAD_SERIALIZED) {
    std::fprintf(stderr,
                 "hvdlite rank %d: warning: MPI was initialised with a thread level below "
                 "MPI_THREAD_SERIALIZED (by mpi4py.rc.thread_level or the application), but "
                 "hvdlite calls MPI from its background thread; initialise MPI with "
                 "MPI_THREAD_MULTIPLE (mpi4py's default)\n",
                 options.rank);
  }
  MPI_Comm base = options.mpi_comm >= 0 ? MPI_Comm_f2c(static_cast<MPI_Fint>(options.mpi_comm))
                                        : MPI_COMM_WORLD;
  check(MPI_Comm_dup(base, &job_), "MPI_Comm_dup");
  check(MPI_Comm_set_errhandler(job_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  int size = 0;
  check(MPI_Comm_rank(job_, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(job_, &size), "MPI_Comm_size");
  if (rank_ != options.rank || size != options.size) {
    std::string which = options.mpi_comm >= 0 ? "the communicator given to init(comm=...)"
                                              : "MPI_COMM_WORLD";
    MPI_Comm_free(&job_);
    throw InvalidArgument("the MPI transport was selected, but " + which + " has this process as "
                          "rank " + std::to_string(rank_) + " of " + std::to_string(size) +
                          " while HVDLITE_RANK/HVDLITE_SIZE say rank " +
                          std::to_string(options.rank) + " of " + std::to_string(options.size) +
                          "; start the job with mpirun (or hvdliterun --mpi), or select the "
                          "built-in transport with HVDLITE_CPU_OPERATIONS=auto");
  }
  hostnames_ = allHostnames(job_, size, options.hostname);
}

MpiTransport::~MpiTransport() {
  if (job_ != MPI_COMM_NULL && !mpiFinalized()) MPI_Comm_free(&job_);
}

std::unique_ptr<Communicator> MpiTransport::communicator(const std::vector<int>& global_ranks) {
  MPI_Comm comm = MPI_COMM_NULL;
  if (static_cast<int>(global_ranks.size()) == static_cast<int>(hostnames_.size())) {
    check(MPI_Comm_dup(job_, &comm), "MPI_Comm_dup");
  } else {
    MPI_Group everyone, members;
    check(MPI_Comm_group(job_, &everyone), "MPI_Comm_group");
    check(MPI_Group_incl(everyone, static_cast<int>(global_ranks.size()), global_ranks.data(),
                         &members),
          "MPI_Group_incl");
    int rc = MPI_Comm_create_group(job_, members, groupTag(global_ranks, sets_made_[global_ranks]++),
                                   &comm);
    MPI_Group_free(&members);
    MPI_Group_free(&everyone);
    check(rc, "MPI_Comm_create_group");
  }
  return std::make_unique<MpiCommunicator>(comm, global_ranks);
}

void MpiTransport::abort() {
  if (job_ == MPI_COMM_NULL || mpiFinalized()) return;
  std::fprintf(stderr,
               "hvdlite rank %d: aborting the MPI job, since MPI cannot cancel a collective that "
               "a failed rank will never join (the reason is logged above)\n",
               rank_);
  std::fflush(stderr);
  MPI_Abort(job_, 1);
}

}  // namespace hvdlite::transport::mpi
