// The shared-memory transport: process sets whose members all run on this
// host move data through a shared segment; any other set, and the rendezvous,
// use the TCP mesh underneath.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/shm/progress.h"
#include "transport/shm/segment.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/transport.h"

namespace hvdlite::transport::shm {

class ShmTransport : public Transport {
 public:
  // Builds the TCP mesh (hostnames come from its rendezvous) and removes the
  // segments earlier rounds of this job left behind (Note [Segment lifetime]).
  ShmTransport(const TransportOptions& options, Store& store);

  // Collective over the members: rank 0 of the set creates and initialises
  // the segment, the others map it after a TCP barrier, and rank 0 unlinks
  // the name after a second one.
  std::unique_ptr<Communicator> communicator(const std::vector<int>& global_ranks) override;
  void abort() override;
  const std::vector<std::string>& hostnames() const override { return tcp_.hostnames(); }
  uint64_t bytesSentTo(int global_rank) const override { return tcp_.bytesSentTo(global_rank); }

 private:
  std::string segmentName(const std::vector<int>& global_ranks);

  TransportOptions options_;
  tcp::TcpTransport tcp_;
  std::map<std::vector<int>, int> sets_made_;  // segments made per member list, for unique names
  std::mutex progress_mutex_;
  // For abort(): both locked, so a communicator being destroyed cannot unmap
  // the segment under it.
  std::vector<std::pair<std::weak_ptr<Progress>, std::weak_ptr<Segment>>> live_;
};

}  // namespace hvdlite::transport::shm
