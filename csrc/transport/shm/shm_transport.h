// The shared-memory transport: process sets whose members all run on this
// host move data through a shared segment; any other set, and the rendezvous,
// use the TCP mesh underneath.
#pragma once

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
  // the segment under a random name it sends the others over TCP (Note
  // [Segment names]), they map it, and rank 0 unlinks the name after a TCP
  // barrier.
  std::unique_ptr<Communicator> communicator(const std::vector<int>& global_ranks) override;
  void abort() override;
  const std::vector<std::string>& hostnames() const override { return tcp_.hostnames(); }
  uint64_t bytesSentTo(int global_rank) const override { return tcp_.bytesSentTo(global_rank); }

 private:
  std::string segmentPrefixOfRound() const;
  // Collective over `control`'s members: rank 0 creates the segment under a
  // random name and initialises it, broadcasts the name, and the others open
  // it (Note [Segment names]). Throws TransportError on every member when
  // rank 0 could not create it.
  std::shared_ptr<Segment> createOrOpen(Communicator& control, size_t bytes);

  TransportOptions options_;
  tcp::TcpTransport tcp_;
  std::mutex progress_mutex_;
  // For abort(): both locked, so a communicator being destroyed cannot unmap
  // the segment under it.
  std::vector<std::pair<std::weak_ptr<Progress>, std::weak_ptr<Segment>>> live_;
};

}  // namespace hvdlite::transport::shm
