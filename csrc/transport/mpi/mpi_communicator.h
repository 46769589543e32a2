// The Communicator of the MPI transport: the members of one process set as
// one MPI communicator, every collective one MPI call.
#pragma once

#include <mpi.h>

#include <vector>

#include "transport/communicator.h"
#include "transport/mpi/mpi_datatypes.h"

namespace hvdlite::transport::mpi {

// Owns its MPI_Comm (freed on destruction unless MPI is already finalised),
// whose error handler returns errors, so that they arrive as TransportError.
// MPI counts are ints: a call larger than that is split into pieces (Note
// [Large MPI counts]). Not thread-safe: the background thread is its only user.
class MpiCommunicator : public Communicator {
 public:
  // comm: a communicator this object now owns; global_ranks[r]: the job rank
  // of comm's rank r.
  MpiCommunicator(MPI_Comm comm, std::vector<int> global_ranks);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(ranks_.size()); }
  int globalRank(int r) const override { return ranks_.at(r); }
  std::string describe() const override { return "mpi"; }

 private:
  // Communicator's hooks (Note [Hook lists]).
  HVDLITE_COLLECTIVE_HOOKS;
  HVDLITE_MESSAGE_HOOKS;

  // Completes a negotiation call (Note [Waiting in MPI]).
  void waitPatiently(MPI_Request& request, const char* what);
  void pairwiseExchange(const char* in, const std::vector<size_t>& send_bytes, char* out,
                        const std::vector<size_t>& recv_bytes);

  MPI_Comm comm_;
  std::vector<int> ranks_;
  int rank_ = -1;
  ReduceOps ops_;
  std::vector<char> work_;  // reducescatter's full sums when counts exceed MPI's ints
};

}  // namespace hvdlite::transport::mpi
