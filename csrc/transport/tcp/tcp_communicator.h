// The Communicator of the built-in TCP transport, over the members of one
// process set and the mesh's shared connections.
#pragma once

#include <vector>

#include "transport/communicator.h"
#include "transport/tcp/mesh.h"

namespace hvdlite::transport::tcp {

struct RingPlan;  // ring.h

// Algorithms (sizes are per call, identical on every member, so every member
// picks the same one):
//   allreduce      recursive doubling below kRingThreshold, else the pipelined
//                  ring of Note [Ring as one stream]
//   reducescatter  the ring's reduce-scatter half over the requested blocks
//   allgatherv     the ring's allgather half
//   broadcast      binomial tree when small, else a pipelined chain
//   alltoallv      pairwise exchange: step k sends to rank+k, receives from rank-k
//   barrier        dissemination of 1-byte messages
// Not thread-safe: the runtime's background thread is its only user.
class TcpCommunicator : public Communicator {
 public:
  // global_ranks: sorted, and containing mesh.rank(). The mesh must outlive it.
  TcpCommunicator(Mesh& mesh, std::vector<int> global_ranks);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(ranks_.size()); }
  int globalRank(int r) const override { return ranks_.at(r); }
  std::string describe() const override { return "tcp"; }

  // Measured with two ranks over loopback (tests/cpp/transport/test_tcp_bench):
  // the ring overtakes recursive doubling between 64 and 256 KiB, and small
  // pieces let a reduced piece leave while it is still in cache.
  static constexpr size_t kRingThreshold = 128 << 10;
  static constexpr size_t kChainThreshold = 256 << 10;
  static constexpr size_t kPieceBytes = 64 << 10;

 private:
  // Communicator's hooks (Note [Hook lists]).
  HVDLITE_COLLECTIVE_HOOKS;
  HVDLITE_MESSAGE_HOOKS;

  // tcp_allreduce.cc
  void recursiveDoubling(char* data, size_t count, DataType dtype, ReduceOp op);
  void ringAllreduce(char* data, size_t count, DataType dtype, ReduceOp op);
  // The reduce-scatter half of the ring over blocks of `bytes` at `offsets`:
  // partial sums of `in` go to `sums`, this rank's finished block to `owned`.
  RingPlan reducingRing(const char* in, char* sums, char* owned, const std::vector<size_t>& bytes,
                        const std::vector<size_t>& offsets, DataType dtype, ReduceOp op);

  Link& peer(int set_rank) { return mesh_.link(ranks_[set_rank]); }
  Link& right() { return peer((rank_ + 1) % size()); }
  Link& left() { return peer((rank_ + size() - 1) % size()); }
  char* scratch(std::vector<char>& buffer, size_t bytes);
  void treeBroadcast(void* data, size_t bytes, int root);
  void chainBroadcast(void* data, size_t bytes, int root);

  Mesh& mesh_;
  std::vector<int> ranks_;
  int rank_ = -1;
  std::vector<char> piece_;  // one received piece / a small message's partner copy
  std::vector<char> work_;   // reducescatter's partial sums
};

}  // namespace hvdlite::transport::tcp
