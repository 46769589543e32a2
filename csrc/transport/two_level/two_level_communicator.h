// A process set that spans several hosts with several ranks on each: its
// allreduce and allgather run in two levels, shared memory inside each host
// and one network collective per position across hosts (Note [Two-level
// allreduce], Note [Two-level allgather]); every other collective runs on the
// flat communicator over all members.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/communicator.h"
#include "transport/two_level/cross_worker.h"
#include "transport/transport.h"

namespace hvdlite::transport::two_level {

// Where a set's members run: which of them share this rank's host, and which
// hold the same position on the other hosts. Two levels apply when there are
// at least two hosts, each with the same number (two or more) of members.
struct SetLayout {
  std::vector<int> local;  // global ranks on this rank's host, sorted
  std::vector<int> cross;  // global ranks at this rank's position on each host, sorted
  std::vector<int> host;   // host of each member (set rank), numbered by their first members
  int hosts = 0;
  bool uniform = false;    // every host holds local.size() members

  // global_ranks: sorted; hostnames: the host of every global rank of the job.
  static SetLayout of(const std::vector<int>& global_ranks, const std::vector<std::string>& hostnames,
                      int my_global_rank);
  bool twoLevels() const { return hosts >= 2 && uniform && local.size() >= 2; }
};

// From which buffer size (bytes; an allgather's: the whole output) each
// collective runs in two levels; kNever: always flat.
struct TwoLevelThresholds {
  static constexpr size_t kNever = SIZE_MAX;
  size_t allreduce = kNever;
  size_t allgather = kNever;
  // What HVDLITE_HIERARCHICAL_ALLREDUCE and _ALLGATHER ask for (TransportOptions).
  static TwoLevelThresholds of(Hierarchy allreduce, Hierarchy allgather);
  bool any() const { return allreduce != kNever || allgather != kNever; }
};

class TwoLevelCommunicator : public Communicator {
 public:
  // flat: over every member (the set's rank order); local: this host's
  // members (shared memory); cross: the members at this rank's position.
  // layout: the set's (SetLayout::of), twoLevels().
  // abort_transport: closes the connections under all three (Transport::abort).
  TwoLevelCommunicator(std::unique_ptr<Communicator> flat, std::unique_ptr<Communicator> local,
                       std::unique_ptr<Communicator> cross, const SetLayout& layout,
                       TwoLevelThresholds thresholds, std::function<void()> abort_transport);
  ~TwoLevelCommunicator() override;

  // Allreduces of at least two chunks, and allgathers where a host's block
  // is over one, are pipelined (Note [Pipelined two levels]).
  static constexpr size_t kChunkBytes = 4 << 20;
  // Smaller buffers run on the flat communicator (Note [Two-level allreduce]).
  static constexpr size_t kTwoLevelMinBytes = 1 << 10;
  // The same for allgather's output: none measured (Note [Two-level allgather]).
  static constexpr size_t kTwoLevelAllgatherMinBytes = 0;

  int rank() const override { return flat_->rank(); }
  int size() const override { return flat_->size(); }
  int globalRank(int r) const override { return flat_->globalRank(r); }
  std::string describe() const override;
  // The flat transport's chunking would split the shards across hosts.
  size_t pipelineChunkBytes() const override { return 0; }

 private:
  void doAllreduce(void* data, size_t count, DataType dtype, ReduceOp op) override;
  void doAllgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) override;
  void doBroadcast(void* data, size_t bytes, int root) override { flat_->broadcast(data, bytes, root); }
  void doAlltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                   const std::vector<size_t>& recv_bytes) override {
    flat_->alltoallv(in, send_bytes, out, recv_bytes);
  }
  void doReducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                       ReduceOp op) override {
    flat_->reducescatter(in, out, counts, dtype, op);
  }
  void doBarrier() override { flat_->barrier(); }
  std::vector<std::string> doGather(const std::string& mine, int root) override {
    return flat_->gather(mine, root);
  }
  void doBroadcastMessage(std::string& message, int root) override {
    flat_->broadcastMessage(message, root);
  }

  void pipelined(char* data, size_t count, size_t chunk, DataType dtype, ReduceOp op);
  void twoLevelAllgatherv(const void* in, char* out, const std::vector<size_t>& bytes_per_rank);

  std::unique_ptr<Communicator> flat_;
  std::unique_ptr<Communicator> local_;
  std::unique_ptr<Communicator> cross_;
  TwoLevelThresholds thresholds_;
  std::function<void()> abort_transport_;
  // members_[h][l]: the set rank at position l of host h; cross_hosts_[l][c]:
  // the host of cross rank c among the members at position l (the hosts'
  // order differs between positions when ranks interleave hosts).
  std::vector<std::vector<int>> members_;
  std::vector<std::vector<int>> cross_hosts_;
  int host_ = 0;  // this rank's host
  std::vector<char> shards_[2];  // this rank's part of a chunk between the levels
  // An allgather's slices of a chunk between the levels, and the blocks of
  // hosts whose members are not consecutive set ranks.
  std::vector<char> slices_[2], host_blocks_;
  std::unique_ptr<CrossWorker> worker_;  // made on the first pipelined collective
};

}  // namespace hvdlite::transport::two_level
