// The MPI transport: the job's ranks are the ranks of an MPI communicator
// (MPI_COMM_WORLD under mpirun, or the one given to hvdlite.init(comm=...)),
// and every process set is an MPI communicator made from it. It needs no
// rendezvous store: MPI already connected the ranks.
#pragma once

#include <mpi.h>

#include <map>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace hvdlite::transport::mpi {

class MpiTransport : public Transport {
 public:
  // Initialises MPI if needed (Note [MPI lifetime]) and dups the job's
  // communicator; collective over its ranks. Throws InvalidArgument when
  // options.rank/size disagree with the communicator's.
  explicit MpiTransport(const TransportOptions& options);
  ~MpiTransport() override;
  MpiTransport(const MpiTransport&) = delete;
  MpiTransport& operator=(const MpiTransport&) = delete;

  // Collective over the members only (MPI_Comm_create_group).
  std::unique_ptr<Communicator> communicator(const std::vector<int>& global_ranks) override;
  // MPI cannot cancel a collective that a lost rank will never join, so the
  // only way not to hang is MPI_Abort: it ends every rank of the job (mpirun
  // then reports which rank failed first).
  void abort() override;
  const std::vector<std::string>& hostnames() const override { return hostnames_; }

 private:
  MPI_Comm job_ = MPI_COMM_NULL;
  int rank_ = 0;
  // Communicators made per member list: with the list, the tag of the next
  // MPI_Comm_create_group (Note [Group tags]).
  std::map<std::vector<int>, int> sets_made_;
  std::vector<std::string> hostnames_;
};

}  // namespace hvdlite::transport::mpi
